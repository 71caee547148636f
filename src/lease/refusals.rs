//! The refusals of the lease protocol: every error a lease call answers
//! with, each built in one place with its reason, a one-line message a
//! person can act on, and its `ErrorInfo` metadata.

use std::time::Duration;

use super::fifo;
use super::keys;
use super::record::Record;
use crate::error::{Error, Reason};
use crate::nats::CasError;

/// Turns a CAS failure that is not a conflict into the caller's error.
pub(super) fn cas_failed(err: CasError) -> Error {
    match err {
        CasError::Failed(err) => err,
        CasError::Conflict => Error::new(Reason::Internal, "unexpected write conflict"),
    }
}

/// `GROUP_MEMBER`: Renew or Release of one member of a group holding,
/// which would leave the others of its group in another state.
pub(super) fn group_member(name: &str, group: &[String], rpc: &str) -> Error {
    let mut names = group.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    if group.len() > 3 {
        names.push_str(&format!(" and {} more", group.len() - 3));
    }
    Error::new(
        Reason::GroupMember,
        format!(
            "lease {name:?} is one member of a group of {} ({names}) taken with AcquireGroup; {rpc} every member at once with {rpc}Group, so that nobody sees part of the group",
            group.len()
        ),
    )
    .with("group_size", group.len())
}

/// `LEASE_HELD` naming the current holder.
pub(super) fn held(name: &str, rec: &Record, revision: u64) -> Error {
    let token = rec.token_at(revision);
    Error::new(
        Reason::LeaseHeld,
        format!(
            "lease {name:?} is held by {:?} (token {token}); retry after it is released or expires, or Acquire with a wait",
            rec.holder
        ),
    )
    .with("holder", &rec.holder)
    .with("fencing_token", token)
    .with("ttl_seconds", rec.ttl_s)
}

/// `LEASE_HELD` while the lock delay of an ended holding runs, saying when
/// the name becomes free (metadata and RetryInfo).
pub(super) fn delayed(name: &str, free_at_ms: u64, now_ms: u64) -> Error {
    let left = Duration::from_millis(free_at_ms.saturating_sub(now_ms));
    Error::new(
        Reason::LeaseHeld,
        format!(
            "lease {name:?} is in its lock delay after its last holding expired or was revoked; \
             it becomes free in {left:?}, or Acquire with a wait"
        ),
    )
    .with("free_at_unix_ms", free_at_ms)
    .with("state", "LOCK_DELAY")
    .retry_after(left)
}

/// `LEASE_HELD` for a name that is free but has waiters queued: an Acquire
/// without a ticket does not jump them.
pub(super) fn queued(name: &str, waiters: usize) -> Error {
    Error::new(
        Reason::LeaseHeld,
        format!(
            "lease {name:?} has {waiters} waiter(s) queued, who take it first; Acquire with a wait to queue behind them"
        ),
    )
    .with("waiters", waiters)
    .with("state", "QUEUED")
}

/// `LEASE_HELD` for a waiter still behind earlier waiters of `name` (the
/// watcher's view counts `waiters` in all) when its wait runs out.
pub(super) fn behind(name: &str, waiters: usize) -> Error {
    Error::new(
        Reason::LeaseHeld,
        format!(
            "lease {name:?} goes to the waiters queued ahead of this one first ({waiters} queued)"
        ),
    )
    .with("waiters", waiters)
    .with("state", "QUEUED")
}

/// `TOO_MANY_WAITERS` when every queue slot of a name is taken.
pub(super) fn too_many_waiters(name: &str, waiters: usize, max: usize) -> Error {
    Error::new(
        Reason::TooManyWaiters,
        format!(
            "lease {name:?} already has {waiters} waiters queued (--max-waiters {max}); retry later, or Acquire without a wait"
        ),
    )
    .with("waiters", waiters)
    .with("limit", "--max-waiters")
    .with("max_waiters", max)
    .retry_after(fifo::TICKET_REFRESH)
}

/// `LEASE_NOT_HELD` with why.
pub(super) fn not_held(name: &str, why: String) -> Error {
    Error::new(
        Reason::LeaseNotHeld,
        format!("you do not hold lease {name:?}: {why}; stop acting as holder and Acquire again"),
    )
}

/// `LEASE_NOT_FOUND` for a revoke of something that is not there.
pub(super) fn not_revocable(name: &str, why: &str) -> Error {
    Error::new(
        Reason::LeaseNotFound,
        format!("cannot revoke lease {name:?}: {why}; list leases to see what is held"),
    )
}

/// `LEASE_HELD` after repeated lost races.
pub(super) fn contended(name: &str) -> Error {
    Error::new(
        Reason::LeaseHeld,
        format!("lease {name:?} is changing hands too fast to settle; retry with backoff"),
    )
}

/// `RECORD_UNREADABLE` for a foreign value where the record of lease
/// `name` (or a semaphore slot, by its key) is kept.
pub(super) fn unreadable(name: &str, bucket: &str) -> Error {
    let key = keys::record_of(name);
    Error::new(
        Reason::RecordUnreadable,
        format!(
            "key {key:?} in bucket {bucket:?} holds a value that is not a Tenure lease; remove it with `nats kv del {bucket} {key}`"
        ),
    )
}
