//! The lease key, and its SHA-256 (which the stored record carries), never
//! appear in logs, even with RUST_LOG=trace through Tenure's own log filter,
//! across Acquire, Renew (right and wrong key), Release and Revoke. Tenure
//! runs as `tenure serve` with its log in a file: the log subscriber is
//! process-global, and this test binary runs every other test beside it.

use std::process::Stdio;

use crate::common::*;
use tenure::proto::{AcquireRequest, RevokeLeaseRequest};

#[tokio::test]
async fn lease_keys_are_never_logged() {
    let nats = Nats::start().await;
    let log = tempfile::NamedTempFile::new().unwrap();
    let stderr = Stdio::from(log.reopen().unwrap());
    let t = Serve::start_adjusted(&nats, &[], |cmd| {
        cmd.env("RUST_LOG", "trace").stderr(stderr);
    })
    .await;
    let mut c = t.client().await;
    let key = "log-secret-lease-key-31337";
    let lease = c
        .acquire(AcquireRequest {
            lease_key: key.into(),
            ..acquire_req("logged.job", "alice", 30)
        })
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    let renewed = renew(&mut c, renew_req("logged.job", lease.revision, key)).await;
    let wrong = "log-wrong-lease-key-4242";
    c.renew(renew_req("logged.job", renewed.revision, wrong))
        .await
        .unwrap_err();
    c.release(release_req("logged.job", renewed.revision, key))
        .await
        .unwrap();
    acquire(
        &mut c,
        AcquireRequest {
            lease_key: key.into(),
            ..acquire_req("logged.job", "bob", 30)
        },
    )
    .await;
    c.revoke_lease(RevokeLeaseRequest {
        name: "logged.job".into(),
        reason: "log test".into(),
        fencing_token: 0,
        slot: 0,
    })
    .await
    .unwrap();

    t.stop().await;
    let text = String::from_utf8_lossy(&std::fs::read(log.path()).unwrap()).into_owned();
    // The capture works: the revoke's operator line is there.
    assert!(text.contains("lease revoked"), "nothing captured");
    // TRACE was on: the NATS client's own debug lines are there.
    assert!(text.contains("async_nats"), "no NATS client lines captured");
    assert!(!text.contains(key), "the lease key was logged");
    let hash = tenure::KeyHash::of(key).to_hex();
    assert!(!text.contains(&hash), "the lease key's SHA-256 was logged");
    assert!(!text.contains(wrong), "a presented lease key was logged");
}
