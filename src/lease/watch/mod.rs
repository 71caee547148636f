//! The shared bucket watcher (the [`Hub`]): lease events fanned out from
//! one NATS consumer per process.
//!
//! Each Tenure process follows the whole bucket with a single NATS ordered
//! consumer, keeps a [`Mirror`](mirror::Mirror) of the current holding of every name, and
//! fans each change out in-process to every `WatchLease` stream and waiting
//! `Acquire` whose filter matches. NATS therefore serves one consumer per
//! replica, not one per watcher, however many clients watch.
//!
//! The watcher heals itself: when its consumer fails (missed heartbeats
//! after a NATS stall, the consumer deleted, a leader change), it follows
//! the bucket again from the last revision it applied, so open watches
//! resume without a gap. While it is away, [`Hub::healthy`] says so (the
//! server reports NOT_SERVING) and new watches are refused with
//! NATS_UNAVAILABLE instead of being served a stale snapshot.
//!
//! A new watch first reads the bucket's last revision from the stream leader
//! and the hub serves its snapshot only once the mirror has caught up to it,
//! so a watch started after a write always sees that write.
//!
//! A resumed watch (`start_revision` N) registers for live events like any
//! other, then replays the bucket's changes after N up to the hub's position
//! at registration from a short-lived consumer ([`resume`]), so the
//! replay and the live feed meet without a gap or an overlap.

mod lag;
mod mirror;
mod outbox;
mod queue_view;
mod resume;
mod slot_view;
mod task;

pub use outbox::WatchBudget;
pub use queue_view::{Candidate, Dormant, Released, Turn};
pub use slot_view::{SlotHint, Want};

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::config::WatcherHold;
use crate::error::{Error, Reason, Result};
use crate::lease::event::{Event, EventKind, Filter};
use crate::lease::record::Holding;
use crate::nats::{Start, Store};
use crate::observe::METRICS;
use outbox::Outbox;
use queue_view::QueueView;
use resume::{End, Proof, Replay};
use task::{run, HubState, Task};

/// Events buffered per watch before it counts as too slow and is ended.
pub const WATCH_BUFFER_EVENTS: usize = 1024;
/// The receiving end of a subscription: its snapshot (read lazily from a
/// clone of the mirror, so it copies nothing per watcher) or its replay,
/// then its queue of live events, then why it ended.
pub struct Subscription {
    /// What comes before the live events.
    prelude: Prelude,
    /// Live events in bucket order.
    queue: Arc<Outbox>,
    /// Live events at or below this revision were replayed (or seen by the
    /// client before it resumed) and are skipped.
    seam: u64,
}

/// What a subscription sends before its live events, then
/// `SnapshotComplete`.
enum Prelude {
    /// Nothing (a follow without a snapshot, or the prelude was sent).
    None,
    /// The current holdings.
    Snapshot(Snapshot),
    /// The changes after a revision.
    Replay(Box<Replay>),
}

/// A snapshot being read: the mirror as it was, and how far it was read.
struct Snapshot {
    /// The holdings as of the snapshot (an O(1) clone of the mirror's map).
    names: imbl::OrdMap<String, Arc<Holding>>,
    /// What the watch follows.
    filter: Filter,
    /// Whether `Current` events are wanted (the kinds filter allows them).
    wanted: bool,
    /// The last mirror key returned.
    after: Option<String>,
    /// Whether the plain leases are read and the semaphore holders (kept
    /// under their slot keys) are being read.
    holders: bool,
}

