//! Renew and Release: only the holder, with the current holding, may write;
//! everyone else gets LEASE_NOT_HELD and changes nothing.

use crate::common::*;
use tenure::proto::{EventType, GetLeaseRequest, WatchLeaseRequest};

/// A wrong lease key cannot renew or release, even with the right revision.
#[tokio::test]
async fn wrong_key_is_not_held_and_writes_nothing() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, _key) = acquire(&mut c, acquire_req("own.key", "alice", 30)).await;
    let before = t.last_sequence().await;
    let err = c
        .renew(renew_req(
            "own.key",
            lease.revision,
            "not-the-right-key-000",
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    let err = c
        .release(release_req(
            "own.key",
            lease.revision,
            "not-the-right-key-000",
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    assert_eq!(t.last_sequence().await, before, "nothing written");
    let now = c
        .get_lease(GetLeaseRequest {
            name: "own.key".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(now, lease);
}

/// A revision outside the current holding (newer than the lease, or from an
/// earlier holding under the same key) is refused and changes nothing.
#[tokio::test]
async fn foreign_revision_is_not_held() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut req = acquire_req("own.rev", "alice", 30);
    req.lease_key = "alice-secret-key-0001".into();
    let (first, key) = acquire(&mut c, req.clone()).await;
    c.release(release_req("own.rev", first.revision, &key))
        .await
        .unwrap();
    let (second, _) = acquire(&mut c, req).await;
    assert!(second.fencing_token > first.fencing_token);
    let before = t.last_sequence().await;
    for rev in [first.revision, second.revision + 100] {
        let err = c.renew(renew_req("own.rev", rev, &key)).await.unwrap_err();
        assert_eq!(reason(&err), "LEASE_NOT_HELD", "revision {rev}");
        let err = c
            .release(release_req("own.rev", rev, &key))
            .await
            .unwrap_err();
        assert_eq!(reason(&err), "LEASE_NOT_HELD", "revision {rev}");
    }
    assert_eq!(t.last_sequence().await, before, "nothing written");
}

/// A Renew retried after a lost reply (its revision now stale, the holding
/// the same) succeeds and keeps the token; so does a Release.
#[tokio::test]
async fn retried_renew_with_stale_revision_succeeds() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, key) = acquire(&mut c, acquire_req("own.retry", "alice", 30)).await;
    let r1 = renew(&mut c, renew_req("own.retry", lease.revision, &key)).await;
    // The reply of r1 was "lost": the client retries with the old revision.
    let r2 = renew(&mut c, renew_req("own.retry", lease.revision, &key)).await;
    assert_eq!(r2.fencing_token, lease.fencing_token);
    assert!(r2.revision > r1.revision);
    c.release(release_req("own.retry", r1.revision, &key))
        .await
        .expect("release with a stale revision of the same holding");
}

/// A fresh replica (no cache) verifies against the bucket and behaves the
/// same: the cache is an optimisation, never a source of truth.
#[tokio::test]
async fn second_replica_renews_and_refuses_alike() {
    let t = Tenure::start().await;
    let (other, mut c2) = t.replica().await;
    let mut c1 = t.client().await;
    let (lease, key) = acquire(&mut c1, acquire_req("own.replica", "alice", 30)).await;
    let r = renew(&mut c2, renew_req("own.replica", lease.revision, &key)).await;
    assert_eq!(r.fencing_token, lease.fencing_token);
    // Replica 1 still remembers the old revision; its CAS fails and it falls back to a read.
    let r = renew(&mut c1, renew_req("own.replica", r.revision, &key)).await;
    let err = c2
        .release(release_req(
            "own.replica",
            r.revision,
            "wrong-key-wrong-key-1",
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    c2.release(release_req("own.replica", r.revision, &key))
        .await
        .unwrap();
    let err = c1
        .renew(renew_req("own.replica", r.revision, &key))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    other.shutdown().await;
}

/// After expiry, Renew and Release fail with LEASE_NOT_HELD, say it expired,
/// and write nothing.
#[tokio::test]
async fn after_expiry_is_not_held() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut events = c
        .watch_lease(WatchLeaseRequest {
            name: "own.exp".into(),
            event_types: vec![EventType::Expired as i32],
            start_revision: 0,
            shard_revisions: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let (lease, key) = acquire(&mut c, acquire_req("own.exp", "alice", 1)).await;
    next_of(&mut events, EventType::Expired).await;
    let before = t.last_sequence().await;
    let err = c
        .renew(renew_req("own.exp", lease.revision, &key))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    assert!(err.message().contains("EXPIRED"), "{}", err.message());
    let err = c
        .release(release_req("own.exp", lease.revision, &key))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    assert_eq!(t.last_sequence().await, before, "nothing written");
}

/// A Release of a lease already released reports it plainly.
#[tokio::test]
async fn release_twice_reports_already_released() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, key) = acquire(&mut c, acquire_req("own.twice", "alice", 30)).await;
    c.release(release_req("own.twice", lease.revision, &key))
        .await
        .unwrap();
    let err = c
        .release(release_req("own.twice", lease.revision, &key))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    let info = tonic_types::StatusExt::get_details_error_info(&err).unwrap();
    assert_eq!(
        info.metadata.get("state").map(String::as_str),
        Some("RELEASED")
    );
    let err = c
        .get_lease(GetLeaseRequest {
            name: "own.twice".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert_eq!(reason(&err), "LEASE_NOT_FOUND");
}
