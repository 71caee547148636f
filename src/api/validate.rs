//! The input rules. Each check returns an `INVALID_*` [`Error`] whose message
//! quotes the rule, so a caller can fix the request without reading code.
//! Nothing is written to the bucket before every check has passed.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::config::{Limits, MAX_SHARDS};
use crate::error::{Error, Reason, Result};
use crate::lease::WatchFrom;

/// Longest lease name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Longest holder, in bytes.
pub const MAX_HOLDER_LEN: usize = 256;
/// Shortest caller-chosen lease key.
pub const MIN_KEY_LEN: usize = 16;
/// Longest caller-chosen lease key.
pub const MAX_KEY_LEN: usize = 256;
/// Most metadata entries.
pub const MAX_METADATA_ENTRIES: usize = 16;
/// Most metadata bytes (keys plus values).
pub const MAX_METADATA_BYTES: usize = 1024;
/// Longest revoke reason, in bytes.
pub const MAX_REASON_LEN: usize = 256;

const NAME_RULE: &str = "1 to 255 characters from [-/_=.a-zA-Z0-9], not starting or ending with '.', without empty levels ('..'), and not under '_tenure' (reserved)";

/// Checks the names of a group: `min` to `max` (`--max-group-size`) distinct valid
/// lease names (AcquireGroup asks for at least 2; RenewGroup and
/// ReleaseGroup take what is left of a group, at least 1).
pub fn group<'a>(
    names: impl ExactSizeIterator<Item = &'a str>,
    min: usize,
    max: usize,
) -> Result<Vec<String>> {
    let count = names.len();
    if count < min || count > max {
        return Err(Error::new(
            Reason::InvalidArgument,
            format!(
                "a group has {min} to {max} names (--max-group-size; got {count}); use Acquire for one name"
            ),
        )
        .with("max_group_size", max));
    }
    let mut out: Vec<String> = Vec::with_capacity(count);
    for n in names {
        let n = name(n)?;
        if out.iter().any(|seen| seen == n) {
            return Err(Error::new(
                Reason::InvalidArgument,
                format!("name {n:?} appears twice in the group; list each name once"),
            )
            .with("name", n));
        }
        out.push(n.to_string());
    }
    Ok(out)
}

/// Checks a lease name (a KV key).
pub fn name(name: &str) -> Result<&str> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-/_=.".contains(&b));
    if name.is_empty()
        || name.len() > MAX_NAME_LEN
        || !ok_chars
        || name.starts_with('.')
        || name.ends_with('.')
        || name.contains("..")
        || crate::lease::is_reserved(name)
    {
        return Err(Error::new(
            Reason::InvalidName,
            format!(
                "lease name {:?} is invalid: use {NAME_RULE}",
                truncate(name)
            ),
        )
        .with("rule", NAME_RULE));
    }
    Ok(name)
}

/// Checks a watch target: a lease name, `prefix.>` for a subtree, or `>` for
/// the whole bucket.
pub fn watch_filter(filter: &str) -> Result<&str> {
    if filter == ">" {
        return Ok(filter);
    }
    let base = filter.strip_suffix(".>").unwrap_or(filter);
    name(base).map_err(|_| {
        Error::new(
            Reason::InvalidName,
            format!(
                "watch target {:?} is invalid: give a lease name, 'prefix.>' or '>'; names use {NAME_RULE}",
                truncate(filter)
            ),
        )
        .with("rule", NAME_RULE)
    })?;
    Ok(filter)
}

/// Checks a holder: 1 to 256 bytes, no control characters.
pub fn holder(holder: &str) -> Result<&str> {
    if holder.len() > MAX_HOLDER_LEN || !is_visible_text(holder) {
        return Err(Error::new(
            Reason::InvalidHolder,
            format!(
                "holder must be 1 to {MAX_HOLDER_LEN} bytes of visible text: not only spaces, no control or \
                 invisible formatting characters (got {} bytes)",
                holder.len()
            ),
        ));
    }
    Ok(holder)
}

/// Whether `text` is something a person can read back: not empty, not
/// only white space, and free of control characters and of invisible
/// formatting characters (zero-width spaces and joiners, bidirectional
/// overrides such as U+202E, byte-order marks, tag characters), which make
/// two different holders look the same in logs, tables and alerts.
pub fn is_visible_text(text: &str) -> bool {
    !text.trim().is_empty()
        && !text
            .chars()
            .any(|c| c.is_control() || is_invisible_format(c))
}

