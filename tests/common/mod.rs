//! Test harness: a real nats-server per test (temp store, free port on
//! 127.0.0.1, stopped by PID on drop; ports for other servers come from
//! `ports`) and an in-process Tenure over it, or
//! `tenure serve` as its own process (so its RSS is its own); raw HTTP/2
//! helpers for what no gRPC client would send.
#![allow(dead_code)]

mod cluster;
mod ports;
#[allow(unused_imports)] // only the cluster tests use it
pub use cluster::NatsCluster;
pub use ports::free_port;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use async_nats::jetstream;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{self, AcquireRequest, EventType, LeaseEvent, ReleaseRequest, RenewRequest};
use tenure::Config;
use tenure::Running;
use tenure::{find_binary, NatsProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::Channel;
use tonic_types::StatusExt;

/// Whether this run is CI's (`CI=true`), where nothing may pass by
/// skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Skips a test that cannot run here, saying why; in CI ([`in_ci`]) the
/// test fails instead.
pub fn skip_or_fail(why: &str) {
    assert!(!in_ci(), "cannot run in CI: {why}");
    eprintln!("SKIPPED: {why}");
}

/// The `tenure` binary as a client of `server`, with no client settings
/// leaking in from the environment, killed if the test drops it.
pub fn tenure_cli(server: &str) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"));
    c.env("TENURE_SERVER", server);
    for var in [
        "TENURE_TOKEN",
        "TENURE_TOKEN_FILE",
        "TENURE_OUTPUT",
        "TENURE_CLIENT_TLS_CA",
        "TENURE_CLIENT_TLS_CERT",
        "TENURE_CLIENT_TLS_KEY",
        "TENURE_CLIENT_TLS_DOMAIN",
        "TENURE_LEASE_KEY",
        "TENURE_TIMEOUT",
    ] {
        c.env_remove(var);
    }
    c.kill_on_drop(true);
    c
}

/// What a finished command printed and how it exited.
#[derive(Debug)]
pub struct Out {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `command` to completion.
pub async fn run_to_end(command: &mut tokio::process::Command) -> Out {
    let out = within("tenure to finish", command.output())
        .await
        .expect("run tenure");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    }
}

/// A nats-server with a temporary store.
pub struct Nats {
    /// The running process (None while killed).
    pub process: Option<NatsProcess>,
    /// Its port, kept across restarts.
    pub port: u16,
    /// The store folder (deleted on drop).
    pub dir: tempfile::TempDir,
}

impl Nats {
    /// Starts a fresh server.
    pub async fn start() -> Nats {
        let dir = tempfile::tempdir().expect("temp dir");
        let bin = find_binary(None).expect("nats-server (run scripts/tools.sh)");
        let process = NatsProcess::spawn(&bin, dir.path(), None)
            .await
            .expect("start nats-server");
        Nats {
            port: process.port,
            process: Some(process),
            dir,
        }
    }

    /// A fresh server with its HTTP monitoring endpoint on; returns it
    /// and the monitoring address (`/varz` counts the messages clients
    /// sent it: each NATS request of Tenure's is one).
    pub async fn start_monitored() -> (Nats, SocketAddr) {
        let dir = tempfile::tempdir().expect("temp dir");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let config = dir.path().join("monitored.conf");
        std::fs::write(&config, format!("http: \"{addr}\"\n")).unwrap();
        let bin = find_binary(None).expect("nats-server (run scripts/tools.sh)");
        let process = NatsProcess::spawn_with_config(&bin, dir.path(), None, Some(&config))
            .await
            .expect("start nats-server");
        let nats = Nats {
            port: process.port,
            process: Some(process),
            dir,
        };
        (nats, addr)
    }

    /// The client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGKILLs the server.
    pub async fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill().await;
        }
    }

    /// Starts the server again on the same port with the same store.
    pub async fn restart(&mut self) {
        let bin = find_binary(None).unwrap();
        self.process = Some(
            NatsProcess::spawn(&bin, self.dir.path(), Some(self.port))
                .await
                .expect("restart"),
        );
    }

    /// A JetStream context for inspecting the bucket directly.
    pub async fn jetstream(&self) -> jetstream::Context {
        jetstream::new(
            async_nats::connect(self.url())
                .await
                .expect("connect to nats"),
        )
    }
}

/// Tenure in-process over its own nats-server.
pub struct Tenure {
    /// The NATS server underneath.
    pub nats: Nats,
    /// The running server.
    pub running: Option<Running>,
    /// The settings it runs with.
    pub config: Config,
}

impl Tenure {
    /// Tenure with default settings.
    pub async fn start() -> Tenure {
        Tenure::start_with(|_| {}).await
    }

    /// Tenure with adjusted settings.
    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> Tenure {
        Tenure::start_on(Nats::start().await, adjust).await
    }

