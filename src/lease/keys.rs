//! Every key of the data model, built and parsed in one place (TiKV's
//! `keys` crate is the model).
//!
//! A lease is kept under its own name. Everything else Tenure keeps in the
//! bucket lives under the reserved first level [`RESERVED`], which no lease
//! name may use:
//!
//! | key | what |
//! | --- | --- |
//! | `<name>` | the lease record of `name` (its revision is the fencing token) |
//! | `_tenure.delay.<name>` | the fence: the lock delay of `name`'s latest holding |
//! | `_tenure.q.<name>.<slot>` | a waiter's ticket in slot `slot` of `name`'s queue |
//! | `_tenure.q.<name>.plain` | the queue's guard, written only by group batches |
//! | `_tenure.sem.<name>.<slot>` | slot `slot` (1 to the limit) of semaphore `name` |
//! | `_tenure.sem.<name>.limit` | the definition (the limit in force) of semaphore `name`, or of read-write lock `name` (`"rw":true`); removed once unused |
//!
//! Parsing is the inverse of building: a key either parses to exactly what
//! built it or to nothing, so a foreign key under the reserved level is
//! ignored rather than misread.

/// The first level of every key Tenure keeps for itself in the bucket
/// (fences, queue tickets, semaphore slots). Lease names may not use it.
pub const RESERVED: &str = "_tenure";

/// The second level of fence keys.
const FENCE: &str = "delay";
/// The second level of queue keys.
const QUEUE: &str = "q";
/// The second level of semaphore keys.
const SEMAPHORE: &str = "sem";
/// The last level of a queue's guard key (never a slot number).
const GUARD: &str = "plain";
/// The last level of a semaphore's definition key.
const DEFINITION: &str = "limit";