/// The invisible formatting characters: Unicode's general category Cf
/// (format) and the line and paragraph separators (Zl, Zp).
fn is_invisible_format(c: char) -> bool {
    matches!(
        c as u32,
        0x00AD
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}

/// Turns a requested TTL into the granted whole seconds: rounded up, raised
/// to the minimum, refused above the maximum. `None` grants `fallback`.
pub fn ttl(
    requested: Option<&prost_types::Duration>,
    limits: &Limits,
    fallback: u64,
) -> Result<u64> {
    let Some(d) = requested else {
        return Ok(fallback);
    };
    let invalid = |what: String| {
        Error::new(
            Reason::InvalidTtl,
            format!(
                "ttl {what}: give a positive duration up to {}s (granted in whole seconds, rounded up, at least {}s)",
                limits.max_ttl_s, limits.min_ttl_s
            ),
        )
        .with("min_ttl_seconds", limits.min_ttl_s)
        .with("max_ttl_seconds", limits.max_ttl_s)
    };
    if d.seconds < 0 || d.nanos < 0 || (d.seconds == 0 && d.nanos == 0) {
        return Err(invalid(format!(
            "{}s {}ns is not positive",
            d.seconds, d.nanos
        )));
    }
    if d.nanos >= 1_000_000_000 {
        return Err(invalid(format!(
            "has {} nanos, more than a second",
            d.nanos
        )));
    }
    let secs = (d.seconds as u64).saturating_add(u64::from(d.nanos > 0));
    if secs > limits.max_ttl_s {
        return Err(invalid(format!("{}s is above the maximum", d.seconds)));
    }
    Ok(secs.max(limits.min_ttl_s))
}

/// Checks a caller's lease key; an empty one means "mint one".
pub fn lease_key(key: &str) -> Result<Option<&str>> {
    if key.is_empty() {
        return Ok(None);
    }
    if key.len() < MIN_KEY_LEN
        || key.len() > MAX_KEY_LEN
        || !key.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Error::new(
            Reason::InvalidLeaseKey,
            format!(
                "lease_key must be {MIN_KEY_LEN} to {MAX_KEY_LEN} printable ASCII characters without spaces, \
                 or empty to have one minted (got {} bytes)",
                key.len()
            ),
        ));
    }
    Ok(Some(key))
}

/// Checks the key presented by Renew and Release: it must be given.
pub fn presented_key(key: &str) -> Result<&str> {
    lease_key(key)?.ok_or_else(|| {
        Error::new(
            Reason::InvalidLeaseKey,
            "lease_key is required: pass the key returned by Acquire",
        )
    })
}

/// Mints a lease key: 32 random bytes, hex.
pub fn mint_key() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Checks an expected revision: it must be given.
pub fn revision(revision: u64) -> Result<u64> {
    if revision == 0 {
        return Err(Error::new(
            Reason::InvalidRevision,
            "expected_revision is required: pass the revision from the last Acquire or Renew reply",
        ));
    }
    Ok(revision)
}

/// Where a watch starts: `start_revision` or `shard_revisions`, not both.
pub fn watch_start(start_revision: u64, shard_revisions: &[u64]) -> Result<WatchFrom> {
    match (start_revision, shard_revisions.len()) {
        (0, 0) => Ok(WatchFrom::Now),
        (from, 0) => Ok(WatchFrom::Revision(from)),
        (0, n) if n <= MAX_SHARDS as usize => Ok(WatchFrom::PerShard(shard_revisions.to_vec())),
        (0, n) => Err(Error::new(
            Reason::InvalidRevision,
            format!("shard_revisions has {n} entries; a bucket has at most {MAX_SHARDS} shards"),
        )),
        _ => Err(Error::new(
            Reason::InvalidRevision,
            "give start_revision or shard_revisions, not both",
        )),
    }
}

