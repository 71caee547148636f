//! Prometheus metrics and the HTTP listener (hyper) that serves them.
//!
//! The metrics are process-wide statics so that the places that know what
//! happened count it in one line: the RPC wrapper (calls and their codes),
//! the lease protocol (acquired, released, revoked, CAS conflicts), the
//! shared watcher (expiries, where it classifies them), the NATS connection
//! follower and the limits. They are served as text at `GET /metrics` on
//! `--metrics-listen`, a separate listener from the gRPC API so that a
//! scraper needs no gRPC and no lease credentials.
//!
//! No metric carries a lease key, a holder or a lease name as a label:
//! labels are the RPC method, the gRPC code and the limit name, all from
//! small fixed sets, so the series count stays bounded; the one exception,
//! `tenure_build_info`, has one series whose labels say which build runs.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::LazyLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::version;

/// Longest request head the metrics listener reads (hyper's minimum buffer).
const MAX_HEAD_BYTES: usize = 8192;
/// How long a scraper may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed accept (e.g. out of file descriptors), so the loop
/// does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// All of Tenure's metrics, registered in their own registry.
pub struct Metrics {
    /// The registry `/metrics` encodes.
    registry: Registry,
    /// `tenure_rpc_requests_total{method, code}`.
    pub rpc_requests: IntCounterVec,
    /// `tenure_rpc_duration_seconds{method, code}`.
    pub rpc_duration: HistogramVec,
    /// `tenure_cas_conflicts_total`: conditional writes that lost a race.
    pub cas_conflicts: IntCounter,
    /// `tenure_queue_conflicts_total`: writes conditional on a wildcard of
    /// a name (tickets on its queue, free-lease grants and releases on its
    /// line) that lost a race (not counted as CAS conflicts).
    pub queue_conflicts: IntCounter,
    /// `tenure_semaphores_removed_total`: unused semaphores (their
    /// definitions and slots) this replica's sweep removed.
    pub semaphores_removed: IntCounter,
    /// `tenure_acquire_hint_misses_total`: Acquire writes made on what this
    /// replica knew (its own release, the watcher's view of the queue)
    /// that failed their condition and were made again after a read.
    pub acquire_hint_misses: IntCounter,
    /// `tenure_line_writes_total`: plain Acquires and Releases written as
    /// one write conditional on the name's line with no read before it
    /// (over this replica's own last write of the line, design section 16).
    pub line_writes: IntCounter,
    /// `tenure_leases_acquired_total`: new holdings taken through this replica.
    pub acquired: IntCounter,
    /// `tenure_groups_acquired_total`: AcquireGroup batches that took (or,
    /// for a retry, renewed) every member of a group.
    pub group_acquired: IntCounter,
    /// `tenure_group_conflicts_total`: group batches (AcquireGroup,
    /// RenewGroup, ReleaseGroup) that lost a race and wrote nothing.
    pub group_conflicts: IntCounter,
    /// `tenure_group_refusals_total`: AcquireGroup attempts refused because
    /// a member was held, queued for or in its lock delay.
    pub group_refused: IntCounter,
    /// `tenure_leases_released_total`: holdings released through this replica.
    pub released: IntCounter,
    /// `tenure_leases_revoked_total`: holdings revoked through this replica.
    pub revoked: IntCounter,
    /// `tenure_leases_expired_total`: expiries seen in the bucket.
    pub expired: IntCounter,
    /// `tenure_watch_streams_active`: open WatchLease streams.
    pub watch_streams: IntGauge,
    /// `tenure_watch_buffer_bytes`: bytes of events waiting in watch
    /// buffers for their clients to read (sampled every 5 s).
    pub watch_buffer_bytes: IntGauge,
    /// `tenure_watcher_following`: how many shards' shared watchers follow
    /// their stream (each idles without subscribers): 1 or 0 on one shard.
    pub watcher_following: IntGauge,
    /// `tenure_nats_connected`: 1 while the NATS connection is up.
    pub nats_connected: IntGauge,
    /// `tenure_nats_reconnects_total`: reconnections after a loss.
    pub nats_reconnects: IntCounter,
    /// `tenure_limit_rejections_total{limit}`: requests refused by a limit.
    pub limit_rejections: IntCounterVec,
}

/// The process's metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

