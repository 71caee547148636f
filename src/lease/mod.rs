//! The lease protocol: acquire, renew, release, revoke, read and list
//! leases with compare-and-set writes on the bucket, and watch them through
//! the shared watcher (see `docs/design.md`).
//!
//! Every write names the revision it replaces, so NATS decides every race;
//! this module only decides *which* revision to name and whether the caller
//! may name it ([`rules`]). Ownership is proven by the lease key, checked
//! against the exact record that the write replaces. A lost race (a CAS
//! conflict) re-reads and tries again, a bounded number of times.
//!
//! The only memory here is the [`cache::KeyCache`], the watcher's mirror
//! and the queue reads in flight ([`fifo::SharedReads`]); none decides
//! anything a conditional write does not confirm.
//! The protocol counts what it does (acquired, released, revoked) where it
//! knows it happened.

mod cache;
mod election;
mod event;
mod fifo;
mod group;
mod list;
mod mirror;
mod queue;
mod record;
mod resume;
mod rules;
mod semaphore;
mod shards;
mod watch;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use election::{ttl_left, value_of, CampaignArgs, Change, ChangeKind, Elections, VALUE_KEY};
pub use event::{Event, EventKind, Filter};
pub use group::{GroupArgs, GroupMember, MAX_GROUP_SIZE};
pub use list::{parse_token as parse_page_token, Page};
pub use queue::Budget;
pub use record::{Holding, KeyHash, Record, Released};
pub use shards::{shard_of, From as WatchFrom, ShardEvent, Shards};
pub use watch::{Hub, Subscription, WATCH_BUFFER_EVENTS};

use cache::{FreeHints, KeyCache};
use record::{Entry, Fence, Kind, Revoked};
use rules::AcquirePlan;

use crate::error::{Error, Reason, Result};
use crate::nats::{CasError, Op, Store, Write, WriteOp};
use crate::observe::METRICS;

/// How many times a call re-reads and retries after losing a CAS race before
/// it reports contention.
const MAX_CAS_ATTEMPTS: usize = 5;
/// How often a waiting Acquire re-checks even without a bucket event: a
/// safety net should the event stream break.
const WAIT_POLL: Duration = Duration::from_secs(1);
/// How long a waiting Acquire waits for the shared watcher to follow its
/// name (it may be loading the bucket after idling) before it polls instead.
const FOLLOW_PATIENCE: Duration = Duration::from_secs(2);
/// Most waiters queued per name unless the server is told otherwise.
pub const DEFAULT_MAX_WAITERS: usize = 64;

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
    /// The semaphore limit (0: a plain, exclusive lease; see [`semaphore`]).
    pub limit: u32,
}

/// How a holding is ended: by its holder, or by an operator.
enum Ending<'a> {
    /// The holder releases: the key must match and `expected` must be a
    /// revision of the holding.
    Release {
        /// The revision the holder presents.
        expected: u64,
        /// The presented key's hash.
        hash: KeyHash,
    },
    /// An operator revokes: the current holding (only the one with `token`,
    /// when not 0), whoever holds it.
    Revoke {
        /// The token the operator targets, or 0 for any.
        token: u64,
        /// Why.
        why: &'a str,
        /// Who.
        by: &'a str,
    },
}

/// The lease operations over one bucket. Cheap to clone.
#[derive(Clone)]
pub struct Leases {
    /// The bucket.
    store: Store,
    /// Records this replica wrote or read, by name.
    cache: Arc<KeyCache>,
    /// The shared watcher: wakes waiting Acquires, serves watches.
    hub: Hub,
    /// Ends waiting Acquires when the server shuts down.
    shutdown: CancellationToken,
    /// Most waiters queued on one name (its queue slots).
    max_waiters: usize,
    /// Queue reads shared by waiters that queue at the same time.
    queue_reads: Arc<fifo::SharedReads>,
    /// Names this replica released, for Acquires in one round trip.
    free: Arc<FreeHints>,
}

/// Where an attempt to take a lease stands towards the name's queue.
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
}

