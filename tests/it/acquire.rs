//! Acquire: mutual exclusion under races, safe retries, and waiting.

use crate::common::*;

/// 100 rounds of 8 concurrent acquirers of one name: exactly one wins each
/// round, and every loser is told LEASE_HELD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_acquirers_exactly_one_wins() {
    let t = Tenure::start().await;
    let channel = t.channel().await;
    for round in 0..100 {
        let name = format!("race.r{round}");
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let mut client =
                    tenure::proto::lease_service_client::LeaseServiceClient::new(channel.clone());
                let req = acquire_req(&name, &format!("h{i}"), 30);
                tokio::spawn(async move { client.acquire(req).await })
            })
            .collect();
        let mut winners = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(_) => winners += 1,
                Err(status) => {
                    assert_eq!(reason(&status), "LEASE_HELD", "round {round}: {status:?}")
                }
            }
        }
        assert_eq!(winners, 1, "round {round}");
    }
}

/// An Acquire retried with the same holder and key (its reply was lost)
/// returns the same holding, renewed, not LEASE_HELD; another key is refused.
#[tokio::test]
async fn retried_acquire_returns_the_same_lease() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut req = acquire_req("retry.a", "alice", 10);
    req.lease_key = "alice-secret-key-0001".into();
    let (first, key) = acquire(&mut c, req.clone()).await;
    assert_eq!(key, "alice-secret-key-0001");
    let (again, _) = acquire(&mut c, req.clone()).await;
    assert_eq!(again.fencing_token, first.fencing_token);
    assert!(
        again.revision > first.revision,
        "the retry renews the holding"
    );
    // The old revision still works as a retried renew; the new one releases.
    req.lease_key = "someone-elses-key-0002".into();
    let err = c.acquire(req).await.unwrap_err();
    assert_eq!(reason(&err), "LEASE_HELD");
    c.release(release_req("retry.a", again.revision, key))
        .await
        .expect("release with the retry's revision");
}

/// A minted key is long and random, and it is what proves ownership.
#[tokio::test]
async fn minted_key_proves_ownership() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, key) = acquire(&mut c, acquire_req("mint.a", "bob", 10)).await;
    assert_eq!(key.len(), 64);
    let renewed = renew(&mut c, renew_req("mint.a", lease.revision, key)).await;
    assert_eq!(renewed.fencing_token, lease.fencing_token);
}

/// A waiting Acquire returns once the holder releases, with a greater token.
#[tokio::test]
async fn wait_returns_when_released() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (held, key) = acquire(&mut c, acquire_req("wait.rel", "first", 60)).await;
    let mut waiter = t.client().await;
    let mut req = acquire_req("wait.rel", "second", 60);
    req.wait = Some(secs(60));
    let waiting = tokio::spawn(async move { waiter.acquire(req).await });
    // The waiter is blocked while the lease is held: a probe still sees the first holder.
    let err = c
        .acquire(acquire_req("wait.rel", "probe", 5))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_HELD");
    assert!(!waiting.is_finished());
    c.release(release_req("wait.rel", held.revision, key))
        .await
        .unwrap();
    let got = within("waiter acquires", waiting)
        .await
        .unwrap()
        .expect("waiter acquires")
        .into_inner();
    let lease = got.lease.unwrap();
    assert_eq!(lease.holder, "second");
    assert!(lease.fencing_token > held.fencing_token);
}

/// A waiting Acquire returns once the holder's lease expires.
#[tokio::test]
async fn wait_returns_when_expired() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (held, _) = acquire(&mut c, acquire_req("wait.exp", "first", 1)).await;
    let mut req = acquire_req("wait.exp", "second", 5);
    req.wait = Some(secs(30));
    let (lease, _) = within("waiter acquires after expiry", acquire(&mut c, req)).await;
    assert_eq!(lease.holder, "second");
    assert!(lease.fencing_token > held.fencing_token);
}

/// When the wait runs out, Acquire fails with LEASE_HELD naming the holder.
#[tokio::test]
async fn wait_runs_out_with_a_clear_status() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    acquire(&mut c, acquire_req("wait.out", "first", 60)).await;
    let mut req = acquire_req("wait.out", "second", 5);
    req.wait = Some(prost_types::Duration {
        seconds: 0,
        nanos: 300_000_000,
    });
    let err = c.acquire(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(reason(&err), "LEASE_HELD");
    assert!(err.message().contains("\"first\""), "{}", err.message());
    assert!(err.message().contains("waiting"), "{}", err.message());
}

/// Shutdown ends a waiting Acquire at once with SHUTTING_DOWN, instead of
/// holding the server open for the grace period.
#[tokio::test]
async fn shutdown_ends_a_waiting_acquire() {
    let mut t = Tenure::start().await;
    let mut c = t.client().await;
    acquire(&mut c, acquire_req("wait.stop", "first", 60)).await;
    let mut waiter = t.client().await;
    let mut req = acquire_req("wait.stop", "second", 5);
    req.wait = Some(secs(120));
    let waiting = tokio::spawn(async move { waiter.acquire(req).await });
    // Make sure the waiter is in: a probe is refused while the lease is held.
    let err = c
        .acquire(acquire_req("wait.stop", "probe", 5))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_HELD");
    within("shutdown", t.running.take().unwrap().shutdown()).await;
    let err = within("waiter ends", waiting).await.unwrap().unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert_eq!(reason(&err), "SHUTTING_DOWN");
}