/// Checks metadata size.
pub fn metadata(map: &HashMap<String, String>) -> Result<BTreeMap<String, String>> {
    let bytes: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
    if map.len() > MAX_METADATA_ENTRIES
        || bytes > MAX_METADATA_BYTES
        || map.keys().any(|k| !is_visible_text(k))
        || map
            .values()
            .any(|v| v.chars().any(|c| c.is_control() || is_invisible_format(c)))
    {
        return Err(Error::new(
            Reason::InvalidMetadata,
            format!(
                "metadata must have at most {MAX_METADATA_ENTRIES} entries with visible keys, values without \
                 control or invisible formatting characters, and at most {MAX_METADATA_BYTES} bytes of keys \
                 and values (got {} entries, {bytes} bytes)",
                map.len()
            ),
        ));
    }
    Ok(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// Checks an Acquire wait; `None` or zero means "do not wait".
pub fn wait(
    requested: Option<&prost_types::Duration>,
    limits: &Limits,
) -> Result<Option<Duration>> {
    let Some(d) = requested else {
        return Ok(None);
    };
    let invalid = || {
        Error::new(
            Reason::InvalidWait,
            format!(
                "wait must be between 0 and {}s (got {}s {}ns)",
                limits.max_wait.as_secs(),
                d.seconds,
                d.nanos
            ),
        )
    };
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(invalid());
    }
    let wait = Duration::new(d.seconds as u64, d.nanos as u32);
    if wait > limits.max_wait {
        return Err(invalid());
    }
    Ok((!wait.is_zero()).then_some(wait))
}

/// Checks an Acquire lock delay: rounded up to whole seconds, at most the
/// server's maximum; `None` or zero means none (0).
pub fn lock_delay(requested: Option<&prost_types::Duration>, limits: &Limits) -> Result<u64> {
    let Some(d) = requested else {
        return Ok(0);
    };
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(lock_delay_invalid(d, limits));
    }
    let secs = (d.seconds as u64).saturating_add(u64::from(d.nanos > 0));
    if secs > limits.max_lock_delay_s {
        return Err(lock_delay_invalid(d, limits));
    }
    Ok(secs)
}

/// `INVALID_ARGUMENT` for a lock delay out of bounds.
fn lock_delay_invalid(d: &prost_types::Duration, limits: &Limits) -> Error {
    Error::new(
        Reason::InvalidArgument,
        format!(
            "lock_delay must be between 0 and {}s (got {}s {}ns); it is rounded up to whole seconds",
            limits.max_lock_delay_s, d.seconds, d.nanos
        ),
    )
    .with("max_lock_delay_seconds", limits.max_lock_delay_s)
}

/// Checks an Acquire's semaphore limit (0: a plain lease) against the
/// server's maximum; a semaphore takes no lock delay.
pub fn limit(limit: u32, lock_delay_s: u64, limits: &Limits) -> Result<u32> {
    if limit > limits.max_semaphore_limit {
        return Err(Error::new(
            Reason::InvalidArgument,
            format!(
                "limit must be between 0 (a plain lease) and {} (got {limit})",
                limits.max_semaphore_limit
            ),
        )
        .with("max_semaphore_limit", limits.max_semaphore_limit));
    }
    if limit > 0 && lock_delay_s > 0 {
        return Err(Error::new(
            Reason::InvalidArgument,
            "a semaphore (limit > 0) takes no lock_delay; drop one of them",
        ));
    }
    Ok(limit)
}

/// Checks an Acquire's read-write lock mode (`None`: not a lock): a lock
/// takes no semaphore limit, lock delay or preference.
pub fn mode(
    mode: i32,
    limit: u32,
    lock_delay_s: u64,
    preference: u32,
) -> Result<Option<crate::lease::Mode>> {
    use crate::lease::Mode;
    use crate::proto::LockMode;
    let mode = match LockMode::try_from(mode) {
        Ok(LockMode::Unspecified) => return Ok(None),
        Ok(LockMode::Exclusive) => Mode::Exclusive,
        Ok(LockMode::Shared) => Mode::Shared,
        Err(_) => {
            return Err(Error::new(
                Reason::InvalidArgument,
                format!("mode must be LOCK_MODE_UNSPECIFIED, LOCK_MODE_EXCLUSIVE or LOCK_MODE_SHARED (got {mode})"),
            ))
        }
    };
    let other = match (limit, lock_delay_s, preference) {
        (0, 0, 0) => return Ok(Some(mode)),
        (l, _, _) if l > 0 => "limit",
        (_, d, _) if d > 0 => "lock_delay",
        _ => "preference",
    };
    Err(Error::new(
        Reason::InvalidArgument,
        format!("a read-write lock Acquire (mode set) takes no {other}; drop one of them"),
    ))
}

