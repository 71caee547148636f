//! Counting semaphores against a real nats-server and two Tenure replicas on
//! one bucket: never more holders than the limit (seen from a watch and from
//! each client's own holding intervals), distinct increasing fencing tokens,
//! a stalled holder's slot freed by its TTL, LIMIT_MISMATCH, the lease key
//! check per slot, and renewals that never conflict with acquires.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use futures::StreamExt;
use tenure::proto::{
    AcquireRequest, EventType, GetLeaseRequest, ListLeasesRequest, ReleaseRequest, RenewRequest,
    RevokeLeaseRequest,
};
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::Code;
use tonic_types::StatusExt;

/// A gRPC client of one replica.
type Client = tenure::proto::lease_service_client::LeaseServiceClient<Channel>;

// Tests that count CAS conflicts, or make them, take turns with those of
// every file (the counter is one per process).
use crate::common::CAS_SERIAL as SERIAL;

/// An Acquire of a slot of semaphore `name` with `limit`.
fn sem_req(name: &str, holder: &str, ttl_s: i64, limit: u32) -> AcquireRequest {
    AcquireRequest {
        limit,
        ..acquire_req(name, holder, ttl_s)
    }
}

/// A Renew of slot `slot`.
fn renew_slot(name: &str, slot: u32, revision: u64, key: &str) -> RenewRequest {
    RenewRequest {
        slot,
        ..renew_req(name, revision, key)
    }
}

/// A Release of slot `slot`.
fn release_slot(name: &str, slot: u32, revision: u64, key: &str) -> ReleaseRequest {
    ReleaseRequest {
        slot,
        ..release_req(name, revision, key)
    }
}

/// Tenure with its metrics endpoint on.
async fn start() -> Tenure {
    Tenure::start_with(|c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap())).await
}

/// The process's `tenure_cas_conflicts_total`, read from `t`'s endpoint.
async fn conflicts(t: &Tenure) -> f64 {
    let addr = t.running.as_ref().unwrap().metrics_addr().unwrap();
    let (_, body) = http_get(addr, "/metrics").await;
    sample(&body, "tenure_cas_conflicts_total")
}

