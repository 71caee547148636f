//! Limits: waiting Acquires in flight, watch streams per identity and in total,
//! request size and metadata size each trip with RESOURCE_EXHAUSTED and an
//! ErrorInfo reason; the ones that clear by themselves carry RetryInfo.

use crate::common::*;
use tenure::proto::{AcquireRequest, GetLeaseRequest, WatchLeaseRequest};
use tonic::Code;
use tonic_types::StatusExt;

/// The RetryInfo delay of a status, if any.
fn retry_delay(status: &tonic::Status) -> Option<std::time::Duration> {
    status.get_details_retry_info().and_then(|r| r.retry_delay)
}

/// Waiting Acquires have their own budget: with one allowed, a second one
/// is refused while the first waits, short calls still run beside it (even
/// with one short call allowed), and the slot is free again once the first
/// is done.
#[tokio::test]
async fn concurrent_requests_are_capped() {
    let t = Tenure::start_with(|c| {
        c.max_concurrent_requests = 1;
        c.max_waiting_acquires = 1;
    })
    .await;
    let mut c = t.client().await;
    acquire(&mut c, acquire_req("busy", "a", 1)).await;
    let waiting_acquire = |holder: &'static str| AcquireRequest {
        wait: Some(secs(30)),
        ..acquire_req("busy", holder, 60)
    };
    // A waiting Acquire occupies the only waiting slot.
    let mut waiter = t.client().await;
    let first = waiting_acquire("b");
    let waiting = tokio::spawn(async move { waiter.acquire(first).await });
    let refused = within("the limit to trip", async {
        loop {
            match c.acquire(waiting_acquire("c")).await {
                Err(status) if status.code() == Code::ResourceExhausted => break status,
                Err(status) if status.code() == Code::FailedPrecondition => {
                    tokio::task::yield_now().await
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(reason(&refused), "TOO_MANY_REQUESTS");
    assert!(retry_delay(&refused).is_some());
    // Short calls do not count waiting ones.
    c.get_lease(GetLeaseRequest {
        name: "busy".into(),
    })
    .await
    .expect("a short call runs beside the waiting one");
    // The first holding expires (TTL 1s): the waiter takes the lease and
    // frees the slot.
    let got = within("the waiter", waiting).await.unwrap().unwrap();
    assert_eq!(got.into_inner().lease.unwrap().holder, "b");
    let err = c
        .acquire(AcquireRequest {
            wait: Some(secs(1)),
            ..acquire_req("busy", "c", 60)
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_HELD", "the waiting slot is free again");
}

async fn open_watch(
    t: &Tenure,
) -> Result<tonic::Streaming<tenure::proto::WatchLeaseResponse>, tonic::Status> {
    let mut c = t.client().await;
    let mut s = c
        .watch_lease(WatchLeaseRequest {
            name: ">".into(),
            event_types: vec![],
            start_revision: 0,
            shard_revisions: Vec::new(),
        })
        .await?
        .into_inner();
    // Wait for the snapshot marker so the stream is surely open.
    within("snapshot", s.message()).await?.expect("an event");
    Ok(s)
}

/// One identity gets at most its share of watch streams; a closed stream
/// frees its slot.
#[tokio::test]
async fn watch_streams_per_identity_are_capped() {
    let t = Tenure::start_with(|c| c.max_watch_streams_per_identity = 2).await;
    let first = open_watch(&t).await.unwrap();
    let _second = open_watch(&t).await.unwrap();
    let refused = open_watch(&t).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(reason(&refused), "TOO_MANY_WATCHES");
    assert!(retry_delay(&refused).is_some());
    drop(first);
    within("a slot to free up", async {
        loop {
            match open_watch(&t).await {
                Ok(s) => break s,
                Err(s) if s.code() == Code::ResourceExhausted => tokio::task::yield_now().await,
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
    })
    .await;
}

/// The replica-wide watch limit holds whatever the identity.
#[tokio::test]
async fn watch_streams_in_total_are_capped() {
    let t = Tenure::start_with(|c| c.max_watch_streams = 1).await;
    let _only = open_watch(&t).await.unwrap();
    let refused = open_watch(&t).await.unwrap_err();
    assert_eq!(reason(&refused), "TOO_MANY_WATCHES");
    assert!(refused.message().contains("this replica"));
}

/// An oversized message and oversized metadata are refused before any RPC
/// runs, and nothing is written.
#[tokio::test]
async fn oversized_requests_are_refused() {
    let t = Tenure::start_with(|c| {
        c.max_request_bytes = 1024;
        c.max_metadata_bytes = 1024;
    })
    .await;
    let mut c = t.client().await;
    let before = t.last_sequence().await;
    let big = AcquireRequest {
        metadata: [("blob".to_string(), "x".repeat(1000))].into(),
        lease_key: "k".repeat(200),
        ..acquire_req("big", "w", 10)
    };
    let err = c.acquire(big).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(reason(&err), "REQUEST_TOO_LARGE");
    assert!(retry_delay(&err).is_none(), "retrying cannot help");

    let mut req = tonic::Request::new(acquire_req("meta", "w", 10));
    req.metadata_mut()
        .insert("x-padding", "p".repeat(2000).parse().unwrap());
    let err = c.acquire(req).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(reason(&err), "METADATA_TOO_LARGE");
    assert_eq!(t.last_sequence().await, before);

    // A normal request still works.
    acquire(&mut c, acquire_req("small", "w", 10)).await;
}
