//! Taking a lease: Acquire, with its wait, its fair queue and its
//! refusals.
//!
//! An Acquire without a wait is one attempt: read the name's line, its
//! record and queue together (unless this replica wrote it last), decide
//! with [`rules::plan_acquire`], and write the new holding conditional on
//! the whole line (design section 16, "One write"). A waiting
//! Acquire on a bucket with atomic batches queues a ticket ([`fifo`]) and
//! takes the lease only as the head of the queue; a plain Acquire never
//! jumps a queued waiter. The lock delay of an ended holding is kept in its
//! fence ([`keys::fence`]) and written in one batch with the holding that
//! ends or replaces it (design sections 15 and 16).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;

use super::cache::Line;
use super::fifo;
use super::keys;
use super::record::{Entry, Fence, Holding, KeyHash, Kind, Mode, Record};
use super::refusals::{
    behind, cas_failed, contended, delayed, held, queued, too_many_waiters, unreadable,
};
use super::rules::{self, AcquirePlan};
use super::wait::{Wait, Wakeups, Woke, FOLLOW_PATIENCE, WAIT_POLL};
use super::watch::{Dormant, Released, Turn};
use super::{now_ms, EventKind, Filter, Leases, MAX_CAS_ATTEMPTS};
use crate::config::TestFault;
use crate::error::{Reason, Result};
use crate::nats::{CasError, Op, Write, WriteOp};
use crate::observe::METRICS;

/// How long a ticket write that lost its race waits for the shared watcher
/// to apply the message that won, before it reads the queue from the
/// stream leader instead: one request per message under the queue's
/// filter (with 64 waiters of one semaphore, workload 8 of the benchmark,
/// these reads were more than half of Tenure's NATS requests).
const VIEW_PATIENCE: Duration = Duration::from_millis(25);

/// Most grant attempts of a waiter shown the head, per turn: each lost one
/// means the name's line moved (a ticket behind it, a refresh), and the
/// next waits for the view to show what did.
const HEAD_ATTEMPTS: usize = 16;

/// What Acquire asks for, already validated.
#[derive(Debug, Clone)]
pub struct AcquireArgs {
    /// The lease name.
    pub name: String,
    /// Who wants it.
    pub holder: String,
    /// Granted TTL, whole seconds.
    pub ttl_s: u64,
    /// The ownership secret.
    pub key: String,
    /// How long to wait for a held lease; `None`: fail at once.
    pub wait: Option<Duration>,
    /// Metadata to store.
    pub metadata: BTreeMap<String, String>,
    /// Lock delay of the holding, whole seconds (0: none).
    pub lock_delay_s: u64,
    /// The semaphore limit (0: a plain, exclusive lease; see
    /// [`super::semaphore`]); for a read-write lock, the most shared
    /// holders (`--max-shared-holders`).
    pub limit: u32,
    /// How a read-write lock is asked for (`None`: a plain lease or a
    /// semaphore slot); with `limit`, the lock's slots.
    pub mode: Option<Mode>,
    /// An election candidate's preference, kept in its ticket while it
    /// waits (0: none; see [`super::election`]).
    pub preference: u32,
}

/// Where an attempt to take a lease stands towards the name's queue.
#[derive(Clone, Copy)]
enum Place<'a> {
    /// An Acquire without a ticket: only when nobody is queued.
    Plain,
    /// A queued waiter: only as the head, and its ticket leaves in the
    /// grant's batch.
    Queued(&'a fifo::Ticket),
}

/// What an attempt takes as known instead of reading it from the stream
/// leader. The write's conditions re-check all of it: a stale hint costs a
/// failed compare-and-set and a read, never a wrong grant.
#[derive(Default)]
struct Known {
    /// The lease's last message (`None`: read it).
    last: Option<Entry>,
    /// A queued waiter: the shared watcher's view says it is the head.
    head: bool,
    /// The last revision of the name's line (record and queue) at which
    /// `last` is the record and nobody but a known head is queued: the
    /// grant is then one write conditional on the line, with no read.
    line: Option<u64>,
}

