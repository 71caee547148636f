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
//! The safety checker's negative controls break this module on purpose
//! with test faults (`tenure serve --test-fault`, refused unless
//! `TENURE_TEST_FAULTS=1`; see [`TestFault`]): each is a branch marked
//! `TEST FAULT`, never taken without the flag.
//!
//! The only memory here is the [`cache::KeyCache`], the watcher's mirror
//! and the queue reads in flight ([`fifo::SharedReads`]); none decides
//! anything a conditional write does not confirm. The protocol counts what
//! it does (acquired, released, revoked) where it knows it happened.
//!
//! # Layout
//!
//! This file is the public face: [`Leases`] and what the API layer uses.
//! The rooms, along the call path:
//!
//! - The data model: `keys.rs` (every key built and parsed), `record.rs`
//!   (records, holdings and the markers that end them), `rules.rs` (the
//!   decisions, as pure functions), `cache.rs` (what this replica knows).
//! - The calls: `acquire.rs` (Acquire with its fair queue and lock delay),
//!   `wait.rs` (the one sleep of every waiting call), `renew.rs` (Renew and
//!   the ownership check), `end.rs` (Release and Revoke), `list.rs`,
//!   `refusals.rs` (every error a lease call answers with).
//! - The fair queue: `fifo.rs` (tickets, queue reads).
//! - Beyond one lease: `semaphore/` (semaphores, the read-write locks
//!   kept as semaphores, `rwlock.rs`, and the sweep), `group.rs`,
//!   `election.rs`,
//!   `shards.rs` (one [`Leases`] per shard of a sharded bucket).
//! - The shared watcher: `watch/` (the hub and its task, the mirror of the
//!   bucket, the queue view, the event queues of watches, resume), and
//!   `event.rs` (the events it delivers).

mod acquire;
mod cache;
mod election;
mod end;
mod event;
mod fifo;
mod group;
mod history;
mod keys;
mod list;
mod record;
mod refusals;
mod renew;
mod rules;
mod semaphore;
mod shards;
mod transfer;
mod wait;
mod watch;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

pub use acquire::AcquireArgs;
pub use election::{ttl_left, value_of, CampaignArgs, Change, ChangeKind, Elections, VALUE_KEY};
pub use event::{Event, EventKind, Filter};
pub use group::{GroupArgs, GroupMember};
pub use history::{Ending, Gap, HistoryQuery, Tenure};
pub use keys::is_reserved;
pub use list::{parse_token as parse_page_token, Page};
pub use record::{Holding, KeyHash, Mode, Record, Released};
pub use shards::{shard_of, From as WatchFrom, ShardEvent, Shards};
pub use watch::{Hub, Subscription, WatchBudget, WATCH_BUFFER_EVENTS};

use cache::{FreeHints, KeyCache, Lines};
use record::{Entry, Kind};
use refusals::unreadable;

use crate::config::{TestFault, TestFaults};
use crate::error::{Error, Reason, Result};
use crate::nats::Store;

/// How many times a call re-reads and retries after losing a CAS race before
/// it reports contention.
const MAX_CAS_ATTEMPTS: usize = 5;

