//! `tenure.v1.LeaseService/KeepAlive`: many renewals over one stream.
//!
//! A unary Renew costs a whole gRPC exchange per holding; a client holding
//! many leases (or many sessions) sends them all here instead, a batch per
//! message. Each entry is renewed exactly as a unary Renew would be: the
//! same validation, the same per-name authorization (`renew`), the same
//! [`crate::lease::Leases::renew`] (key check, CAS on the expected revision,
//! TTL bounds), and its error is what Renew would have returned, carried as
//! a per-entry result instead of the status of the call.
//!
//! Pipelining: the entries of a message run concurrently, and so do the
//! messages of a stream, so their NATS writes are all published before the
//! acks are awaited; responses still go out in request order
//! ([`FuturesOrdered`]), one per request, results in entry order.
//!
//! Bounds: a stream slot per replica and per identity
//! ([`Class::KeepAliveStream`], refused with TOO_MANY_REQUESTS and a
//! RetryInfo); entries per message (`--max-keepalive-entries`, else the
//! stream ends with REQUEST_TOO_LARGE); renewals in flight per stream
//! (`--max-keepalive-in-flight`: past it the stream is not read, so HTTP/2
//! flow control pushes back on the client); an idle timeout
//! (`--keepalive-idle-timeout`); a few finished responses buffered; and
//! `--max-request-bytes` per message, as for every request. Each message
//! takes a renewal permit ([`Class::Renewal`]) while it runs, so stream
//! renewals use the same reserve as unary ones and a flood of Acquires
//! cannot starve them. Each message has one span (never one per entry);
//! each entry is counted in the RPC metrics with method `KeepAlive`.

use std::pin::Pin;
use std::sync::Arc;

use futures::stream::FuturesOrdered;
use futures::Stream;
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_types::StatusExt;
use tracing::Instrument;

use super::auth::{clip, Auth, Caller, Target};
use super::convert::lease;
use super::limits::{CallLimits, CallPermit, Class};
use super::validate;
use crate::config::{Action, KeepAliveBounds, Limits};
use crate::error::{Error, Reason};
use crate::lease::{Holding, Shards};
use crate::observe::METRICS;
use crate::proto;

/// The metrics label of each renewal over a stream.
const METHOD: &str = "KeepAlive";
/// Finished responses buffered for a client that reads slowly; past them the
/// stream waits for the client.
const RESPONSE_BUFFER: usize = 4;

/// The response stream of KeepAlive.
pub type KeepAliveStream =
    Pin<Box<dyn Stream<Item = Result<proto::KeepAliveResponse, Status>> + Send>>;

/// What one stream's work needs, shared by its messages.
struct Renewer {
    /// The lease protocol over each shard.
    shards: Shards,
    /// TTL bounds.
    limits: Limits,
    /// Per-entry authorization.
    auth: Arc<Auth>,
    /// The renewal permit of each message.
    calls: Arc<CallLimits>,
    /// Who opened the stream.
    caller: Caller,
}

/// Opens a KeepAlive stream: authenticates the caller, refuses new streams
/// during shutdown, takes the stream's slot, and runs the stream in a task
/// of its own until the client half-closes (after every pending request is
/// answered), goes away, breaks a bound, or the server shuts down.
pub(super) fn open(
    request: Request<Streaming<proto::KeepAliveRequest>>,
    shards: &Shards,
    limits: &Limits,
    auth: &Arc<Auth>,
    calls: &Arc<CallLimits>,
    shutdown: &CancellationToken,
    bounds: KeepAliveBounds,
) -> Result<Response<KeepAliveStream>, Status> {
    let caller = auth.authenticate(&request)?;
    if shutdown.is_cancelled() {
        return Err(shutting_down().into());
    }
    let slot = calls.admit(Class::KeepAliveStream, &caller.identity)?;
    let renewer = Arc::new(Renewer {
        shards: shards.clone(),
        limits: *limits,
        auth: auth.clone(),
        calls: calls.clone(),
        caller,
    });
    let (tx, rx) = mpsc::channel(RESPONSE_BUFFER);
    let inbound = request.into_inner();
    tokio::spawn(run(renewer, inbound, tx, bounds, shutdown.clone(), slot));
    Ok(Response::new(
        Box::pin(ReceiverStream::new(rx)) as KeepAliveStream
    ))
}

