//! The `tenure` client against a hostile or broken server, and against
//! hostile local input (issue 30): the real binary runs against a fake
//! gRPC server (GetLease, Acquire, Renew, Release, WatchLease, RevokeLease
//! answer with what each test sets; the rest is UNIMPLEMENTED).
//!
//! - Durations and times from the server near `i64::MAX` never panic the
//!   client: `get` shows them, `lock` refuses a TTL no Tenure server grants
//!   (exit 70) and stops its command when a renewal grants one (exit 76).
//! - `tenure serve` refuses duration settings above its ceiling (8760h).
//! - Control characters from the server are escaped in every table and
//!   message; JSON stays exact.
//! - Token and PEM files are read up to a bound; unknown URL schemes and a
//!   CA with an `http://` URL are refused.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tenure::proto::lease_service_server::{LeaseService, LeaseServiceServer};
use tenure::proto::{
    AcquireGroupRequest, AcquireGroupResponse, AcquireRequest, AcquireResponse, EventType,
    GetLeaseRequest, GetLeaseResponse, KeepAliveRequest, KeepAliveResponse, Lease, LeaseEvent,
    ListLeasesRequest, ListLeasesResponse, ReleaseGroupRequest, ReleaseGroupResponse,
    ReleaseRequest, ReleaseResponse, RenewGroupRequest, RenewGroupResponse, RenewRequest,
    RenewResponse, RevokeLeaseRequest, RevokeLeaseResponse, WatchLeaseRequest, WatchLeaseResponse,
};
use tokio::process::Command;
use tonic::{Request, Response, Status, Streaming};

use crate::common::{run_to_end, tenure_cli, Out};

/// A boxed response stream.
type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// What the fake server answers.
#[derive(Clone, Default)]
struct Fake {
    /// The lease Acquire grants.
    granted: Lease,
    /// The lease Renew returns (the granted one when None).
    renewed: Option<Lease>,
    /// The lease GetLease, WatchLease and RevokeLease report.
    shown: Lease,
    /// When set, GetLease fails with this message.
    refusal: Option<String>,
    /// Release calls received.
    releases: Arc<AtomicU32>,
}

#[tonic::async_trait]
impl LeaseService for Fake {
    async fn acquire(
        &self,
        _: Request<AcquireRequest>,
    ) -> Result<Response<AcquireResponse>, Status> {
        Ok(Response::new(AcquireResponse {
            lease: Some(self.granted.clone()),
            lease_key: "fake-lease-key-0123456789".into(),
        }))
    }

    async fn renew(&self, _: Request<RenewRequest>) -> Result<Response<RenewResponse>, Status> {
        Ok(Response::new(RenewResponse {
            lease: Some(self.renewed.clone().unwrap_or_else(|| self.granted.clone())),
        }))
    }

