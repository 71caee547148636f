//! The limits of a request before it is decoded: [`LimitLayer`], a tower
//! layer around the whole gRPC server.
//!
//! It refuses oversized metadata; gives the request message
//! `--request-body-timeout` to arrive after the headers (and cuts it short
//! at shutdown); counts open health `Watch` streams and ends them at
//! shutdown; marks the connection busy while a call runs; and rewrites
//! tonic's own refusals (message too large, undecodable message) into
//! statuses with an ErrorInfo. It works on HTTP requests and bodies, not
//! on lease calls, which is why it is apart from the per-call budgets: it
//! holds no permit for them, since a caller that has not been
//! authenticated, or whose request has not arrived, holds nothing others
//! need.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::body::Body;
use tonic::transport::server::TlsConnectInfo;
use tonic::{Code, Status};

use super::watches::WATCH_RETRY;
use crate::api::listener::{CallGuard, ConnInfo};
use crate::config::Config;
use crate::error::{Error, Reason};
use crate::observe::METRICS;

/// What HTTP/2 and gRPC framing add per header (the HPACK entry overhead).
const HEADER_OVERHEAD: usize = 32;
/// The lease service's client-streaming method.
const KEEPALIVE: &str = "/tenure.v1.LeaseService/KeepAlive";
/// The health service's streaming method.
const HEALTH_WATCH: &str = "/grpc.health.v1.Health/Watch";

/// The tower layer applying the per-request limits to every call.
#[derive(Clone)]
pub struct LimitLayer {
    /// Most header bytes (names, values, 32 bytes per entry).
    max_metadata_bytes: usize,
    /// How long a request message may take to arrive.
    body_timeout: Duration,
    /// One permit per open health `Watch`.
    health_watches: Arc<Semaphore>,
    /// The configured number, for messages.
    max_health_watches: usize,
    /// Cancelled at shutdown: request bodies still arriving are cut off
    /// and health watches end.
    shutdown: CancellationToken,
}

impl LimitLayer {
    /// The limits of `config`; `shutdown` ends what would otherwise hold
    /// the server open after SIGTERM.
    pub fn new(config: &Config, shutdown: CancellationToken) -> LimitLayer {
        LimitLayer {
            max_metadata_bytes: config.max_metadata_bytes,
            body_timeout: config.request_body_timeout,
            health_watches: Arc::new(Semaphore::new(config.max_health_watches)),
            max_health_watches: config.max_health_watches,
            shutdown,
        }
    }
}

impl<S> tower::Layer<S> for LimitLayer {
    type Service = LimitService<S>;

    fn layer(&self, inner: S) -> LimitService<S> {
        LimitService {
            inner,
            limits: self.clone(),
        }
    }
}

/// The service [`LimitLayer`] wraps around the gRPC server.
#[derive(Clone)]
pub struct LimitService<S> {
    /// The gRPC server.
    inner: S,
    /// The limits.
    limits: LimitLayer,
}

impl<S> tower::Service<http::Request<Body>> for LimitService<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let header_bytes: usize = request
            .headers()
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + HEADER_OVERHEAD)
            .sum();
        if header_bytes > self.limits.max_metadata_bytes {
            METRICS.rejected("metadata_bytes");
            let err = Error::new(
                Reason::MetadataTooLarge,
                format!(
                    "request metadata is {header_bytes} bytes, over this server's limit of {}; send less metadata",
                    self.limits.max_metadata_bytes
                ),
            )
            .with("limit_bytes", self.limits.max_metadata_bytes);
            return refuse(err);
        }
        // The connection is busy (not idle) while the call runs.
        let conn = request.extensions().get::<ConnInfo>().cloned().or_else(|| {
            request
                .extensions()
                .get::<TlsConnectInfo<ConnInfo>>()
                .map(|t| t.get_ref().clone())
        });
        let guard = conn.as_ref().map(ConnInfo::call);
        let path = request.uri().path();
        let mut hold = Hold {
            _guard: guard,
            health_watch: None,
            ends_at_shutdown: None,
        };
        if path == HEALTH_WATCH {
            match self.limits.health_watches.clone().try_acquire_owned() {
                Ok(permit) => {
                    hold.health_watch = Some(permit);
                    hold.ends_at_shutdown =
                        Some(Box::pin(self.limits.shutdown.clone().cancelled_owned()));
                }
                Err(_) => {
                    METRICS.rejected("health_watches");
                    return refuse(
                        Error::new(
                            Reason::TooManyWatches,
                            format!(
                                "this replica has {} health watches open, its limit (--max-health-watches); use Check, or retry later",
                                self.limits.max_health_watches
                            ),
                        )
                        .with("limit", self.limits.max_health_watches)
                        .retry_after(WATCH_RETRY),
                    );
                }
            }
        }
        // Reflection and KeepAlive stream their requests (KeepAlive bounds
        // its own silences); everything else sends one message, which must
        // arrive in time.
        let request = if path.starts_with("/grpc.reflection.") || path == KEEPALIVE {
            request
        } else {
            let timeout = self.limits.body_timeout;
            let shutdown = self.limits.shutdown.clone();
            request.map(|body| Body::new(TimedBody::new(body, timeout, shutdown)))
        };
        let fut = self.inner.call(request);
        Box::pin(async move {
            let response = fut.await?;
            let response = rewrite_refusal(response);
            Ok(response.map(|body| Body::new(HeldBody { inner: body, hold })))
        })
    }
}

