//! The shared bucket watcher (the [`Hub`]): lease events fanned out from
//! one NATS consumer per process.
//!
//! Each Tenure process follows the whole bucket with a single NATS ordered
//! consumer, keeps a [`Mirror`] of the current holding of every name, and
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

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use tokio_util::sync::CancellationToken;

use super::event::{Event, EventKind, Filter};
use super::mirror::Mirror;
use super::record::Entry;
use crate::error::{Error, Reason, Result};
use crate::nats::{Follow, Start, Store};

/// Events buffered per subscriber before it counts as too slow and is dropped.
const SUBSCRIBER_BUFFER: usize = 1024;
/// First pause before following the bucket again after the watch failed;
/// it doubles up to [`RESUBSCRIBE_MAX`].
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(100);
/// Longest pause between attempts to follow the bucket again.
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);
/// How long a snapshot waits for the mirror to reach the bucket's position
/// before it is served from what the mirror has (a newest message that
/// expired before the hub saw it would otherwise never arrive).
const SNAPSHOT_CATCH_UP: Duration = Duration::from_millis(500);

/// The receiving end of a subscription: events, then why it ended.
pub struct Subscription {
    /// Events in bucket order.
    events: mpsc::Receiver<Event>,
    /// Why the hub ended this subscription, when it did.
    ended: Arc<OnceLock<Error>>,
}

impl Subscription {
    /// The next event; `Err` once the subscription has ended (shutdown, a
    /// subscriber too slow to keep up, or the bucket watch failing).
    pub async fn next(&mut self) -> Result<Event> {
        match self.events.recv().await {
            Some(event) => Ok(event),
            None => Err(self.ended.get().cloned().unwrap_or_else(|| {
                Error::new(
                    Reason::NatsUnavailable,
                    "the bucket watch ended; watch again",
                )
            })),
        }
    }

    /// Turns the subscription into a stream that ends after its first error.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<Event>> + Send {
        futures::stream::unfold(Some(self), |state| async move {
            let mut sub = state?;
            match sub.next().await {
                Ok(event) => Some((Ok(event), Some(sub))),
                Err(err) => Some((Err(err), None)),
            }
        })
    }
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
}

impl Hub {
    /// Starts the hub task over `store`; it runs until `shutdown`.
    pub async fn start(store: Store, shutdown: CancellationToken) -> Result<Hub> {
        let follow = store.follow(">", Start::Snapshot).await?;
        let (commands, rx) = mpsc::unbounded_channel();
        let (healthy_tx, healthy) = watch::channel(true);
        tokio::spawn(run(store.clone(), follow, rx, shutdown, healthy_tx));
        Ok(Hub {
            commands,
            store,
            healthy,
        })
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
        let gone = || {
            Error::new(
                Reason::ShuttingDown,
                "the server is shutting down; watch again on another replica",
            )
        };
        self.commands
            .send(Command::Subscribe {
                filter,
                kinds,
                snapshot,
                position,
                reply,
            })
            .map_err(|_| gone())?;
        confirmed.await.map_err(|_| gone())?
    }
}

/// One registered subscriber.
struct Subscriber {
    /// What it follows.
    filter: Filter,
    /// Which kinds it wants (empty: all).
    kinds: Vec<EventKind>,
    /// Where its events go.
    events: mpsc::Sender<Event>,
    /// Why it ended, set before its sender is dropped.
    ended: Arc<OnceLock<Error>>,
}

impl Subscriber {
    /// Delivers an event; `false` when the subscriber is gone or too slow.
    fn deliver(&self, event: &Event) -> bool {
        if !self.kinds.is_empty()
            && event.kind != EventKind::SnapshotComplete
            && !self.kinds.contains(&event.kind)
        {
            return true;
        }
        match self.events.try_send(event.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(_)) => {
                let _ = self.ended.set(Error::new(
                    Reason::WatchLagged,
                    format!("watch fell more than {SUBSCRIBER_BUFFER} events behind; read faster or narrow the watch, then watch again"),
                ));
                false
            }
        }
    }

    /// Ends the subscription with `err`.
    fn end(self, err: Error) {
        let _ = self.ended.set(err);
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
    /// Confirms registration with the receiving end.
    reply: oneshot::Sender<Result<Subscription>>,
}

/// The hub's state: the mirror and the subscribers.
#[derive(Default)]
struct State {
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
    /// Snapshots waiting for the mirror.
    pending: Vec<Pending>,
}

