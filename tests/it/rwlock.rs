//! Read-write locks against a real nats-server and two Tenure replicas on
//! one bucket: shared holders together and never with an exclusive one
//! (seen from a watch and from each client's own holding intervals, and
//! shown to fail with the `shared-over-exclusive` test fault), one queue in
//! arrival order whatever the mode, fencing tokens increasing across every
//! holder, Downgrade without a gap, the --max-shared-holders bound, and a
//! name used as a semaphore or as a lock, never both.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use futures::StreamExt;
use tenure::proto::{
    AcquireRequest, AcquireResponse, DowngradeRequest, EventType, GetLeaseRequest, LockMode,
    ReleaseRequest, RenewRequest,
};
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::Code;

/// A gRPC client of one replica.
type Client = tenure::proto::lease_service_client::LeaseServiceClient<Channel>;

/// An Acquire of read-write lock `name` in `mode`.
fn rw_req(name: &str, holder: &str, mode: LockMode) -> AcquireRequest {
    AcquireRequest {
        mode: mode as i32,
        ..acquire_req(name, holder, 30)
    }
}

/// The same, waiting up to a minute.
fn rw_wait(name: &str, holder: &str, mode: LockMode) -> AcquireRequest {
    AcquireRequest {
        wait: Some(prost_types::Duration {
            seconds: 60,
            nanos: 0,
        }),
        ..rw_req(name, holder, mode)
    }
}

/// Releases the holding `got` replied.
async fn release(c: &mut Client, got: &AcquireResponse) {
    let l = got.lease.as_ref().unwrap();
    c.release(ReleaseRequest {
        slot: l.slot,
        ..release_req(&l.name, l.revision, &got.lease_key)
    })
    .await
    .expect("release");
}

/// How many Acquires wait for lock `name`.
async fn waiting(c: &mut Client, name: &str) -> u32 {
    c.get_lease(GetLeaseRequest { name: name.into() })
        .await
        .map_or(0, |r| r.into_inner().waiting)
}

