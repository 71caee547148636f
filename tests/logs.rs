//! The lease key, and its SHA-256 (which the stored record carries), never
//! appear in logs, even with RUST_LOG=trace through Tenure's own log filter,
//! across Acquire, Renew (right and wrong key), Release and Revoke. One
//! test: it installs the process-global subscriber.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use tenure::proto::{AcquireRequest, RevokeLeaseRequest};

/// Collects every log line in memory.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn lease_keys_are_never_logged() {
    let capture = Capture::default();
    let writer = capture.clone();
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        use tracing_subscriber::Layer;
        tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(move || writer.clone())
                    .with_filter(tenure::log_filter("trace").unwrap()),
            )
            .init();
    }

    let t = Tenure::start().await;
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

    let text = String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned();
    // The capture works: the revoke's operator line is there.
    assert!(text.contains("lease revoked"), "nothing captured");
    // TRACE was on: the NATS client's own debug lines are there.
    assert!(text.contains("async_nats"), "no NATS client lines captured");
    assert!(!text.contains(key), "the lease key was logged");
    let hash = tenure::KeyHash::of(key).to_hex();
    assert!(!text.contains(&hash), "the lease key's SHA-256 was logged");
    assert!(!text.contains(wrong), "a presented lease key was logged");
}
