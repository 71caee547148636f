//! The protocol's decisions, as pure functions: what an Acquire does over a
//! name's last message, which revisions belong to a holding, and when a
//! request is a retry of one already applied. They need no NATS, so they
//! are unit-tested here; the conditional write then makes each decision
//! safe against races.

use super::record::{Entry, KeyHash, Kind, Record};

/// What an Acquire should write, given the name's last message.
#[derive(Debug, PartialEq, Eq)]
pub enum AcquirePlan<'a> {
    /// The name is free: write a new holding conditional on this revision
    /// (0 when the name has no message at all).
    Take {
        /// The revision the write must replace.
        expected: u64,
    },
    /// The caller already holds it (same holder and lease key): this is a
    /// retry of an Acquire whose reply was lost. Renew that holding, so the
    /// caller's deadline (counted from this request) is true.
    Retry {
        /// The holding's current revision.
        revision: u64,
        /// Its record.
        record: &'a Record,
    },
    /// Another holding is live.
    Held {
        /// Its current revision.
        revision: u64,
        /// Its record.
        record: &'a Record,
    },
    /// The name holds a value Tenure did not write.
    Unreadable,
}

/// Decides an Acquire of `holder` with key `hash` over `last`.
pub fn plan_acquire<'a>(last: Option<&'a Entry>, holder: &str, hash: &KeyHash) -> AcquirePlan<'a> {
    let Some(entry) = last else {
        return AcquirePlan::Take { expected: 0 };
    };
    match &entry.kind {
        Kind::Held(record) if is_same_holding(record, holder, hash) => AcquirePlan::Retry {
            revision: entry.revision,
            record,
        },
        Kind::Held(record) => AcquirePlan::Held {
            revision: entry.revision,
            record,
        },
        Kind::Unreadable => AcquirePlan::Unreadable,
        Kind::Released(_) | Kind::Expired | Kind::Revoked(_) => AcquirePlan::Take {
            expected: entry.revision,
        },
    }
}

/// Whether an Acquire over `last` must read the name's fence: after an
/// expiry or a revoke (the delay may still run), or with no message at all
/// (a fence may outlive the marker; the new holding must replace it).
/// After a release there is none in force (the release left a tombstone),
/// but a new holding with a delay of its own (`lock_delay_s` > 0) still
/// reads it: its fence is written over the fence key's last revision.
pub fn needs_fence(last: Option<&Entry>, lock_delay_s: u64) -> bool {
    lock_delay_s > 0
        || matches!(
            last.map(|e| &e.kind),
            None | Some(Kind::Expired) | Some(Kind::Revoked(_))
        )
}

/// Until when (Unix ms) a name is refused by the lock delay of the holding
/// its last message ended, or `None` when it is not delayed. An expiry
/// marker takes the delay from the fence (`fence_delay_s`), a revoke from
/// its own payload; a release never delays. The end is the NATS timestamp
/// of the ending message, so the delay runs from when the bucket ended the
/// holding, not from when a replica noticed.
pub fn delayed_until(last: Option<&Entry>, fence_delay_s: u64) -> Option<u64> {
    let entry = last?;
    let delay_s = match entry.kind {
        Kind::Expired => fence_delay_s,
        Kind::Revoked(delay_s) => delay_s,
        _ => 0,
    };
    (delay_s > 0).then(|| entry.time_ms.saturating_add(delay_s.saturating_mul(1000)))
}

/// Whether an Acquire by `holder` with key `hash` is the one that took
/// `record`: the retry identity is the holder and the lease key together.
pub fn is_same_holding(record: &Record, holder: &str, hash: &KeyHash) -> bool {
    record.holder == holder && record.key_matches(hash)
}

