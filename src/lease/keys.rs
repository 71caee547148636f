//! Every key of the data model, built and parsed in one place (TiKV's
//! `keys` crate is the model).
//!
//! Everything Tenure keeps in the bucket lives under the reserved first
//! level [`RESERVED`], which no lease name may use. A lease's record and
//! its queue sit two levels below the name, on sibling branches, so that
//! two wildcards split them exactly (design section 16, "One write"):
//!
//! - the *queue* ([`queue_filter`], `_tenure.q.<name>.ticket.*`): the
//!   tickets and the guard. A ticket's write is conditional on it, so a
//!   record's write never fails a waiter's queueing;
//! - the *line* ([`line_filter`], `_tenure.q.<name>.*.*`): the record and
//!   the queue together, never another name's keys (a child name's are a
//!   level deeper). Every write that takes a free lease is conditional on
//!   it, so it fails if the holder changed or a waiter queued since.
//!
//! | key | what |
//! | --- | --- |
//! | `_tenure.q.<name>.lease.holder` | the lease record of `name` (its revision is the fencing token) |
//! | `_tenure.q.<name>.ticket.<slot>` | a waiter's ticket in slot `slot` of `name`'s queue |
//! | `_tenure.q.<name>.ticket.plain` | the queue's guard, written only by group batches |
//! | `_tenure.delay.<name>` | the fence: the lock delay of `name`'s latest holding |
//! | `_tenure.sem.<name>.<slot>` | slot `slot` (1 to the limit) of semaphore `name` |
//! | `_tenure.sem.<name>.limit` | the definition (the limit in force) of semaphore `name`, or of read-write lock `name` (`"rw":true`); removed once unused |
//!
//! A bucket's stream description names this layout (`key layout 2`,
//! `nats/bucket.rs`); older versions kept a lease's record at the lease
//! name itself, and a bucket they wrote is refused.
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
/// The branch of a lease record's key below the name.
const LEASE: &str = "lease";
/// The last level of a lease record's key.
const HOLDER: &str = "holder";
/// The branch of a queue's keys below the name.
const TICKET: &str = "ticket";

/// The key of the lease record of `name`.
pub fn lease(name: &str) -> String {
    format!("{RESERVED}.{QUEUE}.{name}.{LEASE}.{HOLDER}")
}

/// The key of the record a lease call names: a lease name's record key
/// ([`lease`]), or a semaphore slot's key as it is (the semaphore layer
/// renews, releases and revokes its holders through the lease calls, by
/// slot key).
pub fn record_of(name_or_slot: &str) -> String {
    match parse_semaphore_slot(name_or_slot) {
        Some(_) => name_or_slot.to_string(),
        None => lease(name_or_slot),
    }
}

/// The lease name of a record key ([`lease`]); `None` for every other key.
pub fn parse_lease(key: &str) -> Option<&str> {
    let name = key
        .strip_prefix(RESERVED)?
        .strip_prefix('.')?
        .strip_prefix(QUEUE)?
        .strip_prefix('.')?
        .strip_suffix(HOLDER)?
        .strip_suffix('.')?
        .strip_suffix(LEASE)?
        .strip_suffix('.')?;
    (!name.is_empty() && !is_reserved(name)).then_some(name)
}

/// The KV wildcard that matches exactly the record and the queue (slots
/// and guard) of lease `name`, never another name's keys: a write
/// conditional on the last revision under it fails if the record changed
/// or anything was queued since.
pub fn line_filter(name: &str) -> String {
    format!("{RESERVED}.{QUEUE}.{name}.*.*")
}

/// The KV wildcard that matches the records (and queue keys) of every
/// lease whose name starts with the whole levels `level` (empty, or ending
/// in `.`): what a listing or a prefix watch reads.
pub fn leases_under(level: &str) -> String {
    format!("{RESERVED}.{QUEUE}.{level}>")
}

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
    format!("{RESERVED}.{QUEUE}.{name}.{TICKET}.{slot}")
}

/// The guard key of `name`'s queue: a group's batch writes it conditional
/// on the whole queue ([`queue_filter`]).
pub fn queue_guard(name: &str) -> String {
    format!("{RESERVED}.{QUEUE}.{name}.{TICKET}.{GUARD}")
}

/// The KV wildcard that matches every key of the queue of `name` (slots and
/// guard) and nothing else (not its lease record, never a deeper name's
/// keys): what a ticket's write is conditional on.
pub fn queue_filter(name: &str) -> String {
    format!("{RESERVED}.{QUEUE}.{name}.{TICKET}.*")
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
    let name = name.strip_suffix(TICKET)?.strip_suffix('.')?;
    if name.is_empty() {
        return None;
    }
    if last == GUARD {
        return Some(QueueKey::Guard(name));
    }
    Some(QueueKey::Slot(name, last.parse().ok()?))
}

/// What a key shows as in a watch: a lease name and slot 0 for a lease
/// record's key (or for a lease name itself, as the shared watcher keeps
/// records: [`watched_as`]), the semaphore's name and slot for a semaphore
/// slot key; `None` for Tenure's other keys (fences, definitions,
/// tickets).
pub fn shown_as(key: &str) -> Option<(&str, u32)> {
    if let Some(shown) = parse_semaphore_slot(key) {
        return Some(shown);
    }
    if let Some(name) = parse_lease(key) {
        return Some((name, 0));
    }
    (!is_reserved(key)).then_some((key, 0))
}

/// What the shared watcher never takes for a lease: the key it keeps a
/// key Tenure does not write under (a reserved key nothing parses).
const FOREIGN: &str = "_tenure.foreign";