    async fn release(
        &self,
        _: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(ReleaseResponse { revision: 9 }))
    }

    async fn get_lease(
        &self,
        _: Request<GetLeaseRequest>,
    ) -> Result<Response<GetLeaseResponse>, Status> {
        if let Some(m) = &self.refusal {
            return Err(Status::failed_precondition(m.clone()));
        }
        Ok(Response::new(GetLeaseResponse {
            lease: Some(self.shown.clone()),
            ..Default::default()
        }))
    }

    type WatchLeaseStream = Boxed<WatchLeaseResponse>;

    async fn watch_lease(
        &self,
        _: Request<WatchLeaseRequest>,
    ) -> Result<Response<Self::WatchLeaseStream>, Status> {
        let l = self.shown.clone();
        let events = [
            LeaseEvent {
                r#type: EventType::Current as i32,
                name: l.name.clone(),
                revision: l.revision,
                holder: l.holder.clone(),
                fencing_token: l.fencing_token,
                time: l.renew_time,
                lease: Some(l),
                ..Default::default()
            },
            LeaseEvent {
                r#type: EventType::SnapshotComplete as i32,
                ..Default::default()
            },
        ]
        .map(|e| Ok(WatchLeaseResponse { event: Some(e) }));
        let stream = futures::stream::iter(events).chain(futures::stream::pending());
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_leases(
        &self,
        _: Request<ListLeasesRequest>,
    ) -> Result<Response<ListLeasesResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn revoke_lease(
        &self,
        _: Request<RevokeLeaseRequest>,
    ) -> Result<Response<RevokeLeaseResponse>, Status> {
        Ok(Response::new(RevokeLeaseResponse {
            revision: 10,
            revoked: Some(self.shown.clone()),
        }))
    }

    type KeepAliveStream = Boxed<KeepAliveResponse>;

    async fn keep_alive(
        &self,
        _: Request<Streaming<KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn acquire_group(
        &self,
        _: Request<AcquireGroupRequest>,
    ) -> Result<Response<AcquireGroupResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn renew_group(
        &self,
        _: Request<RenewGroupRequest>,
    ) -> Result<Response<RenewGroupResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn release_group(
        &self,
        _: Request<ReleaseGroupRequest>,
    ) -> Result<Response<ReleaseGroupResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn transfer(
        &self,
        _: Request<tenure::proto::TransferRequest>,
    ) -> Result<Response<tenure::proto::TransferResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn downgrade(
        &self,
        _: Request<tenure::proto::DowngradeRequest>,
    ) -> Result<Response<tenure::proto::DowngradeResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    /// A holding whose holder and revoke reason carry terminal escapes: the
    /// CLI's table must escape them.
    async fn lease_history(
        &self,
        _: Request<tenure::proto::LeaseHistoryRequest>,
    ) -> Result<Response<tenure::proto::LeaseHistoryResponse>, Status> {
        Ok(Response::new(tenure::proto::LeaseHistoryResponse {
            holdings: vec![tenure::proto::HistoricHolding {
                name: "jobs.hist".into(),
                holder: "\x1b[2Jforged\r\nrow".into(),
                fencing_token: 3,
                acquire_time: Some(ts(i64::MAX, i32::MAX)),
                end_time: Some(ts(-5, -1)),
                ending: tenure::proto::HoldingEnding::Revoked as i32,
                revoked_by: "\x1b]0;title\x07".into(),
                revoke_reason: "\x1b[31mred".into(),
                ..Default::default()
            }],
            ..Default::default()
        }))
    }

    /// A key no Ed25519 key can be, and a keyset text with a terminal
    /// escape: the CLI must refuse the first and never print the second.
    async fn get_fence_keys(
        &self,
        _: Request<tenure::proto::GetFenceKeysRequest>,
    ) -> Result<Response<tenure::proto::GetFenceKeysResponse>, Status> {
        Ok(Response::new(tenure::proto::GetFenceKeysResponse {
            keys: vec![tenure::proto::FenceKey {
                key_id: "\x1b[2Jforged".into(),
                public_key: vec![1, 2, 3, 4, 5],
                active: true,
            }],
            keyset: "\x1b[2J".into(),
        }))
    }
}

use futures::StreamExt;

/// A running fake server; stopped on drop.
struct Running {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Running {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Serves `fake` on a free loopback port.
async fn serve(fake: Fake) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(LeaseServiceServer::new(fake))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    Running { addr, task }
}

/// The binary with no client settings from the environment, its address
/// space bounded (1 GiB) so that a file read without a bound fails fast
/// instead of eating the machine's memory.
fn tenure(server: &str) -> Command {
    let mut c = tenure_cli(server);
    c.env("MALLOC_ARENA_MAX", "2");
    // SAFETY: setrlimit is async-signal-safe and touches only its argument.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    c
}

/// Runs the binary to completion.
async fn run(server: &str, args: &[&str]) -> Out {
    run_to_end(tenure(server).args(args)).await
}

/// A one-line error: `tenure: ...`, nothing else on stderr, no panic.
fn one_line_error(out: &Out) -> &str {
    assert!(!out.stderr.contains("panicked"), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.starts_with("tenure: "), "{out:?}");
    out.stderr.trim_end()
}

/// A protobuf duration of whole seconds and nanos.
fn dur(seconds: i64, nanos: i32) -> prost_types::Duration {
    prost_types::Duration { seconds, nanos }
}

/// A protobuf timestamp.
fn ts(seconds: i64, nanos: i32) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds, nanos }
}

/// A plain lease with a 3 s TTL written now.
fn sane(name: &str) -> Lease {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    Lease {
        name: name.into(),
        holder: "fake".into(),
        fencing_token: 7,
        revision: 7,
        ttl: Some(dur(3, 0)),
        acquire_time: Some(ts(now.as_secs() as i64, 0)),
        renew_time: Some(ts(now.as_secs() as i64, 0)),
        ..Default::default()
    }
}

/// A lease whose every duration and time is as large as protobuf allows.
fn absurd(name: &str) -> Lease {
    Lease {
        ttl: Some(dur(i64::MAX, 999_999_999)),
        acquire_time: Some(ts(i64::MAX, i32::MAX)),
        renew_time: Some(ts(i64::MAX, 999_999_999)),
        lock_delay: Some(dur(i64::MAX, i32::MAX)),
        ..sane(name)
    }
}

