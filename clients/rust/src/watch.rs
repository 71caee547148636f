//! [`Watch`]: a stream of lease events that survives a broken connection
//! or a restarted server: it reopens `WatchLease` with capped backoff and
//! resumes (`start_revision`) after the last revision it delivered, so no
//! event is delivered twice and none is skipped; when the server can no
//! longer resume from there (`WATCH_HISTORY_COMPACTED`) it starts afresh
//! with a new snapshot.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures_core::Stream;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::{Error, Reason};
use crate::proto::{EventType, Lease, LeaseEvent, WatchLeaseRequest, WatchLeaseResponse};
use crate::stub::{open_watch, Stub};

/// First pause before reopening a failed stream; doubles up to
/// [`MAX_BACKOFF`] and starts over once an event arrives.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest pause between reopenings.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Events read ahead of the consumer; past it the reading waits (and the
/// server may end the stream with `WATCH_LAGGED`, which is resumed).
const BUFFER: usize = 64;

/// One change of a lease, or one entry of the initial snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// What happened.
    pub kind: EventType,
    /// The lease it happened to (empty for `SNAPSHOT_COMPLETE`).
    pub name: String,
    /// The bucket revision of the change.
    pub revision: u64,
    /// The holder concerned. For `EXPIRED` and `REVOKED` it is what this
    /// stream saw earlier, and empty when it never saw the holding.
    pub holder: String,
    /// The fencing token of the holding concerned, where known (else 0).
    pub fencing_token: u64,
    /// The full holding, for `CURRENT`, `ACQUIRED` and `RENEWED`.
    pub lease: Option<Lease>,
    /// When the change was written (server clock).
    pub time: Option<SystemTime>,
    /// The semaphore slot concerned (1 to the limit); 0 for a plain lease.
    pub slot: u32,
    /// For [`EventType::Missed`], the last revision of the name this stream
    /// saw (0: none): its changes after that one and before `revision` were
    /// not all seen. 0 for every other kind.
    pub missed_after_revision: u64,
}

impl Event {
    /// The event of a proto `LeaseEvent`; `None` for a type this client does
    /// not know (or `UNSPECIFIED`).
    pub fn from_proto(event: LeaseEvent) -> Option<Event> {
        let kind = match EventType::try_from(event.r#type) {
            Ok(EventType::Unspecified) | Err(_) => return None,
            Ok(kind) => kind,
        };
        Some(Event {
            kind,
            name: event.name,
            revision: event.revision,
            holder: event.holder,
            fencing_token: event.fencing_token,
            lease: event.lease,
            time: event.time.and_then(|t| SystemTime::try_from(t).ok()),
            slot: event.slot,
            missed_after_revision: event.missed_after_revision,
        })
    }
}

/// The events of a watch, from [`Client::watch`](crate::Client::watch): a
/// [`Stream`] of `Result<Event, Error>`.
///
/// A fresh watch starts with a [`EventType::Current`] event per lease held
/// and one [`EventType::SnapshotComplete`], then every change. When the
/// stream breaks (server restarted or unreachable, `SHUTTING_DOWN`,
/// `WATCH_LAGGED`, any retryable failure) it is reopened with backoff
/// (100 ms doubling to 5 s) from the last delivered revision: the server
/// replays what changed meanwhile, and nothing already delivered comes
/// again (a resumed stream's own `SNAPSHOT_COMPLETE` is not delivered).
/// When the server answers `WATCH_HISTORY_COMPACTED` (it cannot prove the
/// replay complete) the watch starts afresh: a new snapshot of `CURRENT`
/// events and a new `SNAPSHOT_COMPLETE`, after which names missing from it
/// are no longer held. A permanent failure (e.g. `PERMISSION_DENIED`) is
/// yielded as one `Err`, and the stream ends. Dropping the `Watch` cancels
/// it. Events of types newer than this client are skipped.
///
/// An [`EventType::Missed`] event says the stream did not see every change
/// of its name (the server's watcher fell behind the bucket, which keeps
/// one message per name): the changes after
/// [`Event::missed_after_revision`] and before its `revision` are gone, the
/// holding in its `holder`/`fencing_token` (when known, token != 0) has
/// ended, and other holdings may have come and gone. The events after it
/// are the name's changes from its `revision` on. It comes whatever event
/// types the watch asked for.
pub struct Watch {
    /// The events read by the watch's task.
    events: mpsc::Receiver<Result<Event, Error>>,
    /// The revision of the last event delivered (shared with the task).
    last: Arc<AtomicU64>,
    /// Stops the task when the `Watch` is dropped.
    _stop: DropGuard,
}

