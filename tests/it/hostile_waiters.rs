//! Waiters without a queue ticket under hostile callers (issue 30):
//! semaphore waiters are bounded by `--max-waiters`, a waiting AcquireGroup
//! counts each member against the waiting budget, waiting groups wake on
//! the shared watcher's events rather than re-reading their members every
//! second, and defining a semaphore costs two messages whatever its limit.

use std::time::Duration;

use crate::common::*;
use tenure::proto::{AcquireGroupRequest, AcquireRequest};
use tonic::Code;
use tonic_types::StatusExt;

/// A waiting Acquire of a slot of semaphore `name` with `limit`.
fn sem_wait(name: &str, holder: &str, limit: u32, wait_s: i64) -> AcquireRequest {
    AcquireRequest {
        limit,
        wait: Some(secs(wait_s)),
        ..acquire_req(name, holder, 30)
    }
}

/// A waiting AcquireGroup of `names`.
fn group_wait(names: &[String], holder: &str, wait_s: i64) -> AcquireGroupRequest {
    AcquireGroupRequest {
        names: names.to_vec(),
        holder: holder.into(),
        ttl: Some(secs(30)),
        wait: Some(secs(wait_s)),
        ..Default::default()
    }
}

/// Ten waiting Acquires of a full semaphore with `--max-waiters 3`: three
/// wait, seven are refused TOO_MANY_WAITERS at once naming the flag; the
/// slot freed goes to one of the three. (Semaphore waiters used to be
/// outside the bound: all ten waited.)
#[tokio::test]
async fn semaphore_waiters_are_bounded_by_max_waiters() {
    // It makes CAS conflicts (tickets racing for queue slots).
    let _serial = crate::common::CAS_SERIAL.lock().await;
    let t = Tenure::start_with(|c| c.max_waiters = 3).await;
    let mut c = t.client().await;
    let (held, key) = acquire(&mut c, sem_wait("sem.capped", "holder", 1, 0)).await;
    let (done, mut ended) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..10 {
        let mut c = t.client().await;
        let done = done.clone();
        waiters.push(tokio::spawn(async move {
            let r = c
                .acquire(sem_wait("sem.capped", &format!("w{i}"), 1, 20))
                .await;
            let _ = done.send(r);
        }));
    }
    for _ in 0..7 {
        let refused = within("a refusal", ended.recv())
            .await
            .unwrap()
            .expect_err("no slot is free");
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert_eq!(reason(&refused), "TOO_MANY_WAITERS");
        let info = refused.get_details_error_info().unwrap();
        assert_eq!(info.metadata["limit"], "--max-waiters");
    }
    c.release(tenure::proto::ReleaseRequest {
        slot: held.slot,
        ..release_req("sem.capped", held.revision, &key)
    })
    .await
    .unwrap();
    // The next call to end is one of the three that waited, granted.
    let granted = within("the freed slot to go to a waiter", ended.recv())
        .await
        .unwrap()
        .expect("granted");
    assert_eq!(granted.into_inner().lease.unwrap().slot, 1);
    for w in waiters {
        w.abort();
    }
}