/// 20 clients on two replicas race for a semaphore of 3, three rounds each.
/// A watch never sees a 4th live holder, no two clients' holding intervals
/// (from the grant's reply to sending the release) ever overlap more than 3
/// deep, and every grant's token is distinct and increasing in grant order.
#[tokio::test]
async fn twenty_clients_never_exceed_a_limit_of_three() {
    let _serial = SERIAL.lock().await;
    const CLIENTS: usize = 20;
    const ROUNDS: usize = 3;
    const LIMIT: u32 = 3;
    let name = "sem.race";
    let t = start().await;
    let (_other, b) = t.replica().await;
    let a = t.client().await;

    // The watch: live holders by slot, checked on every event.
    let mut w = watch(&mut a.clone(), name).await;
    next_of(&mut w, EventType::SnapshotComplete).await;
    let watcher = tokio::spawn(async move {
        let mut live: BTreeMap<u32, u64> = BTreeMap::new();
        let (mut granted, mut ended, mut max_live) = (Vec::new(), 0, 0);
        while ended < CLIENTS * ROUNDS {
            let e = next_event(&mut w).await;
            assert!(e.slot >= 1 && e.slot <= LIMIT, "slot {} of {e:?}", e.slot);
            match EventType::try_from(e.r#type).unwrap() {
                EventType::Acquired => {
                    let before = live.insert(e.slot, e.fencing_token);
                    assert_eq!(before, None, "slot {} granted twice", e.slot);
                    granted.push(e.fencing_token);
                }
                EventType::Renewed => {}
                EventType::Released | EventType::Expired => {
                    assert_eq!(live.remove(&e.slot), Some(e.fencing_token), "{e:?}");
                    ended += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
            max_live = max_live.max(live.len());
            assert!(live.len() as u32 <= LIMIT, "{} live holders", live.len());
        }
        (granted, max_live)
    });

    let before = conflicts(&t).await;
    // (granted at, release sent at, token) per holding, as each client saw it.
    let seen: Arc<Mutex<Vec<(Instant, Instant, u64)>>> = Arc::default();
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let mut c = if i % 2 == 0 { a.clone() } else { b.clone() };
        let seen = seen.clone();
        clients.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let req = AcquireRequest {
                    wait: Some(secs(30)),
                    ..sem_req(name, &format!("client-{i}"), 30, LIMIT)
                };
                let (lease, key) = acquire(&mut c, req).await;
                let granted = Instant::now();
                assert!(lease.slot >= 1 && lease.slot <= LIMIT);
                // Work while holding (varied, so holdings interleave).
                tokio::time::sleep(Duration::from_millis(5 * ((i + round) % 4) as u64)).await;
                let sent = Instant::now();
                c.release(release_slot(name, lease.slot, lease.revision, &key))
                    .await
                    .expect("release");
                seen.lock()
                    .unwrap()
                    .push((granted, sent, lease.fencing_token));
            }
        }));
    }
    for c in clients {
        within("the clients to finish", c).await.unwrap();
    }
    let (granted, max_live) = within("the watch to see every release", watcher)
        .await
        .unwrap();
    let after = conflicts(&t).await;

    // The clients' own intervals: a sweep over starts and ends (an end
    // first at the same instant).
    let seen = seen.lock().unwrap().clone();
    let mut edges: Vec<(Instant, i32)> = seen
        .iter()
        .flat_map(|(from, to, _)| [(*from, 1), (*to, -1)])
        .collect();
    edges.sort();
    let (mut depth, mut deepest) = (0, 0);
    for (_, step) in edges {
        depth += step;
        deepest = deepest.max(depth);
    }
    assert!(
        deepest <= LIMIT as i32,
        "{deepest} clients held at once by their own clocks"
    );

    // Tokens: distinct, increasing in the order the watch saw the grants,
    // and the same set the clients got.
    assert_eq!(granted.len(), CLIENTS * ROUNDS);
    assert!(
        granted.windows(2).all(|w| w[0] < w[1]),
        "tokens not increasing in grant order: {granted:?}"
    );
    let mut tokens: Vec<u64> = seen.iter().map(|s| s.2).collect();
    tokens.sort();
    assert_eq!(tokens, granted);
    println!(
        "semaphore race: {} grants, at most {max_live} live holders by the watch, {deepest} by the clients, \
         {} CAS conflicts ({:.2} per grant)",
        granted.len(),
        after - before,
        (after - before) / granted.len() as f64
    );
}

