//! The test faults of the safety checker's negative controls
//! (`tenure serve --test-fault NAME`, docs/safety.md): refused unless
//! `TENURE_TEST_FAULTS=1` is set, hidden from `--help`, and, when allowed,
//! really in force (one cheap observable each for two of them; the safety
//! run shows what every one breaks).

use std::time::Duration;

use crate::common::*;
use tenure::proto::GetLeaseRequest;

/// `tenure serve` with `args` after a NATS URL nobody listens on (it must
/// stop before connecting), and `TENURE_TEST_FAULTS` set to `env` (or unset).
async fn serve(args: &[&str], env: Option<&str>) -> Out {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"));
    c.args(["serve", "--nats-url", "nats://127.0.0.1:1"])
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("TENURE_TEST_FAULTS")
        .kill_on_drop(true);
    if let Some(v) = env {
        c.env("TENURE_TEST_FAULTS", v);
    }
    run_to_end(&mut c).await
}

/// Without `TENURE_TEST_FAULTS=1` a test fault stops the server at start
/// (exit 2) with a message that names the fault and the variable.
#[tokio::test]
async fn a_test_fault_is_refused_without_its_environment_variable() {
    for env in [None, Some("0"), Some("yes")] {
        let out = serve(&["--test-fault", "tokens-go-back"], env).await;
        assert_eq!(out.code, 2, "TENURE_TEST_FAULTS={env:?}: {out:?}");
        assert!(
            out.stderr.contains("tokens-go-back") && out.stderr.contains("TENURE_TEST_FAULTS=1"),
            "{}",
            out.stderr
        );
    }
    // An unknown fault is a usage error, with or without the variable.
    let out = serve(&["--test-fault", "no-such-fault"], Some("1")).await;
    assert_eq!(out.code, 2, "{out:?}");
    // The flag is not in the help: it is for the safety checker alone.
    let help = run_to_end(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure")).args(["serve", "--help"]),
    )
    .await;
    assert_eq!(help.code, 0);
    assert!(!help.stdout.contains("test-fault"), "{}", help.stdout);
}

/// `tokens-go-back` in force: of three grants, the third reports a token
/// below its own revision (a fresh holding's token is its revision).
#[tokio::test]
async fn tokens_go_back_reports_every_third_token_lower() {
    let nats = Nats::start().await;
    let tenure = Serve::start_adjusted(&nats, &["--test-fault", "tokens-go-back"], |c| {
        c.env("TENURE_TEST_FAULTS", "1");
    })
    .await;
    let mut client = tenure.client().await;
    let mut lower = Vec::new();
    for name in ["tf.a", "tf.b", "tf.c"] {
        let (lease, _) = acquire(&mut client, acquire_req(name, "w", 10)).await;
        lower.push(lease.fencing_token < lease.revision);
    }
    assert_eq!(lower, [false, false, true]);
}

/// `early-expiry` in force: a 3 s lease is stored with a 1 s NATS TTL, so
/// it is gone 2 s after its Acquire (it would stand until 3 s).
#[tokio::test]
async fn early_expiry_ends_a_lease_before_its_ttl() {
    let nats = Nats::start().await;
    let tenure = Serve::start_adjusted(&nats, &["--test-fault", "early-expiry"], |c| {
        c.env("TENURE_TEST_FAULTS", "1");
    })
    .await;
    let mut client = tenure.client().await;
    let (lease, _) = acquire(&mut client, acquire_req("tf.early", "w", 3)).await;
    assert_eq!(
        lease.ttl.map(|t| t.seconds),
        Some(3),
        "the holder is told 3 s"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = client
        .get_lease(GetLeaseRequest {
            name: "tf.early".into(),
        })
        .await
        .expect_err("expired after 2 s");
    assert_eq!(reason(&status), "LEASE_NOT_FOUND", "{status:?}");
}
