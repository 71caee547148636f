//! [`KeepAlive`]: the renewals of every lease and semaphore session of one
//! [`Client`](crate::Client) connection over one `KeepAlive` stream.
//!
//! A unary `Renew` costs a whole gRPC exchange per renewal; the stream
//! carries many per message. Each session still decides *when* to renew
//! (its own schedule, retries and safe deadline, in
//! [`renewal`](crate::renewal)); it hands its entry to [`KeepAlive::renew`]
//! and awaits the result. The stream task batches every entry waiting when
//! it is ready to send (renewals due at the same moment go out in one
//! request, up to [`MAX_BATCH`] entries), and matches the responses (one per
//! request, in request order, results in entry order) back to the waiting
//! sessions. A per-entry `KeepAliveError` becomes the same [`Error`] a unary
//! Renew's status would have.
//!
//! The stream is opened on the first renewal and again after it ends (the
//! server's idle timeout, a restart). When it cannot be opened (refused
//! before its first response, e.g. `TOO_MANY_REQUESTS`), the entries
//! waiting for it are sent as unary `Renew`s; a server that answers
//! `UNIMPLEMENTED` gets unary `Renew`s from then on. When an open stream
//! breaks, its pending entries fail with a retryable error and their
//! sessions retry as after a failed unary renewal (same backoff, same safe
//! deadline).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::Code;

use crate::error::{Error, Reason};
use crate::proto::keep_alive_result::Outcome;
use crate::proto::{KeepAliveEntry, KeepAliveRequest, KeepAliveResponse, Lease, RenewRequest};
use crate::stub::Stub;

/// Most entries in one request (the server's default
/// `--max-keepalive-entries`; a server configured lower ends the stream
/// with `REQUEST_TOO_LARGE`, after which batches are halved).
pub(crate) const MAX_BATCH: usize = 1000;

/// Most encoded bytes of one request: below the server's default
/// `--max-request-bytes` (16 KiB), which a request of 1000 entries would
/// exceed; halved, like [`MAX_BATCH`], after a `REQUEST_TOO_LARGE`. A
/// single entry always goes, whatever its size.
pub(crate) const MAX_BATCH_BYTES: usize = 12 * 1024;

/// What an entry adds to a request besides its own encoding: its id (set
/// when the request is built) and the field's tag and length.
const ENTRY_OVERHEAD: usize = 8;

/// One session's renewal waiting for the stream.
struct Pending {
    /// The entry (its id is set by the stream task).
    entry: KeepAliveEntry,
    /// Where its result goes.
    reply: oneshot::Sender<Answer>,
}

/// What the stream task answers an entry.
enum Answer {
    /// The renewed holding, or the entry's error (boxed: the answer
    /// travels through a channel).
    Done(Box<Result<Lease, Error>>),
    /// The stream could not be opened: send a unary Renew instead.
    Unary,
}

/// The renewal path of one client connection.
#[derive(Debug)]
pub(crate) struct KeepAlive {
    /// The client's stub.
    stub: Stub,
    /// The input of the open stream's task; `None` before the first
    /// renewal. Dropping it (the client and its sessions are gone) ends
    /// the task, which half-closes the stream.
    input: Mutex<Option<mpsc::UnboundedSender<Pending>>>,
    /// What the stream tasks learn about the server.
    shared: Arc<Shared>,
}

/// What the stream tasks learn about the server, kept across streams.
#[derive(Debug)]
struct Shared {
    /// The server has no KeepAlive (`UNIMPLEMENTED`): unary Renew only.
    unary_only: AtomicBool,
    /// Most entries per request (halved after `REQUEST_TOO_LARGE`).
    max_batch: AtomicU64,
    /// Most encoded bytes per request (halved after `REQUEST_TOO_LARGE`).
    max_bytes: AtomicU64,
}

/// One stream's task.
struct Task {
    /// The client's stub.
    stub: Stub,
    /// Shared with the [`KeepAlive`].
    shared: Arc<Shared>,
    /// An entry taken from the input that did not fit in the last batch:
    /// the first of the next.
    carry: Option<Pending>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("name", &self.entry.name)
            .finish()
    }
}

