//! Expiry: a lease that is not renewed ends after its TTL; one that is renewed
//! stays; and a lease written over a marker or a tombstone still expires.

use std::time::Duration;

use crate::common::*;
use tenure::proto::{EventType, WatchLeaseRequest};

/// A lease nobody renews expires, and then another holder acquires it
/// without waiting.
#[tokio::test]
async fn unrenewed_lease_expires_and_is_free() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut s = c
        .watch_lease(WatchLeaseRequest {
            name: "exp.a".into(),
            event_types: vec![EventType::Expired as i32],
            start_revision: 0,
            shard_revisions: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let (lease, _) = acquire(&mut c, acquire_req("exp.a", "alice", 1)).await;
    assert_eq!(lease.ttl.unwrap().seconds, 1);
    assert_eq!(
        next_of(&mut s, EventType::Expired).await.fencing_token,
        lease.fencing_token
    );
    let (next, _) = acquire(&mut c, acquire_req("exp.a", "bob", 1)).await;
    assert!(next.fencing_token > lease.fencing_token);
}

/// A lease renewed every TTL/3 stays held for more than 5 TTLs: every renewal
/// succeeds with the same token and a rival is refused throughout.
#[tokio::test]
async fn renewed_lease_stays_held_for_five_ttls() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, key) = acquire(&mut c, acquire_req("exp.keep", "alice", 2)).await;
    let mut revision = lease.revision;
    let started = tokio::time::Instant::now();
    let mut interval = tokio::time::interval(Duration::from_millis(666));
    interval.tick().await;
    while started.elapsed() < Duration::from_millis(10_500) {
        interval.tick().await;
        let renewed = c
            .renew(renew_req("exp.keep", revision, key.clone()))
            .await
            .expect("renewal within the TTL succeeds")
            .into_inner()
            .lease
            .unwrap();
        assert_eq!(renewed.fencing_token, lease.fencing_token);
        revision = renewed.revision;
        let err = c
            .acquire(acquire_req("exp.keep", "rival", 2))
            .await
            .unwrap_err();
        assert_eq!(reason(&err), "LEASE_HELD");
    }
}

/// A lease acquired over an expiry marker, and one acquired over a release
/// tombstone, still expire: Tenure never takes the async-nats create/update
/// path that drops the TTL. The raw message carries Nats-TTL.
#[tokio::test]
async fn lease_over_marker_or_tombstone_still_expires() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut s = c
        .watch_lease(WatchLeaseRequest {
            name: "exp.over".into(),
            event_types: vec![EventType::Expired as i32],
            start_revision: 0,
            shard_revisions: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    // 1. Expire once, leaving a MaxAge marker as the last message.
    let (first, _) = acquire(&mut c, acquire_req("exp.over", "a", 1)).await;
    assert_eq!(
        next_of(&mut s, EventType::Expired).await.fencing_token,
        first.fencing_token
    );
    // 2. Acquire over the marker: it must expire too.
    let (over_marker, _) = acquire(&mut c, acquire_req("exp.over", "b", 1)).await;
    let js = t.nats.jetstream().await;
    let stream = js.get_stream("KV_tenure").await.unwrap();
    let raw = stream.get_raw_message(over_marker.revision).await.unwrap();
    assert_eq!(raw.headers.get("Nats-TTL").map(|v| v.as_str()), Some("1"));
    assert_eq!(
        next_of(&mut s, EventType::Expired).await.fencing_token,
        over_marker.fencing_token
    );
    // 3. Acquire and release, leaving a tombstone; acquire over it: it expires.
    let (held, key) = acquire(&mut c, acquire_req("exp.over", "c", 30)).await;
    c.release(release_req("exp.over", held.revision, key))
        .await
        .unwrap();
    let (over_tombstone, _) = acquire(&mut c, acquire_req("exp.over", "d", 1)).await;
    assert_eq!(
        next_of(&mut s, EventType::Expired).await.fencing_token,
        over_tombstone.fencing_token
    );
}