impl Watch {
    /// Starts the task reading `stream` (opened with `request`) and
    /// reopening it as needed. Needs a Tokio runtime.
    pub(crate) fn spawn(
        stub: Stub,
        target: Arc<str>,
        request: WatchLeaseRequest,
        stream: tonic::Streaming<WatchLeaseResponse>,
    ) -> Watch {
        let (tx, events) = mpsc::channel(BUFFER);
        let stop = CancellationToken::new();
        let last = Arc::new(AtomicU64::new(request.start_revision));
        let task = Resuming {
            stub,
            target,
            request,
            tx,
            stop: stop.clone(),
            last: last.clone(),
        };
        tokio::spawn(task.run(stream));
        Watch {
            events,
            last,
            _stop: stop.drop_guard(),
        }
    }

    /// The revision of the last event delivered (the `start_revision` a
    /// reopened stream resumes from); 0 before the first.
    pub fn last_revision(&self) -> u64 {
        self.last.load(Ordering::SeqCst)
    }
}

/// The task behind a [`Watch`].
struct Resuming {
    /// The client's stub.
    stub: Stub,
    /// The server, for errors.
    target: Arc<str>,
    /// What is watched; `start_revision` is updated for each reopening.
    request: WatchLeaseRequest,
    /// Where the events go.
    tx: mpsc::Sender<Result<Event, Error>>,
    /// Cancelled when the `Watch` is dropped.
    stop: CancellationToken,
    /// The last delivered revision.
    last: Arc<AtomicU64>,
}

/// How one stream ended.
enum Ended {
    /// The consumer is gone: stop.
    Stop,
    /// Reopen (resuming from the last delivered revision).
    Reopen,
    /// Reopen from scratch (`WATCH_HISTORY_COMPACTED`).
    Fresh,
}

impl Resuming {
    async fn run(mut self, first: tonic::Streaming<WatchLeaseResponse>) {
        let mut stream = Some(first);
        let mut backoff = FIRST_BACKOFF;
        loop {
            if let Some(s) = stream.take() {
                let resumed = self.request.start_revision > 0;
                match self.read(s, resumed, &mut backoff).await {
                    Ended::Stop => return,
                    Ended::Reopen => {}
                    Ended::Fresh => {
                        self.request.start_revision = 0;
                        self.last.store(0, Ordering::SeqCst);
                    }
                }
            }
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            self.request.start_revision = self.last.load(Ordering::SeqCst);
            let opened = tokio::select! {
                _ = self.stop.cancelled() => return,
                opened = open_watch(&self.stub, self.request.clone()) => opened,
            };
            match opened {
                Ok(s) => stream = Some(s),
                Err(err) if err.reason() == Reason::WatchHistoryCompacted => {
                    self.request.start_revision = 0;
                    self.last.store(0, Ordering::SeqCst);
                    backoff = FIRST_BACKOFF;
                }
                Err(err) if err.is_retryable() => {}
                Err(err) => {
                    let _ = self
                        .tx
                        .send(Err(err.context(&self.target, "WatchLease")))
                        .await;
                    return;
                }
            }
        }
    }

    /// Delivers the events of one stream until it ends. On a `resumed`
    /// stream, events at or below the last delivered revision and the
    /// catch-up `SNAPSHOT_COMPLETE` are not delivered.
    async fn read(
        &mut self,
        mut stream: tonic::Streaming<WatchLeaseResponse>,
        resumed: bool,
        backoff: &mut Duration,
    ) -> Ended {
        loop {
            let item = tokio::select! {
                _ = self.stop.cancelled() => return Ended::Stop,
                item = next(&mut stream) => item,
            };
            let response = match item {
                None => return Ended::Reopen,
                Some(Err(status)) => {
                    let err = Error::from(status).context(&self.target, "WatchLease");
                    if err.reason() == Reason::WatchHistoryCompacted {
                        return Ended::Fresh;
                    }
                    if err.is_retryable() {
                        return Ended::Reopen;
                    }
                    let _ = self.tx.send(Err(err)).await;
                    return Ended::Stop;
                }
                Some(Ok(response)) => response,
            };
            let Some(event) = response.event.and_then(Event::from_proto) else {
                continue;
            };
            *backoff = FIRST_BACKOFF;
            let last = self.last.load(Ordering::SeqCst);
            if resumed && (event.kind == EventType::SnapshotComplete || event.revision <= last) {
                continue;
            }
            self.last.store(last.max(event.revision), Ordering::SeqCst);
            let sent = tokio::select! {
                _ = self.stop.cancelled() => return Ended::Stop,
                sent = self.tx.send(Ok(event)) => sent,
            };
            if sent.is_err() {
                return Ended::Stop;
            }
        }
    }
}

/// The next item of a stream.
pub(crate) async fn next<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

impl Stream for Watch {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.poll_recv(cx)
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("last_revision", &self.last_revision())
            .finish_non_exhaustive()
    }
}