/// Until `n` Acquires wait for lock `name`.
async fn until_waiting(c: &mut Client, name: &str, n: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while waiting(c, name).await != n {
        assert!(Instant::now() < deadline, "{n} waiters never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Shared holders on two replicas hold together, each with its own slot
/// and token; an exclusive Acquire is refused meanwhile (and a shared one
/// while an exclusive holder holds), and the exclusive holding that follows
/// has a token above every shared one. GetLease lists the holders with
/// their modes.
#[tokio::test]
async fn shared_holders_share_and_exclude_a_writer() {
    let t = Tenure::start().await;
    let (_other, mut b) = t.replica().await;
    let mut a = t.client().await;
    let name = "rw.share";
    let r1 = a
        .acquire(rw_req(name, "reader-1", LockMode::Shared))
        .await
        .unwrap()
        .into_inner();
    let r2 = b
        .acquire(rw_req(name, "reader-2", LockMode::Shared))
        .await
        .unwrap()
        .into_inner();
    let (l1, l2) = (r1.lease.as_ref().unwrap(), r2.lease.as_ref().unwrap());
    assert_eq!(l1.mode, LockMode::Shared as i32);
    assert_ne!(l1.slot, l2.slot);
    assert!(l1.slot > 0 && l2.slot > 0);
    assert!(l2.fencing_token > l1.fencing_token);
    let got = a
        .get_lease(GetLeaseRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.holders.len(), 2, "{got:?}");
    assert!(got
        .holders
        .iter()
        .all(|h| h.mode == LockMode::Shared as i32));

    let err = b
        .acquire(rw_req(name, "writer", LockMode::Exclusive))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(reason(&err), "LEASE_HELD");
    assert!(
        err.message().contains("held shared by 2"),
        "{}",
        err.message()
    );

    // A renewal of a shared holder is its slot's business alone.
    let renewed = a
        .renew(RenewRequest {
            slot: l1.slot,
            ..renew_req(name, l1.revision, &r1.lease_key)
        })
        .await
        .expect("a shared holder renews")
        .into_inner()
        .lease;
    let r1 = AcquireResponse {
        lease: renewed,
        ..r1
    };
    release(&mut a, &r1).await;
    release(&mut b, &r2).await;

    let w = b
        .acquire(rw_req(name, "writer", LockMode::Exclusive))
        .await
        .unwrap()
        .into_inner();
    let lw = w.lease.as_ref().unwrap();
    assert_eq!(lw.mode, LockMode::Exclusive as i32);
    assert!(lw.fencing_token > l2.fencing_token);
    let err = a
        .acquire(rw_req(name, "reader-3", LockMode::Shared))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_HELD", "{err:?}");
    assert!(err.message().contains("exclusively"), "{}", err.message());
    // The same holder and key asking again is a retry: the same holding.
    let again = b
        .acquire(AcquireRequest {
            lease_key: w.lease_key.clone(),
            ..rw_req(name, "writer", LockMode::Exclusive)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.lease.unwrap().fencing_token, lw.fencing_token);
    // ... but not in the other mode: there is no upgrade or downgrade by
    // Acquire.
    let err = b
        .acquire(AcquireRequest {
            lease_key: w.lease_key.clone(),
            ..rw_req(name, "writer", LockMode::Shared)
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "MODE_MISMATCH", "{err:?}");
}

/// Grants in the order they came: (holder, token).
type Grants = Arc<Mutex<Vec<(&'static str, u64)>>>;

/// A waiting Acquire of lock `name` by `holder` in `mode` through `c`,
/// noting its grant in `grants`.
fn wait_in_line(
    c: &Client,
    name: &'static str,
    holder: &'static str,
    mode: LockMode,
    grants: &Grants,
) -> tokio::task::JoinHandle<AcquireResponse> {
    let (mut c, grants) = (c.clone(), grants.clone());
    tokio::spawn(async move {
        let got = c
            .acquire(rw_wait(name, holder, mode))
            .await
            .expect("its turn comes")
            .into_inner();
        let token = got.lease.as_ref().unwrap().fencing_token;
        grants.lock().unwrap().push((holder, token));
        got
    })
}

/// Waiters of both modes queue in one line across replicas: an exclusive
/// waiter behind a shared holder, then a shared waiter behind it. The
/// shared waiter does not join the shared holder (it arrived after a
/// queued writer), an Acquire without a wait is refused while anyone is
/// queued, and the grants come in arrival order with increasing tokens.
#[tokio::test]
async fn waiters_are_served_in_arrival_order_whatever_their_mode() {
    let t = Tenure::start().await;
    let (_other, mut b) = t.replica().await;
    let mut a = t.client().await;
    let name = "rw.order";
    let first = a
        .acquire(rw_req(name, "reader-1", LockMode::Shared))
        .await
        .unwrap()
        .into_inner();
    let grants: Grants = Arc::default();
    let writer = wait_in_line(&b, name, "writer", LockMode::Exclusive, &grants);
    until_waiting(&mut a, name, 1).await;
    let reader = wait_in_line(&a, name, "reader-2", LockMode::Shared, &grants);
    until_waiting(&mut a, name, 2).await;
    // Compatible with the shared holder, but people are queued.
    let err = b
        .acquire(rw_req(name, "reader-3", LockMode::Shared))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_HELD", "{err:?}");
    assert!(grants.lock().unwrap().is_empty(), "nobody was granted yet");

    release(&mut a, &first).await;
    let w = writer.await.unwrap();
    // The reader behind the writer is still queued: the writer holds.
    assert_eq!(waiting(&mut a, name).await, 1);
    assert_eq!(grants.lock().unwrap().len(), 1);
    release(&mut b, &w).await;
    let r = reader.await.unwrap();
    let order = grants.lock().unwrap().clone();
    assert_eq!(
        order.iter().map(|g| g.0).collect::<Vec<_>>(),
        ["writer", "reader-2"]
    );
    let first_token = first.lease.unwrap().fencing_token;
    assert!(
        first_token < order[0].1 && order[0].1 < order[1].1,
        "{order:?}"
    );
    release(&mut a, &r).await;
}

/// Downgrade: the exclusive holder becomes a shared one with no gap (its
/// holding never ends; a waiting reader joins it), a new and higher
/// token, the same slot; it renews from the reply's revision; a retry of
/// the Downgrade with the old revision returns the same shared holding;
/// a shared holding does not downgrade.
#[tokio::test]
async fn a_downgrade_keeps_the_holding_and_lets_readers_in() {
    let t = Tenure::start().await;
    let (_other, mut b) = t.replica().await;
    let mut a = t.client().await;
    let name = "rw.down";
    let w = a
        .acquire(rw_req(name, "writer", LockMode::Exclusive))
        .await
        .unwrap()
        .into_inner();
    let lw = w.lease.clone().unwrap();
    let reader = {
        let mut b = b.clone();
        tokio::spawn(async move {
            b.acquire(rw_wait(name, "reader", LockMode::Shared))
                .await
                .expect("the reader joins the downgraded holder")
                .into_inner()
        })
    };
    until_waiting(&mut a, name, 1).await;
    let down = |revision| DowngradeRequest {
        name: name.into(),
        expected_revision: revision,
        lease_key: w.lease_key.clone(),
        slot: lw.slot,
    };
    let d = a
        .downgrade(down(lw.revision))
        .await
        .expect("downgrade")
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(d.mode, LockMode::Shared as i32);
    assert_eq!(d.slot, lw.slot);
    assert!(d.fencing_token > lw.fencing_token);
    assert_eq!(d.fencing_token, d.revision);
    let r = reader.await.unwrap();
    assert!(r.lease.as_ref().unwrap().fencing_token > d.fencing_token);
    // A retry of the Downgrade whose reply was lost: the same holding.
    let retried = a
        .downgrade(down(lw.revision))
        .await
        .expect("a retried downgrade")
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(retried.fencing_token, d.fencing_token);
    // The downgraded holder keeps renewing, as a shared one.
    let renewed = a
        .renew(RenewRequest {
            slot: d.slot,
            ..renew_req(name, d.revision, &w.lease_key)
        })
        .await
        .expect("renew after downgrade")
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(renewed.fencing_token, d.fencing_token);
    let err = a.downgrade(down(renewed.revision)).await.unwrap_err();
    assert_eq!(reason(&err), "MODE_MISMATCH", "{err:?}");
    let err = b
        .downgrade(DowngradeRequest {
            lease_key: "not-the-key-of-the-writer".into(),
            ..down(renewed.revision)
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD", "{err:?}");
}

/// With --max-shared-holders 2, a third shared Acquire without a wait is
/// refused TOO_MANY_SHARED_HOLDERS (RESOURCE_EXHAUSTED, retryable); with a
/// wait it gets the slot the first release frees.
#[tokio::test]
async fn shared_holders_are_bounded() {
    let t = Tenure::start_with(|c| c.max_shared_holders = 2).await;
    let mut a = t.client().await;
    let name = "rw.bound";
    let r1 = a
        .acquire(rw_req(name, "r1", LockMode::Shared))
        .await
        .unwrap()
        .into_inner();
    a.acquire(rw_req(name, "r2", LockMode::Shared))
        .await
        .unwrap();
    let err = a
        .acquire(rw_req(name, "r3", LockMode::Shared))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(reason(&err), "TOO_MANY_SHARED_HOLDERS");
    assert!(
        err.message().contains("--max-shared-holders 2"),
        "{}",
        err.message()
    );
    let third = {
        let mut a = a.clone();
        tokio::spawn(async move {
            a.acquire(rw_wait(name, "r3", LockMode::Shared))
                .await
                .expect("a slot frees")
                .into_inner()
        })
    };
    until_waiting(&mut a, name, 1).await;
    release(&mut a, &r1).await;
    let got = third.await.unwrap().lease.unwrap();
    assert_eq!(got.slot, r1.lease.unwrap().slot);
}

/// A name is a semaphore or a read-write lock, never both at once: each
/// Acquire of the other kind is refused MODE_MISMATCH; a lock Acquire
/// takes no limit, lock delay or preference.
#[tokio::test]
async fn a_name_is_a_semaphore_or_a_lock_not_both() {
    let t = Tenure::start().await;
    let mut a = t.client().await;
    a.acquire(AcquireRequest {
        limit: 2,
        ..acquire_req("rw.sem", "s", 30)
    })
    .await
    .unwrap();
    let err = a
        .acquire(rw_req("rw.sem", "r", LockMode::Shared))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(reason(&err), "MODE_MISMATCH");
    a.acquire(rw_req("rw.lock", "r", LockMode::Shared))
        .await
        .unwrap();
    let err = a
        .acquire(AcquireRequest {
            limit: 2,
            ..acquire_req("rw.lock", "s", 30)
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "MODE_MISMATCH", "{err:?}");
    for (what, req) in [
        (
            "limit",
            AcquireRequest {
                limit: 2,
                ..rw_req("rw.bad", "r", LockMode::Exclusive)
            },
        ),
        (
            "preference",
            AcquireRequest {
                preference: 1,
                ..rw_req("rw.bad", "r", LockMode::Exclusive)
            },
        ),
        (
            "mode",
            AcquireRequest {
                mode: 7,
                ..acquire_req("rw.bad", "r", 30)
            },
        ),
    ] {
        let err = a.acquire(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{what}: {err:?}");
        assert!(err.message().contains(what), "{what}: {}", err.message());
    }
}

/// Live holders by slot as a watch of lock `name` shows them, with the
/// first violation: an exclusive holder live beside any other holder.
#[derive(Default)]
struct Seen {
    /// slot → (token, exclusive).
    live: BTreeMap<u32, (u64, bool)>,
    /// Most holders live at once.
    most: usize,
    /// The first overlap of an exclusive holder with another.
    overlap: Option<String>,
}

/// One client's holding: from its grant's reply to its release's sending,
/// whether exclusive, and its token.
type Interval = (Instant, Instant, bool, u64);

/// `clients` clients on two replicas take lock `name` `rounds` times each,
/// every third one exclusive, holding a moment and releasing. Returns what
/// a watch saw and the holding intervals (from each grant's reply to the
/// release's sending) that overlapped an exclusive one.
async fn churn(
    t: &Tenure,
    b: &Client,
    name: &'static str,
    clients: usize,
    rounds: usize,
) -> (Seen, Vec<String>) {
    let mut a = t.client().await;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let mut watch = a
        .watch_lease(tenure::proto::WatchLeaseRequest {
            name: name.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let watcher = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = watch.next().await {
                let Some(e) = msg.event else { continue };
                let mut s = seen.lock().unwrap();
                match EventType::try_from(e.r#type) {
                    Ok(EventType::Acquired) => {
                        let exclusive =
                            e.lease.as_ref().unwrap().mode == LockMode::Exclusive as i32;
                        s.live.insert(e.slot, (e.fencing_token, exclusive));
                    }
                    Ok(EventType::Released | EventType::Expired | EventType::Revoked) => {
                        if s.live.get(&e.slot).is_some_and(|l| l.0 == e.fencing_token) {
                            s.live.remove(&e.slot);
                        }
                    }
                    _ => continue,
                }
                s.most = s.most.max(s.live.len());
                if s.live.len() > 1 && s.live.values().any(|l| l.1) && s.overlap.is_none() {
                    s.overlap = Some(format!("{:?}", s.live));
                }
            }
        })
    };
    let intervals: Arc<Mutex<Vec<Interval>>> = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let mut c = if i % 2 == 0 {
            t.client().await
        } else {
            b.clone()
        };
        let intervals = intervals.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                let exclusive = (i + round) % 3 == 0;
                let mode = if exclusive {
                    LockMode::Exclusive
                } else {
                    LockMode::Shared
                };
                let got = c
                    .acquire(rw_wait(name, &format!("c{i}"), mode))
                    .await
                    .expect("acquire")
                    .into_inner();
                let from = Instant::now();
                // Holds a moment: the work the lock protects.
                tokio::time::sleep(Duration::from_millis(5)).await;
                let to = Instant::now();
                release(&mut c, &got).await;
                intervals.lock().unwrap().push((
                    from,
                    to,
                    exclusive,
                    got.lease.unwrap().fencing_token,
                ));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let all = intervals.lock().unwrap().clone();
    let mut overlaps = Vec::new();
    for (i, x) in all.iter().enumerate() {
        for y in &all[i + 1..] {
            if (x.2 || y.2) && x.0 < y.1 && y.0 < x.1 {
                overlaps.push(format!("tokens {} and {}", x.3, y.3));
            }
        }
    }
    // Every grant's token is distinct.
    let mut tokens: Vec<u64> = all.iter().map(|x| x.3).collect();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), all.len(), "tokens repeat");
    // The watch has caught up with the last release once a fresh
    // exclusive holding shows up alone.
    let last = a
        .acquire(rw_req(name, "last", LockMode::Exclusive))
        .await
        .expect("free at the end")
        .into_inner();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen
        .lock()
        .unwrap()
        .live
        .values()
        .any(|l| l.0 == last.lease.as_ref().unwrap().fencing_token)
    {
        assert!(
            Instant::now() < deadline,
            "the watch never saw the last grant"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    watcher.abort();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (seen, overlaps)
}

/// Twelve clients on two replicas, a third of their Acquires exclusive:
/// no exclusive holder ever overlaps another holder (by the watch and by
/// the clients' own intervals), and shared holders did share.
#[tokio::test]
async fn an_exclusive_holder_never_overlaps_another() {
    let t = Tenure::start().await;
    let (_other, b) = t.replica().await;
    let (seen, overlaps) = churn(&t, &b, "rw.churn", 12, 4).await;
    assert_eq!(
        seen.overlap, None,
        "the watch saw an exclusive holder beside another"
    );
    assert!(overlaps.is_empty(), "{overlaps:?}");
    assert!(seen.most > 1, "shared holders never held together");
}

/// The same run with the test fault `shared-over-exclusive` (a shared
/// Acquire takes an exclusive holder for a shared one) is caught: the
/// checks above are not vacuous.
#[tokio::test]
async fn a_shared_holder_beside_an_exclusive_one_is_caught() {
    let t =
        Tenure::start_with(|c| c.test_fault = vec![tenure::TestFault::SharedOverExclusive]).await;
    let (_other, b) = t.replica().await;
    let (seen, overlaps) = churn(&t, &b, "rw.fault", 12, 4).await;
    assert!(
        seen.overlap.is_some() || !overlaps.is_empty(),
        "the fault went unseen"
    );
}

/// A watch of a fresh lock sees each grant as ACQUIRED alone: a lock's
/// acquiring write is conditional on the lock's wildcard, not its slot, so
/// it carries no replaced revision of its slot; the record's own (`over`)
/// says nothing was missed (without it, every first use of a slot came
/// with a MISSED event).
#[tokio::test]
async fn a_watch_sees_a_fresh_lock_without_missed_events() {
    let t = Tenure::start().await;
    let mut a = t.client().await;
    let name = "rw.watch";
    let mut watch = a
        .watch_lease(tenure::proto::WatchLeaseRequest {
            name: name.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut next = async || loop {
        let msg = watch.next().await.expect("the watch goes on").unwrap();
        let Some(e) = msg.event else { continue };
        if e.r#type != EventType::SnapshotComplete as i32 {
            return e;
        }
    };
    for (i, mode) in [LockMode::Shared, LockMode::Shared].into_iter().enumerate() {
        let got = a
            .acquire(rw_req(name, &format!("r{i}"), mode))
            .await
            .unwrap()
            .into_inner()
            .lease
            .unwrap();
        let e = next().await;
        assert_eq!(
            (e.r#type, e.fencing_token, e.slot),
            (EventType::Acquired as i32, got.fencing_token, got.slot),
            "{e:?}"
        );
    }
}

/// An unused read-write lock is swept like a semaphore (its definition's
/// tombstone, conditional on the lock's wildcard, in the batch with its
/// slots'), and the name is a lock again at the next Acquire, with a
/// higher token.
#[tokio::test]
async fn an_unused_lock_is_swept_and_taken_again() {
    let t = Tenure::start_with(|c| c.marker_ttl = Duration::from_secs(2)).await;
    let mut c = t.client().await;
    let kv = t.kv().await;
    let mut changes = kv.watch("_tenure.sem.rw.swept.limit").await.unwrap();
    let got = c
        .acquire(rw_req("rw.swept", "w", LockMode::Exclusive))
        .await
        .unwrap()
        .into_inner();
    release(&mut c, &got).await;
    within("the unused lock's removal", async {
        loop {
            let e = changes.next().await.expect("watch").expect("entry");
            if e.operation == async_nats::jetstream::kv::Operation::Delete {
                break;
            }
        }
    })
    .await;
    let again = c
        .acquire(rw_req("rw.swept", "r", LockMode::Shared))
        .await
        .expect("the lock is defined again")
        .into_inner();
    assert!(again.lease.unwrap().fencing_token > got.lease.unwrap().fencing_token);
}