/// `tenure get` (table and JSON) and `tenure watch` show a lease whose TTL
/// and times are near `i64::MAX`, negative or with out-of-range nanos,
/// without a panic ("overflow when adding duration to instant").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_durations_and_times_from_the_server_do_not_panic_get() {
    for shown in [
        absurd("jobs.huge"),
        Lease {
            ttl: Some(dur(-5, -1)),
            renew_time: Some(ts(i64::MIN, -1)),
            acquire_time: Some(ts(-1, i32::MAX)),
            ..sane("jobs.negative")
        },
    ] {
        let s = serve(Fake {
            shown: shown.clone(),
            ..Default::default()
        })
        .await;
        let table = run(&s.url(), &["get", &shown.name]).await;
        assert_eq!(table.code, 0, "{table:?}");
        assert!(!table.stderr.contains("panicked"), "{table:?}");
        assert_eq!(table.stdout.lines().count(), 2, "{table:?}");
        assert!(table.stdout.contains(&shown.name), "{table:?}");

        let json = run(&s.url(), &["get", &shown.name, "-o", "json"]).await;
        assert_eq!(json.code, 0, "{json:?}");
        let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
        assert_eq!(v["name"], shown.name.as_str(), "{v}");
        assert!(v["ttl_seconds"].is_number(), "{v}");

        let watch = run(&s.url(), &["watch", &shown.name, "--count", "2"]).await;
        assert_eq!(watch.code, 0, "{watch:?}");
        assert!(!watch.stderr.contains("panicked"), "{watch:?}");
    }
}

/// `tenure lock` granted a TTL no Tenure server grants (above the 8760h
/// ceiling) refuses it in one line with exit 70, never runs the command,
/// and releases what it was handed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_refuses_a_ttl_no_server_grants() {
    let fake = Fake {
        granted: absurd("jobs.huge"),
        ..Default::default()
    };
    let releases = fake.releases.clone();
    let s = serve(fake).await;
    let out = run(
        &s.url(),
        &[
            "lock",
            "jobs.huge",
            "--",
            "sh",
            "-c",
            "echo the command ran",
        ],
    )
    .await;
    assert_eq!(out.code, 70, "{out:?}");
    let line = one_line_error(&out);
    assert!(line.contains("TTL") && line.contains("8760h"), "{line}");
    assert!(out.stdout.is_empty(), "the command ran: {out:?}");
    assert_eq!(releases.load(Ordering::SeqCst), 1, "released once");
}

/// A renewal that grants an impossible TTL ends the holding as far as
/// `tenure lock` is concerned: the command is stopped (exit 76), and the
/// renewer does not panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_stops_the_command_when_a_renewal_grants_an_impossible_ttl() {
    let s = serve(Fake {
        granted: sane("jobs.renewed"),
        renewed: Some(absurd("jobs.renewed")),
        shown: sane("jobs.renewed"),
        ..Default::default()
    })
    .await;
    let out = run(
        &s.url(),
        &[
            "lock",
            "jobs.renewed",
            "--ttl",
            "3s",
            "--kill-grace",
            "1s",
            "--",
            "sh",
            "-c",
            "sleep 20",
        ],
    )
    .await;
    assert!(!out.stderr.contains("panicked"), "{out:?}");
    assert_eq!(out.code, 76, "{out:?}");
    assert!(out.stderr.contains("8760h"), "{out:?}");
}

/// Durations given on the client's command line are capped at 8760h too
/// (`--wait 5000000000000000h` used to panic adding it to the clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_client_durations_are_usage_errors() {
    let s = serve(Fake {
        granted: sane("jobs.a"),
        ..Default::default()
    })
    .await;
    for args in [
        &["acquire", "jobs.a", "--wait", "5000000000000000h"][..],
        &["lock", "jobs.a", "--ttl", "5000000000000000h", "--", "true"],
        &["lock", "jobs.a", "--kill-grace", "9000h", "--", "true"],
        &["get", "jobs.a", "--timeout", "5000000000000000h"],
    ] {
        let out = run(&s.url(), args).await;
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains("8760h"), "{args:?}: {out:?}");
        assert!(!out.stderr.contains("panicked"), "{args:?}: {out:?}");
    }
}