impl Leases {
    /// Lease operations over `store`; waits and watches follow `hub` and end
    /// when `shutdown` is cancelled.
    pub fn new(store: Store, hub: Hub, shutdown: CancellationToken) -> Leases {
        Leases {
            store,
            cache: Arc::new(KeyCache::default()),
            hub,
            shutdown,
            max_waiters: DEFAULT_MAX_WAITERS,
            queue_reads: Arc::default(),
            free: Arc::default(),
        }
    }

    /// The same, with at most `max_waiters` waiters queued per name.
    pub fn with_max_waiters(mut self, max_waiters: usize) -> Leases {
        self.max_waiters = max_waiters.max(1);
        self
    }

    /// Whether waits are fair: the bucket takes the atomic batches that
    /// grants and guarded Acquires need.
    fn fair(&self) -> bool {
        self.store.atomic()
    }

    /// Whether the shared watcher is following the bucket, as it changes.
    pub fn healthy(&self) -> tokio::sync::watch::Receiver<bool> {
        self.hub.healthy()
    }

    /// How many waiters are queued for `name` (0 without fair waiting).
    pub async fn waiting(&self, name: &str) -> Result<usize> {
        if !self.fair() {
            return Ok(0);
        }
        Ok(fifo::Queue::read(&self.store, name, self.max_waiters)
            .await?
            .waiting())
    }