/// Whether `key` is one of Tenure's own keys rather than a lease name.
pub fn is_reserved(key: &str) -> bool {
    key.strip_prefix(RESERVED)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The fence key of lease `name`: where the lock delay of its latest
/// holding is kept while the holding lives and after it expired.
pub fn fence(name: &str) -> String {
    format!("{RESERVED}.{FENCE}.{name}")
}

/// The key of queue slot `slot` of lease `name`.
pub fn queue_slot(name: &str, slot: usize) -> String {
    format!("{RESERVED}.{QUEUE}.{name}.{slot}")
}

/// The guard key of `name`'s queue: a group's batch writes it conditional
/// on the whole queue ([`queue_filter`]).
pub fn queue_guard(name: &str) -> String {
    format!("{RESERVED}.{QUEUE}.{name}.{GUARD}")
}

/// The KV wildcard that matches every key of the queue of `name` (slots and
/// guard): one level below `_tenure.q.<name>`, never a deeper name's queue.
pub fn queue_filter(name: &str) -> String {
    format!("{RESERVED}.{QUEUE}.{name}.*")
}

/// A key of a lease's queue, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKey<'a> {
    /// A waiter's slot: the lease name and the slot number.
    Slot(&'a str, usize),
    /// The queue's guard: the lease name.
    Guard(&'a str),
}

/// The lease name and what a queue key is; `None` for every other key.
pub fn parse_queue(key: &str) -> Option<QueueKey<'_>> {
    let rest = key
        .strip_prefix(RESERVED)?
        .strip_prefix('.')?
        .strip_prefix(QUEUE)?
        .strip_prefix('.')?;
    let (name, last) = rest.rsplit_once('.')?;
    if name.is_empty() {
        return None;
    }
    if last == GUARD {
        return Some(QueueKey::Guard(name));
    }
    Some(QueueKey::Slot(name, last.parse().ok()?))
}

/// What a bucket key shows as in a watch: a lease name and slot 0 for a
/// lease key, the semaphore's name and slot for a semaphore slot key;
/// `None` for Tenure's other keys (fences, definitions, tickets).
pub fn shown_as(key: &str) -> Option<(&str, u32)> {
    match parse_semaphore_slot(key) {
        Some(shown) => Some(shown),
        None if is_reserved(key) => None,
        None => Some((key, 0)),
    }
}

/// The prefix every slot key of semaphore `name` starts with (and, for a
/// subtree, of the names below it).
pub fn semaphore_prefix(name: &str) -> String {
    format!("{RESERVED}.{SEMAPHORE}.{name}")
}

/// The key of slot `slot` (1 to the limit) of semaphore `name`.
pub fn semaphore_slot(name: &str, slot: u32) -> String {
    format!("{RESERVED}.{SEMAPHORE}.{name}.{slot}")
}

/// The definition key of semaphore `name`.
pub fn semaphore_definition(name: &str) -> String {
    format!("{RESERVED}.{SEMAPHORE}.{name}.{DEFINITION}")
}

/// The queue name of semaphore `name`'s waiters: the reserved name
/// `_tenure.sem.<name>`, so that its queue is the keys
/// `_tenure.q._tenure.sem.<name>.<slot>` ([`queue_slot`]), built, read and
/// watched exactly as a lease's queue, and never a lease's (lease names
/// cannot start with `_tenure`) nor a semaphore key (those start
/// `_tenure.sem.`).
pub fn semaphore_queue(name: &str) -> String {
    semaphore_prefix(name)
}

/// The semaphore whose waiters queue under the queue name `queue`
/// ([`semaphore_queue`]); `None` for a lease's queue.
pub fn semaphore_of_queue(queue: &str) -> Option<&str> {
    queue
        .strip_prefix(RESERVED)?
        .strip_prefix('.')?
        .strip_prefix(SEMAPHORE)?
        .strip_prefix('.')
        .filter(|name| !name.is_empty())
}

/// The KV wildcard that matches every key of semaphore `name` (its slots
/// and definition) and nothing else: one level below
/// `_tenure.sem.<name>`, never a deeper name's keys. A read-write lock
/// (kept as a semaphore) writes conditional on it, so that one write
/// checks that no key of the lock changed since it was read.
pub fn semaphore_filter(name: &str) -> String {
    format!("{}.*", semaphore_prefix(name))
}

/// The KV wildcard that matches every key of every semaphore (slots and
/// definitions), and nothing else.
pub fn semaphores_filter() -> String {
    format!("{RESERVED}.{SEMAPHORE}.>")
}

/// The semaphore name of a definition key; `None` for any other key.
pub fn parse_semaphore_definition(key: &str) -> Option<&str> {
    let name = key
        .strip_prefix(RESERVED)?
        .strip_prefix('.')?
        .strip_prefix(SEMAPHORE)?
        .strip_prefix('.')?
        .strip_suffix(DEFINITION)?
        .strip_suffix('.')?;
    (!name.is_empty()).then_some(name)
}

/// The semaphore name and slot of a slot key; `None` for any other key
/// (the definition included).
pub fn parse_semaphore_slot(key: &str) -> Option<(&str, u32)> {
    let rest = key
        .strip_prefix(RESERVED)?
        .strip_prefix('.')?
        .strip_prefix(SEMAPHORE)?
        .strip_prefix('.')?;
    let (name, slot) = rest.rsplit_once('.')?;
    if name.is_empty() || !slot.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let slot: u32 = slot.parse().ok()?;
    (slot > 0).then_some((name, slot))
}

/// The name whose waiters a write of `key` may concern: a lease key's
/// name, and the name of its fence or queue key; a semaphore's name for
/// its slots, definition and queue. `None` for a foreign reserved key.
pub fn waited_name(key: &str) -> Option<&str> {
    if !is_reserved(key) {
        return Some(key);
    }
    if let Some(name) = parse_semaphore_slot(key).map(|(name, _)| name) {
        return Some(name);
    }
    if let Some(name) = parse_semaphore_definition(key) {
        return Some(name);
    }
    if let Some(queue) = parse_queue(key) {
        let queue = match queue {
            QueueKey::Slot(queue, _) | QueueKey::Guard(queue) => queue,
        };
        return Some(semaphore_of_queue(queue).unwrap_or(queue));
    }
    key.strip_prefix(RESERVED)?
        .strip_prefix('.')?
        .strip_prefix(FENCE)?
        .strip_prefix('.')
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_name_concerns_its_waiters() {
        for key in [
            "a.b".to_string(),
            fence("a.b"),
            queue_slot("a.b", 3),
            queue_guard("a.b"),
            semaphore_slot("a.b", 2),
            semaphore_definition("a.b"),
            queue_slot(&semaphore_queue("a.b"), 5),
        ] {
            assert_eq!(waited_name(&key), Some("a.b"), "{key}");
        }
        assert_eq!(waited_name("_tenure.other.x"), None);
        assert_eq!(waited_name("_tenure"), None);
    }

    #[test]
    fn reserved() {
        assert!(is_reserved(&fence("jobs.a")));
        assert!(is_reserved("_tenure"));
        assert!(!is_reserved("_tenured.a"));
        assert!(!is_reserved("jobs._tenure"));
    }

    #[test]
    fn fences() {
        assert_eq!(fence("a.b"), "_tenure.delay.a.b");
    }

    #[test]
    fn queues() {
        assert_eq!(queue_slot("a.b", 3), "_tenure.q.a.b.3");
        assert_eq!(queue_guard("a.b"), "_tenure.q.a.b.plain");
        assert_eq!(queue_filter("a"), "_tenure.q.a.*");
        assert_eq!(
            parse_queue("_tenure.q.a.b.3"),
            Some(QueueKey::Slot("a.b", 3))
        );
        assert_eq!(
            parse_queue("_tenure.q.a.b.plain"),
            Some(QueueKey::Guard("a.b"))
        );
        assert_eq!(parse_queue("_tenure.delay.a.3"), None);
        assert_eq!(parse_queue("a.3"), None);
        assert_eq!(parse_queue("_tenure.q.3"), None);
        for (name, slot) in [("a", 0), ("a.b.c", 63), ("x-1/y", 7)] {
            assert_eq!(
                parse_queue(&queue_slot(name, slot)),
                Some(QueueKey::Slot(name, slot))
            );
        }
    }

    #[test]
    fn semaphores() {
        assert_eq!(shown_as("_tenure.sem.jobs.2"), Some(("jobs", 2)));
        assert_eq!(shown_as("jobs.2"), Some(("jobs.2", 0)));
        assert_eq!(shown_as("_tenure.sem.jobs.limit"), None);
        assert_eq!(shown_as("_tenure.q.jobs.0"), None);
        assert_eq!(semaphore_slot("jobs", 2), "_tenure.sem.jobs.2");
        assert_eq!(semaphore_definition("jobs"), "_tenure.sem.jobs.limit");
        assert!(semaphore_slot("jobs.a", 1).starts_with(&semaphore_prefix("jobs")));
        assert_eq!(
            parse_semaphore_slot("_tenure.sem.jobs.a.2"),
            Some(("jobs.a", 2))
        );
        assert_eq!(parse_semaphore_slot("_tenure.sem.jobs.limit"), None);
        assert_eq!(parse_semaphore_slot("_tenure.sem.a.0"), None);
        assert_eq!(parse_semaphore_slot("_tenure.sem.a.+1"), None);
        assert_eq!(parse_semaphore_slot("_tenure.delay.a.1"), None);
        assert_eq!(semaphores_filter(), "_tenure.sem.>");
        assert_eq!(
            parse_semaphore_definition(&semaphore_definition("jobs.a")),
            Some("jobs.a")
        );
        assert_eq!(
            parse_semaphore_definition("_tenure.sem.limit.limit"),
            Some("limit")
        );
        assert_eq!(parse_semaphore_definition("_tenure.sem.limit"), None);
        assert_eq!(parse_semaphore_definition("_tenure.sem.jobs.2"), None);
        assert_eq!(parse_semaphore_definition("_tenure.q.jobs.limit"), None);
    }

    /// A semaphore's queue is the queue of a reserved name: its keys parse
    /// back to that name, never to a lease's or a semaphore key, and its
    /// wildcard matches one level below it only.
    #[test]
    fn semaphore_queues() {
        let queue = semaphore_queue("jobs.a");
        assert_eq!(queue, "_tenure.sem.jobs.a");
        assert_eq!(queue_slot(&queue, 3), "_tenure.q._tenure.sem.jobs.a.3");
        assert_eq!(queue_filter(&queue), "_tenure.q._tenure.sem.jobs.a.*");
        assert_eq!(
            parse_queue("_tenure.q._tenure.sem.jobs.a.3"),
            Some(QueueKey::Slot("_tenure.sem.jobs.a", 3))
        );
        assert_eq!(semaphore_of_queue(&queue), Some("jobs.a"));
        assert_eq!(semaphore_of_queue("jobs.a"), None);
        assert_eq!(semaphore_of_queue("_tenure.sem."), None);
        assert_eq!(shown_as(&queue_slot(&queue, 3)), None);
        assert_eq!(parse_semaphore_slot(&queue_slot(&queue, 3)), None);
        assert_eq!(parse_semaphore_definition(&queue_slot(&queue, 3)), None);
    }
}