impl KeepAlive {
    /// The renewal path over `stub`; nothing is opened yet.
    pub(crate) fn new(stub: Stub) -> Arc<KeepAlive> {
        Arc::new(KeepAlive {
            stub,
            input: Mutex::new(None),
            shared: Arc::new(Shared {
                unary_only: AtomicBool::new(false),
                max_batch: AtomicU64::new(MAX_BATCH as u64),
                max_bytes: AtomicU64::new(MAX_BATCH_BYTES as u64),
            }),
        })
    }

    /// Renews one holding: over the stream, or a unary Renew where there is
    /// none. The caller bounds the wait (its safe deadline, also sent to the
    /// server as a unary call's `grpc-timeout`).
    pub(crate) async fn renew(
        self: &Arc<Self>,
        entry: KeepAliveEntry,
        deadline: Instant,
    ) -> Result<Lease, Error> {
        if !self.shared.unary_only.load(Ordering::Relaxed) {
            let (reply, result) = oneshot::channel();
            let pending = Pending {
                entry: entry.clone(),
                reply,
            };
            self.send(pending);
            match result.await {
                Ok(Answer::Done(result)) => return *result,
                Ok(Answer::Unary) => {}
                // The task ended before answering: the stream broke.
                Err(_) => return Err(broken("the KeepAlive stream ended")),
            }
        }
        self.unary(entry, deadline).await
    }

    /// Hands `pending` to the stream task, starting one if none runs.
    fn send(self: &Arc<Self>, pending: Pending) {
        let mut input = self.input.lock().unwrap_or_else(|e| e.into_inner());
        let pending = match input.as_ref() {
            Some(tx) => match tx.send(pending) {
                Ok(()) => return,
                // That stream's task has ended: start another.
                Err(mpsc::error::SendError(p)) => p,
            },
            None => pending,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(pending);
        *input = Some(tx);
        let task = Task {
            stub: self.stub.clone(),
            shared: self.shared.clone(),
            carry: None,
        };
        tokio::spawn(task.run(rx));
    }

    /// A unary Renew of `entry`.
    async fn unary(&self, entry: KeepAliveEntry, deadline: Instant) -> Result<Lease, Error> {
        let mut request = tonic::Request::new(RenewRequest {
            name: entry.name,
            expected_revision: entry.expected_revision,
            lease_key: entry.lease_key,
            ttl: entry.ttl,
            slot: entry.slot,
        });
        request.set_timeout(deadline.saturating_duration_since(Instant::now()));
        let mut stub = self.stub.clone();
        let reply = stub.renew(request).await?.into_inner();
        reply.lease.ok_or_else(|| {
            Error::local(
                Code::Internal,
                Reason::Internal,
                "Renew reply without a lease",
            )
        })
    }
}

impl Task {
    /// One stream: opened with the first entries, then batches out and
    /// responses in, until it breaks or every sender is gone.
    async fn run(mut self, mut input: mpsc::UnboundedReceiver<Pending>) {
        // Unbounded, so that sending never stops the reading of responses
        // (each session has at most one entry in flight: bounded by them).
        let (requests, outgoing) = mpsc::unbounded_channel::<KeepAliveRequest>();
        // The entries sent, one batch per request, oldest first.
        let mut sent: VecDeque<Vec<Pending>> = VecDeque::new();
        // Sessions renew every TTL/3, so a batch is always ready soon: the
        // stream is opened with one.
        let Some(first) = self.batch(&mut input).await else {
            return;
        };
        let _ = requests.send(request_of(&first));
        sent.push_back(first);
        let mut stub = self.stub.clone();
        let mut responses = match stub.keep_alive(Outgoing(outgoing)).await {
            Ok(response) => response.into_inner(),
            Err(status) => return self.refused(status, sent, input),
        };
        let mut answered = false;
        loop {
            tokio::select! {
                batch = self.batch(&mut input) => {
                    let Some(batch) = batch else {
                        // Every sender is gone: half-close, and answer
                        // nobody (no session waits).
                        return;
                    };
                    if requests.send(request_of(&batch)).is_err() {
                        fail(batch, "the KeepAlive stream ended");
                        return;
                    }
                    sent.push_back(batch);
                }
                message = responses.message() => match message {
                    Ok(Some(response)) => {
                        answered = true;
                        if let Some(batch) = sent.pop_front() {
                            answer(batch, response);
                        }
                    }
                    Ok(None) => {
                        for batch in sent {
                            fail(batch, "the server ended the KeepAlive stream");
                        }
                        return;
                    }
                    Err(status) if !answered => return self.refused(status, sent, input),
                    Err(status) => {
                        self.too_large(&status);
                        let why = format!("the KeepAlive stream broke: {}", Error::from(status));
                        for batch in sent {
                            fail(batch, &why);
                        }
                        return;
                    }
                }
            }
        }
    }