impl Snapshot {
    /// The next holding of the snapshot: the plain leases in name order,
    /// then the semaphore holders in (name, slot key) order.
    fn next(&mut self) -> Option<Arc<Holding>> {
        if !self.wanted {
            return None;
        }
        if !self.holders {
            if let Some(found) = self.next_lease() {
                return Some(found);
            }
            self.holders = true;
            self.after = None;
        }
        // Slot keys sort under the reserved prefix followed by the name.
        let start = crate::lease::keys::semaphore_prefix(match &self.filter {
            Filter::Name(name) => name.as_str(),
            Filter::Subtree(prefix) => prefix.as_str(),
        });
        let from = match &self.after {
            Some(after) => Bound::Excluded(after.clone()),
            None => Bound::Included(start.clone()),
        };
        let (key, found) = self
            .names
            .range((from, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(start.as_str()))
            .find(|(_, h)| h.slot > 0 && self.filter.matches(&h.name))
            .map(|(key, h)| (key.clone(), h.clone()))?;
        self.after = Some(key);
        Some(found)
    }

    /// The next plain lease of the snapshot, in name order.
    fn next_lease(&mut self) -> Option<Arc<Holding>> {
        let found = match &self.filter {
            Filter::Name(name) if self.after.is_none() => self.names.get(name).cloned(),
            Filter::Name(_) => None,
            Filter::Subtree(prefix) => {
                let start = match &self.after {
                    Some(after) => Bound::Excluded(after.clone()),
                    None => Bound::Included(prefix.clone()),
                };
                self.names
                    .range((start, Bound::Unbounded))
                    .take_while(|(name, _)| name.starts_with(prefix.as_str()))
                    .find(|(name, h)| h.slot == 0 && self.filter.matches(name))
                    .map(|(_, h)| h.clone())
            }
        }?;
        self.after = Some(found.name.clone());
        Some(found)
    }
}

impl Subscription {
    /// The next event; `Err` once the subscription has ended (shutdown, or
    /// a watch too slow to keep up).
    pub async fn next(&mut self) -> Result<Arc<Event>> {
        let next = match &mut self.prelude {
            Prelude::None => None,
            Prelude::Snapshot(snapshot) => Some(snapshot.next().map(|h| Event::current(&h))),
            Prelude::Replay(replay) => Some(replay.next().await?),
        };
        match next {
            Some(Some(event)) => return Ok(Arc::new(event)),
            Some(None) => {
                self.prelude = Prelude::None;
                // The revision the prelude is complete up to: a later watch
                // resumed from it misses nothing and repeats nothing.
                return Ok(Arc::new(Event {
                    revision: self.seam,
                    ..Event::snapshot_complete()
                }));
            }
            None => {}
        }
        loop {
            let event = self.queue.pop().await?;
            if event.revision > self.seam {
                return Ok(event);
            }
        }
    }

    /// Keeps `guard` (e.g. the watch's slot in a limit) until the
    /// subscription ends: when the hub ends it (it fell behind, shutdown),
    /// the guard is released at once, before the client reads the end.
    pub fn hold(&self, guard: impl Send + 'static) {
        self.queue.hold(Box::new(guard));
    }

    /// Turns the subscription into a stream that ends after its first error.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<Arc<Event>>> + Send {
        futures::stream::unfold(Some(self), |state| async move {
            let mut sub = state?;
            match sub.next().await {
                Ok(event) => Some((Ok(event), Some(sub))),
                Err(err) => Some((Err(err), None)),
            }
        })
    }
}

/// What the hub tells a resume when it registers it.
struct Registered {
    /// The live subscription, without a prelude yet.
    subscription: Subscription,
    /// The hub's position at registration: later changes are live events.
    at: u64,
    /// A lower bound on the time of every message after the resumed
    /// revision (see [`Checkpoints::after`](resume::Checkpoints::after)).
    since_ms: Option<u64>,
    /// The oldest revision a resume could start from (for the refusal).
    oldest: Option<u64>,
    /// How the hub saw holdings end, for classifying replayed ends.
    ends: imbl::OrdMap<String, End>,
}

/// Who waits for a subscription the mirror must catch up for.
enum Waiter {
    /// A watch with a snapshot.
    Snapshot(oneshot::Sender<Result<Subscription>>),
    /// A resume after revision `from`.
    Resume {
        /// The revision resumed after.
        from: u64,
        /// Messages stored at or before this leader time cannot prove a
        /// resume (`None`: the leader's clock is unknown).
        cutoff_ms: Option<u64>,
        /// Confirms registration, or says why not.
        reply: oneshot::Sender<Result<Registered>>,
    },
}

/// A request to the hub task.
enum Command {
    /// Follow `filter`; with `snapshot`, first send the current holdings and
    /// `SnapshotComplete` once the mirror has reached `position`.
    Subscribe {
        /// What to follow.
        filter: Filter,
        /// Which kinds to deliver (empty: all).
        kinds: Vec<EventKind>,
        /// Whether to send a snapshot first.
        snapshot: bool,
        /// The bucket revision the snapshot must include.
        position: u64,
        /// Confirms registration with the receiving end, or says why not.
        reply: oneshot::Sender<Result<Subscription>>,
    },
    /// Follow `filter` live once the mirror has reached `position`, and
    /// say where the hub is, for a resume.
    Resume {
        /// What to follow.
        filter: Filter,
        /// Which kinds to deliver (empty: all).
        kinds: Vec<EventKind>,
        /// The bucket revision the hub must have reached.
        position: u64,
        /// The resume's details and reply.
        waiter: Waiter,
    },
}