    /// Takes a lease, waiting for it to become free if `args.wait` says so.
    /// On a bucket with atomic batches a wait is fair (first come, first
    /// served across replicas: see [`fifo`]); otherwise it polls.
    pub async fn acquire(&self, args: &AcquireArgs) -> Result<Holding> {
        let Some(wait) = args.wait else {
            return self.try_once(args).await;
        };
        if args.limit > 0 {
            return self.acquire_slot(args, wait).await;
        }
        let deadline = Instant::now() + wait;
        // Waiters are queued already (as this replica's watcher sees them):
        // an Acquire without a ticket would be refused, so queue at once.
        let seen = self.hub.waiting(&args.name);
        let mut held = if self.fair() && seen > 0 {
            queued(&args.name, seen)
        } else {
            match self.try_acquire(args).await {
                Err(err) if err.reason == Reason::LeaseHeld => err,
                other => return other,
            }
        };
        // Only now is there something to wait for: follow the name's ends
        // (which may start the shared watcher), then try again before
        // sleeping, so a release between the first try and the subscription
        // is not missed (a fair waiter's first queued attempt is that try,
        // made once both its subscription and its ticket are in place; the
        // two are made at once, so that its place does not wait for the
        // watcher).
        let (mut follow, mut first) = if self.fair() {
            let (follow, queued) = tokio::join!(
                self.follow_ends(&args.name, true),
                tokio::time::timeout_at(deadline, self.enqueue(args))
            );
            (follow, Some(queued))
        } else {
            (self.follow_ends(&args.name, false).await, None)
        };
        if !self.fair() {
            held = match self.try_acquire(args).await {
                Err(err) if err.reason == Reason::LeaseHeld => err,
                other => return other,
            };
        }
        let mut ticket = None;
        let mut refresh = tokio::time::interval(fifo::TICKET_REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        refresh.reset();
        loop {
            // A new ticket tries at once: the lease may be free already.
            let queued_now = self.fair() && ticket.is_none();
            if queued_now {
                // Queueing counts against the wait too. Should the deadline
                // cut a ticket write short after NATS stored it, that
                // ticket expires like a dead waiter's.
                let queued = match first.take() {
                    Some(queued) => queued,
                    None => tokio::time::timeout_at(deadline, self.enqueue(args)).await,
                };
                match queued {
                    Ok(queued) => ticket = Some(queued?),
                    Err(_) => {
                        let message = format!("{} (gave up after waiting {wait:?})", held.message);
                        return Err(Error {
                            message,
                            retry_after: None,
                            ..held
                        }
                        .with("waited_ms", wait.as_millis()));
                    }
                }
                refresh.reset();
            }
            // Sleep until the lease may be free (a release, expiry or revoke
            // of this name), the poll tick (or the end of a lock delay, if
            // sooner), or the deadline; keep the ticket alive meanwhile.
            let tick = held.retry_after.map_or(WAIT_POLL, |d| d.min(WAIT_POLL));
            let freed = async {
                match follow.as_mut() {
                    Some(f) => f.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => {
                    return Err(Error::new(Reason::ShuttingDown, "the server is shutting down; Acquire again on another replica"));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    if let Some(t) = ticket.take() {
                        t.leave().await;
                    }
                    let message = format!("{} (gave up after waiting {wait:?})", held.message);
                    return Err(Error { message, retry_after: None, ..held }.with("waited_ms", wait.as_millis()));
                }
                _ = refresh.tick(), if ticket.is_some() => {
                    if let Some(t) = ticket.as_mut() {
                        if !self.refresh(args, t).await? {
                            // The ticket is gone (it expired before this
                            // refresh): queue again, at the back.
                            tracing::warn!(name = %args.name, "a waiter's ticket expired while it waited; it queues again");
                            if let Some(mut t) = ticket.take() {
                                t.armed = false;
                            }
                        }
                    }
                    continue;
                }
                _ = std::future::ready(()), if queued_now => {}
                _ = tokio::time::sleep(tick) => {}
                event = freed => {
                    if event.is_err() {
                        follow = None;
                    }
                }
            }
            let attempt = match &ticket {
                Some(t) => match self.on_wake(args, t) {
                    // Not its turn: no read, no write; sleep again (should
                    // the wait run out, it says so, not an older holder).
                    None => {
                        held = behind(&args.name, self.hub.waiting(&args.name));
                        continue;
                    }
                    Some(known) => self.attempt_queued(args, t, known).await,
                },
                None => self.try_acquire(args).await,
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
    /// The shared watcher may be starting (its initial load): waiting for
    /// it is bounded by [`FOLLOW_PATIENCE`].
    /// With `turns`, it also hears when the name's queue lost a ticket
    /// while the name is free ([`EventKind::Turn`]).
    async fn follow_ends(&self, name: &str, turns: bool) -> Option<Subscription> {
        let mut ends = vec![EventKind::Released, EventKind::Expired, EventKind::Revoked];
        if turns {
            ends.push(EventKind::Turn);
        }
        let follow = self.hub.follow(Filter::Name(name.to_string()), ends);
        tokio::time::timeout(FOLLOW_PATIENCE, follow)
            .await
            .ok()?
            .ok()
    }

    /// Takes a semaphore slot, waiting for one to free if `args.wait` says
    /// so: every end of a holding of the name wakes the waiters, who race
    /// for the free slot (semaphores do not queue yet).
    async fn acquire_slot(&self, args: &AcquireArgs, wait: Duration) -> Result<Holding> {
        let deadline = Instant::now() + wait;
        let mut follow = None;
        let mut following = false;
        loop {
            let held = match self.try_acquire_slot(args).await {
                Err(err) if err.reason == Reason::LeaseHeld => err,
                other => return other,
            };
            if !following {
                // Something to wait for: follow the name's ends, then try
                // again at once (a release between the try and the
                // subscription would otherwise be missed).
                following = true;
                follow = self.follow_ends(&args.name, false).await;
                continue;
            }
            let tick = held.retry_after.map_or(WAIT_POLL, |d| d.min(WAIT_POLL));
            let freed = async {
                match follow.as_mut() {
                    Some(f) => f.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.shutdown.cancelled() => {
                    return Err(Error::new(Reason::ShuttingDown, "the server is shutting down; Acquire again on another replica"));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    let message = format!("{} (gave up after waiting {wait:?})", held.message);
                    return Err(Error { message, retry_after: None, ..held }.with("waited_ms", wait.as_millis()));
                }
                _ = tokio::time::sleep(tick) => {}
                event = freed => {
                    if event.is_err() {
                        follow = None;
                    }
                }
            }
        }
    }

    /// Writes a ticket for `args` into a free slot of the name's queue, at
    /// the back. Waiters queueing together share a queue read
    /// ([`fifo::SharedReads`]), and a slot lost to another waiter (a CAS
    /// conflict) is skipped for the next free one of the same read, so a
    /// burst of waiters costs a few queue reads, not one per waiter and
    /// lost race.
    async fn enqueue(&self, args: &AcquireArgs) -> Result<fifo::Ticket> {
        let payload = fifo::TicketRecord {
            place: 0,
            holder: args.holder.clone(),
        }
        .encode();
        // First the slots the watcher saw emptied (no read), then scans.
        let start = rand::random_range(0..self.max_waiters);
        let seen = self.hub.free_slots(&args.name, self.max_waiters, start);
        if let Some(ticket) = self.take_slot(args, &payload, seen).await? {
            return Ok(ticket);
        }
        for _ in 0..MAX_CAS_ATTEMPTS {
            let queue = self
                .queue_reads
                .read(&self.store, &args.name, self.max_waiters)
                .await?;
            let start = rand::random_range(0..self.max_waiters);
            let free = queue.free_slots(self.max_waiters, start);
            if free.is_empty() {
                return Err(too_many_waiters(
                    &args.name,
                    queue.waiting(),
                    self.max_waiters,
                ));
            }
            if let Some(ticket) = self.take_slot(args, &payload, free).await? {
                return Ok(ticket);
            }
        }
        Err(contended(&args.name))
    }

    /// Writes the ticket `payload` into the first of `free` (slot, expected
    /// revision) that is still as expected; `None` when every one was
    /// taken meanwhile.
    async fn take_slot(
        &self,
        args: &AcquireArgs,
        payload: &bytes::Bytes,
        free: Vec<(usize, u64)>,
    ) -> Result<Option<fifo::Ticket>> {
        for (slot, expected) in free {
            let key = fifo::slot_key(&args.name, slot);
            match self
                .store
                .put(&key, payload.clone(), expected, fifo::TICKET_TTL)
                .await
            {
                Ok(revision) => {
                    tracing::debug!(name = %args.name, slot, place = revision, "queued");
                    return Ok(Some(fifo::Ticket {
                        store: self.store.clone(),
                        key,
                        slot,
                        revision,
                        place: revision,
                        armed: true,
                    }));
                }
                Err(CasError::Conflict) => continue,
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Ok(None)
    }

    /// Rewrites a ticket so that it does not expire, keeping its place.
    /// `false`: the ticket is gone.
    async fn refresh(&self, args: &AcquireArgs, ticket: &mut fifo::Ticket) -> Result<bool> {
        let payload = fifo::TicketRecord {
            place: ticket.place,
            holder: args.holder.clone(),
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
        // A name this replica released last is taken over its release
        // (the queue is still read), unless its watcher sees waiters.
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

    /// What a queued waiter does when it wakes (it queued, an event of its
    /// name, a turn, the poll): nothing (`None`)
    /// when the shared watcher's view of the queue shows a waiter ahead of
    /// it; otherwise an attempt, which skips the queue read when the view
    /// says it is the head, and the lease read when the last lease message
    /// the watcher saw is a release (unless something was written since,
    /// which fails the grant).
    fn on_wake(&self, args: &AcquireArgs, ticket: &fifo::Ticket) -> Option<Known> {
        match self.hub.turn(&args.name, ticket.place, ticket.revision) {
            fifo::Turn::NotMine => None,
            fifo::Turn::Unknown => Some(Known::default()),
            fifo::Turn::Mine => {
                // The release the watcher saw last, not the event's: a
                // waiter slow to read its events may hold an older one.
                let last = match args.lock_delay_s {
                    0 => self.hub.released_at(&args.name).map(|revision| Entry {
                        name: args.name.clone(),
                        revision,
                        time_ms: 0,
                        kind: Kind::Released(None),
                    }),
                    _ => None,
                };
                Some(Known { last, head: true })
            }
        }
    }

    /// One attempt of a queued waiter; a lost race is `LEASE_HELD` (the
    /// waiter waits for the next event rather than retrying at once),
    /// except that an attempt on hints that lost its race reads everything
    /// and tries again at once.
    async fn attempt_queued(
        &self,
        args: &AcquireArgs,
        ticket: &fifo::Ticket,
        known: Known,
    ) -> Result<Holding> {
        let hinted = known.last.is_some() || known.head;
        if let Some(holding) = self.attempt(args, Place::Queued(ticket), known).await? {
            return Ok(holding);
        }
        if hinted {
            METRICS.acquire_hint_misses.inc();
            if let Some(holding) = self
                .attempt(args, Place::Queued(ticket), Known::default())
                .await?
            {
                return Ok(holding);
            }
        }
        Err(contended(&args.name))
    }

    /// One attempt to take a lease: read the last message (unless `known`),
    /// then CAS over it (`None`: a lost race). A plain attempt writes only
    /// when no waiter is queued; a queued one only as the head of the queue.
    async fn attempt(
        &self,
        args: &AcquireArgs,
        place: Place<'_>,
        known: Known,
    ) -> Result<Option<Holding>> {
        let hash = KeyHash::of(&args.key);
        let last = match known.last {
            Some(last) => Some(last),
            None => self.store.last(&args.name).await?.map(Entry::from),
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
                // that waits learns its place by queueing: no second scan).
                if matches!(place, Place::Plain) && args.wait.is_none() && self.fair() {
                    err = err.with("waiters", self.waiting(&args.name).await?);
                }
                return Err(err);
            }
            AcquirePlan::Unreadable => return Err(unreadable(&args.name, self.store.bucket())),
        };
        // The queue decides who may write: nobody queued (plain), or the
        // head (queued); the batch re-checks what this read saw.
        let queue_write = match place {
            Place::Plain if self.fair() => {
                let queue = fifo::Queue::read(&self.store, &args.name, self.max_waiters).await?;
                if queue.waiting() > 0 {
                    return Err(queued(&args.name, queue.waiting()));
                }
                None
            }
            Place::Plain => None,
            Place::Queued(ticket) if known.head => Some(ticket.grant_write()),
            Place::Queued(ticket) => {
                let queue = fifo::Queue::read(&self.store, &args.name, self.max_waiters).await?;
                if !queue.holds(ticket.slot, ticket.revision) {
                    // Gone or rewritten: the next refresh finds out which.
                    return Ok(None);
                }
                let ahead = queue.ahead_of(ticket.place);
                if ahead > 0 {
                    return Err(queued(&args.name, queue.waiting()).with("ahead", ahead));
                }
                Some(ticket.grant_write())
            }
        };
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
        let record = Record {
            holder: args.holder.clone(),
            token: 0,
            key_sha256: hash.to_hex(),
            ttl_s: args.ttl_s,
            acquired_ms: now,
            renewed_ms: now,
            metadata: args.metadata.clone(),
            lock_delay_s: args.lock_delay_s,
            group: Vec::new(),
        };
        let ttl = Duration::from_secs(args.ttl_s);
        let (fence_revision, fence_live) = (fence.0, fence.1.is_some());
        // The fence (a holding with a delay always has its fence, and one
        // without never inherits an older holding's) goes in one atomic
        // batch with the record (last: the batch's revision is the token)
        // and the head's ticket delete.
        let fence_write = (args.lock_delay_s > 0 || fence_live)
            .then(|| fence_write(&args.name, args.lock_delay_s, fence_revision));
        let written = match fence_write {
            Some(fence) => {
                let mut writes: Vec<Write> = queue_write.into_iter().collect();
                writes.push(fence);
                writes.push(Write {
                    name: args.name.clone(),
                    op: WriteOp::Put,
                    payload: record.encode(),
                    expected: Some(expected),
                    expected_of: None,
                    ttl,
                });
                self.store.batch(&writes).await
            }
            // Otherwise one conditional write: the lease first, then the
            // head's ticket (a batch costs the stream a sync of its file
            // store). The waiters behind it see its ticket until then,
            // and the lease is held meanwhile: nobody can take it between
            // the two writes (design section 16).
            None => {
                let put = self
                    .store
                    .put(&args.name, record.encode(), expected, ttl)
                    .await;
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
                Ok(Some(Holding::at(&args.name, revision, record)))
            }
            Err(CasError::Conflict) => Ok(None),
            Err(CasError::Failed(err)) => Err(err),
        }
    }

    /// Extends a holding. `expected` may be stale (a retry after a lost
    /// reply) as long as it belongs to the current holding.
    pub async fn renew(
        &self,
        name: &str,
        expected: u64,
        key: &str,
        ttl_s: Option<u64>,
    ) -> Result<Holding> {
        let hash = KeyHash::of(key);
        if let Some(rec) = self.cache.get(name, expected) {
            if rec.key_matches(&hash) {
                match self.write_renewal(name, expected, &rec, ttl_s).await {
                    Err(CasError::Conflict) => {}
                    other => return other.map_err(cas_failed),
                }
            }
        }
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (revision, rec) = self.verify_holding(name, expected, &hash).await?;
            match self.write_renewal(name, revision, &rec, ttl_s).await {
                Err(CasError::Conflict) => continue,
                other => return other.map_err(cas_failed),
            }
        }
        Err(contended(name))
    }

    /// Ends a holding at its holder's request; returns the release's
    /// revision.
    pub async fn release(&self, name: &str, expected: u64, key: &str) -> Result<u64> {
        let ending = Ending::Release {
            expected,
            hash: KeyHash::of(key),
        };
        let (revision, _) = self.end(name, ending).await?;
        Ok(revision)
    }

    /// Revokes the current holding of `name` (only the one with `token`,
    /// when not 0): a `KV-Operation: PURGE` write over it, which watchers
    /// report as REVOKED and which makes the holder's next Renew or Release
    /// fail with LEASE_NOT_HELD. Returns the revoke's revision and the
    /// holding that ended.
    pub async fn revoke(
        &self,
        name: &str,
        token: u64,
        why: &str,
        by: &str,
    ) -> Result<(u64, Holding)> {
        self.end(name, Ending::Revoke { token, why, by }).await
    }

    /// The one conditional-write loop that ends holdings: find the holding
    /// the ending applies to, write the tombstone or purge over exactly its
    /// revision, and start again on a lost race.
    async fn end(&self, name: &str, ending: Ending<'_>) -> Result<(u64, Holding)> {
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (revision, rec) = match &ending {
                Ending::Release { expected, hash } => match self.cache.get(name, *expected) {
                    Some(rec) if rec.key_matches(hash) => (*expected, rec),
                    _ => self.verify_holding(name, *expected, hash).await?,
                },
                Ending::Revoke { token, .. } => self.revocable(name, *token).await?,
            };
            let token = rec.token_at(revision);
            let holder = rec.holder.clone();
            let (op, payload) = match &ending {
                Ending::Release { .. } => (WriteOp::Delete, Released { holder, token }.encode()),
                Ending::Revoke { why, by, .. } => (
                    WriteOp::Purge,
                    Revoked {
                        holder,
                        token,
                        revoked_by: by.to_string(),
                        reason: why.to_string(),
                        lock_delay_s: rec.lock_delay_s,
                    }
                    .encode(),
                ),
            };
            let written = if rec.lock_delay_s > 0 {
                // A holding with a lock delay has a fence: it goes in the same
                // batch, so that neither a release (no delay) nor a revoke
                // (its delay is in the purge) leaves one behind for the
                // marker that replaces this message when it ages out.
                let fence = Write {
                    name: rules::fence_key(name),
                    op: WriteOp::Delete,
                    payload: bytes::Bytes::new(),
                    expected: None,
                    expected_of: None,
                    ttl: Duration::ZERO,
                };
                let end = Write {
                    name: name.to_string(),
                    op,
                    payload,
                    expected: Some(revision),
                    expected_of: None,
                    ttl: Duration::ZERO,
                };
                self.store.batch(&[fence, end]).await
            } else if op == WriteOp::Delete {
                self.store.delete(name, payload, revision).await
            } else {
                self.store.purge(name, payload, revision).await
            };
            match written {
                Ok(at) => {
                    self.cache.remove(name);
                    match &ending {
                        Ending::Release { .. } => {
                            self.free.released(name, at);
                            METRICS.released.inc();
                            tracing::debug!(name, holder = %rec.holder, token, "released");
                        }
                        Ending::Revoke { why, by, .. } => {
                            self.free.forget(name);
                            METRICS.revoked.inc();
                            tracing::warn!(name, holder = %rec.holder, token, revoked_by = by, reason = why, revision = at, "lease revoked");
                        }
                    }
                    return Ok((at, Holding::at(name, revision, (*rec).clone())));
                }
                Err(CasError::Conflict) => {
                    // Whatever we knew is stale: read the leader again.
                    self.cache.remove(name);
                }
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(contended(name))
    }

    /// The current holding of a name.
    pub async fn get(&self, name: &str) -> Result<Holding> {
        let last = self.store.last(name).await?.map(Entry::from);
        match last {
            Some(Entry {
                revision,
                kind: Kind::Held(record),
                ..
            }) => {
                self.cache.insert(name, revision, &record);
                Ok(Holding::at(name, revision, record))
            }
            Some(Entry {
                kind: Kind::Unreadable,
                ..
            }) => Err(unreadable(name, self.store.bucket())),
            other => {
                let state = other.as_ref().map_or("ABSENT", |e| e.kind.state());
                Err(Error::new(
                    Reason::LeaseNotFound,
                    format!("lease {name:?} is not held ({state}); Acquire it to take it"),
                )
                .with("state", state))
            }
        }
    }

    /// One page of the live holdings under `prefix` (see [`list::list`]).
    pub async fn list(&self, prefix: &str, page_size: u32, page_token: &str) -> Result<Page> {
        list::list(&self.store, prefix, page_size, page_token).await
    }

    /// Follows `filter` with a snapshot first: the current holdings (as of
    /// no earlier than this call), `SnapshotComplete`, then live events of
    /// `kinds` (empty: all).
    pub async fn watch(&self, filter: Filter, kinds: Vec<EventKind>) -> Result<Subscription> {
        self.hub.watch(filter, kinds).await
    }

    /// Follows `filter` from after revision `from` (see [`Hub::resume`]).
    pub async fn resume(
        &self,
        filter: Filter,
        kinds: Vec<EventKind>,
        from: u64,
    ) -> Result<Subscription> {
        self.hub.resume(filter, kinds, from).await
    }

    /// The fence of `name` from the leader: its key's last revision (0: none)
    /// and the fence, when that last message is one.
    async fn fence(&self, name: &str) -> Result<(u64, Option<Fence>)> {
        Ok(match self.store.last(&rules::fence_key(name)).await? {
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

    /// Reads the current record of `name` from the leader and checks that it
    /// is the caller's holding: the key matches and `expected` belongs to
    /// the holding ([`rules::belongs_to_holding`]).
    async fn verify_holding(
        &self,
        name: &str,
        expected: u64,
        hash: &KeyHash,
    ) -> Result<(u64, Arc<Record>)> {
        let last = self.store.last(name).await?.map(Entry::from);
        let (revision, rec) = match last {
            Some(Entry {
                revision,
                kind: Kind::Held(rec),
                ..
            }) => (revision, Arc::new(rec)),
            Some(Entry {
                kind: Kind::Unreadable,
                ..
            }) => return Err(unreadable(name, self.store.bucket())),
            Some(entry) => {
                let state = entry.kind.state();
                return Err(not_held(
                    name,
                    format!("it was {state} at revision {}", entry.revision),
                )
                .with("state", state));
            }
            None => {
                return Err(not_held(name, "nobody holds it".to_string()).with("state", "ABSENT"))
            }
        };
        self.cache.insert(name, revision, &rec);
        let token = rec.token_at(revision);
        if !rec.key_matches(hash) {
            return Err(not_held(
                name,
                format!("it is held under another lease key (token {token})"),
            )
            .with("state", "HELD"));
        }
        if !rules::belongs_to_holding(expected, token, revision) {
            return Err(not_held(
                name,
                format!(
                    "revision {expected} is not part of the current holding (token {token}, revision {revision})"
                ),
            )
            .with("state", "HELD"));
        }
        Ok((revision, rec))
    }

    /// Reads the current holding of `name` from the leader for a revoke:
    /// any holder's, or only the one with `token` when not 0.
    async fn revocable(&self, name: &str, token: u64) -> Result<(u64, Arc<Record>)> {
        let last = self.store.last(name).await?.map(Entry::from);
        let (revision, record) = match last {
            Some(Entry {
                revision,
                kind: Kind::Held(record),
                ..
            }) => (revision, record),
            Some(Entry {
                kind: Kind::Unreadable,
                ..
            }) => return Err(unreadable(name, self.store.bucket())),
            _ => return Err(not_revocable(name, "it is not held")),
        };
        let current = record.token_at(revision);
        if token != 0 && token != current {
            return Err(not_revocable(
                name,
                &format!("its current holding has token {current}, not {token}"),
            )
            .with("fencing_token", current));
        }
        Ok((revision, Arc::new(record)))
    }

    /// Writes a renewal of `rec` (the record of `name` at `revision`) with
    /// the same token, conditional on that revision.
    async fn write_renewal(
        &self,
        name: &str,
        revision: u64,
        rec: &Record,
        ttl_s: Option<u64>,
    ) -> Result<Holding, CasError> {
        let record = Record {
            token: rec.token_at(revision),
            ttl_s: ttl_s.unwrap_or(rec.ttl_s),
            renewed_ms: now_ms(),
            ..rec.clone()
        };
        let ttl = Duration::from_secs(record.ttl_s);
        let new_revision = self.store.put(name, record.encode(), revision, ttl).await?;
        self.cache.insert(name, new_revision, &record);
        Ok(Holding::at(name, new_revision, record))
    }
}

/// Turns a CAS failure that is not a conflict into the caller's error.
fn cas_failed(err: CasError) -> Error {
    match err {
        CasError::Failed(err) => err,
        CasError::Conflict => Error::new(Reason::Internal, "unexpected write conflict"),
    }
}

/// `LEASE_HELD` naming the current holder.
fn held(name: &str, rec: &Record, revision: u64) -> Error {
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
fn delayed(name: &str, free_at_ms: u64, now_ms: u64) -> Error {
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
fn queued(name: &str, waiters: usize) -> Error {
    Error::new(
        Reason::LeaseHeld,
        format!(
            "lease {name:?} has {waiters} waiter(s) queued, who take it first; Acquire with a wait to queue behind them"
        ),
    )
    .with("waiters", waiters)
    .with("state", "QUEUED")
}

/// The write that makes `name`'s fence say `lock_delay_s` (0: deletes it),
/// over the fence's last revision `expected`, in the batch that writes the
/// holding it describes (design section 15).
fn fence_write(name: &str, lock_delay_s: u64, expected: u64) -> Write {
    Write {
        name: rules::fence_key(name),
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

/// `LEASE_HELD` for a waiter still behind earlier waiters of `name` (the
/// watcher's view counts `waiters` in all) when its wait runs out.
fn behind(name: &str, waiters: usize) -> Error {
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
fn too_many_waiters(name: &str, waiters: usize, max: usize) -> Error {
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
fn not_held(name: &str, why: String) -> Error {
    Error::new(
        Reason::LeaseNotHeld,
        format!("you do not hold lease {name:?}: {why}; stop acting as holder and Acquire again"),
    )
}

/// `LEASE_NOT_FOUND` for a revoke of something that is not there.
fn not_revocable(name: &str, why: &str) -> Error {
    Error::new(
        Reason::LeaseNotFound,
        format!("cannot revoke lease {name:?}: {why}; list leases to see what is held"),
    )
}

/// `LEASE_HELD` after repeated lost races.
fn contended(name: &str) -> Error {
    Error::new(
        Reason::LeaseHeld,
        format!("lease {name:?} is changing hands too fast to settle; retry with backoff"),
    )
}

/// `RECORD_UNREADABLE` for a foreign value under a lease name.
fn unreadable(name: &str, bucket: &str) -> Error {
    Error::new(
        Reason::RecordUnreadable,
        format!(
            "key {name:?} in bucket {bucket:?} holds a value that is not a Tenure lease; remove it with `nats kv del {bucket} {name}`"
        ),
    )
}

/// Wall-clock Unix milliseconds, for the record's informational times.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