    /// The next batch: one entry (waiting for it), then every entry already
    /// waiting, up to the batch's entries and bytes. `None` once every
    /// sender is gone.
    async fn batch(
        &mut self,
        input: &mut mpsc::UnboundedReceiver<Pending>,
    ) -> Option<Vec<Pending>> {
        let first = match self.carry.take() {
            Some(p) => p,
            None => input.recv().await?,
        };
        let max = self.shared.max_batch.load(Ordering::Relaxed) as usize;
        let max_bytes = self.shared.max_bytes.load(Ordering::Relaxed) as usize;
        let mut bytes = size_of_entry(&first);
        let mut batch = vec![first];
        while batch.len() < max {
            let Ok(p) = input.try_recv() else {
                break;
            };
            bytes += size_of_entry(&p);
            if bytes > max_bytes {
                self.carry = Some(p);
                break;
            }
            batch.push(p);
        }
        Some(batch)
    }

    /// The stream failed before its first response: it could not be
    /// opened. Its entries, and those waiting, go out as unary Renews;
    /// `UNIMPLEMENTED` makes that permanent.
    fn refused(
        &mut self,
        status: tonic::Status,
        sent: VecDeque<Vec<Pending>>,
        mut input: mpsc::UnboundedReceiver<Pending>,
    ) {
        if status.code() == Code::Unimplemented {
            self.shared.unary_only.store(true, Ordering::Relaxed);
        }
        self.too_large(&status);
        input.close();
        let waiting = std::iter::from_fn(|| input.try_recv().ok());
        let carried = self.carry.take();
        for p in sent.into_iter().flatten().chain(carried).chain(waiting) {
            let _ = p.reply.send(Answer::Unary);
        }
    }

    /// Halves the batch's entries and bytes after `REQUEST_TOO_LARGE`.
    fn too_large(&self, status: &tonic::Status) {
        if Error::from_status(status).reason() == Reason::RequestTooLarge {
            for max in [&self.shared.max_batch, &self.shared.max_bytes] {
                let now = max.load(Ordering::Relaxed);
                max.store((now / 2).max(1), Ordering::Relaxed);
            }
        }
    }
}

/// What `p`'s entry adds to a request's encoding.
fn size_of_entry(p: &Pending) -> usize {
    prost::Message::encoded_len(&p.entry) + ENTRY_OVERHEAD
}

/// The request of a batch; each entry's id is its index.
fn request_of(batch: &[Pending]) -> KeepAliveRequest {
    KeepAliveRequest {
        entries: batch
            .iter()
            .enumerate()
            .map(|(i, p)| KeepAliveEntry {
                id: i as u64,
                ..p.entry.clone()
            })
            .collect(),
    }
}

/// Hands each entry of `batch` its result from `response`.
fn answer(batch: Vec<Pending>, mut response: KeepAliveResponse) {
    expand(&mut response.results);
    let mut results: Vec<Option<Outcome>> = vec![None; batch.len()];
    for result in response.results {
        if let Some(slot) = results.get_mut(result.id as usize) {
            *slot = result.outcome;
        }
    }
    for (p, outcome) in batch.into_iter().zip(results) {
        let result = match outcome {
            Some(Outcome::Lease(lease)) => Ok(lease),
            Some(Outcome::Error(e)) => Err(Error::from_keepalive(e)),
            None => Err(broken("the KeepAlive response has no result for the entry")),
        };
        let _ = p.reply.send(Answer::Done(Box::new(result)));
    }
}

/// Fills in each error that repeats an earlier one of the same response
/// (`same_as`: the server sends those as code, reason and the earlier
/// result's index) with that one's message, metadata and retry delay.
fn expand(results: &mut [crate::proto::KeepAliveResult]) {
    for i in 0..results.len() {
        let Some(Outcome::Error(e)) = &results[i].outcome else {
            continue;
        };
        let Some(j) = e.same_as.map(|j| j as usize).filter(|&j| j < i) else {
            continue;
        };
        let Some(Outcome::Error(first)) = results[j].outcome.clone() else {
            continue;
        };
        if let Some(Outcome::Error(e)) = &mut results[i].outcome {
            e.message = first.message;
            e.metadata = first.metadata;
            e.retry_delay = first.retry_delay;
            e.same_as = None;
        }
    }
}

/// Fails every entry of `batch` with a retryable error.
fn fail(batch: Vec<Pending>, why: &str) {
    for p in batch {
        let _ = p.reply.send(Answer::Done(Box::new(Err(broken(why)))));
    }
}

/// The retryable error of an entry whose stream broke.
fn broken(why: &str) -> Error {
    Error::local(Code::Unavailable, Reason::Unspecified, why)
}

/// The request half of the stream, fed by the stream task.
struct Outgoing(mpsc::UnboundedReceiver<KeepAliveRequest>);

impl Stream for Outgoing {
    type Item = KeepAliveRequest;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientConfig;
    use crate::proto::lease_service_client::LeaseServiceClient;
    use tonic_types::StatusExt;

