//! Test harness: one real `tenure serve` process per test, with its own
//! nats-server (started and supervised by Tenure) and a fresh data dir.
//!
//! `TENURE_BIN` (default `target/debug/tenure`) and `NATS_SERVER` (default
//! `.tools/bin/nats-server`) choose the binaries; relative paths are taken
//! from the repository root. Run `scripts/tools.sh` and `cargo build` at the
//! root first.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use tenure_client::{Client, Event, EventType, Watch};
use tokio::process::{Child, Command};
use tonic::transport::ClientTlsConfig;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// How long a test waits for something that should happen.
pub const WAIT: Duration = Duration::from_secs(30);
/// How long the server gets to stop after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(8);

/// The repository root (this crate is `clients/rust`).
pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// A binary from `env` or `default` (relative to the repo root), which must
/// exist.
/// The `tenure` binary the tests run (`TENURE_BIN`).
#[allow(dead_code)] // not every test binary uses it
pub fn tenure_bin() -> PathBuf {
    binary("TENURE_BIN", "target/debug/tenure")
}

fn binary(env: &str, default: &str) -> PathBuf {
    let path = PathBuf::from(std::env::var(env).unwrap_or_else(|_| default.to_string()));
    let path = if path.is_absolute() {
        path
    } else {
        repo_root().join(path)
    };
    assert!(
        path.is_file(),
        "{} not found (set {env}); run `scripts/tools.sh` and `cargo build` at the repo root",
        path.display()
    );
    path
}

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().unwrap().port()
}

/// A running `tenure serve`.
pub struct Server {
    child: Option<Child>,
    /// Its gRPC port on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
    /// TLS settings of the readiness check (when the server serves TLS).
    tls: Option<ClientTlsConfig>,
    /// The extra `tenure serve` arguments.
    args: Vec<String>,
    /// Its data dir (the nats-server store), kept across restarts.
    data: PathBuf,
}

impl Server {
    /// Starts a server and waits (bounded) until its health check says
    /// SERVING.
    pub async fn start() -> Server {
        Server::start_with(&[], None).await
    }

    /// Starts a server with these extra `tenure serve` arguments; `tls` is
    /// what the readiness check connects with when the server serves TLS.
    pub async fn start_with(args: &[String], tls: Option<ClientTlsConfig>) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("tenure-rust-client-")
            .tempdir()
            .expect("temp dir");
        let mut server = Server {
            child: None,
            port: 0,
            dir,
            tls,
            args: args.to_vec(),
            data: PathBuf::new(),
        };
        // Another process may take the port between our probe and Tenure's
        // bind: then Tenure exits, and we try another port.
        for attempt in 0..3 {
            server.port = free_port();
            server.data = server.dir.path().join(format!("data-{attempt}"));
            server.spawn();
            if server.wait_ready().await {
                return server;
            }
            server.kill().await;
        }
        panic!("tenure did not become ready; its log:\n{}", server.log());
    }

    /// Starts Tenure again on the same port and data dir after
    /// [`Server::kill`] (its nats-server restarts on the same store, so
    /// the leases and the bucket's revisions survive).
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "kill it first");
        self.spawn();
        if !self.wait_ready().await {
            panic!("tenure did not come back; its log:\n{}", self.log());
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("tenure.log")).unwrap_or_default()
    }

    /// Spawns `tenure serve` on `self.port` with `self.data`.
    fn spawn(&mut self) {
        let tenure = binary("TENURE_BIN", "target/debug/tenure");
        let nats = binary("NATS_SERVER", ".tools/bin/nats-server");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("tenure.log"))
            .expect("log file");
        let child = Command::new(&tenure)
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--nats-server")
            .arg(&nats)
            .arg("--log-format")
            .arg("json")
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            // Its own process group: Tenure and its nats-server, so that
            // a crashed test can kill both.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", tenure.display()));
        self.child = Some(child);
    }

    /// Retries the gRPC health check until SERVING; false if the process
    /// exited or the deadline passed.
    async fn wait_ready(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + WAIT;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint =
            tonic::transport::Endpoint::from_shared(format!("{scheme}://127.0.0.1:{}", self.port))
                .unwrap();
        if let Some(tls) = &self.tls {
            endpoint = endpoint.tls_config(tls.clone()).unwrap();
        }
        while tokio::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.as_mut().unwrap().try_wait() {
                return false;
            }
            if let Ok(channel) = endpoint.connect().await {
                let request = HealthCheckRequest {
                    service: "tenure.v1.LeaseService".into(),
                };
                if let Ok(reply) = HealthClient::new(channel).check(request).await {
                    if reply.into_inner().status == ServingStatus::Serving as i32 {
                        return true;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Its address, `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A client connected to it.
    pub async fn client(&self) -> Client {
        Client::connect(self.addr()).await.expect("connect")
    }

    /// Stops it with SIGTERM (Tenure stops its nats-server too) and waits
    /// for it to exit; SIGKILLs its process group after a grace period.
    pub async fn stop(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        if let Some(pid) = child.id() {
            // SAFETY: kill(2) on the pid of our own child, not yet reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        if tokio::time::timeout(STOP_GRACE, child.wait())
            .await
            .is_err()
        {
            self.kill_group();
            let _ = self.child.as_mut().unwrap().wait().await;
        }
        self.child = None;
    }

    /// SIGKILLs Tenure and its nats-server at once (the server vanishes, as
    /// on a crash or a network cut) and reaps Tenure.
    pub async fn kill(&mut self) {
        self.kill_group();
        if let Some(mut child) = self.child.take() {
            let _ = child.wait().await;
        }
    }

    /// SIGKILLs the process group (Tenure and its nats-server) while Tenure
    /// is not yet reaped (so the group id is still ours).
    fn kill_group(&mut self) {
        if let Some(pid) = self.child.as_ref().and_then(|c| c.id()) {
            // SAFETY: kill(2) on the process group we created for our child,
            // whose leader is not reaped yet.
            unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Bounds a wait so that a bug fails the test instead of hanging it.
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {WAIT:?}"))
}

/// The next event of a watch (bounded wait).
pub async fn next_event(watch: &mut Watch) -> Event {
    within("a watch event", watch.next())
        .await
        .expect("the watch ended")
        .expect("the watch failed")
}

/// The next event of a watch other than RENEWED (background renewals come
/// at their own pace), which must be of `kind`.
pub async fn expect_event(watch: &mut Watch, kind: EventType) -> Event {
    loop {
        let event = next_event(watch).await;
        if event.kind == EventType::Renewed && kind != EventType::Renewed {
            continue;
        }
        assert_eq!(event.kind, kind, "unexpected event {event:?}");
        return event;
    }
}

/// A server with its `/metrics` listener on a free port; returns it and
/// the listener's address.
pub async fn server_with_metrics(extra: &[&str]) -> (Server, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec!["--metrics-listen".to_string(), addr.clone()];
    args.extend(extra.iter().map(|s| s.to_string()));
    (Server::start_with(&args, None).await, addr)
}

/// The text of the server's `/metrics` page at `addr`.
pub async fn metrics_text(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).await.unwrap();
    text
}

/// Waits until the server has `n` watch streams open (its
/// `tenure_watch_streams_active` gauge), e.g. a client's loss watch.
pub async fn watch_streams_open(metrics: &str, n: u64) {
    within("the watch streams", async {
        loop {
            let text = metrics_text(metrics).await;
            let open = text
                .lines()
                .find_map(|l| l.strip_prefix("tenure_watch_streams_active "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            if open as u64 >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}