/// Semaphore waiters queue like a lock's: eight waiters arriving one after
/// the other on two replicas behind a full semaphore of 2 are granted in
/// arrival order (by token) as the holders release, each woken only when a
/// slot is free for it, with no CAS race lost (only the head writes); an
/// Acquire without a wait that finds a slot free while waiters are queued
/// is refused `state=QUEUED` instead of taking it ahead of them.
#[tokio::test]
async fn waiters_are_served_in_arrival_order_one_per_free_slot() {
    let _serial = SERIAL.lock().await;
    const LIMIT: u32 = 2;
    let name = "sem.fifo";
    let t = start().await;
    let (_other, b) = t.replica().await;
    let mut a = t.client().await;
    let mut holders = Vec::new();
    for i in 0..LIMIT {
        holders.push(acquire(&mut a, sem_req(name, &format!("h{i}"), 30, LIMIT)).await);
    }
    let mut queue = t
        .kv()
        .await
        .watch(format!("_tenure.q._tenure.sem.{name}.ticket.*"))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (mut arrivals, mut tasks) = (Vec::new(), Vec::new());
    for i in 0..8 {
        let holder = format!("w{i}");
        let mut c = if i % 2 == 0 { a.clone() } else { b.clone() };
        let tx = tx.clone();
        let who = holder.clone();
        tasks.push(tokio::spawn(async move {
            let req = AcquireRequest {
                wait: Some(secs(60)),
                ..sem_req(name, &who, 30, LIMIT)
            };
            let (lease, key) = acquire(&mut c, req).await;
            tx.send((who, lease.fencing_token)).unwrap();
            c.release(release_slot(name, lease.slot, lease.revision, &key))
                .await
                .expect("release");
        }));
        // Arrivals in order: each waiter's ticket is in the bucket before
        // the next waiter starts (a first write says place 0; refreshes of
        // earlier tickets name their place).
        loop {
            let entry = within("a ticket", queue.next()).await.unwrap().unwrap();
            let ticket: serde_json::Value =
                serde_json::from_slice(&entry.value).unwrap_or_default();
            if ticket["place"] == 0 && ticket["holder"] == holder.as_str() {
                break;
            }
        }
        arrivals.push(holder);
    }
    for c in [&mut a, &mut b.clone()] {
        let shown = c
            .get_lease(GetLeaseRequest { name: name.into() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((shown.waiting, shown.free_slots), (8, 0), "{shown:?}");
    }
    let before = conflicts(&t).await;
    // One slot frees: an Acquire without a wait does not take it ahead of
    // the queue (the head may take it first; then it is simply held).
    let ((first, first_key), rest) = holders.split_first().unwrap();
    a.release(release_slot(name, first.slot, first.revision, first_key))
        .await
        .unwrap();
    let err = a
        .acquire(sem_req(name, "barger", 30, LIMIT))
        .await
        .expect_err("a slot taken ahead of the queue");
    assert_eq!(reason(&err), "LEASE_HELD", "{err:?}");
    for (lease, key) in rest {
        a.release(release_slot(name, lease.slot, lease.revision, key))
            .await
            .unwrap();
    }
    let mut grants = Vec::new();
    for _ in 0..arrivals.len() {
        grants.push(within("the next grant", rx.recv()).await.unwrap());
    }
    for task in tasks {
        within("a waiter to finish", task).await.unwrap();
    }
    grants.sort_by_key(|(_, token)| *token);
    let by_token: Vec<String> = grants.into_iter().map(|(holder, _)| holder).collect();
    assert_eq!(by_token, arrivals, "granted in arrival order (by token)");
    assert_eq!(
        conflicts(&t).await,
        before,
        "a handoff lost a CAS race: a semaphore waiter other than the head wrote"
    );
}

/// A holder that stops renewing loses its slot when its TTL runs out: the
/// watch reports that slot EXPIRED with its token, and the next Acquire
/// gets the slot with a greater token.
#[tokio::test]
async fn a_stalled_holder_frees_its_slot_within_its_ttl() {
    let name = "sem.stall";
    let t = start().await;
    let (_other, mut b) = t.replica().await;
    let mut a = t.client().await;
    let mut w = watch(&mut a, name).await;
    next_of(&mut w, EventType::SnapshotComplete).await;
    let (live, _) = acquire(&mut a, sem_req(name, "live", 60, 2)).await;
    let (stalled, _) = acquire(&mut b, sem_req(name, "stalled", 1, 2)).await;
    assert_ne!(live.slot, stalled.slot);
    assert!(stalled.fencing_token > live.fencing_token);
    let err = a
        .acquire(sem_req(name, "third", 5, 2))
        .await
        .expect_err("the semaphore is full");
    assert_eq!(reason(&err), "LEASE_HELD");
    assert_eq!(err.get_details_error_info().unwrap().metadata["limit"], "2");

    let expired = next_of(&mut w, EventType::Expired).await;
    assert_eq!(
        (expired.slot, expired.fencing_token, expired.holder.as_str()),
        (stalled.slot, stalled.fencing_token, "stalled")
    );
    let (next, _) = acquire(&mut a, sem_req(name, "third", 5, 2)).await;
    assert_eq!(next.slot, stalled.slot);
    assert!(next.fencing_token > stalled.fencing_token);
}

/// The first holder's limit stands while it has holders: another limit is
/// LIMIT_MISMATCH naming the limit in force; once every holder is gone a new
/// limit defines the semaphore. Limits over the server's bound, or with a
/// lock delay, are refused.
#[tokio::test]
async fn another_limit_is_a_mismatch_while_held() {
    let name = "sem.limit";
    let t = start().await;
    let (_other, mut b) = t.replica().await;
    let mut a = t.client().await;
    let (held, key) = acquire(&mut a, sem_req(name, "first", 30, 2)).await;
    let err = b
        .acquire(sem_req(name, "second", 30, 3))
        .await
        .expect_err("another limit");
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(reason(&err), "LIMIT_MISMATCH");
    assert_eq!(err.get_details_error_info().unwrap().metadata["limit"], "2");

    a.release(release_slot(name, held.slot, held.revision, &key))
        .await
        .expect("release");
    let (lease, _) = acquire(&mut b, sem_req(name, "second", 30, 3)).await;
    assert!((1..=3).contains(&lease.slot), "slot {}", lease.slot);
    let got = a
        .get_lease(GetLeaseRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((got.limit, got.holders.len(), got.free_slots), (3, 1, 2));

    for bad in [
        sem_req(name, "x", 30, 257),
        AcquireRequest {
            lock_delay: Some(secs(1)),
            ..sem_req("sem.delay", "x", 30, 2)
        },
        AcquireRequest {
            preference: 2,
            ..sem_req("sem.preference", "x", 30, 2)
        },
    ] {
        let err = a.acquire(bad).await.expect_err("refused");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(reason(&err), "INVALID_ARGUMENT");
    }
}

/// Only a slot's own lease key renews or releases it; GetLease shows every
/// holder, the limit and the free slots; slot keys never show as leases.
#[tokio::test]
async fn only_the_slot_key_holder_renews_or_releases_it() {
    let name = "sem.keys";
    let t = start().await;
    let (_other, mut b) = t.replica().await;
    let mut a = t.client().await;
    let (one, key_one) = acquire(&mut a, sem_req(name, "one", 30, 3)).await;
    let (two, key_two) = acquire(&mut b, sem_req(name, "two", 30, 3)).await;
    let wrong = "not-the-lease-key-of-anyone";
    for (slot, key) in [(one.slot, wrong), (one.slot, key_two.as_str())] {
        let err = b
            .renew(renew_slot(name, slot, one.revision, key))
            .await
            .expect_err("not this slot's key");
        assert_eq!(reason(&err), "LEASE_NOT_HELD");
        assert!(
            err.message().contains("\"sem.keys\" (semaphore slot"),
            "{}",
            err.message()
        );
        let err = b
            .release(release_slot(name, slot, one.revision, key))
            .await
            .expect_err("not this slot's key");
        assert_eq!(reason(&err), "LEASE_NOT_HELD");
    }
    let renewed = renew(&mut b, renew_slot(name, one.slot, one.revision, &key_one)).await;
    assert_eq!(
        (renewed.slot, renewed.fencing_token, renewed.name.as_str()),
        (one.slot, one.fencing_token, name)
    );

    let got = a
        .get_lease(GetLeaseRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((got.limit, got.free_slots), (3, 1));
    let holders: Vec<(u32, &str, u64)> = got
        .holders
        .iter()
        .map(|l| (l.slot, l.holder.as_str(), l.fencing_token))
        .collect();
    let mut expected = vec![
        (one.slot, "one", one.fencing_token),
        (two.slot, "two", two.fencing_token),
    ];
    expected.sort();
    assert_eq!(holders, expected, "holders by slot");
    assert_eq!(got.lease.unwrap().fencing_token, one.fencing_token);

    // A watch's snapshot shows each holder with its slot, for the name and
    // for a subtree above it.
    for target in [name, "sem.>"] {
        let mut w = watch(&mut a, target).await;
        let mut current = Vec::new();
        loop {
            let e = next_event(&mut w).await;
            if e.r#type == EventType::SnapshotComplete as i32 {
                break;
            }
            assert_eq!(e.name, name);
            current.push((e.slot, e.lease.unwrap().slot));
        }
        current.sort();
        let mut slots = vec![(one.slot, one.slot), (two.slot, two.slot)];
        slots.sort();
        assert_eq!(current, slots, "snapshot of {target}");
    }

    // A plain lease reads as before: no holders, no limit.
    acquire(&mut a, acquire_req("sem.plain", "p", 30)).await;
    let plain = a
        .get_lease(GetLeaseRequest {
            name: "sem.plain".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((plain.limit, plain.holders.len()), (0, 0));
    let listed = a
        .list_leases(ListLeasesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let listed: Vec<(&str, u32)> = listed
        .leases
        .iter()
        .map(|l| (l.name.as_str(), l.slot))
        .collect();
    let mut expected = vec![(name, one.slot), (name, two.slot), ("sem.plain", 0)];
    expected.sort();
    assert_eq!(
        listed, expected,
        "holders are listed under the semaphore's name by slot; slot and definition keys are not leases"
    );

    let (three, _) = acquire(&mut a, sem_req(name, "three", 30, 3)).await;
    assert!(three.fencing_token > two.fencing_token);
    let got = a
        .get_lease(GetLeaseRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((got.holders.len(), got.free_slots), (3, 0));
}

/// Renewing holders while another client acquires and releases slots of the
/// same semaphore, on both replicas, loses no CAS race at all: a renewal
/// writes only its own slot key, an Acquire the definition and a free slot.
#[tokio::test]
async fn renewals_never_conflict_with_acquires() {
    let _serial = SERIAL.lock().await;
    const ROUNDS: usize = 40;
    let name = "sem.renew";
    let t = start().await;
    let (_other, mut b) = t.replica().await;
    let mut a = t.client().await;
    let (one, key_one) = acquire(&mut a, sem_req(name, "one", 30, 4)).await;
    let (two, key_two) = acquire(&mut b, sem_req(name, "two", 30, 4)).await;
    let before = conflicts(&t).await;

    let renewer = |mut c: Client, lease: tenure::proto::Lease, key: String| async move {
        let mut revision = lease.revision;
        for _ in 0..ROUNDS {
            revision = renew(&mut c, renew_slot(name, lease.slot, revision, &key))
                .await
                .revision;
        }
    };
    let acquirer = |mut c: Client, who: &'static str| async move {
        for _ in 0..ROUNDS {
            let (l, k) = acquire(&mut c, sem_req(name, who, 30, 4)).await;
            c.release(release_slot(name, l.slot, l.revision, &k))
                .await
                .expect("release");
        }
    };
    within("renewals and acquires", async {
        tokio::join!(
            renewer(a.clone(), one, key_one),
            renewer(b.clone(), two, key_two),
            acquirer(a.clone(), "acquirer-a"),
        )
    })
    .await;
    let after = conflicts(&t).await;
    println!(
        "semaphore renew vs acquire: {} renewals, {ROUNDS} acquire+release, {} CAS conflicts",
        2 * ROUNDS,
        after - before
    );
    assert_eq!(after - before, 0.0, "renewals conflicted with acquires");
}

/// The command line: `tenure acquire --limit` prints the slot and the
/// renew/release lines with `--slot`; `tenure get` lists the holders, the
/// limit and the free slots; `tenure release --slot` frees the slot.
#[tokio::test]
async fn the_cli_takes_and_shows_semaphore_slots() {
    let t = Tenure::start().await;
    let run = |args: &[&str]| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"));
        c.env(
            "TENURE_SERVER",
            format!("http://{}", t.running.as_ref().unwrap().addr()),
        )
        .env_remove("TENURE_OUTPUT")
        .env_remove("TENURE_LEASE_KEY")
        .args(args);
        async move {
            let out = within("tenure to finish", c.output()).await.unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
        }
    };
    let got = run(&[
        "acquire", "sem.cli", "--limit", "2", "--holder", "c1", "-o", "json",
    ])
    .await;
    let slot = got["slot"].as_u64().expect("a slot");
    assert!((1..=2).contains(&slot));
    run(&[
        "acquire", "sem.cli", "--limit", "2", "--holder", "c2", "-o", "json",
    ])
    .await;
    let shown = run(&["get", "sem.cli", "-o", "json"]).await;
    assert_eq!(
        (shown["limit"].as_u64(), shown["free_slots"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(shown["holders"].as_array().unwrap().len(), 2);
    let revision = got["revision"].as_u64().unwrap().to_string();
    let key = got["lease_key"].as_str().unwrap();
    run(&[
        "release",
        "sem.cli",
        "--slot",
        &slot.to_string(),
        "--revision",
        &revision,
        "--lease-key",
        key,
        "-o",
        "json",
    ])
    .await;
    let shown = run(&["get", "sem.cli", "-o", "json"]).await;
    assert_eq!(shown["free_slots"].as_u64(), Some(1));
}

/// An operator lists a semaphore's holders (one page at a time, through
/// the slots) and revokes one holder by slot: only that holder is ended
/// (its watchers see the slot REVOKED and its renewal fails), the others
/// keep their slots, and a wrong token or an empty slot is refused.
#[tokio::test]
async fn admins_list_and_revoke_semaphore_holders() {
    let name = "sem.admin";
    let t = start().await;
    let mut a = t.client().await;
    let mut held = Vec::new();
    for holder in ["one", "two", "three"] {
        held.push(acquire(&mut a, sem_req(name, holder, 30, 3)).await);
    }
    acquire(&mut a, acquire_req("sem.admin2", "plain", 30)).await;

    // Pages of one walk every holder, by name then slot.
    let mut seen = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = a
            .list_leases(ListLeasesRequest {
                prefix: "sem.admin".into(),
                page_size: 1,
                page_token: page_token.clone(),
            })
            .await
            .expect("list")
            .into_inner();
        assert!(page.leases.len() <= 1);
        seen.extend(page.leases.into_iter().map(|l| (l.name, l.slot, l.holder)));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    let mut expected: Vec<(String, u32, String)> = held
        .iter()
        .map(|(l, _)| (name.to_string(), l.slot, l.holder.clone()))
        .collect();
    expected.sort();
    expected.push(("sem.admin2".into(), 0, "plain".into()));
    assert_eq!(seen, expected, "every holder, one per page");

    let (victim, victim_key) = &held[1];
    let mut w = watch(&mut a, name).await;
    next_of(&mut w, EventType::SnapshotComplete).await;
    let wrong = a
        .revoke_lease(RevokeLeaseRequest {
            name: name.into(),
            reason: "test".into(),
            fencing_token: victim.fencing_token + 1,
            slot: victim.slot,
        })
        .await
        .expect_err("wrong token");
    assert_eq!(reason(&wrong), "LEASE_NOT_FOUND");
    assert!(
        wrong.message().contains("semaphore slot"),
        "{}",
        wrong.message()
    );

    let revoked = a
        .revoke_lease(RevokeLeaseRequest {
            name: name.into(),
            reason: "stuck".into(),
            fencing_token: victim.fencing_token,
            slot: victim.slot,
        })
        .await
        .expect("revoke the slot")
        .into_inner();
    let gone = revoked.revoked.unwrap();
    assert_eq!((gone.name.as_str(), gone.slot), (name, victim.slot));
    assert_eq!(gone.fencing_token, victim.fencing_token);

    let e = next_event(&mut w).await;
    assert_eq!(e.r#type, EventType::Revoked as i32);
    assert_eq!((e.name.as_str(), e.slot), (name, victim.slot));
    assert_eq!(e.fencing_token, victim.fencing_token);

    let err = a
        .renew(renew_slot(name, victim.slot, victim.revision, victim_key))
        .await
        .expect_err("the revoked holder cannot renew");
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    for (other, key) in [&held[0], &held[2]] {
        a.renew(renew_slot(name, other.slot, other.revision, key))
            .await
            .expect("the other holders keep their slots");
    }
    let err = a
        .revoke_lease(RevokeLeaseRequest {
            name: name.into(),
            reason: "again".into(),
            fencing_token: 0,
            slot: victim.slot,
        })
        .await
        .expect_err("the slot is empty now");
    assert_eq!(reason(&err), "LEASE_NOT_FOUND");
    let got = a
        .get_lease(GetLeaseRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((got.holders.len(), got.free_slots), (2, 1));
}

/// An unused semaphore is removed: once its slots have been free and
/// unwritten for the marker TTL, a sweep tombstones its definition and every
/// slot of its limit in one batch (tombstones that age out with the marker
/// TTL), while a semaphore held all along keeps its definition; the name can
/// then be defined again, with another limit and a higher token.
#[tokio::test]
async fn an_unused_semaphore_is_removed_and_a_held_one_is_kept() {
    let t = Tenure::start_with(|c| c.marker_ttl = Duration::from_secs(2)).await;
    let mut c = t.client().await;
    let kv = t.kv().await;
    let mut changes = kv.watch("_tenure.sem.>").await.unwrap();
    let (held, _) = acquire(&mut c, sem_req("sweep.held", "b", 600, 2)).await;
    let (used, key) = acquire(&mut c, sem_req("sweep.idle", "a", 30, 3)).await;
    c.release(release_slot("sweep.idle", used.slot, used.revision, &key))
        .await
        .expect("release");

    // The removal, as the bucket's watch sees it: the definition's
    // tombstone, after a tombstone over each of the three slots.
    let definition = "_tenure.sem.sweep.idle.limit";
    let mut tombstoned = Vec::new();
    within("the unused semaphore's removal", async {
        loop {
            let e = changes.next().await.expect("watch").expect("entry");
            if e.operation != async_nats::jetstream::kv::Operation::Delete {
                continue;
            }
            if e.key == definition {
                break;
            }
            tombstoned.push(e.key);
        }
    })
    .await;
    for slot in 1..=3 {
        let slot_key = format!("_tenure.sem.sweep.idle.{slot}");
        assert!(
            tombstoned.contains(&slot_key),
            "{slot_key} in {tombstoned:?}"
        );
    }
    // The tombstones age out: they carry the marker TTL.
    let js = t.nats.jetstream().await;
    let stream = js
        .get_stream(format!("KV_{}", t.config.bucket))
        .await
        .unwrap();
    let last = stream
        .get_last_raw_message_by_subject(&format!("$KV.{}.{definition}", t.config.bucket))
        .await
        .unwrap();
    assert_eq!(last.headers.get("Nats-TTL").map(|v| v.as_str()), Some("2"));

    // The held semaphore was swept too (the removal above came from a
    // sweep of the whole bucket) and keeps its definition and holder.
    let kept = kv
        .entry("_tenure.sem.sweep.held.limit")
        .await
        .unwrap()
        .expect("the held semaphore's definition");
    assert_eq!(kept.operation, async_nats::jetstream::kv::Operation::Put);
    let got = c
        .get_lease(GetLeaseRequest {
            name: "sweep.held".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((got.limit, got.holders.len()), (2, 1));
    assert_eq!(got.holders[0].revision, held.revision);

    // Defined again, with another limit.
    let (again, _) = acquire(&mut c, sem_req("sweep.idle", "c", 30, 2)).await;
    assert_eq!(again.slot, 1);
    assert!(again.revision > used.revision);
}