/// The handle on a process's shared bucket watcher. Cheap to clone.
#[derive(Clone)]
pub struct Hub {
    /// Commands to the hub task.
    commands: mpsc::UnboundedSender<Command>,
    /// The bucket, for reading its position.
    store: Store,
    /// Whether the hub is following the bucket right now.
    healthy: watch::Receiver<bool>,
    /// The queues as the hub has seen them.
    view: Arc<QueueView>,
}

impl Hub {
    /// Starts the hub task over `store`, with the watch queues bounded by
    /// `budget`; it runs until `shutdown`. With `idle_after`, the hub
    /// follows the bucket only while something needs it: from the first
    /// subscription until it has had none for that long. Without it, it
    /// follows the bucket from now on.
    /// `hold` is a test's [`WatcherHold`] on this hub (`None` in production).
    pub async fn start(
        store: Store,
        budget: Arc<WatchBudget>,
        idle_after: Option<Duration>,
        shutdown: CancellationToken,
        hold: Option<&WatcherHold>,
    ) -> Result<Hub> {
        let follow = match idle_after {
            None => Some(store.follow(">", Start::Snapshot).await?),
            Some(_) => None,
        };
        if follow.is_some() {
            METRICS.watcher_following.inc();
        }
        let (commands, rx) = mpsc::unbounded_channel();
        let (healthy_tx, healthy) = watch::channel(true);
        let mut state = HubState::new(budget);
        state.set_marker_ttl(store.marker_ttl());
        let view = state.view.clone();
        let task = Task {
            store: store.clone(),
            commands: rx,
            shutdown,
            healthy: healthy_tx,
            idle_after,
            held: hold.map(lag::Held::new),
        };
        tokio::spawn(run(task, follow, state));
        Ok(Hub {
            commands,
            store,
            healthy,
            view,
        })
    }

    /// Whether the waiter of `name` whose ticket has `place` and was last
    /// written at `revision` is the head of its queue, as far as this
    /// hub has seen ([`QueueView`]).
    pub fn turn(&self, name: &str, place: u64, revision: u64) -> Turn {
        self.view.turn(name, place, revision)
    }

    /// Registers this replica's waiter of queue `name` with the ticket of
    /// `place` as asleep behind another ticket ([`QueueView::dormant`]).
    pub fn dormant(&self, name: &str, place: u64) -> Dormant {
        self.view.dormant(name, place)
    }

    /// Which slot the head of semaphore `name`'s queue should try
    /// ([`QueueView::free_slot`]).
    pub fn free_slot(&self, name: &str, want: Want<'_>) -> SlotHint {
        self.view.free_slot(name, want)
    }

    /// The revision of `name`'s release, when that is the last lease
    /// message this hub saw and the name has waiters, with the last
    /// revision of the name's line ([`QueueView::released_at`]).
    pub fn released_at(&self, name: &str) -> Option<Released> {
        self.view.released_at(name)
    }

    /// [`Hub::released_at`] once this hub has applied a message of the
    /// name's line after `after` ([`QueueView::released_after`]).
    pub async fn released_after(
        &self,
        name: &str,
        after: u64,
        patience: std::time::Duration,
    ) -> Option<Released> {
        self.view.released_after(name, after, patience).await
    }

    /// Whether this hub has seen a live ticket in `name`'s queue (false
    /// also when it does not follow the bucket).
    pub fn queued(&self, name: &str) -> bool {
        self.view.waiting(name) > 0
    }

    /// How many waiters this hub has seen queued for `name` (0 also when
    /// it does not follow the bucket).
    pub fn waiting(&self, name: &str) -> usize {
        self.view.waiting(name)
    }

    /// The waiting election candidate of `name` with the highest
    /// preference ([`QueueView::preferred`]).
    pub fn preferred(&self, name: &str) -> Option<Candidate> {
        self.view.preferred(name)
    }

    /// `name`'s queue as this hub has seen it ([`QueueView::queue`]).
    pub fn queue(&self, name: &str) -> Option<crate::lease::fifo::Queue> {
        self.view.queue(name)
    }

    /// `name`'s queue once this hub has seen a message of it after
    /// `after` ([`QueueView::queue_after`]).
    pub async fn queue_after(
        &self,
        name: &str,
        after: u64,
        patience: std::time::Duration,
    ) -> Option<crate::lease::fifo::Queue> {
        self.view.queue_after(name, after, patience).await
    }