/// A response carrying `err` as a gRPC status.
fn refuse<E: Send + 'static>(err: Error) -> BoxFuture<'static, Result<http::Response<Body>, E>> {
    let status = Status::from(err);
    Box::pin(async move { Ok(status.into_http()) })
}

/// Replaces tonic's own refusals, which carry no ErrorInfo, with Tenure's:
/// "message too large" (OUT_OF_RANGE) becomes RESOURCE_EXHAUSTED with
/// reason REQUEST_TOO_LARGE, and a request tonic could not decode (bad
/// protobuf, invalid UTF-8, truncated framing, no message at all; INTERNAL)
/// becomes INVALID_ARGUMENT: the caller's fault, not the server's.
fn rewrite_refusal(response: http::Response<Body>) -> http::Response<Body> {
    let headers = response.headers();
    // Tenure's own statuses always carry details; tonic's never do.
    if headers.contains_key("grpc-status-details-bin") {
        return response;
    }
    let Some(status) = Status::from_header_map(headers) else {
        return response;
    };
    let message = status.message();
    match status.code() {
        Code::OutOfRange if message.contains("message length too large") => {
            METRICS.rejected("request_bytes");
            Status::from(Error::new(
                Reason::RequestTooLarge,
                "the request message is larger than this server accepts (--max-request-bytes); send a smaller request",
            ))
            .into_http()
        }
        Code::Internal if is_undecodable(message) => Status::from(
            Error::new(
                Reason::InvalidArgument,
                format!(
                    "the request could not be decoded as a tenure.v1 message: {}; send a valid protobuf message",
                    crate::api::auth::clip(message)
                ),
            )
            .with("field", "request"),
        )
        .into_http(),
        _ => response,
    }
}

/// Whether tonic's INTERNAL `message` says the request could not be read.
fn is_undecodable(message: &str) -> bool {
    [
        "failed to decode Protobuf message",
        "Missing request message",
        "Unexpected EOF decoding stream",
        "protocol error: received message with",
    ]
    .iter()
    .any(|m| message.starts_with(m))
}

/// What a call holds until its response has been sent (for streams: until
/// the stream ends).
struct Hold {
    /// Marks the connection busy.
    _guard: Option<CallGuard>,
    /// The slot of a health watch.
    health_watch: Option<OwnedSemaphorePermit>,
    /// For health watches: fires at shutdown, ending the stream.
    ends_at_shutdown: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
}

