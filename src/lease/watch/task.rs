//! The hub's task: the one loop that follows the bucket and owns the
//! hub's state (the mirror, the queue view, the subscribers and their event
//! queues, the subscriptions waiting for the mirror to catch up, what a
//! resume needs), fed by the [`Hub`](super::Hub) handle's commands.
//!
//! It applies every bucket message in revision order, fans the events out
//! to the subscribers whose filters match, ends a subscriber that falls
//! behind its bounds at once, follows the bucket again after a failure from
//! the last revision it applied, and goes idle when nothing needs it.
//!
//! Idle, it keeps what it learned and follows nothing. Woken within the
//! marker TTL, it catches up from the revision it stopped at (each key's
//! messages since, as after a failure) instead of loading the whole bucket
//! again: the bucket keeps one message per key, and a marker stays the
//! marker TTL, so nothing that changed while it was idle is missed. Idle
//! longer, it forgets everything and loads afresh on waking.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use tokio_util::sync::CancellationToken;

use super::lag::Held;
use super::mirror::Mirror;
use super::outbox::{Outbox, Refused, WatchBudget};
use super::queue_view::QueueView;
use super::resume::{self, Checkpoints, End};
use crate::error::{Error, Reason};
use crate::lease::event::{Event, EventKind, Filter};
use crate::lease::record::{Entry, Kind};
use crate::nats::{Follow, Message, Op, Start, Store};
use crate::observe::METRICS;

use super::{Command, Prelude, Registered, Snapshot, Subscription, Waiter};

/// First pause before following the bucket again after the watch failed;
/// it doubles up to [`RESUBSCRIBE_MAX`].
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(100);
/// Longest pause between attempts to follow the bucket again.
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);
/// How long a snapshot waits for the mirror to reach the bucket's position
/// before it is served from what the mirror has (a newest message that
/// expired before the hub saw it would otherwise never arrive).
const SNAPSHOT_CATCH_UP: Duration = Duration::from_millis(500);
/// How often the hub prunes its resume state and abandoned subscribers (and
/// checks whether it is idle: more often with a short idle timeout).
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// One registered subscriber.
struct Subscriber {
    /// What it follows.
    filter: Filter,
    /// Which kinds it wants (empty: all).
    kinds: Vec<EventKind>,
    /// Its queue, shared with its stream.
    queue: Arc<Outbox>,
}

impl Subscriber {
    /// Whether it wants events of `kind`. `Missed` goes to every
    /// subscription that follows changes (any kind but the snapshot's): a
    /// watch says when it is incomplete, and a waiter learns the name may be
    /// free.
    fn wants(&self, kind: EventKind) -> bool {
        (self.kinds.is_empty() && !kind.is_internal())
            || self.kinds.contains(&kind)
            || (kind == EventKind::Missed
                && self
                    .kinds
                    .iter()
                    .any(|k| !matches!(k, EventKind::Current | EventKind::SnapshotComplete)))
    }

    /// Whether its stream is gone (only the hub holds the queue).
    fn abandoned(&self) -> bool {
        Arc::strong_count(&self.queue) == 1
    }
}

/// A snapshot waiting for the mirror to catch up.
struct Pending {
    /// The bucket revision the snapshot must include.
    position: u64,
    /// When to serve it regardless.
    deadline: Instant,
    /// What to follow.
    filter: Filter,
    /// Which kinds to deliver (empty: all).
    kinds: Vec<EventKind>,
    /// Who waits, and for what.
    waiter: Waiter,
}

/// The hub's state: the mirror and the subscribers.
pub(super) struct HubState {
    /// The bounds of the watch queues.
    budget: Arc<WatchBudget>,
    /// The bucket's current holdings and how each free name got free.
    mirror: Mirror,
    /// Subscribers by id.
    subscribers: HashMap<u64, Subscriber>,
    /// Ids of single-name subscribers by name.
    by_name: HashMap<String, Vec<u64>>,
    /// Ids of subtree subscribers by prefix ("" for everything).
    by_prefix: HashMap<String, Vec<u64>>,
    /// The next subscriber id.
    next_id: u64,
    /// Snapshots and resumes waiting for the mirror.
    pending: Vec<Pending>,
    /// Followers registered while the mirror was loading (it produces no
    /// events then), each with whether the load has applied a message of
    /// its name since: those are woken once when it goes live
    /// ([`HubState::wake_loaded`]).
    loading: HashMap<u64, bool>,
    /// Lower bounds on message times, for proving resumes.
    checkpoints: Checkpoints,
    /// How the hub saw each recently ended holding end, by name.
    ends: imbl::OrdMap<String, End>,
    /// The newest message time seen, Unix milliseconds.
    newest_ms: u64,
    /// How long markers stay in the bucket (what `checkpoints` and `ends`
    /// must cover).
    pub(super) marker_ttl: Duration,
    /// The live tickets of every queue, shared with waiting Acquires.
    pub(super) view: Arc<QueueView>,
    /// Names whose queue lost a live ticket since the hub last caught up:
    /// their waiters are told ([`EventKind::Turn`]) once it has, if the
    /// name is still free (a grant's batch removes the head's ticket just
    /// before it writes the lease: no turn then).
    turns: HashSet<String>,
    /// Names whose preferred election candidate changed since the hub last
    /// caught up: their observers are told ([`EventKind::Candidate`]) once
    /// it has.
    candidates: HashSet<String>,
}