/// One renewal, as Renew and each KeepAlive entry do it: the fields are
/// validated (the name was checked before authorization), then the holding
/// is renewed through the lease protocol.
pub(super) async fn renew(
    shards: &Shards,
    limits: &Limits,
    name: &str,
    expected_revision: u64,
    lease_key: &str,
    ttl: Option<&prost_types::Duration>,
    slot: u32,
) -> Result<Holding, Error> {
    let name = validate::name(name)?;
    let expected = validate::revision(expected_revision)?;
    let key = validate::presented_key(lease_key)?;
    let ttl_s = match ttl {
        Some(ttl) => Some(validate::ttl(Some(ttl), limits, limits.default_ttl_s)?),
        None => None,
    };
    let leases = shards.of(name);
    match validate::slot(slot, limits)? {
        0 => leases.renew(name, expected, key, ttl_s).await,
        slot => leases.renew_slot(name, slot, expected, key, ttl_s).await,
    }
}

/// One stream's task: [`serve`], then frees the stream's `slot` in the
/// stream budget *before* the client can see the stream end, so a client
/// that saw its stream end may open another at once.
async fn run(
    renewer: Arc<Renewer>,
    inbound: Streaming<proto::KeepAliveRequest>,
    tx: mpsc::Sender<Result<proto::KeepAliveResponse, Status>>,
    bounds: KeepAliveBounds,
    shutdown: CancellationToken,
    slot: CallPermit,
) {
    let end = serve(renewer, inbound, &tx, bounds, shutdown).await;
    drop(slot);
    if let Some(status) = end {
        let _ = tx.send(Err(status)).await;
    }
}

/// One stream's loop: reads requests while at least `max_entries` more
/// renewals fit under `max_in_flight`, answers them in order, and returns
/// the status to end the stream with, if any (`None`: end with OK, or the
/// client is gone).
async fn serve(
    renewer: Arc<Renewer>,
    mut inbound: Streaming<proto::KeepAliveRequest>,
    tx: &mpsc::Sender<Result<proto::KeepAliveResponse, Status>>,
    bounds: KeepAliveBounds,
    shutdown: CancellationToken,
) -> Option<Status> {
    let mut pending = FuturesOrdered::new();
    let mut in_flight = 0usize;
    // Set when the client half-closed or the stream must end: no more
    // requests are read; `fatal` is sent once the pending ones are answered.
    let mut reading = true;
    let mut fatal: Option<Status> = None;
    let idle = tokio::time::sleep(bounds.idle_timeout);
    tokio::pin!(idle);
    loop {
        if !reading && pending.is_empty() {
            break;
        }
        let room = in_flight + bounds.max_entries <= bounds.max_in_flight;
        tokio::select! {
            biased;
            () = shutdown.cancelled() => {
                fatal = Some(shutting_down().into());
                break;
            }
            () = tx.closed() => return None,
            Some((n, response)) = pending.next(), if !pending.is_empty() => {
                in_flight -= n;
                if pending.is_empty() {
                    idle.as_mut().reset(Instant::now() + bounds.idle_timeout);
                }
                tokio::select! {
                    sent = tx.send(Ok(response)) => if sent.is_err() { return None },
                    () = shutdown.cancelled() => {
                        fatal = Some(shutting_down().into());
                        break;
                    }
                }
            }
            message = inbound.message(), if reading && room => {
                idle.as_mut().reset(Instant::now() + bounds.idle_timeout);
                match message {
                    Ok(Some(request)) => {
                        let n = request.entries.len();
                        if n > bounds.max_entries {
                            METRICS.rejected("keepalive_entries");
                            fatal = Some(too_many_entries(n, bounds.max_entries).into());
                            reading = false;
                        } else {
                            in_flight += n;
                            let renewer = renewer.clone();
                            pending.push_back(async move { (n, renewer.batch(request).await) });
                        }
                    }
                    Ok(None) => reading = false,
                    Err(status) => {
                        fatal = inbound_error(status);
                        reading = false;
                    }
                }
            }
            () = &mut idle, if reading && pending.is_empty() => {
                fatal = Some(idle_too_long(bounds.idle_timeout).into());
                break;
            }
        }
    }
    fatal
}

