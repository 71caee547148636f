//! Counting semaphores: up to N holders of one name at once, each with its
//! own slot, lease key and fencing token, enforced by conditional writes.
//!
//! A semaphore `name` with limit N is N *slot keys*
//! `_tenure.sem.<name>.<slot>` (slot 1 to N) plus one *definition key*
//! `_tenure.sem.<name>.limit`, all under the reserved first level so they are
//! never leases. Each slot key is written exactly like a lease record (same
//! record, TTL, expiry marker and release tombstone), so a slot is held by at
//! most one holder, and a holder that stops renewing loses its slot within its
//! TTL. The definition (`{"limit":N}`, no TTL) says which limit is in force.
//!
//! An Acquire reads the slots and the definition and picks a free slot (a
//! waiting Acquire queues first, in the fair queue of the reserved name
//! `_tenure.sem.<name>` (`keys::semaphore_queue`), and only the head of
//! that queue takes a slot, so waiters are served in arrival order with no
//! race among them). While
//! the limit stands it writes the slot's record alone, conditional on the
//! slot's revision. An Acquire that defines the limit writes one atomic
//! batch: the definition conditional on the revision it read (which
//! serialises every definer of the semaphore, on any replica), tombstones
//! over the other free slots of the old and new limits when an old
//! definition exists, and the slot's record. A first definition is two
//! messages, whatever the limit. The limit cannot be
//! exceeded: a holding is a live record in a slot key, there are only N slot
//! keys for limit N, and a slot key has one last message. The limit can only
//! change in a batch that read every slot of the old limit free, and any
//! Acquire that raced it fails on the definition's revision. The fencing token
//! is the KV revision of the slot write; revisions are stream-wide, so tokens
//! increase across all holders of the name in grant order.
//!
//! Renew and Release touch only the holder's slot key (through the lease
//! code): renewing one holder never conflicts with acquiring another.
//!
//! A semaphore unused for the marker TTL is removed by a sweep
//! ([`sweep`]), so that definitions do not pile up in the bucket.

mod rwlock;
mod sweep;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fifo;
use super::keys::{self, semaphore_slot as slot_key};
use super::record::{Entry, Holding, KeyHash, Kind, Record};
use super::refusals::{cas_failed, contended, queued as queued_for, unreadable};
use super::rules::{self, AcquirePlan};
use super::wait::{Wait, FOLLOW_PATIENCE};
use super::watch::{SlotHint, Want};
use super::{now_ms, AcquireArgs, EventKind, Filter, Leases, MAX_CAS_ATTEMPTS};
use crate::config::TestFault;
use crate::error::{Error, Reason, Result};
use crate::nats::{CasError, Op, Write, WriteOp};
use crate::observe::METRICS;

/// Slot reads of one replica's semaphore calls in flight at once, so that
/// reads of large semaphores cannot flood NATS.
pub(super) const SLOT_READS: usize = 256;

/// Slots read at a time while looking for a live holder.
const LIVE_PROBE: u32 = 16;

/// The value of a semaphore's definition key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Definition {
    /// The limit in force.
    limit: u32,
    /// Whether the name is a read-write lock ([`rwlock`]) rather than a
    /// semaphore. Omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    rw: bool,
}

impl Definition {
    /// The write of this definition of semaphore (or read-write lock)
    /// `name` over the definition's revision `expected` (0: none); no TTL.
    fn write(&self, name: &str, expected: u64) -> Write {
        Write {
            name: keys::semaphore_definition(name),
            op: WriteOp::Put,
            payload: serde_json::to_vec(self)
                .expect("a definition always serialises")
                .into(),
            expected: Some(expected),
            expected_of: None,
            ttl: Duration::ZERO,
        }
    }
}

/// The limit a semaphore's definition key's value defines; `None` for a
/// value that is no definition, or a read-write lock's (the slot view
/// never vouches for a slot of a lock: its Acquires read everything).
pub(super) fn defined_limit(payload: &[u8]) -> Option<u32> {
    serde_json::from_slice::<Definition>(payload)
        .ok()
        .filter(|d| !d.rw)
        .map(|d| d.limit)
}

