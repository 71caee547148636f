//! Read-write locks: any number of shared holders, or one exclusive holder,
//! each with its own slot, lease key and fencing token, served in arrival
//! order (design section 23).
//!
//! A read-write lock `name` is kept as a semaphore: its holdings are
//! records in the slot keys `_tenure.sem.<name>.<slot>`, written, renewed,
//! released, revoked and expired exactly like a semaphore's (so Renew,
//! Release, KeepAlive and RevokeLease take its slot as they take a
//! semaphore's), each record saying its [`Mode`]; its definition key says
//! `"rw":true`, so that a semaphore Acquire of the name is refused and the
//! other way round. Its waiters queue in the semaphore's queue
//! (`keys::semaphore_queue`), whatever their mode, and only the head of
//! the queue takes the lock: a shared Acquire that arrives after a queued
//! exclusive one waits behind it, so writers are never starved.
//!
//! Unlike a semaphore's, whose holders never exclude each other, every
//! Acquire of a lock reads *every* key of the lock (one scan of the
//! wildcard [`keys::semaphore_filter`], which matches the lock's slots and
//! definition and nothing else) and writes its slot conditional on the
//! last revision under that wildcard: one conditional publish that stores
//! only if no key of the lock was written since the read. So an exclusive
//! holding is written only over a read that saw no live record in any
//! slot, and a shared one only over a read that saw no exclusive record,
//! and neither can be overtaken by a write the read did not see. The
//! stream leader of a replicated stream holds back a write conditional on
//! a wildcard while another write conditional on the *same* wildcard is in
//! flight; every write that can start a holding of the lock names the same
//! one. Renewals and releases name their own slot only: they never make
//! the lock more held than the read saw (a renewal keeps its record, a
//! release frees it, and an expiry is NATS's marker, a write under the
//! wildcard).
//!
//! Downgrade rewrites the exclusive holder's record as a shared one over
//! its own revision, with a new fencing token (the write's revision): the
//! caller holds throughout, and the record names the exclusive holding it
//! ended (`transferred_from`), so watchers report that holding RELEASED
//! and the shared one ACQUIRED, which wakes the waiters.

use std::time::Duration;

use super::super::fifo;
use super::super::keys::{self, semaphore_slot as slot_key};
use super::super::record::{Entry, Holding, KeyHash, Kind, Mode, Record, Released};
use super::super::refusals::{cas_failed, contended, unreadable};
use super::super::rules::{self, AcquirePlan};
use super::super::{now_ms, AcquireArgs, Leases, MAX_CAS_ATTEMPTS};
use super::{in_slot_terms, leave_after_grant, Definition, Read};
use crate::config::TestFault;
use crate::error::{Error, Reason, Result};
use crate::nats::{CasError, Write, WriteOp};

/// A read-write lock as one scan read it: every key under its wildcard.
struct Lock {
    /// The largest revision under the wildcard (0: no key): the condition
    /// of the write that follows.
    last: u64,
    /// The definition.
    definition: Read,
    /// Each slot's last message, by slot (any slot number a replica with
    /// another `--max-shared-holders` may have written).
    slots: std::collections::BTreeMap<u32, Entry>,
}

