//! The shared bucket watcher heals itself: after its NATS consumer is
//! deleted, or nats-server stalls long enough for heartbeats to be missed,
//! open watches resume without a gap, new watches work again, and health
//! reports the outage while it lasts.

use std::time::Duration;

use crate::common::*;
use futures::StreamExt;
use tenure::proto::EventType;
use tonic_health::pb::health_check_response::ServingStatus;

/// Reads watch events until SNAPSHOT_COMPLETE.
async fn skip_snapshot(s: &mut tonic::Streaming<tenure::proto::WatchLeaseResponse>) {
    next_of(s, EventType::SnapshotComplete).await;
}

/// Acquires, retrying while Tenure reports NATS unavailable (it is
/// reconnecting); fails the test on any other error.
async fn acquire_when_up(
    c: &mut tenure::proto::lease_service_client::LeaseServiceClient<tonic::transport::Channel>,
    name: &str,
) -> tenure::proto::Lease {
    within("an Acquire after the outage", async {
        loop {
            match c.acquire(acquire_req(name, "healer", 30)).await {
                Ok(r) => return r.into_inner().lease.unwrap(),
                Err(s) if reason(&s) == "NATS_UNAVAILABLE" => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(s) => panic!("acquire failed: {s:?}"),
            }
        }
    })
    .await
}

/// Deleting the watcher's consumer does not end watching: an open watch
/// gets the next change, and a new watch gets a snapshot with it.
#[tokio::test]
async fn a_deleted_consumer_is_replaced_and_watches_continue() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    acquire(&mut c, acquire_req("heal.before", "alice", 30)).await;
    let mut open = watch(&mut c, "heal.>").await;
    skip_snapshot(&mut open).await;

    let js = t.nats.jetstream().await;
    let stream = js.get_stream("KV_tenure").await.unwrap();
    let names: Vec<String> = stream
        .consumer_names()
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(!names.is_empty(), "the shared watcher has a consumer");
    for name in &names {
        stream.delete_consumer(name).await.unwrap();
    }

    let lease = acquire_when_up(&mut c, "heal.after").await;
    let e = next_of(&mut open, EventType::Acquired).await;
    assert_eq!(
        (e.name.as_str(), e.fencing_token),
        ("heal.after", lease.fencing_token)
    );

    // A new watch is served (retrying while the watcher reports it is
    // still reconnecting) and its snapshot has both holdings.
    let mut fresh = within("a new watch", async {
        loop {
            match c
                .watch_lease(tenure::proto::WatchLeaseRequest {
                    name: "heal.>".into(),
                    event_types: vec![],
                    start_revision: 0,
                    shard_revisions: Vec::new(),
                })
                .await
            {
                Ok(s) => return s.into_inner(),
                Err(s) if reason(&s) == "NATS_UNAVAILABLE" => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(s) => panic!("watch failed: {s:?}"),
            }
        }
    })
    .await;
    let mut names = Vec::new();
    loop {
        let e = next_event(&mut fresh).await;
        if e.r#type == EventType::SnapshotComplete as i32 {
            break;
        }
        names.push(e.name);
    }
    names.sort();
    assert_eq!(names, ["heal.after", "heal.before"]);
}

/// A 7 s SIGSTOP of nats-server: health goes NOT_SERVING and comes back,
/// and the open watch sees a change made after the stall.
#[tokio::test]
async fn a_nats_stall_is_survived_by_open_watches() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut open = watch(&mut c, "stall.>").await;
    skip_snapshot(&mut open).await;
    let mut statuses = HealthStatuses::watch(&t).await;
    assert_eq!(statuses.next().await, ServingStatus::Serving as i32);

    let pid = t.nats.process.as_ref().unwrap().pid().unwrap();
    freeze(pid).await;
    // The fault: long enough for three missed pings (2 s each) and the
    // consumer's heartbeats.
    tokio::time::sleep(Duration::from_secs(7)).await;
    thaw(pid);

    assert_eq!(statuses.next().await, ServingStatus::NotServing as i32);
    let mut status = statuses.next().await;
    while status != ServingStatus::Serving as i32 {
        status = statuses.next().await;
    }
    let lease = acquire_when_up(&mut c, "stall.after").await;
    let e = next_of(&mut open, EventType::Acquired).await;
    assert_eq!(
        (e.name.as_str(), e.fencing_token),
        ("stall.after", lease.fencing_token)
    );
}
