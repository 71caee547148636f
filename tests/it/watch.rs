//! WatchLease: snapshot, marker, then live events in order, for one name and
//! for a subtree.

use crate::common::*;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{EventType, LeaseEvent, WatchLeaseRequest};

fn kind(e: &LeaseEvent) -> EventType {
    EventType::try_from(e.r#type).unwrap()
}

/// Runs the lifecycle ACQUIRED → RENEWED → RELEASED on `name`, then
/// ACQUIRED → EXPIRED on `name2`, and checks a watch of `target` sees both in
/// order after the snapshot (which holds `pre`, acquired before the watch).
async fn lifecycle(target: &str, pre: &str, name: &str, name2: &str) {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (pre_lease, pre_key) = acquire(&mut c, acquire_req(pre, "early", 60)).await;
    let mut s = watch(&mut c, target).await;
    let e = next_event(&mut s).await;
    assert_eq!(
        (kind(&e), e.name.as_str(), e.fencing_token),
        (EventType::Current, pre, pre_lease.fencing_token)
    );
    assert_eq!(e.lease.as_ref().unwrap().holder, "early");
    assert_eq!(kind(&next_event(&mut s).await), EventType::SnapshotComplete);
    if pre == name {
        // Free the name for the lifecycle; the watch sees that first.
        c.release(release_req(pre, pre_lease.revision, pre_key))
            .await
            .unwrap();
        let e = next_event(&mut s).await;
        assert_eq!(
            (kind(&e), e.holder.as_str()),
            (EventType::Released, "early")
        );
    }

    // Each change is awaited before the next write: the bucket keeps one
    // message per name, so a write superseded before the watcher read it
    // is gone (the next one then reports the holding as ACQUIRED).
    let (lease, key) = acquire(&mut c, acquire_req(name, "alice", 30)).await;
    let e = next_event(&mut s).await;
    assert_eq!(
        (kind(&e), e.name.as_str(), e.revision, e.fencing_token),
        (
            EventType::Acquired,
            name,
            lease.revision,
            lease.fencing_token
        )
    );
    assert_eq!(e.holder, "alice");
    let renewed = renew(&mut c, renew_req(name, lease.revision, key.clone())).await;
    let e = next_event(&mut s).await;
    assert_eq!(
        (kind(&e), e.revision, e.fencing_token),
        (EventType::Renewed, renewed.revision, lease.fencing_token)
    );
    let released = c
        .release(release_req(name, renewed.revision, key))
        .await
        .unwrap()
        .into_inner();
    let e = next_event(&mut s).await;
    assert_eq!(
        (kind(&e), e.revision, e.fencing_token, e.holder.as_str()),
        (
            EventType::Released,
            released.revision,
            lease.fencing_token,
            "alice"
        )
    );

    let (short, _) = acquire(&mut c, acquire_req(name2, "bob", 1)).await;
    let e = next_event(&mut s).await;
    assert_eq!(
        (kind(&e), e.name.as_str(), e.fencing_token),
        (EventType::Acquired, name2, short.fencing_token)
    );
    let e = next_event(&mut s).await;
    assert_eq!(
        (
            kind(&e),
            e.name.as_str(),
            e.fencing_token,
            e.holder.as_str()
        ),
        (EventType::Expired, name2, short.fencing_token, "bob")
    );
    assert!(e.revision > short.revision);
}

/// A single-name watch: CURRENT, SNAPSHOT_COMPLETE, then the lifecycle.
#[tokio::test]
async fn single_name_sees_snapshot_then_events_in_order() {
    lifecycle("w.one", "w.one", "w.one", "w.one").await;
}

/// A subtree watch over `w.>` sees every name below it, and nothing else.
#[tokio::test]
async fn subtree_sees_every_name_below() {
    lifecycle("w.>", "w.pre", "w.a.b", "w.c").await;
}

/// An empty snapshot is completed at once; a filter keeps only the asked types.
#[tokio::test]
async fn empty_snapshot_and_filters() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut s = c
        .watch_lease(WatchLeaseRequest {
            name: "f.>".into(),
            event_types: vec![EventType::Released as i32],
            start_revision: 0,
            shard_revisions: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(kind(&next_event(&mut s).await), EventType::SnapshotComplete);
    acquire(&mut c, acquire_req("other", "x", 30)).await;
    let (lease, key) = acquire(&mut c, acquire_req("f.a", "alice", 30)).await;
    c.release(release_req("f.a", lease.revision, key))
        .await
        .unwrap();
    let e = next_event(&mut s).await;
    assert_eq!((kind(&e), e.name.as_str()), (EventType::Released, "f.a"));
}

/// Shutdown ends open watch streams with UNAVAILABLE instead of hanging.
#[tokio::test]
async fn shutdown_ends_watches_with_unavailable() {
    let mut t = Tenure::start().await;
    let mut c = t.client().await;
    let mut s = watch(&mut c, ">").await;
    assert_eq!(kind(&next_event(&mut s).await), EventType::SnapshotComplete);
    let running = t.running.take().unwrap();
    let stopping = tokio::spawn(running.shutdown());
    let err = within("watch ends", s.message()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert_eq!(reason(&err), "SHUTTING_DOWN");
    within("shutdown completes", stopping).await.unwrap();
}

/// Hundreds of watchers share one NATS consumer: the stream's consumer count
/// stays at one (the process's shared watcher) while they are open, and every
/// watcher gets the events of its names.
#[tokio::test]
async fn watchers_share_one_nats_consumer() {
    let t = Tenure::start().await;
    let channel = t.channel().await;
    let mut c = LeaseServiceClient::new(channel.clone());
    let mut streams = Vec::new();
    for i in 0..300 {
        let target = if i % 3 == 0 {
            "fan.>".to_string()
        } else {
            format!("fan.n{}", i % 10)
        };
        let mut s = LeaseServiceClient::new(channel.clone())
            .watch_lease(WatchLeaseRequest {
                name: target.clone(),
                event_types: vec![],
                start_revision: 0,
                shard_revisions: Vec::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(kind(&next_event(&mut s).await), EventType::SnapshotComplete);
        streams.push((target, s));
    }
    let js = t.nats.jetstream().await;
    let mut stream = js.get_stream("KV_tenure").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.consumer_count, 1);
    for n in 0..10 {
        acquire(&mut c, acquire_req(&format!("fan.n{n}"), "h", 30)).await;
    }
    for (target, s) in &mut streams {
        let e = next_event(s).await;
        assert_eq!(kind(&e), EventType::Acquired, "{target}");
        if target != "fan.>" {
            assert_eq!(&e.name, target);
        }
    }
}

/// A subtree snapshot larger than a watcher's live buffer arrives whole.
#[tokio::test]
async fn large_snapshot_arrives_whole() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    for i in 0..1500 {
        acquire(&mut c, acquire_req(&format!("big.n{i}"), "h", 60)).await;
    }
    let mut s = watch(&mut c, "big.>").await;
    let mut names = std::collections::HashSet::new();
    loop {
        let e = next_event(&mut s).await;
        match kind(&e) {
            EventType::Current => assert!(names.insert(e.name)),
            EventType::SnapshotComplete => break,
            other => panic!("unexpected {other:?} in snapshot"),
        }
    }
    assert_eq!(names.len(), 1500);
}