/// What the hub task runs with.
pub(super) struct Task {
    /// The bucket.
    pub(super) store: Store,
    /// Commands from [`Hub`](super::Hub) handles.
    pub(super) commands: mpsc::UnboundedReceiver<Command>,
    /// Ends the task.
    pub(super) shutdown: CancellationToken,
    /// Whether the hub can serve new watches (false while it resubscribes
    /// after a failure; true while idle).
    pub(super) healthy: watch::Sender<bool>,
    /// Stop following the bucket after this long without subscribers and
    /// pending snapshots (`None`: never).
    pub(super) idle_after: Option<Duration>,
    /// Test-only: what a held watcher received and has not applied yet.
    pub(super) held: Option<Held>,
}

/// The hub task: applies bucket messages to the mirror and fans them out;
/// follows the bucket again from the mirror's position when the consumer
/// fails; when idle (see [`Hub::start`](super::Hub::start)) follows nothing, and starts
/// again on the next command: from where it stopped while the marker TTL
/// vouches for what it kept, else with a fresh initial load (and once idle
/// that long, it drops what it kept).
pub(super) async fn run(task: Task, follow: Option<Follow>, mut state: HubState) {
    let Task {
        store,
        mut commands,
        shutdown,
        healthy,
        idle_after,
        mut held,
    } = task;
    let mut hold_limit = held.as_ref().map(Held::limit);
    let mut let_through = false;
    if follow.as_ref().is_some_and(|f| f.initially_pending == 0) {
        state.mirror.live = true;
    }
    // Whether the hub should be following the bucket (false: idle).
    let mut active = follow.is_some();
    // Since when it has had nothing to serve.
    let mut idle_since: Option<Instant> = None;
    // Whether the hub is starting from idle (accepting snapshots that wait
    // for its initial load) and has not failed since.
    let mut waking = false;
    let mut follow = follow;
    let mut retry = Instant::now();
    // Since when the bucket has not been followed after a failure.
    let mut interrupted: Option<Instant> = None;
    // Since when it has been idle with what it learned kept.
    let mut idled: Option<Instant> = None;
    let mut backoff = RESUBSCRIBE_MIN;
    let sweep_every = idle_after.map_or(SWEEP_EVERY, |d| {
        (d / 2).clamp(Duration::from_millis(50), SWEEP_EVERY)
    });
    let mut sweep = tokio::time::interval(sweep_every);
    // The bucket's writes as published, heard only while followers wait
    // for the load (see `HubState::wake_changed`).
    let mut changes: Option<futures::stream::BoxStream<'static, (String, Op)>> = None;
    // Whether this load has tried to hear them (once per load).
    let mut tried_changes = false;
    loop {
        state.wake_loaded();
        if !state.hears_changes() {
            changes = None;
            tried_changes = false;
        } else if !std::mem::replace(&mut tried_changes, true) {
            match store.changes().await {
                Ok(heard) => changes = Some(heard.boxed()),
                // Not heard: the wake at the end of the load remains.
                Err(err) => {
                    tracing::debug!(%err, "not hearing the bucket's writes during the load")
                }
            }
        }
        if std::mem::take(&mut let_through) {
            for (message, pending) in held.as_mut().map(Held::ready).unwrap_or_default() {
                state.apply_message(message, pending);
            }
        }
        // Snapshots are served early only from a live mirror.
        let next_deadline = match state.mirror.live {
            true => state.pending.iter().map(|p| p.deadline).min(),
            false => None,
        };
        let following = follow.is_some();
        let message = async {
            match follow.as_mut() {
                Some(f) => f.messages.next().await,
                None => std::future::pending().await,
            }
        };
        let hold_moved = async {
            match hold_limit.as_mut() {
                Some(limit) => {
                    if limit.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = hold_moved => let_through = true,
            key = async {
                match changes.as_mut() {
                    Some(c) => c.next().await,
                    None => std::future::pending().await,
                }
            } => match key {
                Some((key, op)) => state.wake_changed(&key, &op),
                None => changes = None,
            },
            command = commands.recv() => match command {
                Some(command) => {
                    if !active {
                        // Wake: catch up from where it stopped, or a fresh
                        // initial load, as at start.
                        active = true;
                        waking = true;
                        match idled.take() {
                            Some(at) if !state.beyond_markers(at.elapsed()) => state.catch_up(),
                            _ => state.reset(),
                        }
                        retry = Instant::now();
                        backoff = RESUBSCRIBE_MIN;
                        METRICS.watcher_following.inc();
                        tracing::debug!("shared bucket watch starting: it has a subscriber");
                    }
                    idle_since = None;
                    state.command(command, following || waking);
                }
                None => break,
            },
            message = message => match message {
                Some(Ok((message, pending))) => match held.as_mut() {
                    None => state.apply_message(message, pending),
                    Some(held) => {
                        for (message, pending) in held.admit(message, pending) {
                            state.apply_message(message, pending);
                        }
                    }
                },
                failed => {
                    let why = match failed {
                        Some(Err(err)) => err.message,
                        _ => "the consumer ended".into(),
                    };
                    tracing::warn!(position = state.mirror.position, "shared bucket watch interrupted ({why}); following the bucket again from its last revision");
                    follow = None;
                    healthy.send_replace(false);
                    retry = Instant::now();
                    interrupted.get_or_insert(retry);
                    backoff = RESUBSCRIBE_MIN;
                    if waking {
                        waking = false;
                        state.refuse_pending();
                    }
                }
            },
            _ = tokio::time::sleep_until(retry), if !following && active => {
                // A mirror that has applied nothing starts with the last
                // message of each name; one that has, from after its position.
                let start = match state.mirror.position {
                    0 => Start::Snapshot,
                    position => Start::After(position),
                };
                match store.follow(">", start).await {
                    Ok(resumed) => {
                        if resumed.initially_pending == 0 && !state.mirror.live {
                            state.mirror.live = true;
                        }
                        tracing::info!(position = state.mirror.position, "shared bucket watch following");
                        if let Some(since) = interrupted.take() {
                            if state.mirror.live && state.beyond_markers(since.elapsed()) {
                                let why = format!("it followed nothing for {} ms", since.elapsed().as_millis());
                                state.fell_behind(&why);
                            }
                        }
                        follow = Some(resumed);
                        healthy.send_replace(true);
                        state.serve_pending(false);
                    }
                    Err(err) => {
                        tracing::debug!(%err, ?backoff, "shared bucket watch not resumed yet");
                        retry = Instant::now() + backoff;
                        backoff = (backoff * 2).min(RESUBSCRIBE_MAX);
                        if waking {
                            waking = false;
                            state.refuse_pending();
                        }
                    }
                }
            }
            _ = async { match next_deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                state.serve_pending(true);
            }
            _ = sweep.tick() => {
                state.sweep();
                if idled.is_some_and(|at| state.beyond_markers(at.elapsed())) {
                    // Too old to catch up from: free it.
                    idled = None;
                    state.reset();
                }
                let Some(after) = idle_after else { continue };
                if !active || !state.subscribers.is_empty() || !state.pending.is_empty() {
                    idle_since = None;
                    continue;
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= after {
                    // Nothing needs the bucket followed: stop, keeping
                    // what it learned to catch up from.
                    follow = None;
                    active = false;
                    waking = false;
                    idle_since = None;
                    idled = Some(Instant::now());
                    healthy.send_replace(true);
                    METRICS.watcher_following.dec();
                    tracing::debug!(?after, "shared bucket watch stopped: no subscriber");
                }
            }
        }
    }
    let end = Error::new(
        Reason::ShuttingDown,
        "the server is shutting down; watch again on another replica",
    );
    for (_, subscriber) in state.subscribers.drain() {
        subscriber.queue.end(end.clone());
    }
}

/// What wakes a follower (only waiters follow; a client never sees it): a
/// `Missed` of `name`, which no follower filters out, after every revision
/// (a follow registered during the load has the position of its
/// registration as its seam, and only later events pass).
fn wake(name: &str) -> Arc<Event> {
    Arc::new(Event {
        kind: EventKind::Missed,
        name: name.to_string(),
        revision: u64::MAX,
        ..Event::snapshot_complete()
    })
}

impl HubState {
    /// No subscribers yet; queues bounded by `budget`.
    pub(super) fn new(budget: Arc<WatchBudget>) -> HubState {
        HubState {
            budget,
            mirror: Mirror::default(),
            subscribers: HashMap::new(),
            by_name: HashMap::new(),
            by_prefix: HashMap::new(),
            next_id: 0,
            pending: Vec::new(),
            loading: HashMap::new(),
            checkpoints: Checkpoints::default(),
            ends: imbl::OrdMap::new(),
            newest_ms: 0,
            marker_ttl: Duration::ZERO,
            view: Arc::default(),
            turns: HashSet::new(),
            candidates: HashSet::new(),
        }
    }

    /// Sets the bucket's marker TTL (what resumes and the mirror's memory
    /// of free keys are bounded by), on a hub that has applied nothing.
    pub(super) fn set_marker_ttl(&mut self, ttl: Duration) {
        self.marker_ttl = ttl;
        self.mirror = self.fresh_mirror();
    }

    /// Whether a watcher this far behind the bucket (or following nothing
    /// this long) may have missed markers that NATS has since removed: a
    /// marker is the one message that leaves the bucket without a
    /// successor, so no later message would reveal it.
    pub(super) fn beyond_markers(&self, behind: Duration) -> bool {
        !self.marker_ttl.is_zero() && behind + resume::CLOCK_MARGIN > self.marker_ttl
    }

    /// Ends every subscription: the watcher fell so far behind that a
    /// change may be gone without a trace, and a watch must never miss one
    /// silently. Watches start again from a snapshot; waiters poll.
    pub(super) fn fell_behind(&mut self, why: &str) {
        if self.subscribers.is_empty() {
            return;
        }
        tracing::warn!(
            subscribers = self.subscribers.len(),
            "shared bucket watch fell behind by more than the marker TTL ({why}); ending every watch on this replica"
        );
        let end = Error::new(
            Reason::WatchLagged,
            format!(
                "this replica's bucket watcher fell more than the marker TTL ({} s) behind the bucket, \
                 so a change may be gone without a trace; watch again",
                self.marker_ttl.as_secs()
            ),
        );
        for (_, subscriber) in self.subscribers.drain() {
            subscriber.queue.end(end.clone());
        }
        self.by_name.clear();
        self.by_prefix.clear();
    }

    /// An empty mirror that forgets a free key's last revision once NATS
    /// has removed its end message and that message's marker (twice the
    /// marker TTL).
    fn fresh_mirror(&self) -> Mirror {
        let mut mirror = Mirror::default();
        if !self.marker_ttl.is_zero() {
            mirror.forget_ended_after_ms = Some(2 * self.marker_ttl.as_millis() as u64);
        }
        mirror
    }

    /// Readies a state kept while idle to catch up from its position: the
    /// mirror is not live (snapshots wait for it, waiters read from the
    /// stream leader and are woken by the writes as published) until the
    /// messages written since are applied, as in an initial load; the
    /// queue view keeps its tickets but answers nothing until then. What a
    /// resume needs is forgotten as in [`HubState::reset`]: the idle period
    /// left a hole in it.
    fn catch_up(&mut self) {
        self.mirror.live = false;
        self.view.set_position(0, false);
        self.forget_resume_state();
    }

    /// Forgets everything learned from the bucket (the mirror, checkpoints,
    /// ends), for a fresh initial load; subscribers stay.
    fn reset(&mut self) {
        self.mirror = self.fresh_mirror();
        self.newest_ms = 0;
        self.view.clear();
        self.forget_resume_state();
    }

    /// Forgets what a resume needs (checkpoints, recent ends) and the turns
    /// and candidates not yet told.
    fn forget_resume_state(&mut self) {
        self.checkpoints = Checkpoints::default();
        self.ends = imbl::OrdMap::new();
        self.turns.clear();
        self.candidates.clear();
    }

    /// Whether followers wait for the load to end: the hub then listens to
    /// the bucket's writes as they are published, to wake them early
    /// ([`HubState::wake_changed`]).
    pub(super) fn hears_changes(&self) -> bool {
        !self.mirror.live && !self.loading.is_empty()
    }

    /// Wakes the followers registered during the load whose name a write
    /// `op` of `key` concerns, when it removes something (a release, a
    /// revoke, a ticket leaving: only a removal can free what a waiter
    /// waits for; a ticket's removal also hands the next waiter its turn),
    /// heard as it was published (not yet from the stream; one wake queued at a time, a waiter not yet woken needs no
    /// second): their waiters try again, reading from the stream leader as
    /// they do while the view is not live. A hint only (it may arrive
    /// before the stream stored the write, and expiries are never heard):
    /// the wake at the end of the load ([`HubState::wake_loaded`]) stays
    /// the guarantee.
    pub(super) fn wake_changed(&mut self, key: &str, op: &Op) {
        if self.mirror.live || matches!(op, Op::Put(_)) {
            return;
        }
        let Some(name) = crate::lease::keys::waited_name(key) else {
            return;
        };
        // Load follows are of one name each (waiters follow their name).
        let woken: Vec<u64> = self
            .by_name
            .get(name)
            .into_iter()
            .flatten()
            .copied()
            .filter(|id| {
                self.loading.contains_key(id)
                    && self
                        .subscribers
                        .get(id)
                        .is_some_and(|s| s.queue.bytes() == 0)
            })
            .collect();
        let wake = wake(name);
        for id in woken {
            self.deliver(id, &wake);
        }
    }

    /// Notes, during the load, that it applied a message of `key`: the
    /// followers of the name it concerns may have missed a change.
    fn note_loaded(&mut self, key: &str) {
        if self.mirror.live || self.loading.is_empty() {
            return;
        }
        let Some(name) = crate::lease::keys::waited_name(key) else {
            return;
        };
        for id in self.by_name.get(name).into_iter().flatten() {
            if let Some(touched) = self.loading.get_mut(id) {
                *touched = true;
            }
        }
    }

    /// Wakes the followers registered during the load whose name had a
    /// message applied after they registered, once the mirror is live: a
    /// [`wake`], for the ends they could not be told of while the mirror
    /// loaded (it produces no events then); their waiters try again. The
    /// others need none: a waiter tries after it follows, reading the
    /// leader, so a change applied before it followed was already in that
    /// read, and one after the load ends is an event. (Waking them all
    /// made 30 waiting groups try again at once for nothing.)
    pub(super) fn wake_loaded(&mut self) {
        if !self.mirror.live || self.loading.is_empty() {
            return;
        }
        for (id, touched) in std::mem::take(&mut self.loading) {
            let Some(s) = self.subscribers.get(&id) else {
                continue;
            };
            if !touched && matches!(s.filter, Filter::Name(_)) {
                continue;
            }
            let wake = match &s.filter {
                Filter::Name(n) | Filter::Subtree(n) => wake(n),
            };
            self.deliver(id, &wake);
        }
    }

    /// Refuses every pending snapshot and resume, and ends every follow
    /// made during the load: the hub could not start following the bucket.
    fn refuse_pending(&mut self) {
        let refused = || {
            Error::new(
                Reason::NatsUnavailable,
                "this replica could not follow its bucket; watch again shortly",
            )
        };
        for id in std::mem::take(&mut self.loading).into_keys() {
            // A waiter whose follow ends polls instead.
            if let Some(s) = self.subscribers.get(&id) {
                s.queue.end(refused());
            }
            self.remove(id);
        }
        for p in std::mem::take(&mut self.pending) {
            match p.waiter {
                Waiter::Snapshot(reply) => drop(reply.send(Err(refused()))),
                Waiter::Resume { reply, .. } => drop(reply.send(Err(refused()))),
            }
        }
    }

    /// Handles a command; `following` says whether the bucket is being
    /// followed right now, or is about to be (snapshots are refused while
    /// it is not).
    fn command(&mut self, command: Command, following: bool) {
        let (filter, kinds, position, waiter) = match command {
            Command::Subscribe {
                filter,
                kinds,
                snapshot: false,
                reply,
                ..
            } if self.mirror.live || !following => {
                let (_, subscription) = self.register(filter, kinds, false);
                let _ = reply.send(Ok(subscription));
                return;
            }
            Command::Subscribe {
                filter,
                kinds,
                snapshot: false,
                reply,
                ..
            } => {
                // Loading: confirmed at once (a waiter does not wait for the
                // load, nor poll meanwhile), and woken once it is live, for
                // whatever ended during the load.
                let (id, subscription) = self.register(filter, kinds, false);
                self.loading.insert(id, false);
                let _ = reply.send(Ok(subscription));
                return;
            }
            Command::Subscribe {
                filter,
                kinds,
                position,
                reply,
                ..
            } => (filter, kinds, position, Waiter::Snapshot(reply)),
            Command::Resume {
                filter,
                kinds,
                position,
                waiter,
            } => (filter, kinds, position, waiter),
        };
        if !following {
            let refused = Error::new(
                Reason::NatsUnavailable,
                "this replica is reconnecting its bucket watch; watch again shortly",
            );
            match waiter {
                Waiter::Snapshot(reply) => drop(reply.send(Err(refused))),
                Waiter::Resume { reply, .. } => drop(reply.send(Err(refused))),
            }
            return;
        }
        self.pending.push(Pending {
            position,
            deadline: Instant::now() + SNAPSHOT_CATCH_UP,
            filter,
            kinds,
            waiter,
        });
        self.serve_pending(false);
    }

    /// Serves the snapshots the mirror has caught up to (all due ones with
    /// `force`): current holdings, then `SnapshotComplete`.
    fn serve_pending(&mut self, force: bool) {
        let now = Instant::now();
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| {
                self.mirror.live
                    && (self.mirror.position >= p.position || (force && p.deadline <= now))
            });
        self.pending = waiting;
        for p in ready {
            match p.waiter {
                Waiter::Snapshot(reply) => {
                    let (_, subscription) = self.register(p.filter, p.kinds, true);
                    let _ = reply.send(Ok(subscription));
                }
                Waiter::Resume { reply, .. } if !self.mirror.live => {
                    // Still loading: events before the load ends are not
                    // produced, so a resume registered now could have a gap.
                    let _ = reply.send(Err(Error::new(
                        Reason::NatsUnavailable,
                        "this replica is still loading the bucket; watch again shortly",
                    )));
                }
                Waiter::Resume {
                    from,
                    cutoff_ms,
                    reply,
                } => {
                    let (_, subscription) = self.register(p.filter, p.kinds, false);
                    let _ = reply.send(Ok(Registered {
                        subscription,
                        at: self.mirror.position,
                        since_ms: self.checkpoints.after(from),
                        oldest: cutoff_ms.and_then(|c| self.checkpoints.oldest_after(c)),
                        ends: self.ends.clone(),
                    }));
                }
            }
        }
    }

    /// Adds a subscriber to the indexes; with `snapshot`, its subscription
    /// first reads the mirror as it is now. Returns its id and subscription.
    fn register(
        &mut self,
        filter: Filter,
        kinds: Vec<EventKind>,
        snapshot: bool,
    ) -> (u64, Subscription) {
        let queue = Outbox::new(self.budget.clone());
        let subscriber = Subscriber {
            filter: filter.clone(),
            kinds,
            queue: queue.clone(),
        };
        let prelude = match snapshot {
            true => Prelude::Snapshot(Snapshot {
                names: self.mirror.names.clone(),
                wanted: subscriber.wants(EventKind::Current),
                filter,
                after: None,
                holders: false,
            }),
            false => Prelude::None,
        };
        let id = self.next_id;
        self.next_id += 1;
        match &subscriber.filter {
            Filter::Name(n) => self.by_name.entry(n.clone()).or_default().push(id),
            Filter::Subtree(p) => self.by_prefix.entry(p.clone()).or_default().push(id),
        }
        self.subscribers.insert(id, subscriber);
        let subscription = Subscription {
            prelude,
            queue,
            // A snapshot is the mirror at its position; every live event
            // queued from now on is later (a resume sets its own seam).
            seam: self.mirror.position,
        };
        (id, subscription)
    }

    /// Applies one bucket message: to the queue view, then as a lease
    /// message.
    fn apply_message(&mut self, message: Message, pending: u64) {
        // Kept as the watcher keys it: a lease record under its name.
        let message = Message {
            name: crate::lease::keys::watched_as(&message.name).to_string(),
            ..message
        };
        let applied = self
            .view
            .apply(&message.name, message.revision, &message.op);
        if let Some(semaphore) = crate::lease::keys::parse_semaphore_definition(&message.name) {
            let limit = match &message.op {
                Op::Put(payload) => crate::lease::semaphore::defined_limit(payload),
                _ => None,
            };
            self.view
                .apply_definition(semaphore, message.revision, limit);
        }
        if let Some(name) = applied.left {
            self.turns.insert(name);
        }
        if let Some(name) = applied.candidates {
            self.candidates.insert(name);
        }
        let replaced = message.replaced;
        self.apply(Entry::from(message), replaced, pending);
    }

    /// Applies one bucket message and delivers its event.
    fn apply(&mut self, entry: Entry, replaced: Option<u64>, pending: u64) {
        self.note_loaded(&entry.name);
        if !crate::lease::keys::is_reserved(&entry.name) {
            let released = matches!(entry.kind, Kind::Released(_));
            self.view.apply_lease(&entry.name, entry.revision, released);
        } else if let Some((semaphore, slot)) =
            crate::lease::keys::parse_semaphore_slot(&entry.name)
        {
            let held = match &entry.kind {
                Kind::Held(record) => Some((record.holder.as_str(), record.key_sha256.as_str())),
                _ => None,
            };
            self.view.apply_slot(semaphore, slot, entry.revision, held);
        }
        self.checkpoints.note(entry.revision, entry.time_ms);
        self.newest_ms = self.newest_ms.max(entry.time_ms);
        self.note_end(&entry);
        let lag_ms = crate::lease::now_ms().saturating_sub(entry.time_ms);
        let applied = self.mirror.apply(entry, replaced);
        if self.mirror.live && self.beyond_markers(Duration::from_millis(lag_ms)) {
            self.fell_behind(&format!(
                "it is reading a message written {} ms ago",
                lag_ms
            ));
        }
        if pending == 0 && !self.mirror.live {
            self.mirror.live = true;
            tracing::debug!(
                names = self.mirror.names.len(),
                "shared bucket watch caught up"
            );
        }
        if self.mirror.live {
            self.view.set_position(self.mirror.position, pending == 0);
        }
        for event in [applied.missed, applied.event].into_iter().flatten() {
            let event = Arc::new(event);
            for id in self.interested(&event.name) {
                self.deliver(id, &event);
            }
        }
        if pending == 0 && !self.turns.is_empty() {
            self.give_turns();
        }
        if pending == 0 && !self.candidates.is_empty() {
            self.tell_candidates();
        }
        if !self.pending.is_empty() {
            self.serve_pending(false);
        }
    }

    /// Tells the waiters of each name whose queue lost a ticket, and that
    /// is free now, that the next waiter may be the head, or (the queue
    /// now empty) that a waiting group kept out by the queue may write.
    fn give_turns(&mut self) {
        for queue in std::mem::take(&mut self.turns) {
            // A semaphore's queue: its waiters follow the semaphore's name,
            // and a slot may be free whatever the other slots show.
            let (name, free) = match crate::lease::keys::semaphore_of_queue(&queue) {
                Some(semaphore) => (semaphore.to_string(), true),
                None => {
                    let free = !self.mirror.names.contains_key(&queue);
                    (queue, free)
                }
            };
            if !self.mirror.live || !free {
                continue;
            }
            let event = Arc::new(Event {
                kind: EventKind::Turn,
                name: name.clone(),
                revision: self.mirror.position,
                holder: String::new(),
                token: 0,
                holding: None,
                time_ms: self.newest_ms,
                slot: 0,
                missed_after: 0,
            });
            for id in self.by_name.get(&name).cloned().unwrap_or_default() {
                self.deliver(id, &event);
            }
        }
    }

    /// Tells the observers of each election whose preferred candidate
    /// changed (they read who it is from the view, which is complete now).
    fn tell_candidates(&mut self) {
        if !self.mirror.live {
            return;
        }
        for name in std::mem::take(&mut self.candidates) {
            // The preferred candidate as of now, carried in the event: an
            // observer that reads it late must not report a later one
            // (after a hand-over it would name the next candidate before
            // the hand-over itself).
            let preferred = self.view.preferred(&name);
            let event = Arc::new(Event {
                kind: EventKind::Candidate,
                name: name.clone(),
                revision: self.mirror.position,
                holder: preferred
                    .as_ref()
                    .map(|c| c.holder.clone())
                    .unwrap_or_default(),
                token: preferred.map_or(0, |c| u64::from(c.preference)),
                holding: None,
                time_ms: self.newest_ms,
                slot: 0,
                missed_after: 0,
            });
            for id in self.by_name.get(&name).cloned().unwrap_or_default() {
                self.deliver(id, &event);
            }
        }
    }

    /// Remembers how a holding ended at `entry` (before the mirror applies
    /// it), so a replay can name the holder and token of an expiry marker
    /// or purge, and knows a marker over a free name stands for nothing.
    fn note_end(&mut self, entry: &Entry) {
        if crate::lease::keys::is_reserved(&entry.name) {
            return;
        }
        if !matches!(
            entry.kind,
            Kind::Released(_) | Kind::Expired | Kind::Revoked(_)
        ) {
            self.ends.remove(&entry.name);
            return;
        }
        let before = self.mirror.names.get(&entry.name);
        let ended = match before {
            Some(h) => Some((h.record.holder.clone(), h.token)),
            // Only a live mirror knows the name was free (the initial load
            // sees one message per name, not what came before it).
            None if self.mirror.live => None,
            None => {
                self.ends.remove(&entry.name);
                return;
            }
        };
        let after = self.mirror.last_seen(&entry.name).unwrap_or(0);
        self.ends.insert(
            entry.name.clone(),
            End {
                revision: entry.revision,
                time_ms: entry.time_ms,
                ended,
                after,
            },
        );
    }

    /// Delivers `event` to subscriber `id`, dropping it when its stream is
    /// gone or it fell behind; when the replica's queues are full, the
    /// watch holding the most is ended first.
    fn deliver(&mut self, id: u64, event: &Arc<Event>) {
        let Some(s) = self.subscribers.get(&id) else {
            return;
        };
        if !s.wants(event.kind) {
            return;
        }
        if s.abandoned() {
            self.remove(id);
            return;
        }
        let mut refused = s.queue.push(event.clone());
        if refused == Err(Refused::ReplicaFull) {
            self.end_largest();
            refused = match self.subscribers.get(&id) {
                Some(s) => s.queue.push(event.clone()),
                None => Err(Refused::Ended),
            };
            if refused == Err(Refused::ReplicaFull) {
                if let Some(s) = self.subscribers.get(&id) {
                    s.queue.end(replica_full(&self.budget));
                }
                refused = Err(Refused::Lagged);
            }
        }
        if refused.is_err() {
            self.remove(id);
        }
    }

    /// Ends the watch with the most bytes queued: the replica's bound is
    /// reached, and it is the furthest behind.
    fn end_largest(&mut self) {
        let largest = self
            .subscribers
            .iter()
            .map(|(id, s)| (s.queue.bytes(), *id))
            .max();
        if let Some((bytes, id)) = largest.filter(|(bytes, _)| *bytes > 0) {
            if let Some(s) = self.subscribers.get(&id) {
                tracing::info!(
                    bytes,
                    "ending the watch furthest behind: this replica's watch buffers are full"
                );
                s.queue.end(replica_full(&self.budget));
            }
            self.remove(id);
        }
    }

    /// Ids of subscribers following `name`.
    fn interested(&self, name: &str) -> Vec<u64> {
        let mut ids = self.by_name.get(name).cloned().unwrap_or_default();
        ids.extend(self.by_prefix.get("").into_iter().flatten());
        for (i, b) in name.bytes().enumerate() {
            if b == b'.' {
                ids.extend(self.by_prefix.get(&name[..i]).into_iter().flatten());
            }
        }
        ids
    }

    /// Drops a subscriber.
    fn remove(&mut self, id: u64) {
        if let Some(s) = self.subscribers.remove(&id) {
            let index = match &s.filter {
                Filter::Name(n) => self.by_name.get_mut(n).map(|v| (v, n.clone(), true)),
                Filter::Subtree(p) => self.by_prefix.get_mut(p).map(|v| (v, p.clone(), false)),
            };
            if let Some((ids, key, by_name)) = index {
                ids.retain(|&i| i != id);
                if ids.is_empty() {
                    if by_name {
                        self.by_name.remove(&key);
                    } else {
                        self.by_prefix.remove(&key);
                    }
                }
            }
        }
    }

    /// Drops subscribers whose clients have gone away; samples the bytes
    /// the watch buffers hold.
    fn sweep(&mut self) {
        // Older than this, a marker has left the bucket: resumes from
        // before it are refused, so neither checkpoint nor end is needed.
        let keep = self.marker_ttl + resume::CLOCK_MARGIN * 2;
        self.checkpoints.prune(keep);
        let cutoff = self.newest_ms.saturating_sub(keep.as_millis() as u64);
        let stale: Vec<String> = self
            .ends
            .iter()
            .filter(|(_, end)| end.time_ms <= cutoff)
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            self.ends.remove(&name);
        }
        METRICS
            .watch_buffer_bytes
            .set(i64::try_from(self.budget.queued()).unwrap_or(i64::MAX));
        let gone: Vec<u64> = self
            .subscribers
            .iter()
            .filter(|(_, s)| s.abandoned())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            self.remove(id);
        }
    }
}