/// `INVALID_ARGUMENT`: a Downgrade names slot 0, which no read-write lock
/// holding has.
pub fn downgrade_slot() -> Error {
    Error::new(
        Reason::InvalidArgument,
        "slot must be the read-write lock holding's slot from the Acquire reply (Lease.slot), not 0",
    )
}

/// Checks an Acquire's election preference: a semaphore's waiters have
/// no leader to hand over to them.
pub fn preference(preference: u32, limit: u32) -> Result<u32> {
    if preference > 0 && limit > 0 {
        return Err(Error::new(
            Reason::InvalidArgument,
            "a semaphore (limit > 0) takes no preference (an election candidate's); drop one of them",
        ));
    }
    Ok(preference)
}

/// Checks the semaphore slot a Renew or Release presents (0: a plain
/// lease): at most the server's largest limit.
pub fn slot(slot: u32, limits: &Limits) -> Result<u32> {
    let max = limits.max_semaphore_limit.max(limits.max_shared_holders);
    if slot > max {
        return Err(Error::new(
            Reason::InvalidArgument,
            format!(
                "slot must be 0 (a plain lease) or the slot from the Acquire reply, at most {max} (got {slot})"
            ),
        ));
    }
    Ok(slot)
}

/// Checks watch event-type filters: every value must be a known event type.
pub fn event_types(values: &[i32]) -> Result<Vec<crate::proto::EventType>> {
    use crate::proto::EventType;
    values
        .iter()
        .map(|&v| match EventType::try_from(v) {
            Ok(t) if t != EventType::Unspecified => Ok(t),
            _ => Err(Error::new(
                Reason::InvalidArgument,
                format!("event_types contains {v}, which is not an EventType; use values 1 to 7 (see tenure.v1.EventType)"),
            )
            .with("field", "event_types")),
        })
        .collect()
}

/// Checks a listing prefix: empty, or characters allowed in names.
pub fn prefix(prefix: &str) -> Result<&str> {
    if prefix.is_empty() {
        return Ok(prefix);
    }
    let ok = prefix.len() <= MAX_NAME_LEN
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-/_=.".contains(&b));
    if !ok {
        return Err(Error::new(
            Reason::InvalidName,
            format!(
                "prefix {:?} is invalid: use up to 255 characters from [-/_=.a-zA-Z0-9], or empty for all",
                truncate(prefix)
            ),
        ));
    }
    Ok(prefix)
}

/// Checks a listing page token: empty, or a lease name.
pub fn page_token(token: &str) -> Result<&str> {
    // `name`, or `name#slot` for a semaphore holder (the listing's format).
    match crate::lease::parse_page_token(token) {
        Some((named, _)) if token.is_empty() || name(named).is_ok() => Ok(token),
        _ => Err(Error::new(
            Reason::InvalidArgument,
            "page_token is not one this server issued for this prefix; start again with an empty page_token",
        )),
    }
}

/// Checks a revoke reason: 1 to 256 bytes of printable text.
pub fn revoke_reason(reason: &str) -> Result<&str> {
    if reason.trim().is_empty()
        || reason.len() > MAX_REASON_LEN
        || reason.chars().any(char::is_control)
    {
        return Err(Error::new(
            Reason::InvalidArgument,
            format!("reason must be 1 to {MAX_REASON_LEN} bytes of printable text saying why"),
        ));
    }
    Ok(reason)
}

/// Shortens user input quoted back in messages.
fn truncate(s: &str) -> String {
    if s.len() <= 64 {
        s.to_string()
    } else {
        let mut end = 64;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    }
}

/// Most holdings one LeaseHistory answers (and the default).
pub const MAX_HISTORY_PAGE: u32 = 1000;
/// The page size of a LeaseHistory that gives none.
pub const DEFAULT_HISTORY_PAGE: u32 = 100;

/// A LeaseHistory page size: 0 is the default, at most
/// [`MAX_HISTORY_PAGE`].
pub fn history_page(page_size: u32) -> Result<usize> {
    match page_size {
        0 => Ok(DEFAULT_HISTORY_PAGE as usize),
        n if n <= MAX_HISTORY_PAGE => Ok(n as usize),
        n => Err(Error::new(
            Reason::InvalidArgument,
            format!(
                "page_size {n} is above {MAX_HISTORY_PAGE}; ask for fewer and page with more_since"
            ),
        )),
    }
}