/// The key the shared watcher keeps a bucket key under (its mirror, queue
/// view and ends are keyed so): a lease record's key as its lease name,
/// Tenure's other keys as they are, and a key Tenure does not write (in
/// no reserved level, so not of this layout) as a reserved key that parses
/// as nothing.
pub fn watched_as(key: &str) -> &str {
    match parse_lease(key) {
        Some(name) => name,
        None if is_reserved(key) => key,
        None => FOREIGN,
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
/// `_tenure.q._tenure.sem.<name>.ticket.<slot>` ([`queue_slot`]), built, read and
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
    if let Some(name) = parse_lease(key) {
        return Some(name);
    }
    // A lease name as the shared watcher keeps its record ([`watched_as`]).
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
            lease("a.b"),
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
        assert_eq!(waited_name("a.b"), Some("a.b"), "as the watcher keeps it");
        assert_eq!(waited_name("_tenure"), None);
    }

    #[test]
    fn reserved() {
        assert!(is_reserved(&fence("jobs.a")));
        assert!(is_reserved("_tenure"));
        assert!(!is_reserved("_tenured.a"));
        assert!(!is_reserved("jobs._tenure"));
    }

    /// A record sits on the line beside its queue, not in it: the line's
    /// wildcard matches both and no other name's keys, the queue's only
    /// the tickets; a record key parses back to its name and never as a
    /// queue key; a reserved name never parses.
    #[test]
    fn records() {
        assert_eq!(lease("jobs.a"), "_tenure.q.jobs.a.lease.holder");
        assert_eq!(line_filter("jobs.a"), "_tenure.q.jobs.a.*.*");
        assert_eq!(parse_lease(&lease("jobs.a")), Some("jobs.a"));
        assert_eq!(parse_lease(&lease("lease")), Some("lease"));
        assert_eq!(parse_lease(&lease("a.lease")), Some("a.lease"));
        assert_eq!(parse_lease(&lease("a.ticket")), Some("a.ticket"));
        assert_eq!(parse_lease("_tenure.q.lease.holder"), None);
        assert_eq!(parse_lease("_tenure.q.a.lease"), None);
        assert_eq!(parse_lease("jobs.a"), None);
        assert_eq!(parse_lease("_tenure.q._tenure.sem.a.lease.holder"), None);
        assert_eq!(parse_queue(&lease("jobs.a")), None);
        assert_eq!(parse_queue(&lease("jobs.ticket")), None);
        assert_eq!(parse_lease(&queue_slot("a.lease", 3)), None);
        assert_eq!(parse_lease(&queue_guard("a.lease")), None);
        assert_eq!(shown_as(&lease("jobs.a")), Some(("jobs.a", 0)));
        assert_eq!(watched_as(&lease("jobs.a")), "jobs.a");
        assert_eq!(shown_as(watched_as(&lease("jobs.a"))), Some(("jobs.a", 0)));
        assert_eq!(watched_as("_tenure.sem.a.1"), "_tenure.sem.a.1");
        assert_eq!(
            shown_as(watched_as("jobs.a")),
            None,
            "not a key of this layout"
        );
        assert_eq!(leases_under("jobs."), "_tenure.q.jobs.>");
        assert_eq!(leases_under(""), "_tenure.q.>");
        // A child name's keys are a level deeper: on neither wildcard.
        let levels = |key: &str| key.matches('.').count();
        for child in [lease("jobs.a.b"), queue_slot("jobs.a.b", 1)] {
            assert!(child.starts_with("_tenure.q.jobs.a."));
            assert_eq!(levels(&child), levels(&line_filter("jobs.a")) + 1);
        }
        assert_eq!(levels(&lease("jobs.a")), levels(&line_filter("jobs.a")));
        assert_eq!(
            levels(&queue_slot("jobs.a", 0)),
            levels(&queue_filter("jobs.a"))
        );
    }

    #[test]
    fn fences() {
        assert_eq!(fence("a.b"), "_tenure.delay.a.b");
    }

    #[test]
    fn queues() {
        assert_eq!(queue_slot("a.b", 3), "_tenure.q.a.b.ticket.3");
        assert_eq!(queue_guard("a.b"), "_tenure.q.a.b.ticket.plain");
        assert_eq!(queue_filter("a"), "_tenure.q.a.ticket.*");
        assert_eq!(
            parse_queue("_tenure.q.a.b.ticket.3"),
            Some(QueueKey::Slot("a.b", 3))
        );
        assert_eq!(
            parse_queue("_tenure.q.a.b.ticket.plain"),
            Some(QueueKey::Guard("a.b"))
        );
        assert_eq!(parse_queue("_tenure.q.a.b.3"), None);
        assert_eq!(parse_queue("_tenure.delay.a.ticket.3"), None);
        assert_eq!(parse_queue("a.ticket.3"), None);
        assert_eq!(parse_queue("_tenure.q.ticket.3"), None);
        for (name, slot) in [("a", 0), ("a.b.c", 63), ("x-1/y", 7), ("ticket", 1)] {
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
        assert_eq!(shown_as("_tenure.q.jobs.ticket.0"), None);
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
        assert_eq!(
            queue_slot(&queue, 3),
            "_tenure.q._tenure.sem.jobs.a.ticket.3"
        );
        assert_eq!(
            queue_filter(&queue),
            "_tenure.q._tenure.sem.jobs.a.ticket.*"
        );
        assert_eq!(
            parse_queue("_tenure.q._tenure.sem.jobs.a.ticket.3"),
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