/// Whether `expected` is a revision written by the holding whose token is
/// `token` and whose latest revision is `revision`. Every write of a
/// holding lies in `token..=revision` (no other holding can write between
/// them), so a Renew or Release that presents a stale revision from that
/// range is a retry of the same holder's call, not a stranger's.
pub fn belongs_to_holding(expected: u64, token: u64, revision: u64) -> bool {
    token <= expected && expected <= revision
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::record::fixtures::{self, record};

    fn entry(revision: u64, kind: Kind) -> Entry {
        fixtures::entry("n", revision, kind)
    }

    /// Absent and ended names are taken over their last revision; a live
    /// holding of someone else is held; foreign values are refused.
    #[test]
    fn acquire_takes_only_free_names() {
        let key = KeyHash::of("key-of-alice-0001");
        assert_eq!(
            plan_acquire(None, "alice", &key),
            AcquirePlan::Take { expected: 0 }
        );
        for kind in [Kind::Expired, Kind::Revoked(0), Kind::Released(None)] {
            let e = entry(9, kind);
            assert_eq!(
                plan_acquire(Some(&e), "alice", &key),
                AcquirePlan::Take { expected: 9 }
            );
        }
        let e = entry(9, Kind::Held(record("bob", "key-of-bob-000001", 7)));
        assert!(matches!(
            plan_acquire(Some(&e), "alice", &key),
            AcquirePlan::Held { revision: 9, .. }
        ));
        let e = entry(9, Kind::Unreadable);
        assert_eq!(
            plan_acquire(Some(&e), "alice", &key),
            AcquirePlan::Unreadable
        );
    }

    /// A retry needs the same holder and the same key: the holder alone,
    /// or the key alone, is someone else's Acquire.
    #[test]
    fn retry_identity_is_holder_and_key() {
        let key = KeyHash::of("key-of-alice-0001");
        let e = entry(9, Kind::Held(record("alice", "key-of-alice-0001", 7)));
        assert!(matches!(
            plan_acquire(Some(&e), "alice", &key),
            AcquirePlan::Retry { revision: 9, .. }
        ));
        assert!(matches!(
            plan_acquire(Some(&e), "mallory", &key),
            AcquirePlan::Held { .. }
        ));
        let other = KeyHash::of("key-of-mallory-01");
        assert!(matches!(
            plan_acquire(Some(&e), "alice", &other),
            AcquirePlan::Held { .. }
        ));
    }

    /// The revisions of a holding run from its token to its latest write.
    #[test]
    fn holding_revisions_run_from_token_to_latest() {
        assert!(belongs_to_holding(7, 7, 9));
        assert!(belongs_to_holding(8, 7, 9));
        assert!(belongs_to_holding(9, 7, 9));
        assert!(
            !belongs_to_holding(6, 7, 9),
            "an earlier holding's revision"
        );
        assert!(!belongs_to_holding(10, 7, 9), "a revision not written yet");
    }

    /// Only an expiry or a revoke delays the name, from the ending
    /// message's time; a release, a live holding or no message never does.
    #[test]
    fn lock_delay_follows_expiry_and_revoke_only() {
        let at = |kind| Entry {
            time_ms: 10_000,
            ..entry(9, kind)
        };
        assert_eq!(delayed_until(Some(&at(Kind::Expired)), 5), Some(15_000));
        assert_eq!(delayed_until(Some(&at(Kind::Expired)), 0), None);
        assert_eq!(delayed_until(Some(&at(Kind::Revoked(3))), 5), Some(13_000));
        assert_eq!(delayed_until(Some(&at(Kind::Revoked(0))), 5), None);
        assert_eq!(delayed_until(Some(&at(Kind::Released(None))), 5), None);
        assert_eq!(delayed_until(None, 5), None);
        assert!(needs_fence(None, 0));
        assert!(needs_fence(Some(&at(Kind::Expired)), 0));
        assert!(!needs_fence(Some(&at(Kind::Released(None))), 0));
        assert!(needs_fence(Some(&at(Kind::Released(None))), 5));
    }

    /// The token of a holding is the revision of its acquiring write, and
    /// renewals carry it unchanged.
    #[test]
    fn token_is_the_acquiring_revision() {
        let acquired = record("alice", "key-of-alice-0001", 0);
        assert_eq!(acquired.token_at(12), 12);
        let renewed = record("alice", "key-of-alice-0001", 12);
        assert_eq!(renewed.token_at(15), 12);
    }
}
