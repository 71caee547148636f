//! Watch streams against a real Tenure.

use std::time::Duration;

use crate::common::{expect_event, next_event, Server};
use tenure_client::{AcquireOptions, EventType};

fn opts() -> AcquireOptions {
    AcquireOptions::default()
}

#[tokio::test]
async fn watch_yields_acquired_renewed_released_and_expired() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "watched.job";
    let mut watch = client.watch(name).await.unwrap();
    let first = next_event(&mut watch).await;
    assert_eq!(
        first.kind,
        EventType::SnapshotComplete,
        "nobody holds it yet"
    );
    assert!(first.name.is_empty());

    let session = client
        .acquire(
            name,
            "worker",
            Duration::from_secs(1),
            opts().metadata("k", "v"),
        )
        .await
        .unwrap();
    let acquired = expect_event(&mut watch, EventType::Acquired).await;
    assert_eq!(acquired.name, name);
    assert_eq!(acquired.holder, "worker");
    assert_eq!(acquired.fencing_token, session.fencing_token());
    assert_eq!(acquired.revision, session.fencing_token());
    let lease = acquired.lease.expect("ACQUIRED carries the lease");
    assert_eq!(lease.metadata["k"], "v");
    assert!(acquired.time.is_some());

    let renewed_lease = session.renew().await.unwrap();
    loop {
        let renewed = expect_event(&mut watch, EventType::Renewed).await;
        assert_eq!(renewed.fencing_token, session.fencing_token());
        assert_eq!(renewed.holder, "worker");
        assert!(renewed.lease.is_some());
        if renewed.revision == renewed_lease.revision {
            break; // ours; earlier ones came from the background task
        }
        assert!(renewed.revision < renewed_lease.revision);
    }

    assert!(session.release().await.unwrap());
    let released = expect_event(&mut watch, EventType::Released).await;
    assert_eq!(released.holder, "worker");
    assert_eq!(released.fencing_token, session.fencing_token());

    let expiring = client
        .acquire(name, "expiring", Duration::from_secs(1), opts())
        .await
        .unwrap();
    expiring.pause_renewals();
    let acquired = expect_event(&mut watch, EventType::Acquired).await;
    assert_eq!(acquired.fencing_token, expiring.fencing_token());
    assert!(acquired.fencing_token > session.fencing_token());
    let expired = expect_event(&mut watch, EventType::Expired).await;
    assert_eq!(expired.name, name);
    assert_eq!(expired.holder, "expiring");
    assert_eq!(expired.fencing_token, expiring.fencing_token());
    assert!(expiring.lost().is_cancelled());
}

#[tokio::test]
async fn watch_a_subtree_starts_with_a_snapshot() {
    let server = Server::start().await;
    let client = server.client().await;
    let ttl = Duration::from_secs(30); // no renewals during the test
    let a = client.acquire("snap.a", "ha", ttl, opts()).await.unwrap();
    let b = client.acquire("snap.b", "hb", ttl, opts()).await.unwrap();
    let _other = client.acquire("other.c", "hc", ttl, opts()).await.unwrap();

    let mut watch = client.watch("snap.>").await.unwrap();
    let mut current = Vec::new();
    for _ in 0..2 {
        let event = next_event(&mut watch).await;
        assert_eq!(event.kind, EventType::Current);
        let lease = event.lease.expect("CURRENT carries the lease");
        current.push((event.name, lease.holder, lease.fencing_token));
    }
    current.sort();
    assert_eq!(
        current,
        vec![
            ("snap.a".to_string(), "ha".to_string(), a.fencing_token()),
            ("snap.b".to_string(), "hb".to_string(), b.fencing_token()),
        ]
    );
    assert_eq!(
        next_event(&mut watch).await.kind,
        EventType::SnapshotComplete
    );

    // Live changes, only below "snap.".
    let _outside = client.acquire("other.d", "hd", ttl, opts()).await.unwrap();
    let inside = client.acquire("snap.c", "hc", ttl, opts()).await.unwrap();
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventType::Acquired);
    assert_eq!(event.name, "snap.c");
    assert_eq!(event.fencing_token, inside.fencing_token());
}

#[tokio::test]
async fn watch_keeps_only_the_asked_event_types() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "filtered.job";
    let mut watch = client
        .watch_filtered(name, &[EventType::Released])
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut watch).await.kind,
        EventType::SnapshotComplete
    );
    let session = client
        .acquire(name, "worker", Duration::from_secs(1), opts())
        .await
        .unwrap();
    session.renew().await.unwrap();
    session.release().await.unwrap();
    let event = next_event(&mut watch).await;
    assert_eq!(
        event.kind,
        EventType::Released,
        "ACQUIRED and RENEWED are left out"
    );
    assert_eq!(event.fencing_token, session.fencing_token());
}