    /// Tenure with adjusted settings over `nats`.
    pub async fn start_on(nats: Nats, adjust: impl FnOnce(&mut Config)) -> Tenure {
        let mut config = Config::for_nats(&nats.url());
        adjust(&mut config);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let running = tenure::start(&config, &nats.url(), listener)
            .await
            .expect("tenure starts");
        Tenure {
            nats,
            running: Some(running),
            config,
        }
    }

    /// A gRPC client.
    pub async fn client(&self) -> LeaseServiceClient<Channel> {
        LeaseServiceClient::new(self.channel().await)
    }

    /// A gRPC channel to the server.
    pub async fn channel(&self) -> Channel {
        let addr = self.running.as_ref().unwrap().addr();
        Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .expect("connect to tenure")
    }

    /// A second replica over the same bucket (metrics off), and a client of it.
    pub async fn replica(&self) -> (Running, LeaseServiceClient<Channel>) {
        self.replica_with(None).await
    }

    /// [`Tenure::replica`] whose shared watcher is held back by `hold`.
    pub async fn replica_held(
        &self,
        hold: &tenure::WatcherHold,
    ) -> (Running, LeaseServiceClient<Channel>) {
        self.replica_with(Some(hold.clone())).await
    }

    /// A second replica with `watcher_hold`, and a client of it.
    async fn replica_with(
        &self,
        watcher_hold: Option<tenure::WatcherHold>,
    ) -> (Running, LeaseServiceClient<Channel>) {
        let config = Config {
            metrics_listen: None,
            watcher_hold,
            ..self.config.clone()
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let other = tenure::start(&config, &self.nats.url(), listener)
            .await
            .expect("second replica starts");
        let client = LeaseServiceClient::connect(format!("http://{}", other.addr()))
            .await
            .expect("connect to the second replica");
        (other, client)
    }

    /// The lease bucket, read and written directly (what a test sets up or
    /// checks behind Tenure's back).
    pub async fn kv(&self) -> async_nats::jetstream::kv::Store {
        self.nats
            .jetstream()
            .await
            .get_key_value(&self.config.bucket)
            .await
            .unwrap()
    }

    /// The bucket's last sequence: unchanged means nothing was written.
    pub async fn last_sequence(&self) -> u64 {
        let js = self.nats.jetstream().await;
        let mut stream = js
            .get_stream(format!("KV_{}", self.config.bucket))
            .await
            .unwrap();
        stream.info().await.unwrap().state.last_sequence
    }
}

/// An Acquire request with a TTL in seconds.
pub fn acquire_req(name: &str, holder: &str, ttl_s: i64) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl: Some(secs(ttl_s)),
        ..Default::default()
    }
}

/// A protobuf duration of whole seconds.
pub fn secs(s: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: s,
        nanos: 0,
    }
}

/// The ErrorInfo reason of a status (panics when absent: every error has one).
pub fn reason(status: &tonic::Status) -> String {
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.domain, "tenure.v1");
    info.reason
}

/// Acquires and unwraps the lease and key.
pub async fn acquire(
    client: &mut LeaseServiceClient<Channel>,
    req: AcquireRequest,
) -> (proto::Lease, String) {
    let resp = client.acquire(req).await.expect("acquire").into_inner();
    (resp.lease.unwrap(), resp.lease_key)
}

/// Bounds a wait in a test so a bug fails it instead of hanging it.
pub async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within 30s"))
}

/// A Renew request that keeps the granted TTL.
pub fn renew_req(name: impl Into<String>, revision: u64, key: impl Into<String>) -> RenewRequest {
    RenewRequest {
        name: name.into(),
        expected_revision: revision,
        lease_key: key.into(),
        ttl: None,
        slot: 0,
    }
}

/// A Release request.
pub fn release_req(
    name: impl Into<String>,
    revision: u64,
    key: impl Into<String>,
) -> ReleaseRequest {
    ReleaseRequest {
        name: name.into(),
        expected_revision: revision,
        lease_key: key.into(),
        slot: 0,
    }
}

/// Renews and unwraps the renewed lease.
pub async fn renew(client: &mut LeaseServiceClient<Channel>, req: RenewRequest) -> proto::Lease {
    client
        .renew(req)
        .await
        .expect("renew")
        .into_inner()
        .lease
        .unwrap()
}

/// Opens a watch of `target` (a name, `prefix.>` or `>`), all event types.
pub async fn watch(
    client: &mut LeaseServiceClient<Channel>,
    target: &str,
) -> tonic::Streaming<proto::WatchLeaseResponse> {
    client
        .watch_lease(proto::WatchLeaseRequest {
            name: target.into(),
            event_types: vec![],
            start_revision: 0,
            shard_revisions: Vec::new(),
        })
        .await
        .expect("watch opens")
        .into_inner()
}