/// A semaphore as read: its limit and live holders.
#[derive(Debug)]
pub struct Semaphore {
    /// The limit in force.
    pub limit: u32,
    /// The live holders, by slot.
    pub holders: Vec<Holding>,
}

/// The definition as read: its revision (0: none) and limit (`None`: no
/// definition, or a foreign value).
struct Read {
    /// The definition's last revision.
    revision: u64,
    /// The limit it defines.
    limit: Option<u32>,
    /// Whether it defines a read-write lock.
    rw: bool,
}

impl Read {
    /// The definition in a last message (`None`: the key has none).
    fn of(msg: Option<&crate::nats::Message>) -> Read {
        let def = msg.and_then(|m| match &m.op {
            Op::Put(p) => serde_json::from_slice::<Definition>(p).ok(),
            _ => None,
        });
        Read {
            revision: msg.map_or(0, |m| m.revision),
            limit: def.as_ref().map(|d| d.limit),
            rw: def.is_some_and(|d| d.rw),
        }
    }
}

impl Leases {
    /// Takes a semaphore slot on a bucket without atomic batches (no fair
    /// queue: see `acquire.rs` for the queued wait), waiting for one to
    /// free if the wait allows: every end of a holding of the name wakes
    /// the waiters, who race for the free slot. At most `--max-waiters`
    /// wait for one semaphore on this replica; more are refused
    /// TOO_MANY_WAITERS.
    pub(super) async fn acquire_slot(&self, args: &AcquireArgs, wait: Wait) -> Result<Holding> {
        match self.try_acquire_slot(args).await {
            Err(err) if err.reason == Reason::LeaseHeld => {}
            other => return other,
        }
        let _place = self
            .unqueued
            .join(&args.name, self.max_waiters)
            .map_err(|n| too_many_slot_waiters(&args.name, n, self.max_waiters))?;
        let wakeups = self.follow_ends(&args.name, false);
        self.wait_after(wait, wakeups, || self.try_acquire_slot(args))
            .await
    }

    /// One attempt to take a slot of semaphore `args.name` with limit
    /// `args.limit`, by a caller without a queue ticket: it writes only
    /// when nobody is queued.
    pub(super) async fn try_acquire_slot(&self, args: &AcquireArgs) -> Result<Holding> {
        self.slot_attempt(args, None, MAX_CAS_ATTEMPTS).await
    }

    /// The first try of a waiting Acquire of a semaphore slot, by a caller
    /// without a ticket: one attempt, and a lost race is `LEASE_HELD`, so
    /// that it queues (where the head takes the next free slot with no
    /// race) instead of racing again: with 64 clients arriving at once
    /// on 8 slots, their retries kept NATS busy with reads for the first
    /// ~200 ms (workload 8's first cycles).
    pub(super) async fn first_try_slot(&self, args: &AcquireArgs) -> Result<Holding> {
        self.slot_attempt(args, None, 1).await
    }

    /// One attempt of the queued semaphore waiter holding `ticket`; `head`:
    /// the shared watcher's view says it is the head of the queue (else
    /// the queue is read). Only the head takes a slot, so waiters are
    /// served in arrival order, one per free slot, with no race among
    /// them; the ticket is deleted once the slot is written (design
    /// section 19).
    pub(super) async fn attempt_slot_queued(
        &self,
        args: &AcquireArgs,
        ticket: &fifo::Ticket,
        head: bool,
    ) -> Result<Holding> {
        self.slot_attempt(args, Some((ticket, head)), MAX_CAS_ATTEMPTS)
            .await
    }

