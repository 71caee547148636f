//! The loop of one KeepAlive stream: reads request messages while the
//! stream's bounds leave room for their replies, runs them concurrently,
//! and sends the replies in request order.
//!
//! Room for a request means: the renewals in flight plus a whole message
//! fit under `--max-keepalive-in-flight`, and its reply fits under the
//! reply budget ([`StreamReplies::room_for`]). Without room the stream is
//! simply not read until a reply is computed or taken by the client; a
//! client that never reads its replies therefore stops being read, and
//! once it has nothing in flight the idle timeout ends the stream.

use std::sync::Arc;

use futures::stream::FuturesOrdered;
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status, Streaming};
use tonic_types::StatusExt;

use super::batch::{weight, Renewer, ENTRY_ESTIMATE};
use super::shutting_down;
use crate::api::auth::clip;
use crate::api::limits::StreamReplies;
use crate::config::KeepAliveBounds;
use crate::error::{Error, Reason};
use crate::observe::METRICS;
use crate::proto;

/// Where a stream's replies go, each with the bytes it was charged.
pub(super) type Outbound = mpsc::Sender<(Result<proto::KeepAliveResponse, Status>, usize)>;

/// The reply estimate of a message of `n` entries.
fn estimate(n: usize) -> usize {
    16 + n * ENTRY_ESTIMATE
}

/// One stream's loop: reads requests while there is room for them,
/// answers them in order, and returns the status to end the stream with,
/// if any (`None`: end with OK, or the client is gone).
pub(super) async fn serve(
    renewer: Arc<Renewer>,
    mut inbound: Streaming<proto::KeepAliveRequest>,
    tx: &Outbound,
    replies: &StreamReplies,
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
        let room = in_flight + bounds.max_entries <= bounds.max_in_flight
            && replies.room_for(estimate(bounds.max_entries));
        tokio::select! {
            biased;
            () = shutdown.cancelled() => {
                fatal = Some(shutting_down().into());
                break;
            }
            () = tx.closed() => return None,
            Some((n, charged, response)) = pending.next(), if !pending.is_empty() => {
                in_flight -= n;
                if pending.is_empty() {
                    idle.as_mut().reset(Instant::now() + bounds.idle_timeout);
                }
                let size = weight(&response);
                replies.computed(charged, size);
                tokio::select! {
                    sent = tx.send((Ok(response), size)) => if sent.is_err() { return None },
                    () = shutdown.cancelled() => {
                        fatal = Some(shutting_down().into());
                        break;
                    }
                }
            }
            // A reply was taken by the client: there may be room again.
            () = replies.taken(), if reading && !room => {}
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
                            let charged = estimate(n);
                            replies.computing(charged);
                            let renewer = renewer.clone();
                            pending.push_back(async move {
                                (n, charged, renewer.batch(request).await)
                            });
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
