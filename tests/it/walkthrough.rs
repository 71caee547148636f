//! The documented grpcurl walkthroughs, run for real against the `tenure`
//! binary with its managed local nats-server: the lease walkthrough of
//! README.md (and its curl version, over the Connect protocol), and the
//! semaphore and leader election walkthroughs of docs/api.md.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// The grpcurl (or curl) commands between the `<!-- {marker}:start -->`
/// and `<!-- {marker}:end -->` lines of `page` (relative to the
/// repository).
fn walkthrough_commands(page: &str, marker: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page))
        .unwrap_or_else(|e| panic!("read {page}: {e}"));
    let start = text
        .find(&format!("<!-- {marker}:start -->"))
        .unwrap_or_else(|| panic!("{page} has the {marker} start marker"));
    let end = text
        .find(&format!("<!-- {marker}:end -->"))
        .unwrap_or_else(|| panic!("{page} has the {marker} end marker"));
    text[start..end]
        .lines()
        .filter(|l| l.starts_with("grpcurl ") || l.starts_with("curl "))
        .map(str::to_string)
        .collect()
}

/// What each walkthrough command must print, in order.
const EXPECTED: &[&[&str]] = &[
    &["tenure.v1.LeaseService", "grpc.health.v1.Health"],
    &["rpc Acquire", "rpc WatchLease"],
    &[
        "\"fencingToken\": \"1\"",
        "\"revision\": \"1\"",
        "\"leaseKey\": \"my-secret-lease-key-1\"",
    ],
    &["\"fencingToken\": \"1\"", "\"revision\": \"2\""],
    &["\"code\": 9", "LEASE_HELD", "\"holder\": \"worker-1\""],
    &["\"holder\": \"worker-1\"", "\"revision\": \"2\""],
    &["EVENT_TYPE_CURRENT", "EVENT_TYPE_SNAPSHOT_COMPLETE"],
    &["\"revision\": \"3\""],
    &["\"holder\": \"worker-2\"", "\"fencingToken\": \"4\""],
];

/// What each command of the README's curl walkthrough must print, in order
/// (Connect JSON: compact, camelCase, 64-bit numbers as strings).
const CURL_EXPECTED: &[&[&str]] = &[
    &[
        "\"fencingToken\":\"1\"",
        "\"revision\":\"1\"",
        "\"leaseKey\":\"my-secret-lease-key-1\"",
    ],
    &["\"fencingToken\":\"1\"", "\"revision\":\"2\""],
    &[
        "\"code\":\"failed_precondition\"",
        "\"reason\":\"LEASE_HELD\"",
        "\"holder\":\"worker-1\"",
    ],
    &["\"revision\":\"3\""],
];

/// What each election walkthrough command must print, in order.
const ELECTION_EXPECTED: &[&[&str]] = &[
    &[
        "\"holder\": \"node-1\"",
        "\"value\": \"10.0.0.1:5432\"",
        "\"fencingToken\": \"1\"",
        "\"revision\": \"1\"",
    ],
    &["\"code\": 9", "LEASE_HELD", "led by \\\"node-1\\\""],
    &["\"holder\": \"node-1\"", "\"ttlLeft\""],
    &[
        "\"value\": \"10.0.0.1:6432\"",
        "\"fencingToken\": \"1\"",
        "\"revision\": \"2\"",
    ],
    &["\"fencingToken\": \"1\"", "\"revision\": \"3\""],
    &["CHANGE_TYPE_CURRENT", "\"value\": \"10.0.0.1:6432\""],
    &["\"revision\": \"4\""],
    &["\"holder\": \"node-2\"", "\"fencingToken\": \"5\""],
];

