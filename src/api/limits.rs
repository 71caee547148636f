//! Protection against misbehaving clients: a cap on requests in flight, on
//! request metadata and message size, and on open watch streams per
//! identity and in total. Each refusal is RESOURCE_EXHAUSTED with an
//! ErrorInfo reason; refusals that clear by themselves (busy, too many
//! watches) also carry a `google.rpc.RetryInfo` with a back-off. Size
//! refusals do not: the same request will never fit.
//!
//! The request and metadata limits are a tower layer around the whole gRPC
//! server ([`LimitLayer`]), so they act before a request is decoded or any
//! RPC runs. The watch limits ([`WatchLimits`]) need the caller's identity
//! and the stream's lifetime, so `WatchLease` takes a [`WatchPermit`] and
//! keeps it inside the stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Config;
use crate::error::{Error, Reason};
use crate::observe::METRICS;

/// How long a caller refused for load should back off.
pub const BUSY_RETRY: Duration = Duration::from_millis(250);
/// How long a caller refused a watch should back off.
pub const WATCH_RETRY: Duration = Duration::from_secs(5);
/// What HTTP/2 and gRPC framing add per header (the HPACK entry overhead).
const HEADER_OVERHEAD: usize = 32;

/// The tower layer applying the request limits to every call.
#[derive(Clone)]
pub struct LimitLayer {
    /// One permit per request in flight.
    in_flight: Arc<Semaphore>,
    /// Most header bytes (names, values, 32 bytes per entry).
    max_metadata_bytes: usize,
}

impl LimitLayer {
    /// The limits of `config`.
    pub fn new(config: &Config) -> LimitLayer {
        LimitLayer {
            in_flight: Arc::new(Semaphore::new(config.max_concurrent_requests)),
            max_metadata_bytes: config.max_metadata_bytes,
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

impl<S, B> tower::Service<http::Request<B>> for Limit<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
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
        // Health checks must answer even when the server is saturated.
        let exempt = request.uri().path().starts_with("/grpc.health.");
        let permit: Option<OwnedSemaphorePermit> = if exempt {
            None
        } else {
            match self.limits.in_flight.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    METRICS.rejected("concurrent_requests");
                    return refuse(
                        Error::new(
                            Reason::TooManyRequests,
                            "this server is running as many requests as it allows; retry after the RetryInfo delay, or on another replica",
                        )
                        .retry_after(BUSY_RETRY),
                    );
                }
            }
        };
        let fut = self.inner.call(request);
        Box::pin(async move {
            let response = fut.await?;
            drop(permit);
            Ok(too_large(response))
        })
    }
}

/// A response carrying `err` as a gRPC status.
fn refuse<E: Send + 'static>(
    err: Error,
) -> BoxFuture<'static, Result<http::Response<tonic::body::Body>, E>> {
    let status = tonic::Status::from(err);
    Box::pin(async move { Ok(status.into_http()) })
}

/// Replaces tonic's own "message too large" refusal (OUT_OF_RANGE, no
/// details) with RESOURCE_EXHAUSTED and reason REQUEST_TOO_LARGE.
fn too_large(response: http::Response<tonic::body::Body>) -> http::Response<tonic::body::Body> {
    let headers = response.headers();
    let is_too_large = headers.get("grpc-status").map(|v| v.as_bytes()) == Some(b"11")
        && headers
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|m| {
                m.contains("message%20length%20too%20large")
                    || m.contains("message length too large")
            });
    if !is_too_large {
        return response;
    }
    METRICS.rejected("request_bytes");
    tonic::Status::from(Error::new(
        Reason::RequestTooLarge,
        "the request message is larger than this server accepts (--max-request-bytes); send a smaller request",
    ))
    .into_http()
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
