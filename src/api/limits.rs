//! Protection against misbehaving clients. Each refusal is
//! RESOURCE_EXHAUSTED with an ErrorInfo reason; refusals that clear by
//! themselves (busy, too many watches) also carry a `google.rpc.RetryInfo`
//! with a back-off. Size refusals do not: the same request will never fit.
//!
//! Three places, from the outside in:
//!
//! - [`super::listener`]: open connections, and how long a connection may
//!   stay silent or idle.
//! - [`LimitLayer`], a tower layer around the whole gRPC server, before a
//!   request is decoded: metadata size; how long the request message may
//!   take to arrive after the headers (`--request-body-timeout`; also cut
//!   short at shutdown); open health `Watch` streams, which it ends at
//!   shutdown; and the rewriting of tonic's own refusals (message too
//!   large, undecodable message) into statuses with an ErrorInfo. It holds
//!   no permit for lease calls: a caller that has not been authenticated,
//!   or whose request has not arrived, holds nothing others need.
//! - [`CallLimits`], taken in the RPC wrapper after authentication,
//!   validation and authorization, with the request in hand: short calls
//!   per replica and per identity; waiting Acquires on a budget of their
//!   own; and a reserve through which Renew and Release get past a full
//!   short budget, so holders keep their leases while new work is shed.
//!   KeepAlive streams take a permit of their own budget for their
//!   lifetime, and each of their messages a renewal permit while it runs.
//!   [`WatchLimits`] counts the lease watch streams for their lifetime.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
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

use super::listener::{CallGuard, ConnInfo};
use crate::config::Config;
use crate::error::{Error, Reason};
use crate::observe::METRICS;

/// How long a caller refused for load should back off.
pub const BUSY_RETRY: Duration = Duration::from_millis(250);
/// How long a caller refused a watch should back off.
pub const WATCH_RETRY: Duration = Duration::from_secs(5);
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
    type Service = Limit<S>;

    fn layer(&self, inner: S) -> Limit<S> {
        Limit {
            inner,
            limits: self.clone(),
        }
    }
}

/// The service [`LimitLayer`] wraps around the gRPC server.
#[derive(Clone)]
pub struct Limit<S> {
    /// The gRPC server.
    inner: S,
    /// The limits.
    limits: LimitLayer,
}

impl<S> tower::Service<http::Request<Body>> for Limit<S>
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
                    super::auth::clip(message)
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

/// Which budget a call takes its permit from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Every call but the two below.
    Short,
    /// Renew and Release: the short budget, else the reserve.
    Renewal,
    /// An Acquire with a `wait`.
    Waiting,
    /// A KeepAlive stream, for its lifetime (each of its messages also
    /// takes a [`Class::Renewal`] permit while it runs).
    KeepAliveStream,
}

/// The in-flight budgets of lease calls, taken after authentication and
/// once the request has been read.
pub struct CallLimits {
    /// Short calls.
    short: Arc<Budget>,
    /// Renew and Release beyond the short budget.
    reserve: Arc<Budget>,
    /// Waiting Acquires.
    waiting: Arc<Budget>,
    /// Open KeepAlive streams.
    keepalive_streams: Arc<Budget>,
}

impl CallLimits {
    /// The budgets of `config`; the per-identity shares apply only when
    /// callers are authenticated (`per_identity`): without auth every
    /// caller is `anonymous`.
    pub fn new(config: &Config, per_identity: bool) -> Arc<CallLimits> {
        let share = |n: usize| per_identity.then_some(n);
        Arc::new(CallLimits {
            short: Budget::new(
                "concurrent_requests",
                "--max-concurrent-requests",
                config.max_concurrent_requests,
                share(config.max_concurrent_requests_per_identity),
                "--max-concurrent-requests-per-identity",
            ),
            reserve: Budget::new(
                "reserved_renewals",
                "--reserved-renewals",
                config.reserved_renewals,
                None,
                "",
            ),
            waiting: Budget::new(
                "waiting_acquires",
                "--max-waiting-acquires",
                config.max_waiting_acquires,
                share(config.max_waiting_acquires_per_identity),
                "--max-waiting-acquires-per-identity",
            ),
            keepalive_streams: Budget::new(
                "keepalive_streams",
                "--max-keepalive-streams",
                config.max_keepalive_streams,
                share(config.max_keepalive_streams_per_identity),
                "--max-keepalive-streams-per-identity",
            ),
        })
    }