/// `tenure serve` refuses duration settings above its 8760h ceiling (and
/// numbers too large to be durations at all) at start, with exit 2 and a
/// message naming the flag: `--max-ttl 2562047788015h` used to be accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_durations_above_the_ceiling() {
    for (flag, value) in [
        ("--max-ttl", "2562047788015h"),
        ("--max-ttl", "8761h"),
        ("--default-ttl", "9000h"),
        ("--marker-ttl", "2562047788015h"),
        ("--max-wait", "2562047788015h"),
        ("--max-lock-delay", "2562047788015h"),
        ("--idle-timeout", "2562047788015h"),
        ("--shutdown-grace", "2562047788015h"),
        ("--max-ttl", "6000000000000000h"),
    ] {
        let out = tokio::time::timeout(
            Duration::from_secs(15),
            Command::new(env!("CARGO_BIN_EXE_tenure"))
                .args(["serve", "--listen", "127.0.0.1:0", "--nats-url"])
                .arg("nats://127.0.0.1:1")
                .args([flag, value])
                .env_remove("TENURE_CONFIG")
                .kill_on_drop(true)
                .output(),
        )
        .await
        .unwrap_or_else(|_| panic!("serve {flag} {value} was not refused at start"))
        .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(!err.contains("panicked"), "{flag} {value}: {err}");
    }
}

/// Does `text` hold a control character other than the newlines ending
/// its lines (C0, DEL, C1)?
fn has_control(text: &str) -> bool {
    text.chars().any(|c| c != '\n' && c.is_control())
}

/// A holder, a name and metadata with terminal escapes, CR/LF and C1
/// controls: tables and messages show them escaped (`\x1b`, `\r`, `\n`,
/// `\u{9b}`), so they cannot forge a row or drive the terminal; JSON keeps
/// them exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_from_the_server_are_escaped() {
    let holder = "evil\x1b]0;pwned\x07\x1b[2J\r\nforged  9  9  1s  1s  -  x\u{9b}31m\u{7f}";
    let shown = Lease {
        name: "jobs.a\rjobs.b".into(),
        holder: holder.into(),
        metadata: HashMap::from([("note".to_string(), "a\x1b[2Jb\r\nc".to_string())]),
        ..sane("jobs.a")
    };
    let s = serve(Fake {
        shown: shown.clone(),
        ..Default::default()
    })
    .await;

    let get = run(&s.url(), &["get", "jobs.a"]).await;
    assert_eq!(get.code, 0, "{get:?}");
    assert!(!has_control(&get.stdout), "raw controls: {:?}", get.stdout);
    assert_eq!(
        get.stdout.lines().count(),
        2,
        "a forged row: {}",
        get.stdout
    );
    assert!(
        get.stdout
            .contains(r"evil\x1b]0;pwned\x07\x1b[2J\r\nforged  9  9  1s  1s  -  x\u{9b}31m\x7f"),
        "{}",
        get.stdout
    );
    assert!(get.stdout.contains(r"jobs.a\rjobs.b"), "{}", get.stdout);

    let json = run(&s.url(), &["get", "jobs.a", "-o", "json"]).await;
    assert_eq!(json.code, 0, "{json:?}");
    assert!(
        !has_control(&json.stdout),
        "raw controls: {:?}",
        json.stdout
    );
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["holder"], holder, "JSON is exact");
    assert_eq!(v["name"], shown.name.as_str());
    assert_eq!(v["metadata"]["note"], "a\x1b[2Jb\r\nc");

    let watch = run(&s.url(), &["watch", "jobs.a", "--count", "2"]).await;
    assert_eq!(watch.code, 0, "{watch:?}");
    assert!(
        !has_control(&watch.stdout),
        "raw controls: {:?}",
        watch.stdout
    );
    assert_eq!(watch.stdout.lines().count(), 3, "{}", watch.stdout);

    let watch_json = run(&s.url(), &["watch", "jobs.a", "--count", "1", "-o", "json"]).await;
    assert_eq!(watch_json.code, 0, "{watch_json:?}");
    assert!(!has_control(&watch_json.stdout), "{:?}", watch_json.stdout);
    let e: serde_json::Value = serde_json::from_str(watch_json.stdout.trim()).unwrap();
    assert_eq!(e["holder"], holder, "JSON is exact");

    let revoke = run(&s.url(), &["revoke", "jobs.a"]).await;
    assert_eq!(revoke.code, 0, "{revoke:?}");
    assert!(!has_control(&revoke.stdout), "{:?}", revoke.stdout);
    assert_eq!(revoke.stdout.lines().count(), 1, "{}", revoke.stdout);

    // An error message from the server: one line, escaped.
    let refusing = serve(Fake {
        refusal: Some("held by \x1b[31mred\x1b[0m\r\ntenure: forged line\u{9b}2J".into()),
        ..Default::default()
    })
    .await;
    let err = run(&refusing.url(), &["get", "jobs.a"]).await;
    assert_eq!(err.code, 1, "{err:?}");
    assert!(!has_control(&err.stderr), "raw controls: {:?}", err.stderr);
    let line = one_line_error(&err);
    assert!(line.contains(r"\x1b[31mred\x1b[0m"), "{line}");
}

