//! The shared bucket watcher runs only while something needs it: a replica
//! serving only Acquire/Renew/Release keeps no consumer on the bucket (it
//! does not receive or decode its writes); the first watch starts it and
//! still sees every write made before it began; it stops again once idle,
//! catches up from where it stopped when started again (not a load of the
//! whole bucket), and a waiting Acquire starts it too.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use tenure::proto::{AcquireRequest, EventType, ListLeasesRequest};

/// The bucket stream's consumer count.
async fn consumers(t: &Tenure) -> usize {
    let js = t.nats.jetstream().await;
    let mut stream = js
        .get_stream(format!("KV_{}", t.config.bucket))
        .await
        .unwrap();
    stream.info().await.unwrap().state.consumer_count
}

/// Where the bucket's one consumer (the shared watcher's) started.
async fn watcher_start(t: &Tenure) -> async_nats::jetstream::consumer::DeliverPolicy {
    use futures::TryStreamExt;
    let js = t.nats.jetstream().await;
    let stream = js
        .get_stream(format!("KV_{}", t.config.bucket))
        .await
        .unwrap();
    let infos: Vec<_> = stream.consumers().try_collect().await.unwrap();
    assert_eq!(infos.len(), 1, "one consumer: the shared watcher's");
    infos[0].config.deliver_policy
}

/// Waits until the bucket has `n` consumers.
async fn until_consumers(t: &Tenure, n: usize) {
    within(&format!("{n} consumer(s) on the bucket"), async {
        while consumers(t).await != n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The names and tokens a snapshot of ">" shows.
async fn snapshot(
    c: &mut Client,
) -> (
    BTreeMap<String, u64>,
    tonic::Streaming<tenure::proto::WatchLeaseResponse>,
) {
    let mut w = watch(c, ">").await;
    let mut seen = BTreeMap::new();
    loop {
        let e = next_event(&mut w).await;
        if e.r#type == EventType::SnapshotComplete as i32 {
            return (seen, w);
        }
        seen.insert(e.name, e.fencing_token);
    }
}

/// The names and tokens ListLeases shows (read from the stream leader).
async fn listed(c: &mut Client) -> BTreeMap<String, u64> {
    let page = c
        .list_leases(ListLeasesRequest {
            prefix: String::new(),
            page_size: 1000,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    page.leases
        .into_iter()
        .map(|l| (l.name, l.fencing_token))
        .collect()
}

/// A gRPC client of the first replica.
type Client = tenure::proto::lease_service_client::LeaseServiceClient<tonic::transport::Channel>;

#[tokio::test]
async fn the_watcher_follows_the_bucket_only_while_needed() {
    let t = Tenure::start_with(|c| c.watcher_idle_timeout = Duration::from_millis(200)).await;
    let mut c = t.client().await;
    let mut keys = BTreeMap::new();
    for i in 0..50 {
        let (l, k) = acquire(&mut c, acquire_req(&format!("idle.n{i:02}"), "h", 60)).await;
        keys.insert(l.name.clone(), (l.revision, k));
    }
    assert_eq!(consumers(&t).await, 0, "no watcher while nobody watches");

    // The first watch starts it and sees every write before it began.
    let (seen, w) = snapshot(&mut c).await;
    assert_eq!(consumers(&t).await, 1);
    assert_eq!(
        watcher_start(&t).await,
        async_nats::jetstream::consumer::DeliverPolicy::LastPerSubject,
        "the first start loads the bucket"
    );
    assert_eq!(seen, listed(&mut c).await);
    assert_eq!(seen.len(), 50);
    drop(w);
    until_consumers(&t, 0).await;

    // Changes while idle, an expiry among them: started again, it catches
    // up from where it stopped and sees the bucket as it is now.
    acquire(&mut c, acquire_req("idle.brief", "h", 1)).await;
    within("idle.brief expired", async {
        while listed(&mut c).await.contains_key("idle.brief") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    for i in 0..10 {
        let name = format!("idle.n{i:02}");
        let (revision, key) = &keys[&name];
        c.release(release_req(&name, *revision, key.clone()))
            .await
            .unwrap();
    }
    acquire(&mut c, acquire_req("idle.late", "h", 60)).await;
    assert_eq!(consumers(&t).await, 0);
    let (seen, w) = snapshot(&mut c).await;
    assert!(
        matches!(
            watcher_start(&t).await,
            async_nats::jetstream::consumer::DeliverPolicy::ByStartSequence { start_sequence } if start_sequence > 50
        ),
        "started again within the marker TTL, it catches up from where it stopped"
    );
    assert_eq!(seen, listed(&mut c).await);
    assert_eq!(seen.len(), 41);
    drop(w);
    until_consumers(&t, 0).await;

    // A waiting Acquire starts it and is woken by the release.
    let (held, key) = acquire(&mut c, acquire_req("idle.lock", "first", 60)).await;
    let mut other = t.client().await;
    let waiter = tokio::spawn(async move {
        other
            .acquire(AcquireRequest {
                wait: Some(secs(30)),
                ..acquire_req("idle.lock", "second", 60)
            })
            .await
    });
    until_consumers(&t, 1).await;
    c.release(release_req("idle.lock", held.revision, key))
        .await
        .unwrap();
    let granted = within("the waiter", waiter)
        .await
        .unwrap()
        .expect("granted");
    assert_eq!(granted.into_inner().lease.unwrap().holder, "second");
    until_consumers(&t, 0).await;
}

/// A waiter does not wait for the watcher's load: a group waiter on a
/// replica whose watcher cannot finish loading the bucket (held,
/// [`tenure::WatcherHold`]) is woken by the release as NATS publishes it
/// and takes the group while the load is still held. A group waiter that
/// follows the names polls only every 15 s, past its 10 s wait, so only
/// the wake can grant it: with only the wake at the end of the load it
/// waits for the hold and gives up (checked by disabling the hearing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_while_its_watcher_loads() {
    let t = Tenure::start().await;
    let mut a = t.client().await;
    let (held, key) = acquire(&mut a, acquire_req("idle.loading.a", "first", 60)).await;
    // Replica B, idle, held where the bucket is now, then one message
    // more: its first load never ends.
    let hold = tenure::WatcherHold::default();
    hold.hold_after(t.last_sequence().await);
    acquire(&mut a, acquire_req("idle.loading.later", "other", 60)).await;
    let (b_replica, mut b) = t.replica_held(&hold).await;
    assert_eq!(consumers(&t).await, 0, "no watcher yet");
    let waiter = tokio::spawn(async move {
        b.acquire_group(tenure::proto::AcquireGroupRequest {
            names: vec!["idle.loading.a".into(), "idle.loading.b".into()],
            holder: "second".into(),
            ttl: Some(secs(60)),
            wait: Some(secs(10)),
            ..Default::default()
        })
        .await
    });
    // B's waiter was refused once and follows the names: its watcher has
    // started loading (and hears the bucket's writes).
    until_consumers(&t, 1).await;
    a.release(release_req("idle.loading.a", held.revision, key))
        .await
        .unwrap();
    let granted = within("the waiter", waiter)
        .await
        .unwrap()
        .expect("granted while B's watcher still loads");
    let holders: Vec<String> = granted
        .into_inner()
        .leases
        .into_iter()
        .map(|l| l.holder)
        .collect();
    assert_eq!(holders, ["second", "second"]);
    hold.release();
    b_replica.shutdown().await;
}