    /// A permit for one call of `class` by `identity`, or
    /// RESOURCE_EXHAUSTED / TOO_MANY_REQUESTS naming the limit.
    pub fn admit(&self, class: Class, identity: &str) -> Result<CallPermit, Error> {
        let taken = match class {
            Class::Short => self.short.take(identity),
            Class::Waiting => self.waiting.take(identity),
            Class::KeepAliveStream => self.keepalive_streams.take(identity),
            Class::Renewal => self
                .short
                .take(identity)
                .or_else(|_| self.reserve.take(identity)),
        };
        taken.map_err(|(metric, flag, limit)| {
            METRICS.rejected(metric);
            Error::new(
                Reason::TooManyRequests,
                format!(
                    "this server is running as many such calls as {flag} ({limit}) allows; retry after the RetryInfo delay, or on another replica"
                ),
            )
            .with("limit", flag)
            .retry_after(BUSY_RETRY)
        })
    }
}

/// One budget: a total, and optionally a share per identity.
struct Budget {
    /// Metric label of a refusal for the total.
    metric: &'static str,
    /// The flag setting the total.
    flag: &'static str,
    /// The total.
    total: usize,
    /// The share per identity, when applied.
    per_identity: Option<usize>,
    /// The flag setting the share.
    per_identity_flag: &'static str,
    /// Calls running: in total, and per identity.
    open: Mutex<(usize, HashMap<String, usize>)>,
}

/// What a refusal reports: metric label, flag, limit.
type Refusal = (&'static str, &'static str, usize);

impl Budget {
    fn new(
        metric: &'static str,
        flag: &'static str,
        total: usize,
        per_identity: Option<usize>,
        per_identity_flag: &'static str,
    ) -> Arc<Budget> {
        Arc::new(Budget {
            metric,
            flag,
            total,
            per_identity,
            per_identity_flag,
            open: Mutex::new((0, HashMap::new())),
        })
    }

    fn take(self: &Arc<Self>, identity: &str) -> Result<CallPermit, Refusal> {
        let mut open = self.open.lock().expect("call limits lock");
        if open.0 >= self.total {
            return Err((self.metric, self.flag, self.total));
        }
        if let Some(share) = self.per_identity {
            let mine = open.1.get(identity).copied().unwrap_or(0);
            if mine >= share {
                let metric = match self.metric {
                    "waiting_acquires" => "waiting_acquires_per_identity",
                    "keepalive_streams" => "keepalive_streams_per_identity",
                    _ => "concurrent_requests_per_identity",
                };
                return Err((metric, self.per_identity_flag, share));
            }
            *open.1.entry(identity.to_string()).or_default() += 1;
        }
        open.0 += 1;
        Ok(CallPermit {
            budget: self.clone(),
            identity: self.per_identity.map(|_| identity.to_string()),
        })
    }
}

/// One running call's place in a budget; dropping it frees the place.
pub struct CallPermit {
    /// The budget.
    budget: Arc<Budget>,
    /// The identity counted, when the budget has shares.
    identity: Option<String>,
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        let mut open = self.budget.open.lock().expect("call limits lock");
        open.0 -= 1;
        if let Some(identity) = &self.identity {
            if let Some(n) = open.1.get_mut(identity) {
                *n -= 1;
                if *n == 0 {
                    open.1.remove(identity);
                }
            }
        }
    }
}

/// Counts open watch streams per identity and in total.
pub struct WatchLimits {
    /// One permit per open stream.
    total: Arc<Semaphore>,
    /// The configured total, for messages.
    max_total: usize,
    /// Most streams per identity.
    max_per_identity: usize,
    /// identity → open streams.
    open: Mutex<HashMap<String, usize>>,
}