/// A token file or PEM file that never ends (`/dev/zero`) is read up to a
/// bound (64 KiB for a token, 1 MiB for a PEM) and refused with exit 2,
/// instead of being read until memory runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_token_and_pem_files_are_refused() {
    let s = serve(Fake {
        shown: sane("jobs.a"),
        ..Default::default()
    })
    .await;
    let token = run(&s.url(), &["get", "jobs.a", "--token-file", "/dev/zero"]).await;
    assert_eq!(token.code, 2, "{token:?}");
    let line = one_line_error(&token);
    assert!(
        line.contains("/dev/zero") && line.contains("64 KiB"),
        "{line}"
    );

    let mut env_token = tenure(&s.url());
    env_token
        .env("TENURE_TOKEN_FILE", "/dev/zero")
        .args(["get", "jobs.a"]);
    let out = run_to_end(&mut env_token).await;
    assert_eq!(out.code, 2, "{out:?}");

    for flag in ["--tls-ca", "--tls-cert"] {
        let mut args = vec![
            "get",
            "jobs.a",
            "--server",
            "https://127.0.0.1:1",
            "--tls-ca",
            "/dev/zero",
        ];
        if flag == "--tls-cert" {
            args = vec![
                "get",
                "jobs.a",
                "--server",
                "https://127.0.0.1:1",
                "--tls-ca",
                "/dev/null",
                "--tls-cert",
                "/dev/zero",
                "--tls-key",
                "/dev/null",
            ];
        }
        let pem = run(&s.url(), &args).await;
        assert_eq!(pem.code, 2, "{flag}: {pem:?}");
        let line = one_line_error(&pem);
        assert!(
            line.contains(flag) && line.contains("/dev/zero") && line.contains("1 MiB"),
            "{line}"
        );
    }
}

/// Only http:// and https:// servers are used: `ftp://` (any other
/// scheme) used to be spoken to in plaintext; now it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_url_schemes_are_refused() {
    let s = serve(Fake {
        shown: sane("jobs.a"),
        ..Default::default()
    })
    .await;
    for scheme in ["ftp", "unix", "grpc", "file"] {
        let url = format!("{scheme}://{}", s.addr);
        let out = run(&url, &["get", "jobs.a"]).await;
        assert_eq!(out.code, 2, "{url}: {out:?}");
        let line = one_line_error(&out);
        assert!(
            line.contains(&url) && line.contains("http://") && line.contains("https://"),
            "{line}"
        );
    }
    // Schemes are case-insensitive: HTTP:// is http://.
    let upper = run(&format!("HTTP://{}", s.addr), &["get", "jobs.a"]).await;
    assert_eq!(upper.code, 0, "{upper:?}");
}

/// `--tls-ca` with an explicit `http://` URL is a contradiction (it used to
/// switch to TLS silently): refused, telling the user to write https://.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_with_an_http_url_is_refused() {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let s = serve(Fake {
        shown: sane("jobs.a"),
        ..Default::default()
    })
    .await;
    let out = run(
        &s.url(),
        &["get", "jobs.a", "--tls-ca", ca_path.to_str().unwrap()],
    )
    .await;
    assert_eq!(out.code, 2, "{out:?}");
    let line = one_line_error(&out);
    assert!(
        line.contains("--tls-ca") && line.contains(&format!("https://{}", s.addr)),
        "{line}"
    );
}

/// `tenure fence-keys` against a server that sends a 5-byte "key": a bad
/// response (exit 70) in one line, nothing of the server's text printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_keys_refuses_a_key_that_is_not_one() {
    let server = serve(Fake {
        granted: sane("jobs.fence"),
        ..Default::default()
    })
    .await;
    let out = run(&server.url(), &["fence-keys"]).await;
    assert_eq!(out.code, 70, "{out:?}");
    assert!(one_line_error(&out).contains("5 bytes"), "{out:?}");
    assert!(
        !out.stdout.contains('\x1b') && !out.stderr.contains('\x1b'),
        "{out:?}"
    );
}

/// `tenure history` against a server whose holder and revoke reason carry
/// terminal escapes and whose times are absurd: no escape reaches the
/// terminal, no panic, one row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_escapes_what_the_server_sends() {
    let server = serve(Fake {
        granted: sane("jobs.hist"),
        ..Default::default()
    })
    .await;
    let out = run(&server.url(), &["history", "jobs.hist"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        !out.stdout.contains('\x1b') && !out.stdout.contains('\r'),
        "{out:?}"
    );
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.stdout);
}