impl Metrics {
    /// Creates and registers every metric.
    fn new() -> Metrics {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let rpc_requests = IntCounterVec::new(
            Opts::new(
                "tenure_rpc_requests_total",
                "gRPC calls handled, by method and status code",
            ),
            &["method", "code"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(rpc_requests.clone()))
            .expect("unique metric");
        let rpc_duration = HistogramVec::new(
            HistogramOpts::new(
                "tenure_rpc_duration_seconds",
                "gRPC call latency until the response (or, for WatchLease, the stream) starts",
            )
            .buckets(vec![
                0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                30.0, 300.0,
            ]),
            &["method", "code"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(rpc_duration.clone()))
            .expect("unique metric");
        let limit_rejections = IntCounterVec::new(
            Opts::new(
                "tenure_limit_rejections_total",
                "requests refused with RESOURCE_EXHAUSTED, by limit",
            ),
            &["limit"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(limit_rejections.clone()))
            .expect("unique metric");
        // `tenure_build_info{version, commit, build_date}`: always 1; its
        // labels say which build runs (`super::version`).
        let build_info = IntGauge::with_opts(
            Opts::new(
                "tenure_build_info",
                "always 1; the labels say which build of Tenure runs",
            )
            .const_label("version", version::VERSION)
            .const_label("commit", version::COMMIT)
            .const_label("build_date", version::BUILD_DATE),
        )
        .expect("valid metric");
        build_info.set(1);
        registry
            .register(Box::new(build_info))
            .expect("unique metric");
        Metrics {
            rpc_requests,
            rpc_duration,
            cas_conflicts: counter(
                "tenure_cas_conflicts_total",
                "conditional writes that lost a race and were re-read",
            ),
            queue_conflicts: counter(
                "tenure_queue_conflicts_total",
                "writes conditional on a name's queue or line (tickets, free-lease grants, releases) that found it changed meanwhile, made again",
            ),
            semaphores_removed: counter(
                "tenure_semaphores_removed_total",
                "unused semaphores (definitions and slots) removed by this replica's sweep",
            ),
            acquire_hint_misses: counter(
                "tenure_acquire_hint_misses_total",
                "Acquire writes made on what the replica knew without a read that failed their condition",
            ),
            line_writes: counter(
                "tenure_line_writes_total",
                "plain Acquires and Releases made as one conditional write with no read",
            ),
            acquired: counter(
                "tenure_leases_acquired_total",
                "new holdings (new fencing tokens) taken through this replica",
            ),
            group_acquired: counter(
                "tenure_groups_acquired_total",
                "AcquireGroup batches that took every member of a group (a retry renews them)",
            ),
            group_conflicts: counter(
                "tenure_group_conflicts_total",
                "group batches (AcquireGroup, RenewGroup, ReleaseGroup) that lost a race and wrote nothing",
            ),
            group_refused: counter(
                "tenure_group_refusals_total",
                "AcquireGroup attempts refused because a member was held, had queued waiters or was in its lock delay",
            ),
            released: counter(
                "tenure_leases_released_total",
                "holdings released through this replica",
            ),
            revoked: counter(
                "tenure_leases_revoked_total",
                "holdings revoked by an operator through this replica",
            ),
            expired: counter(
                "tenure_leases_expired_total",
                "holdings that expired in the bucket (every replica counts every expiry)",
            ),
            watch_streams: gauge(
                "tenure_watch_streams_active",
                "WatchLease streams open on this replica",
            ),
            watch_buffer_bytes: gauge(
                "tenure_watch_buffer_bytes",
                "bytes of events waiting in watch buffers for their clients to read (sampled every 5 s)",
            ),
            watcher_following: gauge(
                "tenure_watcher_following",
                "shards whose shared watcher follows the stream (it idles without watches, waiting Acquires or elections): 1 or 0 on a bucket of one shard",
            ),
            nats_connected: gauge(
                "tenure_nats_connected",
                "1 while the NATS connection is up, else 0",
            ),
            nats_reconnects: counter(
                "tenure_nats_reconnects_total",
                "times the NATS connection came back after being lost",
            ),
            limit_rejections,
            registry,
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// Records one finished RPC.
    pub fn rpc(&self, method: &str, code: tonic::Code, elapsed: Duration) {
        let code = code_name(code);
        self.rpc_requests.with_label_values(&[method, code]).inc();
        self.rpc_duration
            .with_label_values(&[method, code])
            .observe(elapsed.as_secs_f64());
    }

    /// Records a request refused by `limit`.
    pub fn rejected(&self, limit: &str) {
        self.limit_rejections.with_label_values(&[limit]).inc();
    }
}

/// The UPPER_SNAKE name of a gRPC code, as Prometheus label.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Serves `GET /metrics` on `listener` until `shutdown` is cancelled.
/// Anything else gets 404. One request per connection; a request head must
/// arrive within 5 s and fit in 8 KiB, so a stray client cannot hold memory.
pub async fn serve(listener: TcpListener, shutdown: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(err) => {
                    tracing::warn!(%err, "metrics listener accept failed; pausing");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .max_buf_size(MAX_HEAD_BYTES)
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service_fn(respond));
            tokio::select! {
                _ = conn => {}
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

/// Answers one metrics request.
async fn respond(
    request: http::Request<Incoming>,
) -> Result<http::Response<Full<Bytes>>, Infallible> {
    let (status, body) =
        if request.method() == http::Method::GET && request.uri().path() == "/metrics" {
            (http::StatusCode::OK, METRICS.render())
        } else {
            (
                http::StatusCode::NOT_FOUND,
                "only GET /metrics is served here\n".to_string(),
            )
        };
    let mut response = http::Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(response)
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