/// What each semaphore walkthrough command must print, in order.
const SEMAPHORE_EXPECTED: &[&[&str]] = &[
    &[
        "\"holder\": \"worker-1\"",
        "\"fencingToken\": \"2\"",
        "\"slot\": 1",
    ],
    &[
        "\"holder\": \"worker-2\"",
        "\"fencingToken\": \"3\"",
        "\"slot\": 2",
    ],
    &[
        "\"code\": 9",
        "LEASE_HELD",
        "\"holders\": \"2\"",
        "\"limit\": \"2\"",
    ],
    &["\"code\": 9", "LIMIT_MISMATCH", "\"limit\": \"2\""],
    &["\"holders\": [", "\"holder\": \"worker-2\"", "\"limit\": 2"],
    &["\"slot\": 1", "\"slot\": 2", "\"holder\": \"worker-2\""],
    &["\"revision\": \"4\""],
    &[
        "\"holder\": \"worker-3\"",
        "\"fencingToken\": \"5\"",
        "\"slot\": 1",
    ],
    &[
        "\"revision\": \"6\"",
        "\"holder\": \"worker-2\"",
        "\"slot\": 2",
    ],
];

/// Every README walkthrough command runs and prints what the README says,
/// and SIGTERM stops the service (and its nats-server) cleanly.
#[tokio::test]
async fn readme_walkthrough_runs() {
    run_walkthrough("README.md", "walkthrough", EXPECTED).await;
}

/// The README's curl walkthrough (the Connect protocol, JSON over
/// HTTP/1.1) runs and prints what the README says.
#[tokio::test]
async fn readme_curl_walkthrough_runs() {
    run_walkthrough("README.md", "curl-walkthrough", CURL_EXPECTED).await;
}

/// The leader election walkthrough of docs/api.md runs and prints what it
/// says.
#[tokio::test]
async fn api_election_walkthrough_runs() {
    run_walkthrough("docs/api.md", "election-walkthrough", ELECTION_EXPECTED).await;
}

/// The semaphore walkthrough of docs/api.md runs and prints what it says.
#[tokio::test]
async fn api_semaphore_walkthrough_runs() {
    run_walkthrough("docs/api.md", "semaphore-walkthrough", SEMAPHORE_EXPECTED).await;
}

/// Runs the walkthrough of `page` between `marker` lines against a fresh
/// `tenure serve`, checking each command's output against `expected`.
async fn run_walkthrough(page: &str, marker: &str, expected: &[&[&str]]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tools = root.join(".tools/bin");
    assert!(
        tools.join("grpcurl").is_file(),
        "grpcurl missing: run scripts/tools.sh"
    );
    let commands = walkthrough_commands(page, marker);
    assert_eq!(
        commands.len(),
        expected.len(),
        "the {marker} of {page} and the test disagree on the steps"
    );

    let port = crate::common::free_port();
    let data = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data.path())
        .current_dir(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    // Ready when health says SERVING.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ready = async {
            let channel =
                tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{port}"))
                    .ok()?
                    .connect()
                    .await
                    .ok()?;
            let mut h = HealthClient::new(channel);
            let r = h
                .check(HealthCheckRequest {
                    service: "tenure.v1.LeaseService".into(),
                })
                .await
                .ok()?;
            Some(r.into_inner().status == 1)
        };
        if ready.await == Some(true) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "tenure did not become ready"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "tenure exited at start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let path = format!(
        "{}:{}",
        tools.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (command, expected) in commands.iter().zip(expected) {
        let command = command.replace("localhost:7419", &format!("127.0.0.1:{port}"));
        let out = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .env("PATH", &path)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The watch ends at its -max-time; the refused Acquire fails on purpose.
        if !command.contains("-max-time") && !command.contains("-format-error") {
            assert!(out.status.success(), "{command}\n{text}");
        }
        for want in *expected {
            assert!(
                text.contains(want),
                "{command}\nmissing {want:?} in:\n{text}"
            );
        }
    }

    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id().unwrap() as libc::pid_t, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    let ports = std::fs::read_dir(data.path().join("nats/ports"))
        .unwrap()
        .count();
    assert_eq!(
        ports, 0,
        "nats-server removed its ports file: it was stopped"
    );
}
