//! Hostile connections (issue 10, items 5 and 10), over real sockets
//! against a real nats-server: connections that never speak, idle ones,
//! more connections than file descriptors, health watches, and what each
//! does to shutdown.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use crate::common::*;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::GetLeaseRequest;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// Reads from `conn` until the server closes it; how long that took.
async fn closed_by_server(conn: &mut TcpStream) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return start.elapsed(),
            Ok(_) => {}
        }
    }
}

/// A silent connection is closed after --handshake-timeout; past
/// --max-connections a new connection is closed at once; an idle HTTP/2
/// connection is closed after --idle-timeout; and then clients are served.
#[tokio::test]
async fn silent_idle_and_surplus_connections_are_closed() {
    let t = Tenure::start_with(|c| {
        c.max_connections = 4;
        c.handshake_timeout = Duration::from_secs(2);
        c.idle_timeout = Duration::from_secs(2);
    })
    .await;
    let addr = t.running.as_ref().unwrap().addr();
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    let opened = Instant::now();
    let mut surplus = TcpStream::connect(addr).await.unwrap();
    let took = within(
        "the surplus connection to close",
        closed_by_server(&mut surplus),
    )
    .await;
    assert!(
        took < Duration::from_secs(1),
        "the 5th connection closed after {took:?}, not at once"
    );
    for conn in &mut silent {
        within("a silent connection to close", closed_by_server(conn)).await;
    }
    let waited = opened.elapsed();
    eprintln!("measured: surplus closed after {took:?}, silent after {waited:?}");
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(10),
        "silent connections closed after {waited:?}"
    );

    // An HTTP/2 connection that made one call and then idles.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let mut send = send.ready().await.unwrap();
    let (response, _) = send
        .send_request(
            http::Request::builder()
                .method("POST")
                .uri(format!("http://{addr}/tenure.v1.LeaseService/GetLease"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .unwrap(),
            true,
        )
        .unwrap();
    within("a response", response).await.unwrap();
    let called = Instant::now();
    within("the idle connection to close", conn)
        .await
        .unwrap()
        .ok();
    let idle = called.elapsed();
    eprintln!("measured: idle connection closed after {idle:?}");
    assert!(
        idle >= Duration::from_millis(1500),
        "closed after {idle:?} idle"
    );

    let mut c = t.client().await;
    let err = c
        .get_lease(GetLeaseRequest { name: "n".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

/// Health `Watch` streams are capped (they need no credentials), and
/// shutdown ends them and a call whose message never arrives at once,
/// instead of waiting out the whole grace period.
#[tokio::test]
async fn shutdown_ends_health_watches_and_stalled_calls() {
    let mut t = Tenure::start_with(|c| {
        c.max_health_watches = 2;
        c.shutdown_grace = Duration::from_secs(30);
        c.request_body_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = t.running.as_ref().unwrap().addr();
    let mut health = HealthClient::new(t.channel().await);
    let watch = || HealthCheckRequest {
        service: String::new(),
    };
    let mut first = health.watch(watch()).await.unwrap().into_inner();
    let mut second = health.watch(watch()).await.unwrap().into_inner();
    for s in [&mut first, &mut second] {
        let status = within("SERVING", s.message()).await.unwrap().unwrap();
        assert_eq!(status.status, 1, "SERVING");
    }
    let refused = match health.watch(watch()).await {
        Ok(s) => s.into_inner().message().await.unwrap_err(),
        Err(s) => s,
    };
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(reason(&refused), "TOO_MANY_WATCHES");

    // A call that sends its headers and never its message.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut send = send.ready().await.unwrap();
    let (stalled, _stream) = send
        .send_request(
            http::Request::builder()
                .method("POST")
                .uri(format!("http://{addr}/tenure.v1.LeaseService/Renew"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .unwrap(),
            false,
        )
        .unwrap();
    // Make sure the server has the stalled call before shutting down.
    let _ = send.ready().await.unwrap();

    let started = Instant::now();
    let running = t.running.take().unwrap();
    within("shutdown", running.shutdown()).await;
    let took = started.elapsed();
    eprintln!("measured: shutdown took {took:?} (grace 30s)");
    assert!(
        took < Duration::from_secs(5),
        "shutdown took {took:?} of a 30s grace"
    );

    // The watch saw NOT_SERVING, then ended with UNAVAILABLE.
    let mut saw_not_serving = false;
    let end = loop {
        match within("the watch to end", first.message()).await {
            Ok(Some(m)) => saw_not_serving |= m.status == 2,
            Ok(None) => break None,
            Err(s) => break Some(s),
        }
    };
    assert!(saw_not_serving);
    let end = end.expect("ended with a status");
    assert_eq!(end.code(), Code::Unavailable);
    let response = within("the stalled call to end", stalled).await;
    if let Ok(r) = response {
        let status = tonic::Status::from_header_map(r.headers());
        if let Some(s) = status {
            assert_eq!(s.code(), Code::Unavailable, "{s:?}");
        }
    }
}

/// Seconds of CPU the process `pid` has used (user + system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which ends with ')'): utime is the
    // 12th, stime the 13th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// Item 5: out of file descriptors, the accept loop logs the error, backs
/// off instead of spinning, and serves new clients once the idle
/// connections have been closed.
#[tokio::test]
async fn accept_errors_back_off_and_are_logged() {
    let nats = Nats::start().await;
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let log_path = log_dir.path().join("stderr");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"));
    cmd.args([
        "serve",
        "--nats-url",
        &nats.url(),
        "--listen",
        &addr.to_string(),
        "--handshake-timeout",
        "4s",
        "--log-format",
        "json",
    ])
    .env("RUST_LOG", "info")
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&log_path).unwrap());
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let child = Kill(child);

    let serves = || async {
        loop {
            if let Ok(mut c) = LeaseServiceClient::connect(format!("http://{addr}")).await {
                let mut req = tonic::Request::new(GetLeaseRequest { name: "n".into() });
                req.set_timeout(Duration::from_secs(2));
                if let Err(s) = c.get_lease(req).await {
                    if s.code() == Code::NotFound {
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    within("tenure to serve", serves()).await;

    // Now only 256 descriptors: fewer than the connections coming.
    let limit = libc::rlimit {
        rlim_cur: 256,
        rlim_max: 1024,
    };
    // SAFETY: prlimit on our own child, with a valid struct.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());

    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // Over a 2 s window with accept failing, the server mostly sleeps.
    let (cpu0, wall0) = (cpu_seconds(pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_seconds(pid) - cpu0;
    let window = wall0.elapsed().as_secs_f64();
    eprintln!("measured: {used:.3}s CPU in {window:.2}s with accept failing");
    assert!(
        used < window * 0.5,
        "{used:.2}s of CPU in {window:.2}s: the accept loop spins"
    );
    let log = std::fs::read_to_string(&log_path).unwrap();
    let accept_errors = log
        .lines()
        .filter(|l| l.contains("cannot accept a gRPC connection"))
        .count();
    assert!(accept_errors >= 1, "no accept error logged:\n{log}");
    assert!(
        accept_errors <= 2,
        "accept errors must be rate-limited, got {accept_errors} lines"
    );

    // The silent connections time out; a new client is served again.
    within("tenure to serve again", serves()).await;
    drop(idle);
    drop(child);
}