/// A response body that keeps its [`Hold`] until it is done, and for health
/// watches ends with UNAVAILABLE / SHUTTING_DOWN at shutdown.
struct HeldBody {
    /// The response.
    inner: Body,
    /// What the call holds.
    hold: Hold,
}

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        let polled = poll_until(&mut this.inner, cx, |cx| {
            let end = this.hold.ends_at_shutdown.as_mut()?;
            end.as_mut().poll(cx).is_ready().then_some(())
        });
        match polled {
            Cut::Inner(ready) => ready,
            Cut::Pending => Poll::Pending,
            Cut::Stop(()) => {
                this.hold.ends_at_shutdown = None;
                this.hold.health_watch = None;
                this.inner = Body::empty();
                let mut trailers = http::HeaderMap::new();
                let _ = shutting_down().add_header(&mut trailers);
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.hold.ends_at_shutdown.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What [`poll_until`] saw.
enum Cut<T> {
    /// The body had a frame, an error or its end.
    Inner(Poll<Option<Result<Frame<Bytes>, Status>>>),
    /// The body is pending and `stop` did not fire.
    Pending,
    /// The body is pending and `stop` fired with this.
    Stop(T),
}

/// The one poll shape of [`HeldBody`] and [`TimedBody`]: the body first;
/// only while it is pending, `stop` (which registers its wakers).
fn poll_until<T>(
    inner: &mut Body,
    cx: &mut Context<'_>,
    stop: impl FnOnce(&mut Context<'_>) -> Option<T>,
) -> Cut<T> {
    match http_body::Body::poll_frame(Pin::new(inner), cx) {
        Poll::Pending => match stop(cx) {
            Some(why) => Cut::Stop(why),
            None => Cut::Pending,
        },
        ready => Cut::Inner(ready),
    }
}

/// The status of calls cut off by shutdown.
fn shutting_down() -> Status {
    Status::from(Error::new(
        Reason::ShuttingDown,
        "the server is shutting down; retry on another replica",
    ))
}

/// A request body that must arrive within the body timeout and is cut off
/// at shutdown.
///
/// The timers are armed only when the body is first found pending: a unary
/// request usually arrives with its headers, and then no timer entry and no
/// shutdown waiter is registered (and removed again) for it at all. The
/// deadline still counts from the headers (`started`).
struct TimedBody {
    /// The request body.
    inner: Body,
    /// When the headers arrived: the deadline counts from here.
    started: Instant,
    /// The timeout, for the deadline and the message.
    timeout: Duration,
    /// Cancelled at shutdown.
    shutdown: CancellationToken,
    /// The armed timers, once the body was pending.
    timers: Option<Timers>,
    /// Whether the body has ended (or failed): the timers are off.
    done: bool,
}

/// The two timers of a [`TimedBody`] still arriving.
struct Timers {
    /// Fires when the body is late.
    deadline: Pin<Box<Sleep>>,
    /// Fires at shutdown.
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
}

/// Why a [`TimedBody`] was cut off.
enum Late {
    /// The server is shutting down.
    Shutdown,
    /// The body timeout passed.
    Timeout,
}

impl TimedBody {
    fn new(inner: Body, timeout: Duration, shutdown: CancellationToken) -> TimedBody {
        TimedBody {
            inner,
            started: Instant::now(),
            timeout,
            shutdown,
            timers: None,
            done: false,
        }
    }
}

/// Arms `timers` if they are not yet (deadline `started + timeout`), and
/// polls them.
fn poll_late(
    timers: &mut Option<Timers>,
    started: Instant,
    timeout: Duration,
    shutdown: &CancellationToken,
    cx: &mut Context<'_>,
) -> Option<Late> {
    let timers = timers.get_or_insert_with(|| Timers {
        deadline: Box::pin(tokio::time::sleep_until(started + timeout)),
        shutdown: Box::pin(shutdown.clone().cancelled_owned()),
    });
    if timers.shutdown.as_mut().poll(cx).is_ready() {
        return Some(Late::Shutdown);
    }
    timers
        .deadline
        .as_mut()
        .poll(cx)
        .is_ready()
        .then_some(Late::Timeout)
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if this.done {
            return Pin::new(&mut this.inner).poll_frame(cx);
        }
        let polled = poll_until(&mut this.inner, cx, |cx| {
            poll_late(
                &mut this.timers,
                this.started,
                this.timeout,
                &this.shutdown,
                cx,
            )
        });
        match polled {
            Cut::Pending => Poll::Pending,
            Cut::Inner(ready) => {
                if !matches!(ready, Poll::Ready(Some(Ok(_)))) || this.inner.is_end_stream() {
                    this.done = true;
                    this.timers = None;
                }
                ready
            }
            Cut::Stop(late) => {
                this.done = true;
                this.timers = None;
                Poll::Ready(Some(Err(match late {
                    Late::Shutdown => shutting_down(),
                    Late::Timeout => {
                        METRICS.rejected("request_body_timeout");
                        Status::from(
                            Error::new(
                                Reason::InvalidArgument,
                                format!(
                                    "the request message did not arrive within {:?} of its headers (--request-body-timeout); send the whole request at once",
                                    this.timeout
                                ),
                            )
                            .with("field", "request"),
                        )
                    }
                })))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