    /// Whether the hub follows the bucket (false while it resubscribes
    /// after a failure); changes are signalled on the receiver.
    pub fn healthy(&self) -> watch::Receiver<bool> {
        self.healthy.clone()
    }

    /// Follows `filter` with a snapshot first: the current holdings (as of
    /// no earlier than this call), `SnapshotComplete`, then live events.
    pub async fn watch(&self, filter: Filter, kinds: Vec<EventKind>) -> Result<Subscription> {
        let position = self.store.last_revision().await?;
        self.subscribe(filter, kinds, true, position).await
    }

    /// Follows `filter` from after revision `from`: the changes the bucket
    /// still holds after it (the last of each name), `SnapshotComplete`,
    /// then live events. Refused with WATCH_HISTORY_COMPACTED when the
    /// bucket cannot prove it still holds every change after `from`, and
    /// with INVALID_ARGUMENT when `from` is beyond the bucket's last
    /// revision.
    /// `repeat` is the test fault `replay-repeats` (false in production).
    pub async fn resume(
        &self,
        filter: Filter,
        kinds: Vec<EventKind>,
        from: u64,
        repeat: bool,
    ) -> Result<Subscription> {
        let position = self.store.position().await?;
        if from > position.last_revision {
            return Err(Error::new(
                Reason::InvalidArgument,
                format!(
                    "start_revision {from} is beyond the bucket's last revision {}; resume from a revision \
                     this watch delivered, or 0 for a fresh snapshot",
                    position.last_revision
                ),
            )
            .with("field", "start_revision")
            .with("last_revision", position.last_revision));
        }
        let (reply, confirmed) = oneshot::channel();
        self.commands
            .send(Command::Resume {
                filter: filter.clone(),
                kinds: kinds.clone(),
                position: position.last_revision,
                waiter: Waiter::Resume {
                    from,
                    cutoff_ms: position
                        .now_ms
                        .map(|now| Proof::cutoff_ms(now, position.marker_ttl)),
                    reply,
                },
            })
            .map_err(|_| shutting_down())?;
        let Registered {
            mut subscription,
            at,
            mut since_ms,
            oldest,
            ends,
        } = confirmed.await.map_err(|_| shutting_down())??;
        // The hub saw no message at or before `from` (it started after
        // they were overwritten): message `from` itself, or else `from + 1`,
        // bounds the later ones if it is still there.
        for revision in [from, from + 1] {
            if since_ms.is_some() || revision > position.last_revision {
                break;
            }
            since_ms = self.store.time_at(revision).await?;
        }
        let proof = Proof {
            from,
            since_ms,
            now_ms: position.now_ms,
            marker_ttl: position.marker_ttl,
            oldest,
        };
        // Dropping the subscription on refusal unregisters it.
        let deadline = Instant::now() + proof.check()?;
        // TEST FAULT (replay-repeats): read and deliver from before `from`.
        let start = match repeat {
            true => from.saturating_sub(crate::config::REPLAY_REPEATS),
            false => from,
        };
        let follow = if at > from {
            let subjects = resume::subjects(&filter);
            let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
            Some(self.store.replay(&subjects, start).await?)
        } else {
            None
        };
        let mut replay = Replay::new(follow, at, filter, kinds, ends, deadline, proof);
        if repeat {
            replay.repeat_from(start);
        }
        subscription.prelude = Prelude::Replay(Box::new(replay));
        subscription.seam = at.max(from);
        Ok(subscription)
    }

    /// Follows `filter` without a snapshot, keeping only `kinds` (empty:
    /// all). Every change written after this returns is delivered.
    pub async fn follow(&self, filter: Filter, kinds: Vec<EventKind>) -> Result<Subscription> {
        self.subscribe(filter, kinds, false, 0).await
    }

    /// Registers a subscription and waits for the hub to confirm it.
    async fn subscribe(
        &self,
        filter: Filter,
        kinds: Vec<EventKind>,
        snapshot: bool,
        position: u64,
    ) -> Result<Subscription> {
        let (reply, confirmed) = oneshot::channel();
        self.commands
            .send(Command::Subscribe {
                filter,
                kinds,
                snapshot,
                position,
                reply,
            })
            .map_err(|_| shutting_down())?;
        confirmed.await.map_err(|_| shutting_down())?
    }
}

/// SHUTTING_DOWN for a watch the hub can no longer take.
fn shutting_down() -> Error {
    Error::new(
        Reason::ShuttingDown,
        "the server is shutting down; watch again on another replica",
    )
}