    /// One attempt to take a slot: without a ticket (`queued` is `None`),
    /// or as the queued waiter with that ticket (and whether the view says
    /// it is the head); a lost race reads and tries again, `attempts` tries
    /// in all.
    async fn slot_attempt(
        &self,
        args: &AcquireArgs,
        queued: Option<(&fifo::Ticket, bool)>,
        attempts: usize,
    ) -> Result<Holding> {
        if let Some(mode) = args.mode {
            return self.rw_attempt(args, mode, queued, attempts).await;
        }
        let name = args.name.as_str();
        let limit = args.limit;
        let hash = KeyHash::of(&args.key);
        // The slots a holder may take: as many as the limit (TEST FAULT
        // semaphore-over-limit: one more).
        let mut slots_open = limit;
        if self.faults.contains(TestFault::SemaphoreOverLimit) {
            slots_open = limit + 1;
        }
        // The head of the queue asks the shared watcher's view which slot
        // to try: one it vouches for is written with no read, else that
        // one slot is read instead of all of them (TEST FAULT
        // semaphore-herd: every waiter is a "head"; they read all; TEST
        // FAULT semaphore-over-limit: nothing is vouched for, the slot
        // past the limit is read).
        let key_hex = hash.to_hex();
        let mut hint = match queued {
            Some((_, true)) if !self.faults.contains(TestFault::SemaphoreHerd) => {
                Some(self.hub.free_slot(
                    name,
                    Want {
                        open: slots_open,
                        limit,
                        holder: &args.holder,
                        key: &key_hex,
                        vouch: slots_open == limit,
                    },
                ))
            }
            _ => None,
        };
        // A queued waiter that does not know it is the head (the view is
        // not live, or did not say) asks the queue first: one read, where
        // the slots and the definition are several, and only the head
        // reads on. A wake reaches every waiter of the name (while the
        // watcher loads, every release does): each costs one read, not
        // ten. Nobody can queue ahead of a ticket, so the head stays the
        // head through the retries below.
        let mut queued = queued;
        if let Some((ticket, false)) = queued {
            self.may_take_slot(name, queued).await?;
            queued = Some((ticket, true));
        }
        'attempt: for _ in 0..attempts {
            let hinted = match hint.take() {
                // The view saw every slot taken: wait for an end (which the
                // view applies before it wakes anyone).
                Some(SlotHint::Free(free)) if free.is_empty() => {
                    return Err(full_seen(name, limit))
                }
                Some(SlotHint::Free(free)) => Some(free[rand::random_range(0..free.len())]),
                Some(SlotHint::Mine(slot)) => Some(slot),
                Some(SlotHint::Vouched { slot, revision }) => {
                    match self.write_slot(args, &hash, slot, revision, queued).await {
                        Err(CasError::Conflict) => {
                            // Written since: read everything.
                            METRICS.acquire_hint_misses.inc();
                            continue 'attempt;
                        }
                        other => return other.map_err(cas_failed),
                    }
                }
                Some(SlotHint::Unknown) | None => None,
            };
            // Another limit in force is refused as soon as one live holder
            // of it is found, before the slots of a large limit are read
            // (a small one's are read as cheaply as the probe).
            if limit > LIVE_PROBE && hinted.is_none() {
                let def = self.definition(name).await?;
                if def.rw {
                    return Err(rwlock::in_use_as(name, "a read-write lock"));
                }
                if let Some(in_force) = def.limit {
                    if in_force != limit && self.any_holder(name, in_force).await? {
                        return Err(mismatch(name, limit, in_force));
                    }
                }
            }
            // The slots first, then the definition: a limit change committed
            // after the slots were read rewrote them, so a write over a
            // slot's read revision fails if the limit changed since.
            let read_at = tokio::time::Instant::now();
            let mut slots = match hinted {
                Some(slot) => vec![(slot, self.slot(name, slot).await?)],
                None => self.slots(name, 1, slots_open).await?,
            };
            let def = self.definition(name).await?;
            if def.rw {
                return Err(rwlock::in_use_as(name, "a read-write lock"));
            }
            let in_force = def.limit.unwrap_or(0);
            if hinted.is_some() {
                // One slot was read: good for a write only under the limit
                // asked for, and when it is free or the caller's own; else
                // read them all (the hint is gone).
                let usable = in_force == limit
                    && matches!(
                        rules::plan_acquire(slots[0].1.as_ref(), &args.holder, &hash),
                        AcquirePlan::Take { .. } | AcquirePlan::Retry { .. }
                    );
                if !usable {
                    METRICS.acquire_hint_misses.inc();
                    continue 'attempt;
                }
            } else if in_force > slots_open {
                slots.extend(self.slots(name, slots_open + 1, in_force).await?);
            }
            let live: Vec<(u32, u64, &Record)> = slots
                .iter()
                .filter_map(|(slot, e)| match e {
                    Some(Entry {
                        revision,
                        kind: Kind::Held(r),
                        ..
                    }) => Some((*slot, *revision, r)),
                    _ => None,
                })
                .collect();
            if in_force > 0 && in_force != limit && !live.is_empty() {
                return Err(mismatch(name, limit, in_force));
            }
            let mut free = Vec::new();
            for (slot, entry) in slots.iter().take(slots_open as usize) {
                match rules::plan_acquire(entry.as_ref(), &args.holder, &hash) {
                    AcquirePlan::Retry { revision, record } => {
                        let key = slot_key(name, *slot);
                        return match self
                            .write_renewal(&key, revision, record, Some(args.ttl_s))
                            .await
                        {
                            Err(CasError::Conflict) => continue 'attempt,
                            other => other.map_err(cas_failed).map(|h| h.in_slot(name, *slot)),
                        };
                    }
                    AcquirePlan::Unreadable => {
                        return Err(unreadable(&slot_key(name, *slot), self.store.bucket()))
                    }
                    AcquirePlan::Take { expected } => free.push((*slot, expected)),
                    AcquirePlan::Held { .. } => {}
                }
            }
            if free.is_empty() {
                return Err(full(name, limit, &live));
            }
            // The queue decides who may take a free slot: nobody queued
            // (no ticket), or the head (a ticket).
            self.may_take_slot(name, queued).await?;
            // A random free slot, so that concurrent Acquires rarely pick the
            // same; the Acquire that defines the semaphore (alone: the batch
            // serialises definers) takes the lowest, so a fresh semaphore's
            // first holder is always slot 1.
            let pick = match in_force == limit {
                true => rand::random::<u32>() as usize % free.len(),
                false => 0,
            };
            let (slot, expected) = free[pick];
            // A slot read as empty can have been taken, released and aged
            // back to empty (the marker TTL, twice) under another limit
            // while a stalled attempt waited; its write over revision 0
            // would then succeed under a limit it never read
            // (model/sem.pml, control AGE_ANY_TIME). An attempt older than
            // half the marker TTL reads again instead of writing.
            if read_at.elapsed() > self.store.marker_ttl() / 2 {
                continue 'attempt;
            }
            if in_force == limit {
                match self.write_slot(args, &hash, slot, expected, queued).await {
                    Err(CasError::Conflict) => continue 'attempt,
                    other => return other.map_err(cas_failed),
                }
            }
            let now = now_ms();
            let record = Record::grant(
                &args.holder,
                &hash,
                args.ttl_s,
                &args.metadata,
                0,
                now,
                expected,
            );
            let key = slot_key(name, slot);
            let ttl = self.nats_ttl(args.ttl_s);
            // Definers of one semaphore on this replica take turns, and one
            // that finds the definition moved meanwhile reads again: on one
            // node a batch costs the server a store of its own (~4 ms) and
            // batches are applied one at a time, so 64 first Acquires of a
            // fresh semaphore, each sending a definition that all but one
            // would lose, kept NATS busy ~250 ms (workload 8's first
            // cycles).
            let _turn = self.definers.enter(name).await;
            if self.definition(name).await?.revision != def.revision {
                continue 'attempt;
            }
            // (Re)defining the limit: the definition over its read
            // revision, and, when an old definition exists, every free
            // slot of both limits over its read revision (the taken one
            // gets the record, the others a tombstone), so that any
            // Acquire that read the old limit fails on its slot. A first
            // definition (no definition message yet) needs no
            // tombstones: an Acquire that writes a slot without the
            // definition in its batch read a definition of its own
            // limit, which cannot have existed before this one, so it
            // read this one, after this batch; the definition and the
            // slot are the whole write.
            let fresh = def.revision == 0;
            let mut writes = vec![Definition { limit, rw: false }.write(name, def.revision)];
            for (n, entry) in &slots {
                let revision = entry.as_ref().map_or(0, |e| e.revision);
                if fresh
                    || *n == slot
                    || matches!(
                        entry,
                        Some(Entry {
                            kind: Kind::Held(_),
                            ..
                        })
                    )
                {
                    continue;
                }
                writes.push(Write::delete(
                    slot_key(name, *n),
                    bytes::Bytes::new(),
                    Some(revision),
                ));
            }
            writes.push(Write::put(key, record.encode(), expected, ttl));
            if let Some((ticket, _)) = queued {
                writes.insert(0, ticket.grant_write());
            }
            match self.store.batch(&writes).await {
                Ok(revision) => return Ok(self.slot_granted(args, slot, revision, record)),
                Err(CasError::Conflict) => continue,
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(contended(name))
    }

    /// Writes `args`'s holding into slot `slot` of semaphore `args.name`
    /// over the slot's revision `expected`, while the limit asked for
    /// stands: only the slot is written; a queued waiter's ticket is
    /// deleted after it (the waiters behind see it until then, and the
    /// slot is held meanwhile).
    async fn write_slot(
        &self,
        args: &AcquireArgs,
        hash: &KeyHash,
        slot: u32,
        expected: u64,
        queued: Option<(&fifo::Ticket, bool)>,
    ) -> std::result::Result<Holding, CasError> {
        let name = args.name.as_str();
        let record = Record::grant(
            &args.holder,
            hash,
            args.ttl_s,
            &args.metadata,
            0,
            now_ms(),
            expected,
        );
        let key = slot_key(name, slot);
        let ttl = self.nats_ttl(args.ttl_s);
        let revision = self.store.put(&key, record.encode(), expected, ttl).await?;
        if let Some((ticket, _)) = queued {
            leave_after_grant(name, ticket).await;
        }
        Ok(self.slot_granted(args, slot, revision, record))
    }

    /// The holding of slot `slot` of semaphore `args.name` just written at
    /// `revision`, counted and cached.
    fn slot_granted(
        &self,
        args: &AcquireArgs,
        slot: u32,
        revision: u64,
        record: Record,
    ) -> Holding {
        let (name, key) = (args.name.as_str(), slot_key(&args.name, slot));
        tracing::debug!(name, slot, holder = %args.holder, token = revision, "semaphore slot acquired");
        METRICS.acquired.inc();
        self.cache.insert(&key, revision, &record);
        Holding::at(&key, revision, record).in_slot(name, slot)
    }

    /// Whether the caller may take a free slot of semaphore `name` now: a
    /// caller without a ticket only when nobody is queued (one read of the
    /// queue), a queued waiter only as the head (no read when the view
    /// said so). `LEASE_HELD` otherwise.
    async fn may_take_slot(&self, name: &str, queued: Option<(&fifo::Ticket, bool)>) -> Result<()> {
        let queue_name = keys::semaphore_queue(name);
        match queued {
            // TEST FAULT barging: an Acquire without a ticket does not
            // read the queue.
            None if !self.fair() || self.faults.contains(TestFault::Barging) => Ok(()),
            None => {
                let queue = fifo::Queue::read(&self.store, &queue_name, self.max_waiters).await?;
                match queue.waiting() {
                    0 => Ok(()),
                    n => Err(queued_for(name, n)),
                }
            }
            Some((_, true)) => Ok(()),
            Some((ticket, false)) => {
                // Waiters woken together share one read: one begun after
                // this waiter asked is as good as its own.
                let asked = tokio::time::Instant::now();
                let mut lane = self.head_reads.enter(&queue_name).await;
                let (at, queue) = match lane.take() {
                    Some((at, queue)) if at >= asked => (at, queue),
                    _ => {
                        let at = tokio::time::Instant::now();
                        let queue =
                            fifo::Queue::read(&self.store, &queue_name, self.max_waiters).await?;
                        (at, queue)
                    }
                };
                lane.keep((at, queue.clone()));
                drop(lane);
                if !queue.holds(ticket.slot, ticket.revision) {
                    // Gone or rewritten: the next refresh finds out which.
                    return Err(contended(name));
                }
                match queue.ahead_of(ticket.place) {
                    0 => Ok(()),
                    ahead => Err(queued_for(name, queue.waiting()).with("ahead", ahead)),
                }
            }
        }
    }

    /// Renews the holding in slot `slot` of semaphore `name`: only its slot
    /// key is written.
    pub async fn renew_slot(
        &self,
        name: &str,
        slot: u32,
        expected: u64,
        key: &str,
        ttl_s: Option<u64>,
    ) -> Result<Holding> {
        let holding = self
            .renew(&slot_key(name, slot), expected, key, ttl_s)
            .await
            .map_err(|e| in_slot_terms(e, name, slot))?;
        Ok(holding.in_slot(name, slot))
    }

    /// Releases the holding in slot `slot` of semaphore `name`; returns the
    /// release's revision.
    pub async fn release_slot(
        &self,
        name: &str,
        slot: u32,
        expected: u64,
        key: &str,
    ) -> Result<u64> {
        self.release(&slot_key(name, slot), expected, key)
            .await
            .map_err(|e| in_slot_terms(e, name, slot))
    }

    /// Revokes the holding in slot `slot` of semaphore `name` (only the one
    /// with `token`, when not 0); returns the revoke's revision and the
    /// holding ended. Watchers see the slot `REVOKED`.
    pub async fn revoke_slot(
        &self,
        name: &str,
        slot: u32,
        token: u64,
        why: &str,
        by: &str,
    ) -> Result<(u64, Holding)> {
        let (revision, holding) = self
            .revoke(&slot_key(name, slot), token, why, by)
            .await
            .map_err(|e| in_slot_terms(e, name, slot))?;
        Ok((revision, holding.in_slot(name, slot)))
    }

    /// The semaphore `name`, when it has a definition and live holders. The
    /// holders come from the shared watcher's snapshot of the name (one
    /// NATS read for the bucket's position, however many slots: a
    /// semaphore's reads cost what a plain lease's do); only when the
    /// watcher cannot serve one are the slots read, a bounded number at a
    /// time.
    pub async fn semaphore(&self, name: &str) -> Result<Option<Semaphore>> {
        let def = self.definition(name).await?;
        let Some(limit) = def.limit else {
            return Ok(None);
        };
        let holders = match self.seen_holders(name, limit).await {
            Some(holders) => holders,
            None => self
                .slots(name, 1, limit)
                .await?
                .into_iter()
                .filter_map(|(slot, e)| match e {
                    Some(Entry {
                        revision,
                        kind: Kind::Held(r),
                        ..
                    }) => Some(Holding::at(&slot_key(name, slot), revision, r).in_slot(name, slot)),
                    _ => None,
                })
                .collect(),
        };
        Ok((!holders.is_empty()).then_some(Semaphore { limit, holders }))
    }

    /// The live holders of semaphore `name` in slots 1 to `limit`, from the
    /// shared watcher's snapshot, which covers every write committed before
    /// this call; `None` when the watcher cannot give one soon.
    async fn seen_holders(&self, name: &str, limit: u32) -> Option<Vec<Holding>> {
        let watch = self
            .hub
            .watch(Filter::Name(name.to_string()), vec![EventKind::Current]);
        let mut sub = tokio::time::timeout(FOLLOW_PATIENCE, watch)
            .await
            .ok()?
            .ok()?;
        let mut holders = Vec::new();
        loop {
            let event = tokio::time::timeout(FOLLOW_PATIENCE, sub.next())
                .await
                .ok()?
                .ok()?;
            match (&event.kind, &event.holding) {
                (EventKind::SnapshotComplete, _) => return Some(holders),
                (EventKind::Current, Some(h)) if h.slot > 0 && h.slot <= limit => {
                    holders.push((**h).clone())
                }
                _ => {}
            }
        }
    }

    /// Whether semaphore `name` has a live holder in slots 1 to `limit`:
    /// the slots are read a few at a time, and the first live one ends the
    /// search.
    async fn any_holder(&self, name: &str, limit: u32) -> Result<bool> {
        let mut from = 1;
        while from <= limit {
            let to = (from + LIVE_PROBE - 1).min(limit);
            let slots = self.slots(name, from, to).await?;
            if slots.iter().any(|(_, e)| {
                matches!(
                    e,
                    Some(Entry {
                        kind: Kind::Held(_),
                        ..
                    })
                )
            }) {
                return Ok(true);
            }
            from = to + 1;
        }
        Ok(false)
    }

    /// Reads the definition of semaphore `name` from the stream leader.
    async fn definition(&self, name: &str) -> Result<Read> {
        let last = self.store.last(&keys::semaphore_definition(name)).await?;
        Ok(Read::of(last.as_ref()))
    }

    /// Reads slot `slot` of semaphore `name` from the stream leader (one
    /// of this replica's [`SLOT_READS`] slot reads at a time).
    async fn slot(&self, name: &str, slot: u32) -> Result<Option<Entry>> {
        let _turn = self.slot_reads.acquire().await;
        Ok(self
            .store
            .last(&slot_key(name, slot))
            .await?
            .map(Entry::from))
    }

    /// Reads slots `from` to `to` of semaphore `name` from the stream
    /// leader, concurrently, at most [`SLOT_READS`] of this replica's slot
    /// reads at a time (a read waits for its turn).
    async fn slots(&self, name: &str, from: u32, to: u32) -> Result<Vec<(u32, Option<Entry>)>> {
        let reads = (from..=to).map(|slot| async move {
            let _turn = self.slot_reads.acquire().await;
            let last = self.store.last(&slot_key(name, slot)).await?;
            Ok::<_, Error>((slot, last.map(Entry::from)))
        });
        futures::future::try_join_all(reads).await
    }
}

/// An error of the lease code about a slot key, told in the caller's terms
/// (the semaphore's name and the slot) rather than the reserved key's.
fn in_slot_terms(mut err: Error, name: &str, slot: u32) -> Error {
    err.message = err.message.replace(
        &format!("{:?}", slot_key(name, slot)),
        &format!("{name:?} (semaphore slot {slot})"),
    );
    err
}

/// `TOO_MANY_WAITERS` when a semaphore has as many waiters on this replica
/// as `--max-waiters`.
fn too_many_slot_waiters(name: &str, waiters: usize, max: usize) -> Error {
    Error::new(
        Reason::TooManyWaiters,
        format!(
            "semaphore {name:?} already has {waiters} Acquires waiting for a slot on this replica (--max-waiters {max}); retry later, or Acquire without a wait"
        ),
    )
    .with("waiters", waiters)
    .with("limit", "--max-waiters")
    .with("max_waiters", max)
    .retry_after(Duration::from_secs(2))
}

/// `LIMIT_MISMATCH`: the semaphore's live holders use another limit.
fn mismatch(name: &str, asked: u32, in_force: u32) -> Error {
    Error::new(
        Reason::LimitMismatch,
        format!(
            "semaphore {name:?} has limit {in_force} while it has holders, not {asked}; \
             Acquire with limit {in_force}, or wait until every holder is gone"
        ),
    )
    .with("limit", in_force)
}

/// `LEASE_HELD` for the head of the queue when the shared watcher's view
/// shows every slot of the semaphore taken.
fn full_seen(name: &str, limit: u32) -> Error {
    Error::new(
        Reason::LeaseHeld,
        format!(
            "semaphore {name:?} has all {limit} slots taken; retry after a holder releases or expires, \
             or Acquire with a wait"
        ),
    )
    .with("limit", limit)
    .with("holders", limit)
}

/// `LEASE_HELD`: every slot of the semaphore is taken.
fn full(name: &str, limit: u32, live: &[(u32, u64, &Record)]) -> Error {
    let soonest = live.iter().map(|(_, _, r)| r.ttl_s).min().unwrap_or(0);
    Error::new(
        Reason::LeaseHeld,
        format!(
            "semaphore {name:?} has all {limit} slots taken; retry after a holder releases or expires, \
             or Acquire with a wait"
        ),
    )
    .with("limit", limit)
    .with("holders", live.len())
    .with("ttl_seconds", soonest)
}

/// Deletes a granted waiter's ticket, over its last revision (a lost
/// delete leaves it to expire within the ticket TTL: the waiters behind it
/// wait meanwhile, nobody is overtaken).
async fn leave_after_grant(name: &str, ticket: &fifo::Ticket) {
    if let Err(CasError::Failed(err)) = ticket
        .store
        .delete(&ticket.key, bytes::Bytes::new(), ticket.revision)
        .await
    {
        tracing::warn!(name, %err, "a granted semaphore waiter's ticket was not deleted; it expires within the ticket TTL");
    }
}