/// The next event of a watch (fails the test if the stream errs or ends).
pub async fn next_event(s: &mut tonic::Streaming<proto::WatchLeaseResponse>) -> LeaseEvent {
    within("next watch event", s.message())
        .await
        .expect("stream ok")
        .expect("stream open")
        .event
        .expect("an event")
}

/// The next event of type `kind`, skipping others.
pub async fn next_of(
    s: &mut tonic::Streaming<proto::WatchLeaseResponse>,
    kind: EventType,
) -> LeaseEvent {
    loop {
        let e = next_event(s).await;
        if e.r#type == kind as i32 {
            return e;
        }
    }
}

/// GETs `path` from an HTTP listener (the metrics endpoint); returns the
/// status line and the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: tenure\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).await.unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

/// `tenure serve` as a subprocess over `nats` (killed on drop), with its
/// gRPC and metrics listeners on free loopback ports.
pub struct Serve {
    /// The process.
    pub child: tokio::process::Child,
    /// Its PID (for /proc).
    pub pid: u32,
    /// The gRPC address.
    pub grpc: SocketAddr,
    /// The `/metrics` address.
    pub metrics: SocketAddr,
}

impl Serve {
    /// Starts `tenure serve --nats-url <nats> --listen .. --metrics-listen ..`
    /// followed by `args`, logging warnings and errors, and waits until it
    /// accepts gRPC connections.
    pub async fn start(nats: &Nats, args: &[&str]) -> Serve {
        Serve::start_adjusted(nats, args, |_| {}).await
    }

    /// [`Serve::start`] with the command adjusted first (its environment,
    /// where its output goes) by `adjust`, which runs after the defaults.
    pub async fn start_adjusted(
        nats: &Nats,
        args: &[&str],
        adjust: impl FnOnce(&mut tokio::process::Command),
    ) -> Serve {
        let grpc_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let metrics_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"));
        command
            .args(["serve", "--nats-url", &nats.url()])
            .args(["--listen", &grpc_addr.to_string()])
            .args(["--metrics-listen", &metrics_addr.to_string()])
            .args(args)
            .env("RUST_LOG", "warn")
            .kill_on_drop(true);
        adjust(&mut command);
        let child = command.spawn().expect("start tenure");
        let serve = Serve {
            pid: child.id().unwrap(),
            child,
            grpc: grpc_addr,
            metrics: metrics_addr,
        };
        within("tenure to listen", async {
            while serve.endpoint().connect().await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        serve
    }

    /// The gRPC URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// An endpoint for the gRPC listener, to adjust before connecting.
    pub fn endpoint(&self) -> tonic::transport::Endpoint {
        tonic::transport::Endpoint::from_shared(self.url()).unwrap()
    }

    /// A client on a connection of its own.
    pub async fn client(&self) -> LeaseServiceClient<Channel> {
        LeaseServiceClient::new(self.endpoint().connect().await.expect("connect to tenure"))
    }

    /// Tenure's resident set size now, in MiB.
    pub fn rss_mib(&self) -> u64 {
        rss_mib(self.pid)
    }

    /// The value of an unlabelled metric now (0 when absent).
    pub async fn metric(&self, name: &str) -> f64 {
        metric(self.metrics, name).await
    }

    /// Asks the process to shut down (SIGTERM, as an operator would) and
    /// waits for it to exit; it flushes its traces on the way out.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on the PID of a child this handle has not reaped.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        within("tenure to exit after SIGTERM", self.child.wait())
            .await
            .expect("wait for tenure")
    }

    /// Kills the process (by its PID) and reaps it.
    pub async fn stop(mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
    }
}

/// The messages clients have sent the nats-server whose monitoring
/// endpoint is `addr` (`in_msgs` of `/varz`).
pub async fn nats_in_msgs(addr: SocketAddr) -> u64 {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    // HTTP/1.0: the whole body, not chunked, and the connection closes.
    conn.write_all(b"GET /varz HTTP/1.0\r\n\r\n").await.unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).await.unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let varz: serde_json::Value = serde_json::from_str(body).expect("varz JSON");
    varz["in_msgs"].as_u64().expect("in_msgs")
}

/// Freezes the test's own child process `pid` (SIGSTOP) and returns once
/// it really is stopped: signals are delivered asynchronously, and on a
/// busy machine a nats-server answers requests for a moment after
/// `kill` returns unless the test waits for the stop (waitpid reports it).
pub async fn freeze(pid: u32) {
    // SAFETY: signalling the test's own child process by its pid.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    within(
        "the process to stop",
        tokio::task::spawn_blocking(move || {
            let mut status = 0;
            // SAFETY: waiting on the test's own child process.
            let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WUNTRACED) };
            assert!(
                r == pid as libc::pid_t && libc::WIFSTOPPED(status),
                "waitpid: {r} {status}"
            );
        }),
    )
    .await
    .unwrap();
}