impl Renewer {
    /// Answers one request: takes a renewal permit, then renews every entry
    /// concurrently. Without a permit (the replica is at its limits) every
    /// entry fails with TOO_MANY_REQUESTS and its RetryInfo delay.
    async fn batch(&self, request: proto::KeepAliveRequest) -> proto::KeepAliveResponse {
        // Debug, like the RPC spans: traces export it, info logs skip it.
        let span = tracing::debug_span!(
            "keepalive",
            otel.name = METHOD,
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.method = METHOD,
            identity = clip(&self.caller.identity),
            entries = request.entries.len(),
            failed = tracing::field::Empty,
        );
        async {
            let started = Instant::now();
            let results = match self.calls.admit(Class::Renewal, &self.caller.identity) {
                // One entry (the common message of a session helper) needs
                // no join: its future is not moved into a joined set.
                Ok(_permit) => match request.entries.as_slice() {
                    [one] => vec![self.entry(one, started).await],
                    entries => {
                        let renewals = entries.iter().map(|e| self.entry(e, started));
                        futures::future::join_all(renewals).await
                    }
                },
                Err(err) => request
                    .entries
                    .iter()
                    .map(|e| outcome(e.id, Err(err.clone()), started))
                    .collect(),
            };
            let failed = results
                .iter()
                .filter(|r| matches!(r.outcome, Some(proto::keep_alive_result::Outcome::Error(_))))
                .count();
            tracing::Span::current().record("failed", failed);
            proto::KeepAliveResponse { results }
        }
        .instrument(span)
        .await
    }

    /// Renews one entry as a unary Renew would: name, then the caller's
    /// `renew` grant on it, then the other fields and the renewal.
    async fn entry(&self, e: &proto::KeepAliveEntry, started: Instant) -> proto::KeepAliveResult {
        let result = async {
            let name = validate::name(&e.name)?;
            self.auth
                .authorize(&self.caller, Action::Renew, Target::Name(name))?;
            renew(
                &self.shards,
                &self.limits,
                name,
                e.expected_revision,
                &e.lease_key,
                e.ttl.as_ref(),
                e.slot,
            )
            .await
        }
        .await;
        outcome(e.id, result.map(|h| lease(&h)), started)
    }
}

/// The result of entry `id`, counted in the RPC metrics.
fn outcome(
    id: u64,
    result: Result<proto::Lease, Error>,
    started: Instant,
) -> proto::KeepAliveResult {
    use proto::keep_alive_result::Outcome;
    let (code, outcome) = match result {
        Ok(l) => (Code::Ok, Outcome::Lease(l)),
        Err(err) => (err.reason.code(), Outcome::Error(entry_error(err))),
    };
    METRICS.rpc(METHOD, code, started.elapsed());
    proto::KeepAliveResult {
        id,
        outcome: Some(outcome),
    }
}

/// An entry's error, as the status of a unary Renew would carry it.
fn entry_error(err: Error) -> proto::KeepAliveError {
    let status = Status::from(err.clone());
    let reason = status
        .get_details_error_info()
        .map(|info| info.reason)
        .unwrap_or_default();
    proto::KeepAliveError {
        code: status.code() as i32,
        reason,
        message: err.message,
        metadata: err
            .metadata
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        retry_delay: err.retry_after.map(|d| prost_types::Duration {
            seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos() as i32,
        }),
    }
}

/// What ends a stream whose request could not be read: the message was too
/// large or undecodable (the caller's fault, said so), a refusal of the
/// limit layer (shutdown; it carries its ErrorInfo) as it is, or nothing
/// when the client went away.
fn inbound_error(status: Status) -> Option<Status> {
    match status.code() {
        Code::OutOfRange => {
            METRICS.rejected("request_bytes");
            Some(
                Error::new(
                    Reason::RequestTooLarge,
                    "a KeepAlive request message is larger than this server accepts (--max-request-bytes); send fewer entries per message",
                )
                .into(),
            )
        }
        Code::Internal => Some(
            Error::new(
                Reason::InvalidArgument,
                format!(
                    "a KeepAlive request could not be decoded as a tenure.v1 message: {}; send valid protobuf messages",
                    clip(status.message())
                ),
            )
            .with("field", "request")
            .into(),
        ),
        _ if status.get_details_error_info().is_some() => Some(status),
        _ => None,
    }
}

/// REQUEST_TOO_LARGE for a message with too many entries.
fn too_many_entries(n: usize, max: usize) -> Error {
    Error::new(
        Reason::RequestTooLarge,
        format!(
            "a KeepAlive request has {n} entries, over this server's limit of {max} (--max-keepalive-entries); split it into several messages"
        ),
    )
    .with("limit", max)
    .with("field", "entries")
}

/// The end of a stream silent for too long.
fn idle_too_long(timeout: Duration) -> Error {
    Error::new(
        Reason::InvalidArgument,
        format!(
            "the KeepAlive stream sent no request for {timeout:?} (--keepalive-idle-timeout); reopen it when there is something to renew"
        ),
    )
    .with("field", "request")
}

/// The end of calls cut off by shutdown.
fn shutting_down() -> Error {
    Error::new(
        Reason::ShuttingDown,
        "the server is shutting down; retry on another replica",
    )
}