    /// A task over a channel that is never used (batching sends nothing).
    fn task() -> Task {
        let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
        let credentials = ClientConfig::new("127.0.0.1:9").credentials();
        let keepalive = KeepAlive::new(LeaseServiceClient::with_interceptor(channel, credentials));
        Task {
            stub: keepalive.stub.clone(),
            shared: keepalive.shared.clone(),
            carry: None,
        }
    }

    /// An error sent as a reference to an earlier one gets its message,
    /// metadata and retry delay.
    #[test]
    fn repeated_errors_are_expanded() {
        use crate::proto::{KeepAliveError, KeepAliveResult};
        let error = |message: &str, field: &str, same_as| KeepAliveResult {
            id: 0,
            outcome: Some(Outcome::Error(KeepAliveError {
                code: 3,
                reason: "INVALID_NAME".into(),
                message: message.into(),
                metadata: [("field".to_string(), field.to_string())]
                    .into_iter()
                    .filter(|(_, v)| !v.is_empty())
                    .collect(),
                retry_delay: None,
                same_as,
            })),
        };
        let mut results = vec![error("bad name", "name", None), error("", "", Some(0))];
        expand(&mut results);
        assert_eq!(results[1], error("bad name", "name", None));
    }

    #[tokio::test]
    async fn batches_stay_within_the_request_bound_and_keep_the_order() {
        let mut task = task();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut answers = Vec::new();
        for i in 0..1500u64 {
            let (reply, answer) = oneshot::channel();
            let entry = KeepAliveEntry {
                name: format!("jobs.some-rather-long-lease-name.{i}"),
                expected_revision: 1_000_000 + i,
                lease_key: "k".repeat(32),
                ..Default::default()
            };
            tx.send(Pending { entry, reply }).unwrap();
            answers.push(answer);
        }
        drop(tx);
        let mut names = Vec::new();
        let mut batches = 0;
        while let Some(batch) = task.batch(&mut rx).await {
            let request = request_of(&batch);
            assert!(
                prost::Message::encoded_len(&request) <= MAX_BATCH_BYTES,
                "a request of {} entries is too large",
                batch.len()
            );
            assert!(batch.len() <= MAX_BATCH);
            names.extend(batch.into_iter().map(|p| p.entry.name));
            batches += 1;
        }
        assert_eq!(names.len(), 1500, "no entry is lost between batches");
        for (i, name) in names.iter().enumerate() {
            assert!(name.ends_with(&format!(".{i}")), "out of order at {i}");
        }
        assert!(
            batches < 30,
            "entries waiting together share requests: {batches}"
        );

        // After a REQUEST_TOO_LARGE, batches are halved.
        task.too_large(&tonic::Status::with_error_details(
            Code::ResourceExhausted,
            "too large",
            tonic_types::ErrorDetails::with_error_info(
                "REQUEST_TOO_LARGE",
                crate::error::DOMAIN,
                std::collections::HashMap::<String, String>::new(),
            ),
        ));
        assert_eq!(
            task.shared.max_bytes.load(Ordering::Relaxed) as usize,
            MAX_BATCH_BYTES / 2
        );
        assert_eq!(
            task.shared.max_batch.load(Ordering::Relaxed) as usize,
            MAX_BATCH / 2
        );
    }
}