impl WatchLimits {
    /// The limits of `config`.
    pub fn new(config: &Config) -> Arc<WatchLimits> {
        Arc::new(WatchLimits {
            total: Arc::new(Semaphore::new(config.max_watch_streams)),
            max_total: config.max_watch_streams,
            max_per_identity: config.max_watch_streams_per_identity,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A permit for one more stream of `identity`, or RESOURCE_EXHAUSTED.
    pub fn acquire(self: &Arc<Self>, identity: &str) -> Result<WatchPermit, Error> {
        let mut open = self.open.lock().expect("watch limits lock");
        let mine = open.get(identity).copied().unwrap_or(0);
        if mine >= self.max_per_identity {
            METRICS.rejected("watch_streams_per_identity");
            return Err(Error::new(
                Reason::TooManyWatches,
                format!(
                    "identity {identity:?} already has {mine} watch streams open on this replica, its limit; close one or watch a wider prefix"
                ),
            )
            .with("limit", self.max_per_identity)
            .retry_after(WATCH_RETRY));
        }
        let Ok(permit) = self.total.clone().try_acquire_owned() else {
            METRICS.rejected("watch_streams");
            return Err(Error::new(
                Reason::TooManyWatches,
                format!(
                    "this replica has {} watch streams open, its limit; retry later or on another replica",
                    self.max_total
                ),
            )
            .with("limit", self.max_total)
            .retry_after(WATCH_RETRY));
        };
        *open.entry(identity.to_string()).or_default() += 1;
        METRICS.watch_streams.inc();
        Ok(WatchPermit {
            limits: self.clone(),
            identity: identity.to_string(),
            _permit: permit,
        })
    }
}

/// One open watch stream; dropping it (when the stream ends) frees it.
pub struct WatchPermit {
    /// The limits it counts against.
    limits: Arc<WatchLimits>,
    /// Whose stream it is.
    identity: String,
    /// The slot in the total.
    _permit: OwnedSemaphorePermit,
}

impl Drop for WatchPermit {
    fn drop(&mut self) {
        METRICS.watch_streams.dec();
        let mut open = self.limits.open.lock().expect("watch limits lock");
        if let Some(n) = open.get_mut(&self.identity) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.identity);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(short: usize, per_identity: usize, reserve: usize) -> Config {
        Config {
            max_concurrent_requests: short,
            max_concurrent_requests_per_identity: per_identity,
            reserved_renewals: reserve,
            max_waiting_acquires: 1,
            max_waiting_acquires_per_identity: 1,
            ..Config::for_nats("nats://127.0.0.1:4222")
        }
    }

    fn limit(err: &Error) -> &str {
        &err.metadata.iter().find(|(k, _)| *k == "limit").unwrap().1
    }

    /// One identity at its share is refused; another still gets in; a
    /// dropped permit frees the share.
    #[test]
    fn short_calls_per_identity() {
        let calls = CallLimits::new(&config(3, 2, 0), true);
        let a1 = calls.admit(Class::Short, "a").unwrap();
        let _a2 = calls.admit(Class::Short, "a").unwrap();
        let err = calls.admit(Class::Short, "a").err().unwrap();
        assert_eq!(err.reason, Reason::TooManyRequests);
        assert_eq!(limit(&err), "--max-concurrent-requests-per-identity");
        let _b = calls.admit(Class::Short, "b").unwrap();
        let err = calls.admit(Class::Short, "c").err().unwrap();
        assert_eq!(limit(&err), "--max-concurrent-requests");
        drop(a1);
        calls.admit(Class::Short, "a").unwrap();
    }

    /// Without authentication there are no shares: everyone is anonymous.
    #[test]
    fn no_shares_without_auth() {
        let calls = CallLimits::new(&config(3, 1, 0), false);
        let _held: Vec<_> = (0..3)
            .map(|_| calls.admit(Class::Short, "anonymous").unwrap())
            .collect();
    }

    /// KeepAlive streams count against their own budget, per identity and
    /// per replica, whatever the short calls do; a dropped stream frees its
    /// slot.
    #[test]
    fn keepalive_streams_have_their_own_budget() {
        let config = Config {
            max_keepalive_streams: 2,
            max_keepalive_streams_per_identity: 1,
            ..config(1, 1, 0)
        };
        let calls = CallLimits::new(&config, true);
        let _short = calls.admit(Class::Short, "a").unwrap();
        let a = calls.admit(Class::KeepAliveStream, "a").unwrap();
        let err = calls.admit(Class::KeepAliveStream, "a").err().unwrap();
        assert_eq!(err.reason, Reason::TooManyRequests);
        assert!(err.retry_after.is_some());
        assert_eq!(limit(&err), "--max-keepalive-streams-per-identity");
        let _b = calls.admit(Class::KeepAliveStream, "b").unwrap();
        let err = calls.admit(Class::KeepAliveStream, "c").err().unwrap();
        assert_eq!(limit(&err), "--max-keepalive-streams");
        drop(a);
        calls.admit(Class::KeepAliveStream, "a").unwrap();
    }

    /// Renewals use the reserve once short calls are full; waiting Acquires
    /// count against neither.
    #[test]
    fn renewals_and_waiting_have_their_own_room() {
        let calls = CallLimits::new(&config(1, 1, 1), true);
        let _short = calls.admit(Class::Short, "a").unwrap();
        assert!(calls.admit(Class::Short, "b").is_err());
        let _renew = calls.admit(Class::Renewal, "b").unwrap();
        let err = calls.admit(Class::Renewal, "b").err().unwrap();
        assert_eq!(limit(&err), "--reserved-renewals");
        let _wait = calls.admit(Class::Waiting, "b").unwrap();
        let err = calls.admit(Class::Waiting, "c").err().unwrap();
        assert_eq!(limit(&err), "--max-waiting-acquires");
    }
}
