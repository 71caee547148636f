//! Prometheus metrics on their own HTTP listener: RPC counts and latency by
//! method and code, CAS conflicts, leases acquired/released/revoked/expired,
//! active watch streams, NATS connection state and reconnects; and never a
//! lease key. Tenure runs as `tenure serve` processes: the metrics are
//! process-wide, and this test binary runs every other test beside it;
//! counters are compared before and after each step in a single sequence.

use crate::common::*;
use tenure::proto::{RevokeLeaseRequest, WatchLeaseRequest};

/// The value of the sample `series` (name with labels, as exposed), 0 when absent.
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Polls /metrics until `series` reaches `at_least`.
async fn until(addr: std::net::SocketAddr, series: &str, at_least: f64) -> String {
    within(&format!("{series} to reach {at_least}"), async {
        loop {
            let (_, body) = http_get(addr, "/metrics").await;
            if sample(&body, series) >= at_least {
                return body;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
}

#[tokio::test]
async fn metrics_move_with_the_traffic() {
    let mut nats = Nats::start().await;
    let t = Serve::start(&nats, &[]).await;
    let addr = t.metrics;
    let (status, _) = http_get(addr, "/nope").await;
    assert!(status.contains("404"), "{status}");
    let (status, before) = http_get(addr, "/metrics").await;
    assert!(status.contains("200"), "{status}");
    assert_eq!(sample(&before, "tenure_nats_connected"), 1.0);
    assert_eq!(
        sample(&before, "tenure_nats_reconnects_total"),
        0.0,
        "the first connection is not a reconnect"
    );

    let mut c = t.client().await;
    let (lease, key) = acquire(
        &mut c,
        tenure::proto::AcquireRequest {
            lease_key: "metrics-secret-lease-key-42".into(),
            ..acquire_req("m.one", "alice", 30)
        },
    )
    .await;
    // A second replica renews; the first still caches the old revision, so
    // its next renewal loses one CAS race (counted) and falls back to a read.
    let other = Serve::start(&nats, &[]).await;
    other
        .client()
        .await
        .renew(renew_req("m.one", lease.revision, &key))
        .await
        .unwrap();
    // Only the first replica is left to see the expiry below.
    other.stop().await;
    let r = renew(&mut c, renew_req("m.one", lease.revision, &key)).await;
    assert!(r.revision > lease.revision);
    c.release(release_req("m.one", r.revision, key.clone()))
        .await
        .unwrap();
    let err = c
        .renew(renew_req("m.one", r.revision, &key))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    acquire(&mut c, acquire_req("m.two", "bob", 30)).await;
    c.revoke_lease(RevokeLeaseRequest {
        name: "m.two".into(),
        reason: "test".into(),
        fencing_token: 0,
        slot: 0,
    })
    .await
    .unwrap();
    acquire(&mut c, acquire_req("m.short", "carol", 1)).await;
    let mut watch = c
        .watch_lease(WatchLeaseRequest {
            name: "m.>".into(),
            event_types: vec![],
            start_revision: 0,
            shard_revisions: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    within("snapshot", watch.message()).await.unwrap();

    let after = until(addr, "tenure_leases_expired_total", 1.0).await;
    let delta = |series: &str| sample(&after, series) - sample(&before, series);
    assert_eq!(
        delta(r#"tenure_rpc_requests_total{code="OK",method="Acquire"}"#),
        3.0
    );
    assert_eq!(
        delta(r#"tenure_rpc_requests_total{code="FAILED_PRECONDITION",method="Renew"}"#),
        1.0
    );
    assert_eq!(
        delta(r#"tenure_rpc_duration_seconds_count{code="OK",method="Release"}"#),
        1.0
    );
    assert!(delta("tenure_cas_conflicts_total") >= 1.0);
    assert_eq!(delta("tenure_leases_acquired_total"), 3.0);
    assert_eq!(delta("tenure_leases_released_total"), 1.0);
    assert_eq!(delta("tenure_leases_revoked_total"), 1.0);
    assert_eq!(sample(&after, "tenure_watch_streams_active"), 1.0);
    assert!(!after.contains("metrics-secret-lease-key-42"));
    assert!(!after.contains("alice"), "holders are not labels");

    drop(watch);
    within("the watch gauge to drop", async {
        while sample(
            &http_get(addr, "/metrics").await.1,
            "tenure_watch_streams_active",
        ) != 0.0
        {
            tokio::task::yield_now().await;
        }
    })
    .await;

    // NATS goes away and comes back: the gauge and the reconnect counter follow.
    let reconnects = sample(&after, "tenure_nats_reconnects_total");
    nats.kill().await;
    within("the connected gauge to drop", async {
        while sample(&http_get(addr, "/metrics").await.1, "tenure_nats_connected") != 0.0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    nats.restart().await;
    until(addr, "tenure_nats_reconnects_total", reconnects + 1.0).await;
    until(addr, "tenure_nats_connected", 1.0).await;
    t.stop().await;
}