impl Known {
    /// The head's knowledge from the view: the lease released at
    /// `released.at`, its line last written at `released.line`.
    fn released(name: &str, released: Released) -> Known {
        Known {
            last: Some(Entry {
                name: name.to_string(),
                revision: released.at,
                time_ms: 0,
                kind: Kind::Released(None),
            }),
            head: true,
            line: Some(released.line),
        }
    }
}

impl Leases {
    /// Takes a lease, waiting for it to become free if `args.wait` says so.
    /// On a bucket with atomic batches a wait is fair (first come, first
    /// served across replicas: see [`fifo`]); otherwise it polls.
    pub async fn acquire(&self, args: &AcquireArgs) -> Result<Holding> {
        self.acquire_as_written(args)
            .await
            .map(|holding| self.reported(holding))
    }

    /// [`Leases::acquire`], with the holding as written.
    async fn acquire_as_written(&self, args: &AcquireArgs) -> Result<Holding> {
        let Some(wait) = args.wait else {
            return self.try_once(args).await;
        };
        let wait = Wait::new("Acquire", wait);
        if args.limit > 0 && !self.fair() {
            return self.acquire_slot(args, wait).await;
        }
        if !self.fair() {
            let wakeups = self.follow_ends(&args.name, false);
            return self
                .wait_for(wait, wakeups, || self.try_acquire(args))
                .await;
        }
        // The queue of the name's lease, or of its semaphore (see
        // `keys::semaphore_queue`): one queue design for both.
        let queue = queue_of(args);
        // Waiters are queued already (as this replica's watcher sees them):
        // an Acquire without a ticket would be refused, so queue at once.
        let mut seen = self.hub.waiting(&queue);
        // TEST FAULT barging: try without a ticket first, whoever is queued.
        if self.faults.contains(TestFault::Barging) {
            seen = 0;
        }
        let mut held = if seen > 0 {
            queued(&args.name, seen)
        } else {
            let first = match args.limit {
                0 => self.try_acquire(args).await,
                _ => self.first_try_slot(args).await,
            };
            match first {
                Err(err) if err.reason == Reason::LeaseHeld => err,
                other => return other,
            }
        };
        // Only now is there something to wait for: follow the name's ends
        // and turns (which may start the shared watcher) and queue, both
        // at once so that the waiter's place does not wait for the
        // watcher. Its first queued attempt is made once both are in
        // place, so a release between the first try and the subscription
        // is not missed.
        let (mut wakeups, first) = tokio::join!(
            self.follow_ends(&args.name, true),
            tokio::time::timeout_at(wait.deadline(), self.enqueue(args))
        );
        let mut first = Some(first);
        let mut ticket: Option<fifo::Ticket> = None;
        // While the view shows a ticket ahead, a semaphore's waiter sleeps
        // dormant: without its subscription (every end, grant and turn of
        // the name would wake it for nothing), woken only when its ticket
        // is first. A lease's waiters stay subscribed: following the name
        // again costs the new head a round trip through the shared
        // watcher on every handoff (measured: the fair handoff of workload
        // 3 fell from 580-780 to 390-400 handoffs/s).
        let mut dormant: Option<Dormant> = None;
        let mut unsubscribed = false;
        let mut refresh = tokio::time::interval(fifo::TICKET_REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        refresh.reset();
        loop {
            // A new ticket tries at once: the lease may be free already.
            let queued_now = ticket.is_none();
            if queued_now {
                // Queueing counts against the wait too. Should the deadline
                // cut a ticket write short after NATS stored it, that
                // ticket expires like a dead waiter's.
                let queued = match first.take() {
                    Some(queued) => queued,
                    None => tokio::time::timeout_at(wait.deadline(), self.enqueue(args)).await,
                };
                match queued {
                    Ok(queued) => ticket = Some(queued?),
                    Err(_) => return Err(wait.gave_up(held)),
                }
                refresh.reset();
                // A new ticket, a new place: the old registration is void.
                dormant = None;
            }
            // Sleep until the lease may be free, keeping the ticket alive.
            let woke = wait
                .sleep(
                    &self.shutdown,
                    &mut wakeups,
                    dormant.as_ref(),
                    &held,
                    Some(&mut refresh),
                    queued_now,
                    WAIT_POLL,
                )
                .await;
            let t = match (woke, ticket.as_mut()) {
                (Err(err), _) => {
                    if let Some(t) = ticket.take() {
                        t.leave().await;
                    }
                    return Err(err);
                }
                (Ok(Woke::Refresh), Some(t)) => {
                    if !self.refresh(args, t).await? {
                        // A Transfer may have handed it the lease (deleting
                        // the ticket with the grant): then the lease is its
                        // own, and an attempt returns it. Nothing hands a
                        // semaphore slot over.
                        if args.limit == 0 {
                            match self.attempt(args, Place::Queued(t), Known::default()).await {
                                Ok(Some(holding)) => {
                                    if let Some(mut t) = ticket.take() {
                                        t.armed = false;
                                    }
                                    return Ok(holding);
                                }
                                Ok(None) => {}
                                Err(err) if err.reason == Reason::LeaseHeld => {}
                                Err(err) => return Err(err),
                            }
                        }
                        // The ticket is gone (it expired before this
                        // refresh): queue again, at the back.
                        tracing::warn!(name = %args.name, "a waiter's ticket expired while it waited; it queues again");
                        if let Some(mut t) = ticket.take() {
                            t.armed = false;
                        }
                    }
                    continue;
                }
                (Ok(_), None) => continue,
                (Ok(Woke::Retry), Some(t)) => t,
            };
            let mut known = self.on_wake(args, t);
            if known.is_none() && dormant.is_none() && args.limit > 0 {
                // Registered first, then asked again: a ticket ahead that
                // left in between is not missed.
                let registered = self.hub.dormant(&queue, t.place);
                known = self.on_wake(args, t);
                if known.is_none() {
                    dormant = Some(registered);
                    if wakeups.take().is_some() {
                        unsubscribed = true;
                    }
                }
            }
            if known.is_some() {
                dormant = None;
                if std::mem::take(&mut unsubscribed) {
                    // Its turn may have come: follow the name's ends again
                    // before the attempt reads, so none after it is missed.
                    wakeups = self.follow_ends(&args.name, true).await;
                }
            }
            let attempt = match known {
                // Not its turn: no read, no write; sleep again (should the
                // wait run out, it says so, not an older holder).
                None => {
                    held = behind(&args.name, self.hub.waiting(&queue));
                    continue;
                }
                Some(known) if args.limit > 0 => {
                    self.attempt_slot_queued(args, t, known.head).await
                }
                Some(known) => self.attempt_queued(args, t, known).await,
            };
            held = match attempt {
                Err(err) if err.reason == Reason::LeaseHeld => err,
                Err(err) => {
                    if let Some(t) = ticket.take() {
                        t.leave().await;
                    }
                    return Err(err);
                }
                Ok(holding) => {
                    if let Some(mut t) = ticket.take() {
                        // The grant's batch deleted it, unless this was the
                        // caller's own holding found again (a retry).
                        if holding.revision == holding.token {
                            t.armed = false;
                        } else {
                            t.leave().await;
                        }
                    }
                    return Ok(holding);
                }
            };
        }
    }

    /// One attempt to take a lease, or a slot of a semaphore.
    async fn try_once(&self, args: &AcquireArgs) -> Result<Holding> {
        if args.limit > 0 {
            self.try_acquire_slot(args).await
        } else {
            self.try_acquire(args).await
        }
    }

    /// Follows the ends of holdings of `name` (releases, expiries, revokes),
    /// which wake a waiting Acquire; `None` when the hub cannot follow (the
    /// waiter then polls).
    /// The shared watcher confirms at once, even while it loads the bucket
    /// (it then wakes the follow once the load is done); waiting for the
    /// confirmation is bounded by [`FOLLOW_PATIENCE`].
    /// With `turns`, it also hears when the name's queue lost a ticket
    /// while the name is free ([`EventKind::Turn`]).
    pub(super) async fn follow_ends(&self, name: &str, turns: bool) -> Wakeups {
        let mut ends = vec![EventKind::Released, EventKind::Expired, EventKind::Revoked];
        if turns {
            // A queued waiter also wakes on a new holding: a Transfer may
            // have handed it the lease (its ticket is then gone).
            ends.push(EventKind::Turn);
            ends.push(EventKind::Acquired);
        }
        let follow = self.hub.follow(Filter::Name(name.to_string()), ends);
        let subscription = tokio::time::timeout(FOLLOW_PATIENCE, follow)
            .await
            .ok()?
            .ok()?;
        Some(subscription.into_stream().map(|e| e.map(drop)).boxed())
    }

    /// Writes a ticket for `args` into a free slot of the name's queue, at
    /// the back, conditional on the whole queue's last revision (so a
    /// group's guard, which names it too, and a ticket never pass each
    /// other unseen; see [`fifo`]). Waiters of one name take turns on this
    /// replica ([`fifo::Lanes`]), each trying the queue as the lane's last
    /// ticket left it, else as the shared watcher's view shows it (no read
    /// either way), else as read from the stream leader; a lost race
    /// (anything written to the queue meanwhile) reads again. A queue the
    /// view shows full is refused without a read (retryable, as a refusal
    /// from a read a moment old would be).
    async fn enqueue(&self, args: &AcquireArgs) -> Result<fifo::Ticket> {
        let payload = fifo::TicketRecord {
            place: 0,
            holder: args.holder.clone(),
            grant: ticket_grant(args),
            preference: args.preference,
        }
        .encode();
        let start = rand::random_range(0..self.max_waiters);
        let full =
            |queue: &fifo::Queue| too_many_waiters(&args.name, queue.waiting(), self.max_waiters);
        let name = queue_of(args);
        let viewed = self.hub.queue(&name);
        if let Some(queue) = viewed.filter(|q| q.free_slots(self.max_waiters, start).is_empty()) {
            return Err(full(&queue));
        }
        let mut lane = self.queue_lanes.enter(&name).await;
        // The lane's queue and the view's are each exact at their revision
        // but may be old: the newer is tried first, and a full one is
        // checked against a read.
        let newer = |a: Option<fifo::Queue>, b: Option<fifo::Queue>| match (a, b) {
            (Some(a), Some(b)) if b.last > a.last => Some(b),
            (a, b) => a.or(b),
        };
        let mut known = newer(lane.take(), self.hub.queue(&name))
            .filter(|q| !q.free_slots(self.max_waiters, start).is_empty());
        // The revision a ticket write lost its race at: a retry takes the
        // view once it has applied something newer (a ticket, a grant, a
        // release, a grant's ticket delete: the line of a busy name moves
        // several times a handoff), and reads the queue from the stream
        // leader (a request per message under the line) only when the view
        // has not moved on within VIEW_PATIENCE, at most MAX_CAS_ATTEMPTS
        // times. Retries on the view's word go on while the wait lasts (the
        // caller bounds this call by the Acquire's deadline): each costs
        // one write, and each lost race means the line moved on.
        let mut lost_at = 0;
        let mut reads = 0;
        loop {
            if known.is_none() && lost_at > 0 {
                known = self.hub.queue_after(&name, lost_at, VIEW_PATIENCE).await;
            }
            let queue = match known.take() {
                Some(queue) => queue,
                None if reads < MAX_CAS_ATTEMPTS => {
                    reads += 1;
                    fifo::Queue::read(&self.store, &name, self.max_waiters).await?
                }
                None => break,
            };
            let Some(&slot) = queue.free_slots(self.max_waiters, start).first() else {
                return Err(full(&queue));
            };
            if let Some(ticket) = self.take_slot(&name, &payload, slot, queue.last).await? {
                lane.keep(queue.with_ticket(slot, ticket.revision));
                return Ok(ticket);
            }
            lost_at = queue.last;
        }
        Err(contended(&args.name))
    }

    /// Writes the ticket `payload` into `slot`, conditional on the queue's
    /// last revision being `last`; `None` when the queue changed since.
    async fn take_slot(
        &self,
        name: &str,
        payload: &bytes::Bytes,
        slot: usize,
        last: u64,
    ) -> Result<Option<fifo::Ticket>> {
        let key = keys::queue_slot(name, slot);
        let queue = keys::queue_filter(name);
        match self
            .store
            .put_under(&key, payload.clone(), last, &queue, fifo::TICKET_TTL)
            .await
        {
            Ok(revision) => {
                tracing::debug!(name, slot, place = revision, "queued");
                Ok(Some(fifo::Ticket {
                    store: self.store.clone(),
                    key,
                    slot,
                    revision,
                    place: revision,
                    armed: true,
                }))
            }
            Err(CasError::Conflict) => Ok(None),
            Err(CasError::Failed(err)) => Err(err),
        }
    }

    /// Rewrites a ticket so that it does not expire, keeping its place.
    /// `false`: the ticket is gone.
    async fn refresh(&self, args: &AcquireArgs, ticket: &mut fifo::Ticket) -> Result<bool> {
        let payload = fifo::TicketRecord {
            place: ticket.place,
            holder: args.holder.clone(),
            grant: ticket_grant(args),
            preference: args.preference,
        }
        .encode();
        match self
            .store
            .put(&ticket.key, payload, ticket.revision, fifo::TICKET_TTL)
            .await
        {
            Ok(revision) => {
                ticket.revision = revision;
                Ok(true)
            }
            Err(CasError::Conflict) => Ok(false),
            Err(CasError::Failed(err)) => Err(err),
        }
    }

    /// One Acquire without a ticket: read, then CAS, retried on lost races.
    /// A name this replica released last is written over its release
    /// without reading the lease (the queue is still read); any write since
    /// fails that CAS, and the next try reads.
    async fn try_acquire(&self, args: &AcquireArgs) -> Result<Holding> {
        if self.fair() {
            if let Some(holding) = self.take_released_line(args).await? {
                return Ok(holding);
            }
            for _ in 0..MAX_CAS_ATTEMPTS {
                if let Some(holding) = self.attempt(args, Place::Plain, Known::default()).await? {
                    return Ok(holding);
                }
            }
            return Err(contended(&args.name));
        }
        // Without fair waiting, a name this replica released last is
        // taken over its release without reading it.
        let hint = args.lock_delay_s == 0 && !self.hub.queued(&args.name);
        let mut known = match self.free.released_at(&args.name).filter(|_| hint) {
            Some(revision) => Known {
                last: Some(Entry {
                    name: args.name.clone(),
                    revision,
                    time_ms: 0,
                    kind: Kind::Released(None),
                }),
                head: false,
                line: None,
            },
            None => Known::default(),
        };
        for _ in 0..MAX_CAS_ATTEMPTS {
            let hinted = known.last.is_some();
            if let Some(holding) = self.attempt(args, Place::Plain, known).await? {
                return Ok(holding);
            }
            if hinted {
                METRICS.acquire_hint_misses.inc();
                self.free.forget(&args.name);
            }
            known = Known::default();
        }
        Err(contended(&args.name))
    }

    /// A plain Acquire of a name whose line this replica wrote last with
    /// its release, nobody queued: one write conditional on the whole line
    /// at that release, and no read (design section 16, "One write").
    /// `None` when there is no such release, or the line changed since (a
    /// waiter queued, someone else took or released it): the caller reads.
    async fn take_released_line(&self, args: &AcquireArgs) -> Result<Option<Holding>> {
        // TEST FAULT barging: the faulty Acquire reads nothing at all.
        if args.lock_delay_s > 0 || self.faults.contains(TestFault::Barging) {
            return Ok(None);
        }
        let Some(Line { last, free: true }) = self.lines.get(&args.name) else {
            return Ok(None);
        };
        let known = Known {
            last: Some(Entry {
                name: args.name.clone(),
                revision: last,
                time_ms: 0,
                kind: Kind::Released(None),
            }),
            head: false,
            line: Some(last),
        };
        let taken = self.attempt(args, Place::Plain, known).await?;
        match taken {
            Some(_) => METRICS.line_writes.inc(),
            None => {
                METRICS.acquire_hint_misses.inc();
                self.lines.forget(&args.name);
            }
        }
        Ok(taken)
    }

    /// What a queued waiter does when it wakes (it queued, an event of its
    /// name, a turn, the poll): nothing (`None`)
    /// when the shared watcher's view of the queue shows a waiter ahead of
    /// it; otherwise an attempt, which skips the queue read when the view
    /// says it is the head, and the lease read when the last lease message
    /// the watcher saw is a release (unless something was written since,
    /// which fails the grant).
    fn on_wake(&self, args: &AcquireArgs, ticket: &fifo::Ticket) -> Option<Known> {
        // TEST FAULT semaphore-herd: a queued semaphore waiter takes every
        // wake as its turn, and races the others for the free slot.
        if args.limit > 0 && self.faults.contains(TestFault::SemaphoreHerd) {
            return Some(Known {
                last: None,
                head: true,
                line: None,
            });
        }
        let turn = self
            .hub
            .turn(&queue_of(args), ticket.place, ticket.revision);
        match turn {
            Turn::NotMine => None,
            Turn::Unknown => Some(Known::default()),
            Turn::Mine => {
                // The release the watcher saw last, not the event's: a
                // waiter slow to read its events may hold an older one.
                let released = match args.lock_delay_s {
                    0 if args.limit == 0 => self.hub.released_at(&args.name),
                    _ => None,
                };
                Some(match released {
                    Some(released) => Known::released(&args.name, released),
                    None => Known {
                        head: true,
                        ..Known::default()
                    },
                })
            }
        }
    }

    /// One turn of a queued waiter as the head: up to `MAX_CAS_ATTEMPTS`
    /// attempts, each on the view's word when it has one, else after a
    /// read; races lost on all of them are `LEASE_HELD` (the waiter waits
    /// for the next event).
    async fn attempt_queued(
        &self,
        args: &AcquireArgs,
        ticket: &fifo::Ticket,
        known: Known,
    ) -> Result<Holding> {
        // Once the view (complete since this waiter's ticket) or a read has
        // shown it the head, it stays the head: tickets written later are
        // behind it, and one that left is no longer ahead. A grant that
        // lost its race (most often to a ticket written behind it, or a
        // refresh, which moved the line) tries again on the view's word as
        // soon as the view has applied what won, as long as the lease is
        // still released; it reads only when the view cannot say.
        let mut known = known;
        for _ in 0..HEAD_ATTEMPTS {
            let hinted = known.last.is_some() || known.head;
            let line = known.line;
            if let Some(holding) = self.attempt(args, Place::Queued(ticket), known).await? {
                return Ok(holding);
            }
            if hinted {
                METRICS.acquire_hint_misses.inc();
            }
            // On the view's word: past the line it lost on; after a read,
            // as the view has it now (a stale one fails, then waits).
            let released = match line {
                Some(line) => {
                    self.hub
                        .released_after(&args.name, line, VIEW_PATIENCE)
                        .await
                }
                None => self.hub.released_at(&args.name),
            };
            known = released.map_or_else(Known::default, |released| {
                Known::released(&args.name, released)
            });
        }
        Err(contended(&args.name))
    }

    /// One attempt to take a lease: read the last message and the queue
    /// (unless `known`), then CAS over them (`None`: a lost race). A plain
    /// attempt writes only when no waiter is queued; a queued one only as
    /// the head of the queue.
    ///
    /// With fair waiting, the record and the queue sit on one line
    /// ([`keys::line_filter`]) and are read together in one scan; a free
    /// lease is taken with one write conditional on the whole line, which
    /// fails if the record changed or anyone queued since (design section
    /// 16, "One write"). Every write that takes a free lease names the line
    /// so: on a replicated stream the leader holds back a condition while
    /// another on the same string is in flight, and two grants over one
    /// release can never both pass. An expired holding still in the record
    /// is taken over on the record's own revision, as its holder's
    /// renewal names it.
    async fn attempt(
        &self,
        args: &AcquireArgs,
        place: Place<'_>,
        known: Known,
    ) -> Result<Option<Holding>> {
        let hash = KeyHash::of(&args.key);
        let plain = matches!(place, Place::Plain);
        // TEST FAULT barging: an Acquire without a ticket does not read
        // the queue, and takes a free name ahead of its waiters.
        let barging = plain && self.faults.contains(TestFault::Barging);
        let (last, queue, line) = match known {
            Known {
                last: Some(last),
                line: Some(line),
                ..
            } if self.fair() => (Some(last), None, Some(line)),
            _ if self.fair() && !barging => {
                let queue = fifo::Queue::read(&self.store, &args.name, self.max_waiters).await?;
                let last = queue.lease.clone().map(|msg| Entry {
                    name: args.name.clone(),
                    ..Entry::from(msg)
                });
                let line = queue.line;
                (last, Some(queue), Some(line))
            }
            Known {
                last: Some(last), ..
            } => (Some(last), None, None),
            _ => (self.read_lease(&args.name).await?, None, None),
        };
        let expected = match rules::plan_acquire(last.as_ref(), &args.holder, &hash) {
            AcquirePlan::Take { expected } => expected,
            AcquirePlan::Retry { revision, record } => {
                return match self
                    .write_renewal(&args.name, revision, record, Some(args.ttl_s))
                    .await
                {
                    Err(CasError::Conflict) => Ok(None),
                    other => other.map(Some).map_err(cas_failed),
                }
            }
            AcquirePlan::Held { revision, record } => {
                let mut err = held(&args.name, record, revision);
                // The queue length, for an Acquire that does not wait (one
                // that waits learns its place by queueing; TEST FAULT
                // barging: no queue read at all).
                if plain && args.wait.is_none() && self.fair() && !barging {
                    let waiting = match &queue {
                        Some(queue) => queue.waiting(),
                        None => self.waiting(&args.name).await?,
                    };
                    err = err.with("waiters", waiting);
                }
                return Err(err);
            }
            AcquirePlan::Unreadable => return Err(unreadable(&args.name, self.store.bucket())),
        };
        // The queue decides who may write: nobody queued (plain), or the
        // head (queued); the write's condition re-checks what was read. A
        // line known without a read vouches for the queue itself.
        let queue_write = match (place, &queue) {
            (Place::Plain, Some(queue)) if queue.waiting() > 0 => {
                return Err(queued(&args.name, queue.waiting()));
            }
            (Place::Plain, _) => None,
            (Place::Queued(ticket), Some(queue)) => {
                if !queue.holds(ticket.slot, ticket.revision) {
                    // Gone or rewritten: the next refresh finds out which.
                    return Err(contended(&args.name));
                }
                let ahead = queue.ahead_of(ticket.place);
                if ahead > 0 {
                    return Err(queued(&args.name, queue.waiting()).with("ahead", ahead));
                }
                Some(ticket.grant_write())
            }
            (Place::Queued(ticket), None) => Some(ticket.grant_write()),
        };
        // A free lease is taken on its line; an expired holding still in
        // the record on the record's revision.
        let line = line.filter(|_| !matches!(last.as_ref().map(|e| &e.kind), Some(Kind::Held(_))));
        // The lock delay of the holding the last message ended, and the
        // fence the new holding replaces.
        let fence = if rules::needs_fence(last.as_ref(), args.lock_delay_s) {
            self.fence(&args.name).await?
        } else {
            (0, None)
        };
        let now = now_ms();
        if let Some(free_at) = rules::delayed_until(
            last.as_ref(),
            fence.1.as_ref().map_or(0, |f| f.lock_delay_s),
        ) {
            if free_at > now {
                return Err(delayed(&args.name, free_at, now));
            }
        }
        let record = Record::grant(
            &args.holder,
            &hash,
            args.ttl_s,
            &args.metadata,
            args.lock_delay_s,
            now,
            expected,
        );
        let ttl = self.nats_ttl(args.ttl_s);
        let (fence_revision, fence_live) = (fence.0, fence.1.is_some());
        // The fence (a holding with a delay always has its fence, and one
        // without never inherits an older holding's) goes in one atomic
        // batch with the record (last: the batch's revision is the token)
        // and the head's ticket delete.
        let fence_write = (args.lock_delay_s > 0 || fence_live)
            .then(|| fence_write(&args.name, args.lock_delay_s, fence_revision));
        let key = keys::lease(&args.name);
        let filter = keys::line_filter(&args.name);
        let fenced = fence_write.is_some();
        let written = match fence_write {
            Some(fence) => {
                // The record first, so that the batch's first condition is
                // the line's; its revision (the token) is the batch's first.
                let mut writes = vec![Write {
                    expected: Some(line.unwrap_or(expected)),
                    expected_of: line.map(|_| filter.clone()),
                    ..Write::put(key.clone(), record.encode(), expected, ttl)
                }];
                writes.extend(queue_write);
                writes.push(fence);
                let later = writes.len() as u64 - 1;
                self.store.batch(&writes).await.map(|last| last - later)
            }
            // Otherwise one conditional write: the lease first, then the
            // head's ticket (a batch costs the stream a sync of its file
            // store). The waiters behind it see its ticket until then,
            // and the lease is held meanwhile: nobody can take it between
            // the two writes (design section 16).
            None => {
                // TEST FAULT one-write-exact: the Acquire over this
                // replica's release names the record alone.
                let exact =
                    plain && queue.is_none() && self.faults.contains(TestFault::OneWriteExact);
                let put = match line.filter(|_| !exact) {
                    Some(line) => {
                        self.store
                            .put_under(&key, record.encode(), line, &filter, ttl)
                            .await
                    }
                    None => self.store.put(&key, record.encode(), expected, ttl).await,
                };
                if let (Ok(_), Place::Queued(ticket)) = (&put, &place) {
                    if let Err(CasError::Failed(err)) = self
                        .store
                        .delete(&ticket.key, bytes::Bytes::new(), ticket.revision)
                        .await
                    {
                        tracing::warn!(name = %args.name, %err, "a granted waiter's ticket was not deleted; it expires within the ticket TTL");
                    }
                }
                put
            }
        };
        match written {
            Ok(revision) => {
                tracing::debug!(name = %args.name, holder = %args.holder, token = revision, "acquired");
                METRICS.acquired.inc();
                self.cache.insert(&args.name, revision, &record);
                self.free.acquired(&args.name);
                // Written on the line with nobody queued: this replica's
                // release of it needs no read (`end.rs`).
                match line {
                    Some(_) if plain && !fenced => self.lines.set(
                        &args.name,
                        Line {
                            last: revision,
                            free: false,
                        },
                    ),
                    _ => self.lines.forget(&args.name),
                }
                Ok(Some(Holding::at(&args.name, revision, record)))
            }
            Err(CasError::Conflict) => Ok(None),
            Err(CasError::Failed(err)) => Err(err),
        }
    }

    /// The fence of `name` from the leader: its key's last revision (0: none)
    /// and the fence, when that last message is one.
    pub(super) async fn fence(&self, name: &str) -> Result<(u64, Option<Fence>)> {
        Ok(match self.store.last(&keys::fence(name)).await? {
            Some(msg) => {
                let fence = match &msg.op {
                    Op::Put(payload) => Fence::decode(payload),
                    _ => None,
                };
                (msg.revision, fence)
            }
            None => (0, None),
        })
    }
}

/// The write that makes `name`'s fence say `lock_delay_s` (0: deletes it),
/// over the fence's last revision `expected`, in the batch that writes the
/// holding it describes (design section 15).
pub(super) fn fence_write(name: &str, lock_delay_s: u64, expected: u64) -> Write {
    Write {
        name: keys::fence(name),
        op: if lock_delay_s > 0 {
            WriteOp::Put
        } else {
            WriteOp::Delete
        },
        payload: Fence { lock_delay_s }.encode(),
        expected: Some(expected),
        expected_of: None,
        ttl: Duration::ZERO,
    }
}

/// What a waiter's ticket says it would be granted, for a Transfer to it;
/// none for a waiter with a lock delay (a Transfer does not move fences).
fn ticket_grant(args: &AcquireArgs) -> Option<fifo::TicketGrant> {
    (args.lock_delay_s == 0).then(|| fifo::TicketGrant {
        key_sha256: KeyHash::of(&args.key).to_hex(),
        ttl_s: args.ttl_s,
        metadata: args.metadata.clone(),
    })
}

/// The name of the queue `args` waits in: the lease's own name, or for a
/// semaphore its reserved queue name ([`keys::semaphore_queue`]).
fn queue_of(args: &AcquireArgs) -> std::borrow::Cow<'_, str> {
    match args.limit {
        0 => std::borrow::Cow::Borrowed(args.name.as_str()),
        _ => std::borrow::Cow::Owned(keys::semaphore_queue(&args.name)),
    }
}