#[tokio::test]
async fn watch_reconnects_across_a_restart_without_duplicates() {
    let mut server = Server::start().await;
    let client = server.client().await;
    let mut watch = client.watch("resume.>").await.unwrap();
    assert_eq!(
        next_event(&mut watch).await.kind,
        EventType::SnapshotComplete
    );
    let a = client
        .acquire("resume.a", "a", Duration::from_secs(60), opts())
        .await
        .unwrap();
    let acquired = expect_event(&mut watch, EventType::Acquired).await;
    assert_eq!(acquired.name, "resume.a");
    let before = watch.last_revision();
    assert_eq!(before, acquired.revision);

    // Tenure (and its nats-server) die and come back on the same port and
    // store: the watch reopens by itself, resuming after `before`.
    server.kill().await;
    server.restart().await;
    let other = server.client().await;
    let b = other
        .acquire("resume.b", "b", Duration::from_secs(60), opts())
        .await
        .unwrap();
    // What comes next is new: nothing at or below `before` again (no
    // CURRENT or ACQUIRED of resume.a, no second SNAPSHOT_COMPLETE), and
    // revisions only grow, up to resume.b's holding: its ACQUIRED (live, or
    // replayed when b was acquired before the watch was back), or, from a
    // server that ignores `start_revision` and answers with a snapshot, its
    // CURRENT.
    let mut last = before;
    loop {
        let event = next_event(&mut watch).await;
        assert_ne!(event.kind, EventType::SnapshotComplete, "{event:?}");
        assert!(event.revision > last, "{event:?} after revision {last}");
        last = event.revision;
        if event.kind == EventType::Acquired || event.kind == EventType::Current {
            assert_eq!(event.name, "resume.b");
            assert_eq!(event.fencing_token, b.fencing_token());
            break;
        }
        assert_eq!(event.name, "resume.a", "{event:?}");
    }
    assert_eq!(watch.last_revision(), last);
    assert!(b.release().await.unwrap());
    let released = expect_event(&mut watch, EventType::Released).await;
    assert_eq!(released.name, "resume.b");
    assert!(a.release().await.unwrap());
}

#[tokio::test]
async fn watch_from_a_revision_skips_what_came_before() {
    let server = Server::start().await;
    let client = server.client().await;
    let first = client
        .acquire("from.a", "a", Duration::from_secs(60), opts())
        .await
        .unwrap();
    let mut watch = client
        .watch_from("from.>", &[], first.revision())
        .await
        .unwrap();
    let second = client
        .acquire("from.b", "b", Duration::from_secs(60), opts())
        .await
        .unwrap();
    // Nothing of from.a at or before its acquisition comes: the first
    // event delivered is from.b's ACQUIRED (renewals of from.a aside).
    let acquired = expect_event(&mut watch, EventType::Acquired).await;
    assert_eq!(acquired.name, "from.b");
    assert_eq!(acquired.fencing_token, second.fencing_token());
    first.release().await.unwrap();
    second.release().await.unwrap();
}

#[tokio::test]
async fn watch_from_replays_what_changed_while_away() {
    let server = Server::start().await;
    let client = server.client().await;
    let a = client
        .acquire("away.a", "a", Duration::from_secs(60), opts())
        .await
        .unwrap();
    let mut watch = client.watch("away.>").await.unwrap();
    assert_eq!(next_event(&mut watch).await.kind, EventType::Current);
    assert_eq!(
        next_event(&mut watch).await.kind,
        EventType::SnapshotComplete
    );
    let saved = watch.last_revision();
    drop(watch);

    // While nobody watches: a is released, b acquired.
    assert!(a.release().await.unwrap());
    let b = client
        .acquire("away.b", "b", Duration::from_secs(60), opts())
        .await
        .unwrap();

    // Resuming replays both, in order, with no snapshot.
    let mut watch = client.watch_from("away.>", &[], saved).await.unwrap();
    let released = expect_event(&mut watch, EventType::Released).await;
    assert_eq!(released.name, "away.a");
    let acquired = expect_event(&mut watch, EventType::Acquired).await;
    assert_eq!(acquired.name, "away.b");
    assert_eq!(acquired.fencing_token, b.fencing_token());
    assert!(acquired.revision > released.revision);
    b.release().await.unwrap();
    let released = expect_event(&mut watch, EventType::Released).await;
    assert_eq!(released.name, "away.b");
}