/// With `--max-waiting-acquires 4`, a waiting AcquireGroup of three names
/// takes three places: a second waiting group of two is refused
/// TOO_MANY_REQUESTS naming the flag (each used to take one place).
#[tokio::test]
async fn a_waiting_group_counts_every_member() {
    // It makes CAS conflicts (tickets racing for queue slots).
    let _serial = crate::common::CAS_SERIAL.lock().await;
    let nats = Nats::start().await;
    let server = Serve::start(&nats, &["--max-waiting-acquires", "4"]).await;
    let mut c = server.client().await;
    let names: Vec<String> = (0..5).map(|i| format!("wg.{i}")).collect();
    for n in &names {
        acquire(&mut c, acquire_req(n, "holder", 60)).await;
    }
    let mut first = server.client().await;
    let three = names[..3].to_vec();
    let waiting =
        tokio::spawn(async move { first.acquire_group(group_wait(&three, "g1", 30)).await });
    // It has its places once it has tried (and been refused) once.
    within("the first group to try", async {
        while server.metric("tenure_group_refusals_total").await < 1.0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let refused = c
        .acquire_group(group_wait(&names[3..], "g2", 30))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "TOO_MANY_REQUESTS");
    let info = refused.get_details_error_info().unwrap();
    assert_eq!(info.metadata["limit"], "--max-waiting-acquires");
    assert!(!waiting.is_finished());
    waiting.abort();
}

/// Waiting groups do not re-read their members every second: 30 groups
/// over held names, once each has tried twice (before and after following
/// its names), make fewer than 30 more attempts in the next 3 seconds
/// (polling once a second made at least 90). An end still wakes them: a
/// release of one group's members grants it.
#[tokio::test]
async fn waiting_groups_wake_on_events_not_a_poll() {
    // It makes CAS conflicts (tickets racing for queue slots).
    let _serial = crate::common::CAS_SERIAL.lock().await;
    let nats = Nats::start().await;
    let server = Serve::start(&nats, &[]).await;
    let mut c = server.client().await;
    let mut keys = Vec::new();
    for i in 0..60 {
        keys.push(acquire(&mut c, acquire_req(&format!("poll.{i}"), "holder", 60)).await);
    }
    let mut groups = Vec::new();
    for g in 0..30 {
        let mut gc = server.client().await;
        let names = vec![format!("poll.{}", 2 * g), format!("poll.{}", 2 * g + 1)];
        groups.push(tokio::spawn(async move {
            gc.acquire_group(group_wait(&names, &format!("g{g}"), 60))
                .await
        }));
    }
    within("every group to try twice", async {
        while server.metric("tenure_group_refusals_total").await < 60.0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let settled = server.metric("tenure_group_refusals_total").await;
    // A window with no event: only a poll could make attempts in it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let polled = server.metric("tenure_group_refusals_total").await - settled;
    println!("30 waiting groups: {polled} attempts in 3 s without an event");
    assert!(polled < 30.0, "{polled} attempts in 3 s without an event");
    // An end wakes the group at once.
    for (lease, key) in &keys[..2] {
        c.release(release_req(&lease.name, lease.revision, key))
            .await
            .unwrap();
    }
    let got = within("group 0 to be granted", groups.remove(0))
        .await
        .unwrap()
        .unwrap()
        .into_inner();
    assert_eq!(got.leases.len(), 2);
    for g in groups {
        g.abort();
    }
}

/// A first definition of a 256-slot semaphore writes the definition and
/// the slot: two messages (it wrote 257).
#[tokio::test]
async fn defining_a_semaphore_is_two_messages() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let before = t.last_sequence().await;
    let (held, _) = acquire(
        &mut c,
        AcquireRequest {
            limit: 256,
            ..acquire_req("sem.big", "h", 30)
        },
    )
    .await;
    assert_eq!(held.slot, 1);
    assert_eq!(t.last_sequence().await - before, 2);
}

/// Reading a 256-slot semaphore with two holders is served from the
/// shared watcher's snapshot: a GetLease costs a few NATS requests, not
/// one per slot (it cost 257); and an Acquire with another limit is
/// refused LIMIT_MISMATCH after reading the first slots that show a
/// holder, not every slot of both limits (it read 356).
#[tokio::test]
async fn semaphore_reads_cost_little() {
    let (nats, monitoring) = Nats::start_monitored().await;
    let t = Tenure::start_on(nats, |_| {}).await;
    let sent = || nats_in_msgs(monitoring);
    let mut c = t.client().await;
    let sem = |holder: &str, limit| AcquireRequest {
        limit,
        ..acquire_req("sem.read", holder, 30)
    };
    acquire(&mut c, sem("a", 256)).await;
    acquire(&mut c, sem("b", 256)).await;
    let get = || tenure::proto::GetLeaseRequest {
        name: "sem.read".into(),
    };
    // The first read starts the shared watcher; count the next ones.
    c.get_lease(get()).await.unwrap();
    let before = sent().await;
    let shown = c.get_lease(get()).await.unwrap().into_inner();
    let cost = sent().await - before;
    assert_eq!((shown.limit, shown.holders.len()), (256, 2));
    assert_eq!(shown.free_slots, 254);
    println!("GetLease of a 256-slot semaphore: {cost} NATS messages");
    assert!(
        cost <= 12,
        "a GetLease of a 256-slot semaphore sent {cost} NATS messages"
    );

    let before = sent().await;
    let refused = c.acquire(sem("c", 100)).await.unwrap_err();
    let cost = sent().await - before;
    assert_eq!(reason(&refused), "LIMIT_MISMATCH");
    println!("Acquire with a mismatched limit: {cost} NATS messages");
    assert!(cost <= 40, "a mismatched Acquire sent {cost} NATS messages");
}

/// A bucket at its max_bytes refuses new keys with BUCKET_FULL
/// (RESOURCE_EXHAUSTED, naming the bucket and what to do), while holders
/// still renew and release: those writes replace a key's message.
#[tokio::test]
async fn a_full_bucket_refuses_new_leases_and_keeps_holders() {
    let t = Tenure::start_with(|c| c.bucket_max_bytes = 32 * 1024).await;
    let mut c = t.client().await;
    let metadata: std::collections::HashMap<String, String> =
        [("blob".to_string(), "m".repeat(1000))].into();
    let mut held = Vec::new();
    let full = loop {
        let name = format!("full.{}", held.len());
        let req = AcquireRequest {
            metadata: metadata.clone(),
            ..acquire_req(&name, "h", 60)
        };
        match c.acquire(req).await {
            Ok(r) => {
                let r = r.into_inner();
                held.push((r.lease.unwrap(), r.lease_key));
            }
            Err(s) => break s,
        }
        assert!(
            held.len() < 100,
            "32 KiB holds fewer than 100 leases of 1 KB"
        );
    };
    assert_eq!(full.code(), Code::ResourceExhausted, "{full:?}");
    assert_eq!(reason(&full), "BUCKET_FULL");
    assert!(full.message().contains("max-bytes"), "{}", full.message());
    assert!(held.len() >= 10, "only {} leases fit", held.len());
    let (lease, key) = &held[0];
    let renewed = renew(&mut c, renew_req(&lease.name, lease.revision, key)).await;
    assert_eq!(renewed.fencing_token, lease.fencing_token);
    c.release(release_req(&lease.name, renewed.revision, key))
        .await
        .unwrap();
}