impl Leases {
    /// One attempt to take read-write lock `args.name` in `mode` (`queued`:
    /// the caller's ticket, and whether the view says it is the head);
    /// a lost race reads and tries again, `attempts` tries in all.
    pub(super) async fn rw_attempt(
        &self,
        args: &AcquireArgs,
        mode: Mode,
        queued: Option<(&fifo::Ticket, bool)>,
        attempts: usize,
    ) -> Result<Holding> {
        self.store.require_atomic()?;
        let name = args.name.as_str();
        let hash = KeyHash::of(&args.key);
        let max = args.limit;
        let filter = keys::semaphore_filter(name);
        // A queued waiter that does not know it is the head asks the queue
        // first (one read), as a semaphore's does; nobody can queue ahead
        // of it, so it stays the head through the retries below.
        let mut queued = queued;
        if let Some((ticket, false)) = queued {
            self.may_take_slot(name, queued).await?;
            queued = Some((ticket, true));
        }
        'attempt: for _ in 0..attempts {
            let lock = self.read_lock(name, max).await?;
            if lock.definition.limit.is_some() && !lock.definition.rw {
                return Err(in_use_as(name, "a semaphore"));
            }
            let mut live: Vec<&Record> = Vec::new();
            let mut taken = std::collections::BTreeSet::new();
            for (slot, entry) in &lock.slots {
                match rules::plan_acquire(Some(entry), &args.holder, &hash) {
                    AcquirePlan::Retry { revision, record } if record.mode == Some(mode) => {
                        // The caller's own holding (a retry after a lost
                        // reply): renewed, as for a lease.
                        let key = slot_key(name, *slot);
                        return match self
                            .write_renewal(&key, revision, record, Some(args.ttl_s))
                            .await
                        {
                            Err(CasError::Conflict) => continue 'attempt,
                            other => other.map_err(cas_failed).map(|h| h.in_slot(name, *slot)),
                        };
                    }
                    AcquirePlan::Retry { record, .. } => {
                        return Err(no_upgrade(name, record.mode, mode));
                    }
                    AcquirePlan::Held { record, .. } => {
                        live.push(record);
                        taken.insert(*slot);
                    }
                    AcquirePlan::Unreadable => {
                        return Err(unreadable(&slot_key(name, *slot), self.store.bucket()))
                    }
                    AcquirePlan::Take { .. } => {}
                }
            }
            // A record of no mode (not a lock's) excludes like an
            // exclusive one. TEST FAULT shared-over-exclusive: a shared
            // Acquire takes every holder for a shared one.
            let exclusive = live.iter().any(|r| r.mode != Some(Mode::Shared))
                && !(mode == Mode::Shared && self.faults.contains(TestFault::SharedOverExclusive));
            match mode {
                Mode::Exclusive if !live.is_empty() => return Err(held(name, &live)),
                Mode::Shared if exclusive => return Err(held(name, &live)),
                _ => {}
            }
            let Some(slot) = (1..=max).find(|slot| !taken.contains(slot)) else {
                return Err(full(name, live.len(), max, args.wait.is_some()));
            };
            if mode == Mode::Shared && live.len() >= max as usize {
                return Err(full(name, live.len(), max, args.wait.is_some()));
            }
            // The queue decides who may take it: nobody queued (no
            // ticket), or the head (a ticket).
            self.may_take_slot(name, queued).await?;
            let over = lock.slots.get(&slot).map_or(0, |e| e.revision);
            let record = Record::grant(
                &args.holder,
                &hash,
                args.ttl_s,
                &args.metadata,
                0,
                now_ms(),
                over,
            )
            .in_mode(mode);
            let key = slot_key(name, slot);
            let ttl = self.nats_ttl(args.ttl_s);
            let written = if lock.definition.rw {
                // The lock is defined: its slot alone, over the wildcard.
                let written = self
                    .store
                    .put_under(&key, record.encode(), lock.last, &filter, ttl)
                    .await;
                if let (Ok(_), Some((ticket, _))) = (&written, queued) {
                    leave_after_grant(name, ticket).await;
                }
                written
            } else {
                // First use (or after the sweep removed it): the slot over
                // the wildcard, checked first, then the definition over its
                // revision, and the ticket, in one batch.
                let mut writes = vec![
                    Write {
                        name: key,
                        op: WriteOp::Put,
                        payload: record.encode(),
                        expected: Some(lock.last),
                        expected_of: Some(filter.clone()),
                        ttl,
                    },
                    Definition {
                        limit: max,
                        rw: true,
                    }
                    .write(name, lock.definition.revision),
                ];
                if let Some((ticket, _)) = queued {
                    writes.push(ticket.grant_write());
                }
                // The slot's revision is the batch's first.
                let n = writes.len() as u64;
                self.store.batch(&writes).await.map(|last| last - (n - 1))
            };
            match written {
                Ok(revision) => return Ok(self.slot_granted(args, slot, revision, record)),
                Err(CasError::Conflict) => continue,
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(contended(name))
    }

    /// Reads every key of read-write lock `name` (one scan of its
    /// wildcard); `max`: this replica's `--max-shared-holders`, which
    /// bounds how many keys it reads. The scan walks revisions upwards,
    /// which makes it a consistent read at its last revision (reading
    /// each key once in any order would not be: `model/rwlock.pml`,
    /// control `SCAN_ANY_ORDER`).
    async fn read_lock(&self, name: &str, max: u32) -> Result<Lock> {
        // Slots, the definition, and slots of a replica with a larger
        // --max-shared-holders, up to a cap.
        let cap = (max as usize).saturating_mul(2).saturating_add(8);
        let (messages, all) = self.store.scan(&keys::semaphore_filter(name), cap).await?;
        if !all {
            return Err(Error::new(
                Reason::LimitMismatch,
                format!(
                    "read-write lock {name:?} has more than {cap} keys: a replica runs with a larger --max-shared-holders than this one's {max}; set the same on every replica"
                ),
            )
            .with("max_shared_holders", max));
        }
        let mut lock = Lock {
            last: 0,
            definition: Read::of(None),
            slots: Default::default(),
        };
        for msg in messages {
            lock.last = lock.last.max(msg.revision);
            if keys::parse_semaphore_definition(&msg.name) == Some(name) {
                lock.definition = Read::of(Some(&msg));
            } else if let Some((of, slot)) = keys::parse_semaphore_slot(&msg.name) {
                if of == name {
                    lock.slots.insert(slot, Entry::from(msg));
                }
            }
        }
        Ok(lock)
    }

    /// Turns the exclusive holding in slot `slot` of read-write lock `name`
    /// shared, with no gap: its record is rewritten over its revision as a
    /// shared one, with a new fencing token (this write's revision). A
    /// retry of a Downgrade whose reply was lost returns the shared
    /// holding.
    pub async fn downgrade(
        &self,
        name: &str,
        slot: u32,
        expected: u64,
        key: &str,
    ) -> Result<Holding> {
        let hash = KeyHash::of(key);
        let skey = slot_key(name, slot);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (revision, rec) = match self.verify_holding(&skey, expected, &hash).await {
                Ok(held) => held,
                Err(err) if err.reason == Reason::LeaseNotHeld => {
                    return match self.downgraded(&skey, expected, &hash).await? {
                        Some(holding) => Ok(holding.in_slot(name, slot)),
                        None => Err(in_slot_terms(err, name, slot)),
                    };
                }
                Err(err) => return Err(in_slot_terms(err, name, slot)),
            };
            if rec.mode != Some(Mode::Exclusive) {
                return Err(not_exclusive(name, slot, rec.mode));
            }
            let now = now_ms();
            let record = Record {
                token: 0,
                acquired_ms: now,
                renewed_ms: now,
                over: Some(revision),
                transferred_from: Some(Released {
                    holder: rec.holder.clone(),
                    token: rec.token_at(revision),
                }),
                mode: Some(Mode::Shared),
                ..(*rec).clone()
            };
            let ttl = self.nats_ttl(record.ttl_s);
            match self.store.put(&skey, record.encode(), revision, ttl).await {
                Ok(at) => {
                    self.cache.insert(&skey, at, &record);
                    tracing::debug!(name, slot, token = at, "read-write lock downgraded");
                    return Ok(Holding::at(&skey, at, record).in_slot(name, slot));
                }
                Err(CasError::Conflict) => continue,
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(contended(name))
    }

    /// The shared holding in `skey` that a Downgrade presenting `expected`
    /// (a revision of the exclusive holding) already made, if any: a
    /// retry after a lost reply.
    async fn downgraded(
        &self,
        skey: &str,
        expected: u64,
        hash: &KeyHash,
    ) -> Result<Option<Holding>> {
        let Some(Entry {
            revision,
            kind: Kind::Held(rec),
            ..
        }) = self.store.last(skey).await?.map(Entry::from)
        else {
            return Ok(None);
        };
        let ended = match &rec.transferred_from {
            Some(from) if rec.mode == Some(Mode::Shared) && rec.key_matches(hash) => from.token,
            _ => return Ok(None),
        };
        let token = rec.token_at(revision);
        Ok((ended <= expected && expected < token).then(|| Holding::at(skey, revision, rec)))
    }
}

/// `MODE_MISMATCH`: the name is in use another way (`as_what`: "a
/// semaphore", "a read-write lock").
pub(super) fn in_use_as(name: &str, as_what: &str) -> Error {
    Error::new(
        Reason::ModeMismatch,
        format!(
            "{name:?} is in use as {as_what}; use each name one way only (it is free for other use once unused for the marker TTL)"
        ),
    )
    .with("in_use_as", as_what.trim_start_matches("a "))
}

/// `MODE_MISMATCH`: the caller holds the lock in another mode already.
fn no_upgrade(name: &str, held: Option<Mode>, asked: Mode) -> Error {
    Error::new(
        Reason::ModeMismatch,
        format!(
            "you hold read-write lock {name:?} {} already, not {}; release it first (only Downgrade changes a holding's mode)",
            mode_name(held),
            mode_name(Some(asked))
        ),
    )
    .with("mode", mode_name(held))
}

/// `MODE_MISMATCH`: a Downgrade of a holding that is not exclusive.
fn not_exclusive(name: &str, slot: u32, mode: Option<Mode>) -> Error {
    Error::new(
        Reason::ModeMismatch,
        format!(
            "the holding of {name:?} in slot {slot} is {}, not an exclusive read-write lock holding; only an exclusive holding downgrades",
            mode_name(mode)
        ),
    )
    .with("mode", mode_name(mode))
}

/// How a mode reads in a message.
fn mode_name(mode: Option<Mode>) -> &'static str {
    match mode {
        Some(Mode::Exclusive) => "exclusive",
        Some(Mode::Shared) => "shared",
        None => "a semaphore slot",
    }
}

/// `LEASE_HELD`: the lock is held in a mode that excludes the Acquire.
fn held(name: &str, live: &[&Record]) -> Error {
    let exclusive = live.iter().find(|r| r.mode != Some(Mode::Shared));
    let soonest = live.iter().map(|r| r.ttl_s).min().unwrap_or(0);
    let message = match exclusive {
        Some(r) => format!(
            "read-write lock {name:?} is held exclusively by {:?}; retry after it is released or expires, or Acquire with a wait",
            r.holder
        ),
        None => format!(
            "read-write lock {name:?} is held shared by {} holders; retry after they release or expire, or Acquire with a wait",
            live.len()
        ),
    };
    Error::new(Reason::LeaseHeld, message)
        .with("holders", live.len())
        .with(
            "mode",
            if exclusive.is_some() {
                "EXCLUSIVE"
            } else {
                "SHARED"
            },
        )
        .with("ttl_seconds", soonest)
}

/// `TOO_MANY_SHARED_HOLDERS` (`LEASE_HELD` for a waiting Acquire, which
/// waits for one to leave): `holders` share the lock, `max` may.
fn full(name: &str, holders: usize, max: u32, waiting: bool) -> Error {
    let reason = match waiting {
        true => Reason::LeaseHeld,
        false => Reason::TooManySharedHolders,
    };
    Error::new(
        reason,
        format!(
            "read-write lock {name:?} has {holders} shared holders, as many as --max-shared-holders {max} allows; retry after one releases, or Acquire with a wait"
        ),
    )
    .with("holders", holders)
    .with("max_shared_holders", max)
    .retry_after(Duration::from_secs(1))
}
