//! Lock-delay: after a holding with a `lock_delay` expires or is revoked,
//! the name stays refused for the delay (on every replica, with the time it
//! becomes free), waiters simply wait; after a release it is free at once.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;
use tenure::proto::{AcquireRequest, EventType, ListLeasesRequest, RevokeLeaseRequest};
use tonic_types::StatusExt;

/// An Acquire with a lock delay in whole seconds.
fn delayed_req(name: &str, holder: &str, ttl_s: i64, delay_s: i64) -> AcquireRequest {
    AcquireRequest {
        lock_delay: Some(secs(delay_s)),
        ..acquire_req(name, holder, ttl_s)
    }
}

/// Wall-clock Unix ms (the test, NATS and Tenure share one host).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The `free_at_unix_ms` of a lock-delay refusal, checking its reason,
/// state and RetryInfo.
fn free_at(status: &tonic::Status) -> u64 {
    assert_eq!(reason(status), "LEASE_HELD", "{status:?}");
    let info = status.get_details_error_info().unwrap();
    assert_eq!(info.metadata["state"], "LOCK_DELAY");
    let retry = status.get_details_retry_info().expect("RetryInfo");
    assert!(retry.retry_delay.is_some());
    info.metadata["free_at_unix_ms"].parse().unwrap()
}

/// After an expiry the name is refused on both replicas until the marker's
/// time plus the delay; a waiter on the other replica gets it after that.
#[tokio::test]
async fn after_expiry_the_name_stays_refused_for_the_delay() {
    let t = Tenure::start().await;
    let (_other, mut b) = t.replica().await;
    let mut a = t.client().await;
    let mut watch = watch(&mut a, "ld.exp").await;
    let (lease, _) = acquire(&mut a, delayed_req("ld.exp", "paused", 1, 3)).await;
    assert_eq!(lease.lock_delay.unwrap().seconds, 3);
    let expired = next_of(&mut watch, EventType::Expired).await;
    let ended_ms = {
        let t = expired.time.unwrap();
        t.seconds as u64 * 1000 + t.nanos as u64 / 1_000_000
    };
    for c in [&mut a, &mut b] {
        let err = c
            .acquire(acquire_req("ld.exp", "eager", 5))
            .await
            .unwrap_err();
        assert_eq!(free_at(&err), ended_ms + 3000);
    }
    let waited = AcquireRequest {
        wait: Some(secs(20)),
        ..acquire_req("ld.exp", "patient", 5)
    };
    let (next, _) = within("the waiter gets the name", acquire(&mut b, waited)).await;
    assert!(
        now_ms() + 50 >= ended_ms + 3000,
        "granted before the delay ended"
    );
    assert!(next.fencing_token > lease.fencing_token);
    assert!(next.lock_delay.is_none());
}

/// After a revoke the name is refused for the delay, counted from the
/// revoke.
#[tokio::test]
async fn after_revoke_the_name_stays_refused_for_the_delay() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    acquire(&mut c, delayed_req("ld.rev", "stuck", 60, 2)).await;
    let revoked = c
        .revoke_lease(RevokeLeaseRequest {
            name: "ld.rev".into(),
            reason: "stuck in GC".into(),
            fencing_token: 0,
            slot: 0,
        })
        .await
        .unwrap();
    let before = now_ms();
    drop(revoked);
    let err = c
        .acquire(acquire_req("ld.rev", "next", 5))
        .await
        .unwrap_err();
    let free = free_at(&err);
    assert!(
        free >= before + 1000 && free <= before + 2100,
        "{free} vs {before}"
    );
    let waited = AcquireRequest {
        wait: Some(secs(20)),
        ..acquire_req("ld.rev", "next", 5)
    };
    within("the waiter gets the name", acquire(&mut c, waited)).await;
    assert!(now_ms() + 50 >= free);
}

/// After a release the name is free at once, and the next holding (without
/// a delay) does not inherit the released one's delay when it expires.
#[tokio::test]
async fn after_release_the_name_is_free_at_once() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, key) = acquire(&mut c, delayed_req("ld.rel", "tidy", 60, 30)).await;
    c.release(release_req("ld.rel", lease.revision, key))
        .await
        .unwrap();
    let mut watch = watch(&mut c, "ld.rel").await;
    let (next, _) = acquire(&mut c, acquire_req("ld.rel", "next", 1)).await;
    assert!(next.fencing_token > lease.fencing_token);
    next_of(&mut watch, EventType::Expired).await;
    acquire(&mut c, acquire_req("ld.rel", "third", 5)).await;
}

/// After a delayed holding is released, a new holding with a delay of its
/// own takes the name at once (its fence is written over the tombstone the
/// release left on the fence key).
#[tokio::test]
async fn a_delayed_holding_follows_a_released_one() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, key) = acquire(&mut c, delayed_req("ld.again", "first", 60, 30)).await;
    c.release(release_req("ld.again", lease.revision, key))
        .await
        .unwrap();
    let (next, _) = acquire(&mut c, delayed_req("ld.again", "second", 60, 30)).await;
    assert!(next.fencing_token > lease.fencing_token);
    assert_eq!(next.lock_delay.unwrap().seconds, 30);
}

/// A delay replaced by a holding without one is gone: its expiry frees the
/// name at once.
#[tokio::test]
async fn a_new_holding_without_delay_replaces_the_fence() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut watch = watch(&mut c, "ld.swap").await;
    acquire(&mut c, delayed_req("ld.swap", "first", 1, 1)).await;
    next_of(&mut watch, EventType::Expired).await;
    let waited = AcquireRequest {
        wait: Some(secs(20)),
        ..acquire_req("ld.swap", "second", 1)
    };
    within("after the delay", acquire(&mut c, waited)).await;
    next_of(&mut watch, EventType::Expired).await;
    acquire(&mut c, acquire_req("ld.swap", "third", 5)).await;
}

/// Tenure's own keys are not leases: listings and whole-bucket watches never
/// show them, and names under `_tenure` are refused. Delays above the
/// maximum are refused.
#[tokio::test]
async fn fences_are_not_leases() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut all = watch(&mut c, ">").await;
    next_of(&mut all, EventType::SnapshotComplete).await;
    let (lease, key) = acquire(&mut c, delayed_req("ld.list", "h", 60, 5)).await;
    let listed = c
        .list_leases(ListLeasesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = listed.leases.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["ld.list"]);
    c.release(release_req("ld.list", lease.revision, key))
        .await
        .unwrap();
    for kind in [EventType::Acquired, EventType::Released] {
        let e = next_event(&mut all).await;
        assert_eq!((e.r#type, e.name.as_str()), (kind as i32, "ld.list"));
    }
    let err = c
        .acquire(acquire_req("_tenure.delay.x", "h", 5))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "INVALID_NAME");
    let err = c
        .acquire(delayed_req("ld.big", "h", 5, 3600))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "INVALID_ARGUMENT");
    // Not a sleep for synchronisation: a bound on what else might arrive.
    let extra = tokio::time::timeout(Duration::from_millis(300), all.message()).await;
    assert!(extra.is_err(), "no event for Tenure's own keys: {extra:?}");
}
