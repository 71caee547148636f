//! The `tenure` client subcommands, run as the real binary against a real
//! server (in-process Tenure over its own nats-server): `tenure lock` gives
//! its command the token, never lets two commands overlap, stops the
//! command before the lease can pass on (revoke, server stop), forwards
//! signals and exits with the documented codes; the one-shot subcommands
//! print parseable JSON, readable tables and one-line errors.

use std::process::Stdio;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::*;
use futures::StreamExt;
use tenure::proto::{EventType, GetLeaseRequest, RevokeLeaseRequest, WatchLeaseRequest};
use tenure::{Action, Grant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The binary under test, pointed at `t`, with no client settings leaking
/// in from the environment.
fn tenure(t: &Tenure) -> Command {
    tenure_cli(&format!("http://{}", t.running.as_ref().unwrap().addr()))
}

/// Runs `tenure ARGS...` to completion.
async fn run(t: &Tenure, args: &[&str]) -> Out {
    run_to_end(tenure(t).args(args)).await
}

/// Starts `tenure lock` with the command's stdout piped to the test, so the
/// command can tell the test what it sees, line by line.
fn spawn_lock(t: &Tenure, args: &[&str], script: &str) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = tenure(t)
        .arg("lock")
        .args(args)
        .args(["--", "bash", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tenure lock");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// The next line the command printed.
async fn line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    within("a line from the command", lines.next_line())
        .await
        .unwrap()
        .expect("the command printed a line")
}

/// Waits for `tenure lock` to exit; its code and stderr.
async fn finish(mut child: Child) -> (i32, String) {
    let status = within("tenure lock to exit", child.wait()).await.unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .await
        .unwrap();
    (status.code().unwrap_or(-1), err)
}

/// Now, as Unix seconds.
fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A command that reports readiness (token and deadline) and, on SIGTERM,
/// the time it got it (bash's $EPOCHREALTIME: no fork, microseconds).
const WAIT_FOR_TERM: &str = r#"
trap 'echo "term $EPOCHREALTIME"; exit 143' TERM
echo "ready $TENURE_FENCING_TOKEN $TENURE_DEADLINE_UNIX_MS"
while :; do sleep 0.2; done
"#;

/// Parses "ready TOKEN DEADLINE_MS".
fn ready(l: &str) -> (u64, u128) {
    let f: Vec<&str> = l.split_whitespace().collect();
    assert_eq!(f.first(), Some(&"ready"), "{l}");
    (f[1].parse().unwrap(), f[2].parse().unwrap())
}

/// Parses "term SECONDS.MICROS".
fn term_time(l: &str) -> f64 {
    let f: Vec<&str> = l.split_whitespace().collect();
    assert_eq!(f.first(), Some(&"term"), "{l}");
    f[1].parse().unwrap()
}

/// The command sees the lease's name, its fencing token (the one the
/// server handed out), the holder and a deadline in the future; the lease
/// is released (not left to expire) when the command exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_gives_the_command_its_token_and_releases() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut watch = c
        .watch_lease(WatchLeaseRequest {
            name: "jobs.env".into(),
            event_types: vec![],
            start_revision: 0,
            shard_revisions: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let started = now_s();
    let out = run(
        &t,
        &[
            "lock",
            "jobs.env",
            "--holder",
            "builder-7",
            "--",
            "sh",
            "-c",
            "echo $TENURE_LEASE_NAME $TENURE_FENCING_TOKEN $TENURE_HOLDER $TENURE_DEADLINE_UNIX_MS",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let f: Vec<&str> = out.stdout.split_whitespace().collect();
    assert_eq!(f[0], "jobs.env");
    assert_eq!(f[2], "builder-7");
    let deadline_s = f[3].parse::<f64>().unwrap() / 1000.0;
    // Default TTL 10 s, margin 1 s: the deadline lies ~9 s after the start.
    assert!(
        deadline_s > started + 5.0 && deadline_s < now_s() + 10.0,
        "deadline {deadline_s} vs start {started}"
    );
    let mut seen = Vec::new();
    while let Some(Ok(m)) = within("watch events", watch.next()).await {
        let e = m.event.unwrap();
        seen.push((e.r#type, e.fencing_token));
        if e.r#type == EventType::Released as i32 {
            break;
        }
    }
    let acquired = seen
        .iter()
        .find(|(ty, _)| *ty == EventType::Acquired as i32)
        .expect("an ACQUIRED event");
    assert_eq!(
        f[1],
        acquired.1.to_string(),
        "the command got the server's token"
    );
    let err = c
        .get_lease(GetLeaseRequest {
            name: "jobs.env".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_FOUND");
}

/// Three `tenure lock` runs on one name, started together, run their
/// commands one after another: the intervals the commands record never
/// overlap, and each later command has a greater fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_one_name_never_overlap() {
    let t = Tenure::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("intervals");
    let script = format!(
        "echo \"start $TENURE_FENCING_TOKEN $EPOCHREALTIME\" >> {f}; sleep 1.2; echo \"end $TENURE_FENCING_TOKEN $EPOCHREALTIME\" >> {f}",
        f = file.display()
    );
    let runs: Vec<_> = (0..3)
        .map(|_| {
            tenure(&t)
                .args([
                    "lock", "jobs.one", "--ttl", "3s", "--wait", "60s", "-q", "--", "bash", "-c",
                    &script,
                ])
                .output()
        })
        .collect();
    for out in within("three locks", futures::future::join_all(runs)).await {
        let out = out.unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let mut spans: Vec<(u64, f64, f64)> = Vec::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (token, at): (u64, f64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        match f[0] {
            "start" => spans.push((token, at, f64::NAN)),
            _ => {
                let s = spans.iter_mut().find(|s| s.0 == token).unwrap();
                s.2 = at;
            }
        }
    }
    assert_eq!(spans.len(), 3, "{text}");
    spans.sort_by(|a, b| a.1.total_cmp(&b.1));
    for w in spans.windows(2) {
        assert!(
            w[0].2 <= w[1].1,
            "token {} ran until {} but token {} started at {}:\n{text}",
            w[0].0,
            w[0].2,
            w[1].0,
            w[1].1
        );
        assert!(w[1].0 > w[0].0, "tokens must grow:\n{text}");
    }
}

/// A revoke reaches the command as SIGTERM long before the safe deadline:
/// the watch reports it, no renewal needs to fail first. `tenure lock`
/// exits 76. Prints the measured revoke → SIGTERM time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_sends_sigterm_before_the_deadline() {
    let t = Tenure::start().await;
    let (child, mut lines) = spawn_lock(&t, &["jobs.rv", "--ttl", "30s"], WAIT_FOR_TERM);
    let (token, deadline_ms) = ready(&line(&mut lines).await);
    let mut c = t.client().await;
    let revoked_at = now_s();
    c.revoke_lease(RevokeLeaseRequest {
        name: "jobs.rv".into(),
        reason: "test".into(),
        fencing_token: token,
        slot: 0,
    })
    .await
    .unwrap();
    let term = term_time(&line(&mut lines).await);
    let (code, err) = finish(child).await;
    println!(
        "revoke -> SIGTERM of the command: {:.1} ms",
        (term - revoked_at) * 1000.0
    );
    assert!(
        term * 1000.0 < deadline_ms as f64,
        "SIGTERM at {term} is not before the safe deadline {deadline_ms}"
    );
    assert!(term >= revoked_at, "SIGTERM before the revoke?");
    assert_eq!(code, 76, "{err}");
    assert!(err.contains("REVOKED"), "{err}");
}

/// When the server stops, renewals cannot get through: the command gets
/// SIGTERM before the lease can expire (the last write NATS stored + TTL),
/// which is when another replica could hand it to someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_stop_sends_sigterm_before_the_lease_can_expire() {
    let mut t = Tenure::start().await;
    let (child, mut lines) = spawn_lock(&t, &["jobs.stop", "--ttl", "3s"], WAIT_FOR_TERM);
    ready(&line(&mut lines).await);
    let stopped_at = now_s();
    t.running.take().unwrap().shutdown().await;
    let term = term_time(&line(&mut lines).await);
    let (code, err) = finish(child).await;
    // The last write of the holding, by the NATS server's clock (the same
    // machine's): the client sent it earlier, so its expiry is no later
    // than this + TTL.
    let kv = t.kv().await;
    let entry = kv
        .entry("_tenure.q.jobs.stop.lease.holder")
        .await
        .unwrap()
        .expect("the holding");
    let written = entry.created.unix_timestamp_nanos() as f64 / 1e9;
    let expiry = written + 3.0;
    println!(
        "server stopped at {stopped_at:.3}; last write {written:.3}; SIGTERM {term:.3}, {:.0} ms before the expiry",
        (expiry - term) * 1000.0
    );
    assert!(term < expiry, "SIGTERM at {term}, expiry at {expiry}");
    assert!(term > stopped_at, "SIGTERM before the stop?");
    assert_eq!(code, 76, "{err}");
    assert!(err.contains("safe deadline"), "{err}");
}

/// Exit codes: the command's own, 128+N for a signal, 127 for a missing
/// command, 75 for a held lease (with and without a wait), 69 for an
/// unreachable server; a --limit runs the command under a semaphore slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_exit_codes() {
    let t = Tenure::start().await;
    let code = |args: &'static [&'static str]| {
        let t = &t;
        async move { run(t, args).await }
    };
    assert_eq!(
        code(&["lock", "x.a", "--", "sh", "-c", "exit 3"])
            .await
            .code,
        3
    );
    assert_eq!(
        code(&["lock", "x.a", "--", "sh", "-c", "kill -KILL $$"])
            .await
            .code,
        137
    );
    let missing = code(&["lock", "x.a", "--", "/nonexistent/cmd"]).await;
    assert_eq!(missing.code, 127, "{}", missing.stderr);
    // The lease was released after the missing command, so it is free.
    assert_eq!(
        code(&["lock", "x.a", "--limit", "1", "--", "true"])
            .await
            .code,
        0
    );
    // --limit N > 1 holds one of N semaphore slots, renewed and released.
    let limit = code(&["lock", "x.sem", "--limit", "3", "--", "true"]).await;
    assert_eq!(limit.code, 0, "{}", limit.stderr);
    // --mode shared joins a shared holder of a read-write lock (renewed
    // and released by its slot); --mode exclusive is refused beside it.
    let mut c = t.client().await;
    acquire(
        &mut c,
        tenure::proto::AcquireRequest {
            mode: tenure::proto::LockMode::Shared as i32,
            ..acquire_req("x.rw", "reader", 60)
        },
    )
    .await;
    let shared = code(&["lock", "x.rw", "--mode", "shared", "--", "true"]).await;
    assert_eq!(shared.code, 0, "{}", shared.stderr);
    let exclusive = code(&["lock", "x.rw", "--mode", "exclusive", "--", "true"]).await;
    assert_eq!(exclusive.code, 75, "{}", exclusive.stderr);
    let listed = code(&["get", "x.rw"]).await;
    assert!(
        listed.stdout.contains("reader (shared)"),
        "{}",
        listed.stdout
    );

    let mut c = t.client().await;
    acquire(&mut c, acquire_req("x.held", "other", 60)).await;
    let held = code(&["lock", "x.held", "--", "true"]).await;
    assert_eq!(held.code, 75, "{}", held.stderr);
    assert!(
        held.stderr.starts_with("tenure: LEASE_HELD: "),
        "{}",
        held.stderr
    );
    let waited = code(&["lock", "x.held", "--wait", "1s", "--", "true"]).await;
    assert_eq!(waited.code, 75, "{}", waited.stderr);

    let mut nowhere = Command::new(env!("CARGO_BIN_EXE_tenure"));
    let out = nowhere
        .args([
            "lock",
            "x.a",
            "--server",
            "http://127.0.0.1:1",
            "--",
            "true",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("tenure: UNAVAILABLE: cannot reach"));
}

/// SIGINT and SIGTERM sent to `tenure lock` reach the command; its exit
/// (128+signal) is tenure's, and the lease is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_are_forwarded_to_the_command() {
    let t = Tenure::start().await;
    for (sig, name) in [(libc::SIGINT, "INT"), (libc::SIGHUP, "HUP")] {
        let script = format!(
            "trap 'echo got-{name}; exit $((128 + {sig}))' {name}; echo ready; while :; do sleep 0.2; done"
        );
        let (child, mut lines) = spawn_lock(&t, &["jobs.sig"], &script);
        assert_eq!(line(&mut lines).await, "ready");
        // SAFETY: signalling a child process we spawned.
        unsafe { libc::kill(child.id().unwrap() as i32, sig) };
        assert_eq!(line(&mut lines).await, format!("got-{name}"));
        let (code, err) = finish(child).await;
        assert_eq!(code, 128 + sig, "{err}");
        let mut c = t.client().await;
        let err = c
            .get_lease(GetLeaseRequest {
                name: "jobs.sig".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(
            reason(&err),
            "LEASE_NOT_FOUND",
            "released after the command"
        );
    }
}

/// `--output json` parses for every subcommand, and the acquire → renew →
/// release cycle works from the shell with what acquire printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_parses() {
    let t = Tenure::start().await;
    let json = |out: Out| -> serde_json::Value {
        assert_eq!(out.code, 0, "{}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
    };
    let a = json(
        run(
            &t,
            &[
                "acquire", "jobs.j", "--holder", "w1", "--ttl", "30s", "--meta", "team=ops", "-o",
                "json",
            ],
        )
        .await,
    );
    assert_eq!(a["holder"], "w1");
    assert_eq!(a["ttl_seconds"], 30.0);
    assert_eq!(a["metadata"]["team"], "ops");
    let key = a["lease_key"].as_str().unwrap().to_string();
    let token = a["fencing_token"].as_u64().unwrap();
    let rev = a["revision"].as_u64().unwrap().to_string();

    let r = json(
        run(
            &t,
            &[
                "renew",
                "jobs.j",
                "--revision",
                &rev,
                "--lease-key",
                &key,
                "-o",
                "json",
            ],
        )
        .await,
    );
    assert_eq!(r["fencing_token"].as_u64(), Some(token));
    assert!(r["revision"].as_u64().unwrap() > rev.parse().unwrap());
    let rev2 = r["revision"].as_u64().unwrap().to_string();

    let g = json(run(&t, &["get", "jobs.j", "-o", "json"]).await);
    assert_eq!(g["revision"].as_u64().unwrap().to_string(), rev2);
    assert!(g["ttl_left_seconds"].as_f64().unwrap() > 20.0);

    let l = json(run(&t, &["list", "jobs.", "-o", "json"]).await);
    assert_eq!(l.as_array().unwrap().len(), 1);
    assert_eq!(l[0]["name"], "jobs.j");

    let w = run(&t, &["watch", "jobs.>", "--count", "2", "-o", "json"]).await;
    assert_eq!(w.code, 0, "{}", w.stderr);
    let events: Vec<serde_json::Value> = w
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "CURRENT");
    assert_eq!(events[0]["lease"]["holder"], "w1");
    assert_eq!(events[1]["type"], "SNAPSHOT_COMPLETE");

    let rel = json(
        run(
            &t,
            &[
                "release",
                "jobs.j",
                "--revision",
                &rev2,
                "--lease-key",
                &key,
                "-o",
                "json",
            ],
        )
        .await,
    );
    assert!(rel["revision"].as_u64().is_some());

    json(run(&t, &["acquire", "jobs.k", "-o", "json"]).await);
    let rv = json(run(&t, &["revoke", "jobs.k", "--reason", "test", "-o", "json"]).await);
    assert_eq!(rv["revoked"]["name"], "jobs.k");
}

/// Tables carry the documented columns; errors are one line,
/// `tenure: REASON: ...`, with a non-zero exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_and_one_line_errors() {
    let t = Tenure::start().await;
    let a = run(&t, &["acquire", "jobs.t", "--holder", "w1", "--ttl", "30s"]).await;
    assert_eq!(a.code, 0, "{}", a.stderr);
    let g = run(&t, &["get", "jobs.t"]).await;
    let header = g.stdout.lines().next().unwrap();
    for col in ["NAME", "HOLDER", "TOKEN", "REVISION", "TTL LEFT", "WAITERS"] {
        assert!(header.contains(col), "{header}");
    }
    assert!(
        g.stdout.lines().nth(1).unwrap().starts_with("jobs.t  "),
        "{}",
        g.stdout
    );

    let missing = run(&t, &["get", "jobs.none"]).await;
    assert_eq!(missing.code, 1);
    assert_eq!(missing.stderr.lines().count(), 1, "{}", missing.stderr);
    assert!(
        missing.stderr.starts_with("tenure: LEASE_NOT_FOUND: "),
        "{}",
        missing.stderr
    );

    let wrong = run(
        &t,
        &[
            "renew",
            "jobs.t",
            "--revision",
            "1",
            "--lease-key",
            "not-the-key-0123456789",
        ],
    )
    .await;
    assert_eq!(wrong.code, 1);
    assert!(
        wrong.stderr.starts_with("tenure: LEASE_NOT_HELD: "),
        "{}",
        wrong.stderr
    );

    let bad = run(&t, &["get", "bad..name"]).await;
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr.starts_with("tenure: INVALID_NAME: "),
        "{}",
        bad.stderr
    );
}

/// With bearer tokens on, the client sends --token, --token-file or
/// TENURE_TOKEN; without one it is refused with exit 77.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_from_flag_file_and_env() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "ops ops-token-0123456789abcdef\n").unwrap();
    let t = Tenure::start_with(|c| {
        c.auth_tokens = Some(tokens);
        c.grants = vec![Grant {
            identity: "ops".into(),
            prefixes: vec!["ops.".into()],
            actions: vec![Action::All],
        }];
    })
    .await;
    let refused = run(&t, &["acquire", "ops.a"]).await;
    assert_eq!(refused.code, 77, "{}", refused.stderr);
    assert!(
        refused.stderr.starts_with("tenure: UNAUTHENTICATED: "),
        "{}",
        refused.stderr
    );

    let ok = run(
        &t,
        &["acquire", "ops.a", "--token", "ops-token-0123456789abcdef"],
    )
    .await;
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let file = dir.path().join("token");
    std::fs::write(&file, "ops-token-0123456789abcdef\n").unwrap();
    let ok = run(
        &t,
        &["get", "ops.a", "--token-file", file.to_str().unwrap()],
    )
    .await;
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let env = within(
        "tenure get",
        tenure(&t)
            .args(["lock", "ops.b", "--", "true"])
            .env("TENURE_TOKEN", "ops-token-0123456789abcdef")
            .output(),
    )
    .await
    .unwrap();
    assert_eq!(env.status.code(), Some(0));
    let denied = run(
        &t,
        &["get", "other.a", "--token", "ops-token-0123456789abcdef"],
    )
    .await;
    assert_eq!(denied.code, 77, "{}", denied.stderr);
}

/// Completion scripts cover the client and the server subcommands.
#[tokio::test]
async fn completions() {
    for shell in ["bash", "zsh", "fish"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        for sub in ["lock", "top", "serve", "kill-grace"] {
            assert!(text.contains(sub), "{shell} completions lack {sub}");
        }
    }
}

/// Over mTLS: --tls-ca verifies the server (named by --tls-domain, since
/// the URL has an IP address), --tls-cert/--tls-key identify the client,
/// whose grant then applies. Without a client certificate nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls() {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n);
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "tenure cli test CA");
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(path("ca.pem"), ca.pem()).unwrap();
    for (name, cn, sans) in [
        ("server", "tenure", vec!["localhost".to_string()]),
        ("ops", "ops", vec![]),
    ] {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        let cert = p.signed_by(&key, &ca).unwrap();
        std::fs::write(path(&format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(path(&format!("{name}.key")), key.serialize_pem()).unwrap();
    }
    let t = Tenure::start_with(|c| {
        c.tls_cert = Some(path("server.pem"));
        c.tls_key = Some(path("server.key"));
        c.tls_client_ca = Some(path("ca.pem"));
        c.grants = vec![Grant {
            identity: "ops".into(),
            prefixes: vec!["tls.".into()],
            actions: vec![Action::All],
        }];
    })
    .await;
    let server = format!("https://{}", t.running.as_ref().unwrap().addr());
    let ca = path("ca.pem");
    let cert = path("ops.pem");
    let key = path("ops.key");
    let tls = [
        "--server",
        server.as_str(),
        "--tls-domain",
        "localhost",
        "--tls-ca",
        ca.to_str().unwrap(),
    ];
    let mut args = vec!["lock", "tls.a"];
    args.extend_from_slice(&tls);
    args.extend_from_slice(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    args.extend_from_slice(&["--", "sh", "-c", "test -n \"$TENURE_FENCING_TOKEN\""]);
    let ok = run(&t, &args).await;
    assert_eq!(ok.code, 0, "{}", ok.stderr);

    let mut args = vec!["get", "tls.a"];
    args.extend_from_slice(&tls);
    let refused = run(&t, &args).await;
    assert_ne!(refused.code, 0);
    assert!(refused.stderr.starts_with("tenure: "), "{}", refused.stderr);
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
    assert_eq!(refused.code, 69, "{}", refused.stderr);
    assert!(refused.stderr.contains("--tls-cert"), "{}", refused.stderr);
}

/// Without the watch grant `tenure lock` cannot follow its lease and says
/// so; a revoke then shows up as a refused Renew (LEASE_NOT_HELD) at the
/// next renewal, still well before the safe deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_renewal_stops_the_command_without_a_watch() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "worker worker-token-0123456789abcdef\nops ops-token-0123456789abcdef\n",
    )
    .unwrap();
    let t = Tenure::start_with(|c| {
        c.auth_tokens = Some(tokens);
        c.grants = vec![
            Grant {
                identity: "worker".into(),
                prefixes: vec!["w.".into()],
                actions: vec![Action::Acquire, Action::Renew, Action::Release],
            },
            Grant {
                identity: "ops".into(),
                prefixes: vec!["".into()],
                actions: vec![Action::All],
            },
        ];
    })
    .await;
    let mut child = tenure(&t)
        .args([
            "lock",
            "w.job",
            "--ttl",
            "6s",
            "--token",
            "worker-token-0123456789abcdef",
        ])
        .args(["--", "bash", "-c", WAIT_FOR_TERM])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (token, deadline_ms) = ready(&line(&mut lines).await);
    let revoked = run(
        &t,
        &[
            "revoke",
            "w.job",
            "--token",
            "ops-token-0123456789abcdef",
            "--fencing-token",
            &token.to_string(),
        ],
    )
    .await;
    assert_eq!(revoked.code, 0, "{}", revoked.stderr);
    let term = term_time(&line(&mut lines).await);
    let (code, err) = finish(child).await;
    assert!(
        term * 1000.0 < deadline_ms as f64,
        "{term} vs {deadline_ms}"
    );
    assert_eq!(code, 76, "{err}");
    assert!(
        err.contains("cannot follow the lease with WatchLease"),
        "{err}"
    );
    assert!(err.contains("renew refused: LEASE_NOT_HELD"), "{err}");
}

/// What the command leaves running in its process group would work without
/// the lease: it is stopped when the command exits, before the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_of_the_command_are_stopped() {
    let t = Tenure::start().await;
    let out = run(
        &t,
        &["lock", "jobs.left", "--", "sh", "-c", "sleep 600 & echo $!"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let pid: u32 = out.stdout.trim().parse().unwrap();
    // Gone, or a zombie waiting for an init that does not reap.
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let running = state
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().next())
        .is_some_and(|s| s != "Z");
    assert!(!running, "sleep {pid} still runs: {state}");
}
