//! Acquire options of issue 12 against a real Tenure: lock-delay after a
//! revoke (not after a release), and FIFO waiting seen through
//! `Client::inspect`.

use std::time::Duration;

use crate::common::{metrics_text, server_with_metrics, within, Server};
use tenure_client::{AcquireOptions, Client, LeaseInfo, Reason};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test]
async fn a_lock_delay_holds_the_name_after_a_revoke_but_not_after_a_release() {
    let server = Server::start().await;
    let client = server.client().await;
    let delayed = || AcquireOptions::default().lock_delay(secs(30));

    let released = client
        .acquire("ld.released", "a", secs(5), delayed())
        .await
        .unwrap();
    assert_eq!(
        released.lease().lock_delay.map(|d| d.seconds),
        Some(30),
        "the holding carries its lock delay"
    );
    assert!(released.release().await.unwrap());
    let next = client
        .acquire("ld.released", "b", secs(5), AcquireOptions::default())
        .await
        .expect("free at once after a release");
    next.release().await.unwrap();

    let revoked = client
        .acquire("ld.revoked", "a", secs(5), delayed())
        .await
        .unwrap();
    client.revoke("ld.revoked", "test", None).await.unwrap();
    within("the loss", revoked.lost().cancelled()).await;
    let err = client
        .acquire("ld.revoked", "b", secs(5), AcquireOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseHeld, "{err}");
    assert_eq!(err.metadata()["state"], "LOCK_DELAY");
    let free_at: u64 = err.metadata()["free_at_unix_ms"].parse().unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(free_at > now_ms, "the name is free only later");
}

/// How many Acquires the server refused with RESOURCE_EXHAUSTED.
async fn refusals(metrics: &str) -> u64 {
    metrics_text(metrics)
        .await
        .lines()
        .filter(|l| {
            l.starts_with("tenure_rpc_requests_total{")
                && l.contains("method=\"Acquire\"")
                && l.contains("code=\"RESOURCE_EXHAUSTED\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Polls `inspect` until `check` holds for its answer (the queue has no
/// event to wait for).
async fn until(client: &Client, name: &str, check: impl Fn(&LeaseInfo) -> bool) -> LeaseInfo {
    within("the queue state", async {
        loop {
            if let Ok(info) = client.inspect(name).await {
                if check(&info) {
                    return info;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test]
async fn waiters_are_counted_and_granted_in_arrival_order() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "fifo.order";
    let first = client
        .acquire(name, "first", secs(10), AcquireOptions::default())
        .await
        .unwrap();
    let info = client.inspect(name).await.unwrap();
    assert_eq!((info.waiting, info.limit), (0, 0));
    assert_eq!(info.lease.holder, "first");

    let wait = || AcquireOptions::default().wait(secs(25));
    let spawn = |holder: &'static str| {
        let client = client.clone();
        tokio::spawn(async move { client.acquire(name, holder, secs(10), wait()).await })
    };
    let second = spawn("second");
    until(&client, name, |i| i.waiting == 1).await;
    let third = spawn("third");
    until(&client, name, |i| i.waiting == 2).await;

    assert!(first.release().await.unwrap());
    let second = within("second", second).await.unwrap().unwrap();
    let info = client.inspect(name).await.unwrap();
    assert_eq!(info.lease.holder, "second", "the first to wait goes first");
    assert_eq!(info.waiting, 1, "third still waits");
    assert!(!third.is_finished());
    assert!(second.release().await.unwrap());
    let third = within("third", third).await.unwrap().unwrap();
    assert!(third.fencing_token() > second.fencing_token());
    assert_eq!(client.inspect(name).await.unwrap().waiting, 0);
    third.release().await.unwrap();
}

#[tokio::test]
async fn a_full_queue_is_retried_within_the_wait_and_reported_when_it_runs_out() {
    let (server, metrics) = server_with_metrics(&["--max-waiters", "1"]).await;
    let client = server.client().await;
    let name = "fifo.full";
    let holder = client
        .acquire(name, "holder", secs(10), AcquireOptions::default())
        .await
        .unwrap();
    let queued = {
        let client = client.clone();
        tokio::spawn(async move {
            let wait = AcquireOptions::default().wait(secs(25));
            client.acquire(name, "queued", secs(10), wait).await
        })
    };
    until(&client, name, |i| i.waiting == 1).await;

    // The queue is full: a short wait runs out retrying, and says why.
    let err = client
        .acquire(
            name,
            "late",
            secs(10),
            AcquireOptions::default().wait(Duration::from_millis(500)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::TooManyWaiters, "{err}");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(err.is_retryable());

    // A long wait keeps retrying until the queue has room, then waits its
    // turn and gets the lease after the queued one.
    let refused = refusals(&metrics).await;
    let patient = {
        let client = client.clone();
        tokio::spawn(async move {
            let wait = AcquireOptions::default().wait(secs(25));
            client.acquire(name, "patient", secs(10), wait).await
        })
    };
    within("patient's first refusal", async {
        while refusals(&metrics).await == refused {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(holder.release().await.unwrap());
    let queued = within("queued", queued).await.unwrap().unwrap();
    assert!(queued.release().await.unwrap());
    let patient = within("patient", patient).await.unwrap().unwrap();
    assert!(patient.fencing_token() > queued.fencing_token());
    patient.release().await.unwrap();
}