/// Most waiters queued per name unless the server is told otherwise.
pub const DEFAULT_MAX_WAITERS: usize = 64;

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
    /// Per name, the lane its waiters write their tickets in, one at a time.
    queue_lanes: Arc<fifo::Lanes>,
    /// Per semaphore, the turn of its definers on this replica: one
    /// definition batch at a time.
    definers: Arc<fifo::Lanes<()>>,
    /// Per semaphore queue, the last read of it by a waiter that asked
    /// whether it is the head, and when that read began: waiters woken
    /// together share one read (`semaphore::may_take_slot`).
    head_reads: Arc<fifo::Lanes<(tokio::time::Instant, fifo::Queue)>>,
    /// Names this replica released, for Acquires in one round trip on a
    /// bucket without fair waiting.
    free: Arc<FreeHints>,
    /// Names whose line this replica wrote last with nobody queued, for
    /// an Acquire or a Release in one conditional write and no read.
    lines: Arc<Lines>,
    /// Waiters without a queue ticket (semaphore slots) on this replica,
    /// per name, bounded by `max_waiters` like a queue.
    unqueued: Arc<wait::Unqueued>,
    /// Turns for semaphore slot reads ([`semaphore::SLOT_READS`] at once).
    slot_reads: Arc<tokio::sync::Semaphore>,
    /// Deliberate bugs for the safety checker's negative controls (none in
    /// production; see [`TestFault`]).
    faults: TestFaults,
    /// Grants so far, for the `tokens-go-back` test fault.
    grants: Arc<AtomicU64>,
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
            queue_lanes: Arc::default(),
            definers: Arc::default(),
            head_reads: Arc::default(),
            free: Arc::default(),
            lines: Arc::default(),
            unqueued: Arc::default(),
            slot_reads: Arc::new(tokio::sync::Semaphore::new(semaphore::SLOT_READS)),
            faults: TestFaults::default(),
            grants: Arc::default(),
        }
    }

    /// The same, with at most `max_waiters` waiters queued per name.
    pub fn with_max_waiters(mut self, max_waiters: usize) -> Leases {
        self.max_waiters = max_waiters.max(1);
        self
    }

    /// The same, broken on purpose by `faults` (`tenure serve
    /// --test-fault`, for the safety checker's negative controls only).
    pub fn with_test_faults(mut self, faults: TestFaults) -> Leases {
        self.faults = faults;
        self
    }

    /// The TTL NATS stores a record of `ttl_s` with: the TTL granted, but
    /// for the test faults `late-expiry` and `early-expiry`.
    fn nats_ttl(&self, ttl_s: u64) -> Duration {
        // TEST FAULT late-expiry: NATS keeps the record 3 s longer than
        // the holder was told.
        if self.faults.contains(TestFault::LateExpiry) {
            return Duration::from_secs(ttl_s + 3);
        }
        // TEST FAULT early-expiry: NATS keeps it half as long (whole
        // seconds, at least 1).
        if self.faults.contains(TestFault::EarlyExpiry) {
            return Duration::from_secs((ttl_s / 2).max(1));
        }
        Duration::from_secs(ttl_s)
    }

    /// A grant as its holder is told of it: as written, but for the test
    /// fault `tokens-go-back`.
    fn reported(&self, mut holding: Holding) -> Holding {
        // TEST FAULT tokens-go-back: every third grant reports a token
        // 1,000 below the real one (at least 1).
        if self.faults.contains(TestFault::TokensGoBack)
            && self.grants.fetch_add(1, Ordering::Relaxed) % 3 == 2
        {
            holding.token = holding.token.saturating_sub(1000).max(1);
        }
        holding
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

    /// How many waiters are queued for a slot of semaphore `name` (0
    /// without fair waiting).
    pub async fn semaphore_waiting(&self, name: &str) -> Result<usize> {
        self.waiting(&keys::semaphore_queue(name)).await
    }

    /// The waiting election candidate of `name` with the highest
    /// preference, as the shared watcher's view shows it.
    pub fn preferred(&self, name: &str) -> Option<election::Candidate> {
        self.hub.preferred(name)
    }

    /// The last message of `name`'s lease record (or of a semaphore slot,
    /// by its key: [`keys::record_of`]), read from the stream leader
    /// (`None`: none), named by `name`.
    async fn read_lease(&self, name: &str) -> Result<Option<Entry>> {
        Ok(self
            .store
            .last(&keys::record_of(name))
            .await?
            .map(|msg| Entry {
                name: name.to_string(),
                ..Entry::from(msg)
            }))
    }

    /// The current holding of a name.
    pub async fn get(&self, name: &str) -> Result<Holding> {
        let last = self.read_lease(name).await?;
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
        // TEST FAULT (replay-repeats): the replay starts before `from`.
        let repeat = self.faults.contains(TestFault::ReplayRepeats);
        self.hub.resume(filter, kinds, from, repeat).await
    }
}

/// Wall-clock Unix milliseconds, for the record's informational times.
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