/// The hub task: applies bucket messages to the mirror and fans them out;
/// follows the bucket again from the mirror's position when the consumer
/// fails.
async fn run(
    store: Store,
    follow: Follow,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
    healthy: watch::Sender<bool>,
) {
    let mut state = State::default();
    if follow.initially_pending == 0 {
        state.mirror.live = true;
    }
    let mut follow = Some(follow);
    let mut retry = Instant::now();
    let mut backoff = RESUBSCRIBE_MIN;
    let mut sweep = tokio::time::interval(Duration::from_secs(5));
    loop {
        let next_deadline = state.pending.iter().map(|p| p.deadline).min();
        let following = follow.is_some();
        let message = async {
            match follow.as_mut() {
                Some(f) => f.messages.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            command = commands.recv() => match command {
                Some(command) => state.command(command, following),
                None => break,
            },
            message = message => match message {
                Some(Ok((message, pending))) => state.apply(Entry::from(message), pending),
                failed => {
                    let why = match failed {
                        Some(Err(err)) => err.message,
                        _ => "the consumer ended".into(),
                    };
                    tracing::warn!(position = state.mirror.position, "shared bucket watch interrupted ({why}); following the bucket again from its last revision");
                    follow = None;
                    healthy.send_replace(false);
                    retry = Instant::now();
                    backoff = RESUBSCRIBE_MIN;
                }
            },
            _ = tokio::time::sleep_until(retry), if !following => {
                match store.follow(">", Start::After(state.mirror.position)).await {
                    Ok(resumed) => {
                        if resumed.initially_pending == 0 && !state.mirror.live {
                            state.mirror.live = true;
                        }
                        tracing::info!(position = state.mirror.position, "shared bucket watch resumed");
                        follow = Some(resumed);
                        healthy.send_replace(true);
                    }
                    Err(err) => {
                        tracing::debug!(%err, ?backoff, "shared bucket watch not resumed yet");
                        retry = Instant::now() + backoff;
                        backoff = (backoff * 2).min(RESUBSCRIBE_MAX);
                    }
                }
            }
            _ = async { match next_deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                state.serve_pending(true);
            }
            _ = sweep.tick() => state.sweep(),
        }
    }
    let end = Error::new(
        Reason::ShuttingDown,
        "the server is shutting down; watch again on another replica",
    );
    for (_, subscriber) in state.subscribers.drain() {
        subscriber.end(end.clone());
    }
}

impl State {
    /// Handles a command; `following` says whether the bucket is being
    /// followed right now (snapshots are refused while it is not).
    fn command(&mut self, command: Command, following: bool) {
        let Command::Subscribe {
            filter,
            kinds,
            snapshot,
            position,
            reply,
        } = command;
        if !snapshot {
            let subscription = self.register(filter, kinds, Vec::new());
            let _ = reply.send(Ok(subscription));
            return;
        }
        if !following {
            let _ = reply.send(Err(Error::new(
                Reason::NatsUnavailable,
                "this replica is reconnecting its bucket watch; watch again shortly",
            )));
            return;
        }
        self.pending.push(Pending {
            position,
            deadline: Instant::now() + SNAPSHOT_CATCH_UP,
            filter,
            kinds,
            reply,
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
                (self.mirror.live && self.mirror.position >= p.position)
                    || (force && p.deadline <= now)
            });
        self.pending = waiting;
        for p in ready {
            let mut snapshot: Vec<Event> = match &p.filter {
                Filter::Name(name) => self
                    .mirror
                    .names
                    .get(name)
                    .map(Event::current)
                    .into_iter()
                    .collect(),
                filter => self
                    .mirror
                    .names
                    .values()
                    .filter(|h| filter.matches(&h.name))
                    .map(Event::current)
                    .collect(),
            };
            snapshot.sort_by_key(|e| e.revision);
            snapshot.push(Event::snapshot_complete());
            let subscription = self.register(p.filter, p.kinds, snapshot);
            let _ = p.reply.send(Ok(subscription));
        }
    }

    /// Adds a subscriber to the indexes with `first` already queued (the
    /// channel has room for all of it plus the usual buffer).
    fn register(
        &mut self,
        filter: Filter,
        kinds: Vec<EventKind>,
        first: Vec<Event>,
    ) -> Subscription {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER + first.len());
        let ended = Arc::new(OnceLock::new());
        let subscriber = Subscriber {
            filter,
            kinds,
            events: tx,
            ended: ended.clone(),
        };
        for event in &first {
            subscriber.deliver(event);
        }
        let id = self.next_id;
        self.next_id += 1;
        match &subscriber.filter {
            Filter::Name(n) => self.by_name.entry(n.clone()).or_default().push(id),
            Filter::Subtree(p) => self.by_prefix.entry(p.clone()).or_default().push(id),
        }
        self.subscribers.insert(id, subscriber);
        Subscription { events: rx, ended }
    }

    /// Applies one bucket message and delivers its event.
    fn apply(&mut self, entry: Entry, pending: u64) {
        let event = self.mirror.apply(entry);
        if pending == 0 && !self.mirror.live {
            self.mirror.live = true;
            tracing::debug!(
                names = self.mirror.names.len(),
                "shared bucket watch caught up"
            );
        }
        if let Some(event) = event {
            let ids = self.interested(&event.name);
            let mut gone = Vec::new();
            for id in ids {
                if let Some(s) = self.subscribers.get(&id) {
                    if !s.deliver(&event) {
                        gone.push(id);
                    }
                }
            }
            for id in gone {
                self.remove(id);
            }
        }
        if !self.pending.is_empty() {
            self.serve_pending(false);
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

    /// Drops subscribers whose clients have gone away.
    fn sweep(&mut self) {
        let gone: Vec<u64> = self
            .subscribers
            .iter()
            .filter(|(_, s)| s.events.is_closed())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            self.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::record::fixtures::{entry, held as rec};

    /// A subscriber that stops reading is ended with WATCH_LAGGED once its
    /// buffer is full, and others keep receiving.
    #[tokio::test]
    async fn slow_subscriber_is_ended_with_watch_lagged() {
        let mut state = State::default();
        state.mirror.live = true;
        let mut slow = state.register(Filter::parse(">"), Vec::new(), Vec::new());
        let mut fast = state.register(Filter::parse("a"), Vec::new(), Vec::new());
        for i in 0..(SUBSCRIBER_BUFFER as u64 + 10) {
            state.apply(entry("a", i + 1, rec("h", if i == 0 { 0 } else { 1 })), 0);
            // The fast one keeps up.
            assert_eq!(fast.next().await.unwrap().revision, i + 1);
        }
        for _ in 0..SUBSCRIBER_BUFFER {
            slow.next().await.unwrap();
        }
        let err = slow.next().await.unwrap_err();
        assert_eq!(err.reason, Reason::WatchLagged);
        assert_eq!(
            state.subscribers.len(),
            1,
            "the slow subscriber was dropped"
        );
    }
}