/// Lets a process stopped by [`freeze`] run again (SIGCONT).
pub fn thaw(pid: u32) {
    // SAFETY: signalling the test's own child process by its pid.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
}

/// The resident set size of a process, in MiB.
pub fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib / 1024
}

/// The value of an unlabelled metric served at `addr` now (0 when absent).
pub async fn metric(addr: SocketAddr, name: &str) -> f64 {
    let (_, body) = http_get(addr, "/metrics").await;
    sample(&body, name)
}

/// The value of an unlabelled metric in a `/metrics` body (0 when absent).
pub fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// A raw HTTP/2 connection to `addr`.
pub async fn h2_connect(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// The headers of a gRPC call of `method` (no credentials).
pub fn grpc_headers(addr: SocketAddr, method: &str) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/tenure.v1.LeaseService/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// The statuses that end a set of stalled calls (each a response and the
/// request stream the caller never finished), awaited together within 30 s;
/// each stream is dropped only once its call has ended.
pub async fn stalled_statuses(
    what: &str,
    stalled: Vec<(h2::client::ResponseFuture, h2::SendStream<Bytes>)>,
) -> Vec<tonic::Status> {
    within(
        what,
        futures::future::join_all(stalled.into_iter().map(|(response, stream)| async move {
            let status = grpc_status(response).await;
            drop(stream);
            status
        })),
    )
    .await
}

/// The gRPC status of a raw response: from its headers (trailers-only) or
/// its trailers.
pub async fn grpc_status(response: h2::client::ResponseFuture) -> tonic::Status {
    let response = response.await.expect("a response");
    if let Some(status) = tonic::Status::from_header_map(response.headers()) {
        return status;
    }
    let mut body = response.into_body();
    while let Some(data) = body.data().await {
        data.expect("body");
    }
    let trailers = body.trailers().await.expect("trailers").expect("trailers");
    tonic::Status::from_header_map(&trailers).expect("grpc-status in the trailers")
}

/// A gRPC length-prefixed frame of `message`.
pub fn frame(message: &[u8]) -> Bytes {
    let mut out = vec![0u8];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

/// The lease service's health statuses as they change, from a health Watch.
pub struct HealthStatuses(tonic::Streaming<tonic_health::pb::HealthCheckResponse>);

impl HealthStatuses {
    /// Watches the health of `tenure.v1.LeaseService` on `t`.
    pub async fn watch(t: &Tenure) -> HealthStatuses {
        let mut health = tonic_health::pb::health_client::HealthClient::new(t.channel().await);
        let stream = health
            .watch(tonic_health::pb::HealthCheckRequest {
                service: "tenure.v1.LeaseService".into(),
            })
            .await
            .expect("health watch opens")
            .into_inner();
        HealthStatuses(stream)
    }

    /// The next status (a `ServingStatus` as i32).
    pub async fn next(&mut self) -> i32 {
        within("health change", self.0.message())
            .await
            .expect("health stream ok")
            .expect("health stream open")
            .status
    }
}

/// The CAS-conflict counter (`tenure_cas_conflicts_total`) is one per test
/// process: the tests that count it, and the tests that make conflicts
/// (lease and semaphore FIFO, semaphore races), take turns under this lock,
/// whichever file they are in.
pub static CAS_SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts one Tenure replica per NATS URL in `urls`, each with `config` and
/// that URL as its only seed (so that replicas on a cluster reach the
/// stream through different nodes), and waits until a first write goes
/// through each: a new replicated stream takes a moment to be writable
/// from every node (`UNAVAILABLE` or a deadline meanwhile).
pub async fn replicas_on(
    config: &tenure::Config,
    urls: &[String],
) -> (Vec<tenure::Running>, Vec<LeaseServiceClient<Channel>>) {
    let mut running = Vec::new();
    let mut clients = Vec::new();
    for url in urls {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let r = tenure::start(config, url, listener)
            .await
            .expect("tenure starts");
        clients.push(
            LeaseServiceClient::connect(format!("http://{}", r.addr()))
                .await
                .expect("connect to tenure"),
        );
        running.push(r);
    }
    for (i, client) in clients.iter().enumerate() {
        within("a first write through every replica", async {
            loop {
                let mut c = client.clone();
                let probe = format!("ready.{i}");
                match c.acquire(acquire_req(&probe, "ready", 10)).await {
                    Ok(resp) => {
                        let resp = resp.into_inner();
                        let lease = resp.lease.unwrap();
                        c.release(release_req(&probe, lease.revision, resp.lease_key))
                            .await
                            .expect("release the probe");
                        return;
                    }
                    Err(s)
                        if matches!(
                            s.code(),
                            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                        ) =>
                    {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    Err(s) => panic!("probe: {s:?}"),
                }
            }
        })
        .await;
    }
    (running, clients)
}