/// WATCH_LAGGED for a watch ended because the replica's buffers are full.
fn replica_full(budget: &WatchBudget) -> Error {
    Error::new(
        Reason::WatchLagged,
        format!(
            "this replica's watch buffers are full ({} bytes) and this watch was furthest behind; \
             read faster or narrow the watch, then watch again",
            budget.total_bytes
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::record::fixtures::{entry, held as rec};
    use crate::lease::WATCH_BUFFER_EVENTS;
    use futures::FutureExt;
    use tokio::sync::oneshot;

    fn state(per_watch_bytes: usize, total_bytes: usize) -> HubState {
        let mut state = HubState::new(Arc::new(WatchBudget::new(
            WATCH_BUFFER_EVENTS,
            per_watch_bytes,
            total_bytes,
        )));
        state.mirror.live = true;
        state
    }

    /// A watcher reading messages older than the marker TTL may have lost
    /// markers without a trace: every subscription ends with WATCH_LAGGED
    /// instead of going on incomplete; one that keeps up is left alone.
    #[tokio::test]
    async fn a_watcher_beyond_the_marker_ttl_ends_every_watch() {
        let mut state = state(usize::MAX, usize::MAX);
        state.set_marker_ttl(Duration::from_secs(10));
        state.mirror.live = true;
        let (_, mut sub) = state.register(Filter::parse(">"), Vec::new(), false);
        let now = crate::lease::now_ms();
        let at = |rev, ms| Entry {
            time_ms: ms,
            ..entry("a", rev, rec("h", if rev == 1 { 0 } else { 1 }))
        };
        state.apply(at(1, now - 1_000), Some(0), 0);
        assert_eq!(sub.next().await.unwrap().revision, 1);
        state.apply(at(2, now - 60_000), Some(1), 0);
        let err = sub.next().await.unwrap_err();
        assert_eq!(err.reason, Reason::WatchLagged);
        assert!(err.message.contains("marker TTL"), "{}", err.message);
        assert!(state.subscribers.is_empty());
    }

    /// A subscriber that stops reading is ended with WATCH_LAGGED once its
    /// buffer is full, its buffer is freed at once (the error comes before
    /// any queued event), and others keep receiving.
    #[tokio::test]
    async fn slow_subscriber_is_ended_and_freed_at_once() {
        let mut state = state(usize::MAX, usize::MAX);
        let (_, mut slow) = state.register(Filter::parse(">"), Vec::new(), false);
        let (_, mut fast) = state.register(Filter::parse("a"), Vec::new(), false);
        for i in 0..(WATCH_BUFFER_EVENTS as u64 + 10) {
            state.apply(
                entry("a", i + 1, rec("h", if i == 0 { 0 } else { 1 })),
                Some(i),
                0,
            );
            // The fast one keeps up.
            assert_eq!(fast.next().await.unwrap().revision, i + 1);
        }
        assert_eq!(state.budget.queued(), 0, "nothing held for the slow one");
        let err = slow.next().await.unwrap_err();
        assert_eq!(err.reason, Reason::WatchLagged);
        assert_eq!(
            state.subscribers.len(),
            1,
            "the slow subscriber was dropped"
        );
    }

    /// A follow made while the mirror loads is confirmed at once (its
    /// waiter neither waits for the load nor polls), hears nothing of the
    /// load itself (no events then) but is woken early by its name's writes
    /// as they are published, and once when the mirror goes live if the
    /// load applied a message of its name after it followed; after
    /// that it hears ends as they come. A load that fails ends it instead,
    /// so its waiter polls.
    #[tokio::test]
    async fn a_follow_during_the_load_is_confirmed_at_once_and_woken_when_live() {
        let mut state = state(usize::MAX, usize::MAX);
        state.mirror.live = false;
        let follow = |state: &mut HubState, name: &str| {
            let (reply, mut confirmed) = oneshot::channel();
            state.command(
                Command::Subscribe {
                    filter: Filter::Name(name.into()),
                    kinds: vec![EventKind::Released],
                    snapshot: false,
                    position: 0,
                    reply,
                },
                true,
            );
            confirmed.try_recv().expect("confirmed at once").unwrap()
        };
        let mut sub = follow(&mut state, "a");
        let mut untouched = follow(&mut state, "z");
        // The load: a holding and its release, the last with nothing
        // pending behind it (the mirror goes live on it).
        state.apply(entry("a", 1, rec("h", 0)), Some(0), 1);
        state.wake_loaded();
        assert!(sub.next().now_or_never().is_none(), "nothing while loading");
        // Writes heard as published wake it early: a removal of one of its
        // own name's keys (a semaphore slot of it here) does, one wake at a
        // time; another name's does not, nor a put.
        assert!(state.hears_changes());
        let removal = Op::Delete(Default::default());
        state.wake_changed("b", &removal);
        state.wake_changed("a", &Op::Put(Default::default()));
        assert!(sub.next().now_or_never().is_none(), "a put frees nothing");
        state.wake_changed(&crate::lease::keys::semaphore_slot("a", 3), &removal);
        state.wake_changed("a", &removal);
        let early = sub.next().now_or_never().expect("woken early").unwrap();
        assert_eq!((early.kind, early.name.as_str()), (EventKind::Missed, "a"));
        assert!(sub.next().now_or_never().is_none(), "one wake at a time");
        state.apply(entry("a", 2, Kind::Released(None)), Some(1), 0);
        assert!(state.mirror.live);
        state.wake_loaded();
        let wake = sub.next().now_or_never().expect("woken once live").unwrap();
        assert!(
            untouched.next().now_or_never().is_none(),
            "nothing of its name was loaded after it followed: no wake"
        );
        assert_eq!((wake.kind, wake.name.as_str()), (EventKind::Missed, "a"));
        assert!(!state.hears_changes(), "live: the stream says it all");
        state.wake_changed("a", &removal);
        state.wake_loaded();
        state.apply(entry("a", 3, rec("h2", 0)), Some(2), 0);
        state.apply(entry("a", 4, Kind::Released(None)), Some(3), 0);
        let end = sub.next().await.unwrap();
        assert_eq!(
            (end.kind, end.revision),
            (EventKind::Released, 4),
            "woken once, then the live ends"
        );

        // A load that fails ends the follows made during it.
        let mut state = self::state(usize::MAX, usize::MAX);
        state.mirror.live = false;
        let mut sub = follow(&mut state, "a");
        state.refuse_pending();
        assert_eq!(
            sub.next().await.unwrap_err().reason,
            Reason::NatsUnavailable
        );
        assert!(state.subscribers.is_empty());
    }

    /// A watch is bounded in bytes too, not only in events.
    #[tokio::test]
    async fn a_watch_is_bounded_in_bytes() {
        let mut state = state(4096, usize::MAX);
        let (_, mut slow) = state.register(Filter::parse(">"), Vec::new(), false);
        for i in 0..100 {
            state.apply(
                entry("a", i + 1, rec("h", if i == 0 { 0 } else { 1 })),
                Some(i),
                0,
            );
        }
        assert_eq!(slow.next().await.unwrap_err().reason, Reason::WatchLagged);
        assert!(state.subscribers.is_empty());
    }

    /// When the replica's buffers are full, the watch furthest behind is
    /// ended and the others keep receiving.
    #[tokio::test]
    async fn a_full_replica_ends_the_watch_furthest_behind() {
        let one = {
            let mut m = Mirror::default();
            m.live = true;
            m.apply(entry("a", 1, rec("h", 0)), Some(0))
                .event
                .unwrap()
                .weight()
        };
        let mut state = state(usize::MAX, one * 6);
        let (_, mut behind) = state.register(Filter::parse(">"), Vec::new(), false);
        let (_, mut reader) = state.register(Filter::parse(">"), Vec::new(), false);
        for i in 0..20 {
            state.apply(
                entry("a", i + 1, rec("h", if i == 0 { 0 } else { 1 })),
                Some(i),
                0,
            );
            assert_eq!(reader.next().await.unwrap().revision, i + 1);
        }
        assert_eq!(behind.next().await.unwrap_err().reason, Reason::WatchLagged);
        assert!(state.budget.queued() <= one * 6);
    }

    /// A snapshot is read lazily from the mirror as it was: later changes
    /// do not show in it, and it comes in name order, filtered.
    #[tokio::test]
    async fn snapshots_are_read_lazily_from_the_mirror_as_it_was() {
        let mut state = state(usize::MAX, usize::MAX);
        for (i, name) in ["jobs.b", "jobs.a", "other.x", "jobs"].iter().enumerate() {
            state.apply(entry(name, i as u64 + 1, rec("h", 0)), Some(0), 0);
        }
        let (_, mut sub) = state.register(Filter::parse("jobs.>"), Vec::new(), true);
        state.apply(entry("jobs.c", 9, rec("h", 0)), Some(0), 0);
        let mut names = Vec::new();
        loop {
            let e = sub.next().await.unwrap();
            if e.kind == EventKind::SnapshotComplete {
                break;
            }
            names.push(e.name.clone());
        }
        assert_eq!(names, ["jobs.a", "jobs.b"]);
        let live = sub.next().await.unwrap();
        assert_eq!(
            (live.kind, live.name.as_str()),
            (EventKind::Acquired, "jobs.c")
        );
    }
}
