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
        Kind::Released(_) | Kind::Expired | Kind::Revoked => AcquirePlan::Take {
            expected: entry.revision,
        },
    }
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
        for kind in [Kind::Expired, Kind::Revoked, Kind::Released(None)] {
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