/// A protobuf timestamp as Unix milliseconds: absent is `None`; one before
/// 1970 or with out-of-range nanos is INVALID_ARGUMENT naming `field`.
pub fn time_ms(t: Option<&prost_types::Timestamp>, field: &str) -> Result<Option<u64>> {
    let Some(t) = t else {
        return Ok(None);
    };
    if t.seconds < 0 || !(0..1_000_000_000).contains(&t.nanos) {
        return Err(Error::new(
            Reason::InvalidArgument,
            format!("{field} must be a time after 1970 with nanos in 0..1e9"),
        ));
    }
    Ok(Some(
        (t.seconds as u64)
            .saturating_mul(1000)
            .saturating_add(t.nanos as u64 / 1_000_000),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            min_ttl_s: 1,
            max_ttl_s: 3600,
            default_ttl_s: 10,
            max_wait: Duration::from_secs(300),
            max_lock_delay_s: 60,
            max_semaphore_limit: 8,
            max_shared_holders: 4,
            max_group_size: 4,
        }
    }

    /// A group is min..=max distinct valid names; the refusal names the
    /// rule or the duplicate.
    #[test]
    fn groups() {
        let ok = group(["a", "b"].into_iter(), 2, 3).unwrap();
        assert_eq!(ok, ["a", "b"]);
        for (names, min) in [(vec!["a"], 2), (vec![], 1), (vec!["a", "b", "c", "d"], 2)] {
            let err = group(names.into_iter(), min, 3).unwrap_err();
            assert_eq!(err.reason, Reason::InvalidArgument);
        }
        let dup = group(["a", "b", "a"].into_iter(), 2, 3).unwrap_err();
        assert_eq!(dup.reason, Reason::InvalidArgument);
        assert!(dup.message.contains("\"a\" appears twice"));
        let reserved = group(["a", "_tenure.x"].into_iter(), 2, 3).unwrap_err();
        assert_eq!(reserved.reason, Reason::InvalidName);
    }

    fn d(seconds: i64, nanos: i32) -> prost_types::Duration {
        prost_types::Duration { seconds, nanos }
    }

    /// A limit above the server's maximum, or with a lock delay, is refused.
    #[test]
    fn limits_and_slots() {
        assert_eq!(limit(0, 5, &limits()).unwrap(), 0);
        assert_eq!(limit(8, 0, &limits()).unwrap(), 8);
        assert_eq!(
            limit(9, 0, &limits()).unwrap_err().reason,
            Reason::InvalidArgument
        );
        assert_eq!(
            limit(2, 1, &limits()).unwrap_err().reason,
            Reason::InvalidArgument
        );
        assert_eq!(slot(8, &limits()).unwrap(), 8);
        assert!(slot(9, &limits()).is_err());
    }

    /// Names follow the KV key rule; watch targets may add '.>'.
    #[test]
    fn names() {
        for good in ["a", "jobs.nightly", "a-b_c/d=e.F9"] {
            assert!(name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "a b",
            "a*",
            "a>",
            "ünï",
            &"x".repeat(256),
        ] {
            assert_eq!(name(bad).unwrap_err().reason, Reason::InvalidName, "{bad}");
        }
        assert!(watch_filter("jobs.>").is_ok());
        assert!(watch_filter(">").is_ok());
        assert!(watch_filter("jobs.*").is_err());
        assert!(watch_filter(".>").is_err());
    }

    /// TTLs round up to whole seconds, never below the minimum, never above the maximum.
    #[test]
    fn ttls() {
        let l = limits();
        assert_eq!(ttl(None, &l, 10).unwrap(), 10);
        assert_eq!(ttl(Some(&d(0, 300_000_000)), &l, 10).unwrap(), 1);
        assert_eq!(ttl(Some(&d(1, 500_000_000)), &l, 10).unwrap(), 2);
        assert_eq!(ttl(Some(&d(5, 0)), &l, 10).unwrap(), 5);
        let l5 = Limits { min_ttl_s: 5, ..l };
        assert_eq!(ttl(Some(&d(2, 0)), &l5, 10).unwrap(), 5);
        for bad in [
            d(0, 0),
            d(-1, 0),
            d(0, -5),
            d(3601, 0),
            d(3600, 1),
            d(1, 1_000_000_000),
        ] {
            assert_eq!(
                ttl(Some(&bad), &l, 10).unwrap_err().reason,
                Reason::InvalidTtl,
                "{bad:?}"
            );
        }
    }

    /// Keys are optional at Acquire, required and well-formed elsewhere.
    #[test]
    fn keys() {
        assert_eq!(lease_key("").unwrap(), None);
        assert!(lease_key("short").is_err());
        assert!(lease_key("has a space in it ok").is_err());
        assert!(lease_key("0123456789abcdef").unwrap().is_some());
        assert!(presented_key("").is_err());
        assert_eq!(mint_key().len(), 64);
        assert_ne!(mint_key(), mint_key());
    }

    /// Metadata, waits and event types are bounded and typed.
    #[test]
    fn others() {
        let big: HashMap<_, _> = [("k".to_string(), "v".repeat(2000))].into();
        assert_eq!(metadata(&big).unwrap_err().reason, Reason::InvalidMetadata);
        let many: HashMap<_, _> = (0..17).map(|i| (i.to_string(), String::new())).collect();
        assert!(metadata(&many).is_err());
        assert!(metadata(&HashMap::new()).unwrap().is_empty());
        let l = limits();
        assert_eq!(wait(Some(&d(0, 0)), &l).unwrap(), None);
        assert!(wait(Some(&d(-1, 0)), &l).is_err());
        assert!(wait(Some(&d(301, 0)), &l).is_err());
        assert!(event_types(&[3, 5]).is_ok());
        assert_eq!(
            event_types(&[99]).unwrap_err().reason,
            Reason::InvalidArgument
        );
        assert!(event_types(&[0]).is_err());
        assert!(holder("").is_err());
        assert!(holder("a\nb").is_err());
        assert!(holder("worker 1").is_ok());
        assert!(holder("wörker-ü 1").is_ok());
        for invisible in [
            "   ",
            "alice\u{202E}",
            "al\u{200B}ice",
            "\u{FEFF}alice",
            "alice\u{2028}",
            "a\u{E0041}",
        ] {
            assert_eq!(
                holder(invisible).unwrap_err().reason,
                Reason::InvalidHolder,
                "{invisible:?}"
            );
        }
        for (k, v) in [
            ("k", "a\0b"),
            ("k", "\x1b[31m"),
            ("k", "a\nb"),
            (" ", "v"),
            ("k\u{200D}", "v"),
        ] {
            let md: HashMap<_, _> = [(k.to_string(), v.to_string())].into();
            assert_eq!(
                metadata(&md).unwrap_err().reason,
                Reason::InvalidMetadata,
                "{k:?}={v:?}"
            );
        }
        let md: HashMap<_, _> = [("team".to_string(), String::new())].into();
        assert!(metadata(&md).is_ok(), "an empty value is fine");
        assert!(revision(0).is_err());
        assert!(prefix("").is_ok());
        assert!(prefix("jobs.").is_ok());
        assert!(prefix("jobs>").is_err());
        assert!(page_token("jobs.a").is_ok());
        assert!(page_token("..").is_err());
        assert!(revoke_reason("stuck").is_ok());
        assert!(revoke_reason(" ").is_err());
        assert!(revoke_reason("a\nb").is_err());
    }

    proptest::proptest! {
        /// The validators never panic, on anything.
        #[test]
        fn validators_never_panic(
            s in proptest::prelude::any::<String>(),
            secs in proptest::prelude::any::<i64>(),
            nanos in proptest::prelude::any::<i32>(),
            md in proptest::collection::hash_map(".{0,40}", ".{0,200}", 0..20),
        ) {
            let l = limits();
            let d = prost_types::Duration { seconds: secs, nanos };
            let _ = name(&s);
            let _ = watch_filter(&s);
            let _ = holder(&s);
            let _ = lease_key(&s);
            let _ = presented_key(&s);
            let _ = metadata(&md);
            let _ = prefix(&s);
            let _ = page_token(&s);
            let _ = revoke_reason(&s);
            if let Ok(t) = ttl(Some(&d), &l, 10) {
                proptest::prop_assert!((1..=3600).contains(&t));
            }
            if let Ok(Some(w)) = wait(Some(&d), &l) {
                proptest::prop_assert!(w <= Duration::from_secs(300));
            }
        }
    }
}
