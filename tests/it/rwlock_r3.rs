//! Read-write locks on a replicated bucket: a 3-node JetStream cluster, the
//! bucket at 3 replicas, three Tenure replicas each attached to another
//! node, and clients racing Acquires without a wait (so that many
//! wildcard-conditional writes are in flight at once) in both modes.
//!
//! The question: the leader of a replicated stream checks a write's
//! condition against what it has applied, and holds back a write while
//! another with the same condition subject is in flight (tests/it/fifo_r3.rs
//! found a wildcard condition blind to a write in flight under another
//! subject). Every write that can start a lock holding names the lock's
//! wildcard (design section 23), so none should pass on a state that
//! another in flight is about to change.
//!
//! The judge needs no watch: every holding lives, in the stream's own order,
//! from its acquiring write (its token) to its release tombstone (the
//! Release reply's revision), so two holdings overlap exactly when each
//! began before the other ended. An exclusive holding overlapping any
//! other is the violation; a release refused (the slot rewritten under its
//! holder) is one too. The same run with the test fault
//! `shared-over-exclusive` is the control: the judge must see it.

use crate::common::*;
use rand::Rng;
use tenure::proto::{AcquireRequest, LockMode, ReleaseRequest};
use tenure::Config;

use crate::common::CAS_SERIAL as ONE_AT_A_TIME;

/// Grants each client makes.
const GRANTS: usize = 25;

/// One holding in revision space: (token, release revision, exclusive).
type Held = (u64, u64, bool);

/// Runs the race through three replicas on the three nodes of `cluster`
/// (with `fault` in force when given) and returns every holding.
async fn race(cluster: &NatsCluster, fault: Option<tenure::TestFault>) -> Vec<Held> {
    let mut config = Config::for_nats(&cluster.url(0));
    config.replicas = 3;
    config.metrics_listen = None;
    config.test_fault = fault.into_iter().collect();
    let urls: Vec<String> = (0..3).map(|node| cluster.url(node)).collect();
    let (running, clients) = replicas_on(&config, &urls).await;
    let mut tasks = Vec::new();
    for i in 0..9 {
        let mut c = clients[i % 3].clone();
        tasks.push(tokio::spawn(async move {
            let mut held = Vec::new();
            while held.len() < GRANTS {
                let exclusive = rand::rng().random_ratio(1, 3);
                let mode = if exclusive {
                    LockMode::Exclusive
                } else {
                    LockMode::Shared
                };
                let req = AcquireRequest {
                    mode: mode as i32,
                    ..acquire_req("rw.r3", &format!("c{i}"), 30)
                };
                let got = match c.acquire(req).await {
                    Ok(got) => got.into_inner(),
                    // Held, or lost every race: try again.
                    Err(s) if reason(&s) == "LEASE_HELD" => {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    Err(s) => panic!("acquire: {s:?}"),
                };
                let lease = got.lease.unwrap();
                let released = c
                    .release(ReleaseRequest {
                        slot: lease.slot,
                        ..release_req("rw.r3", lease.revision, &got.lease_key)
                    })
                    .await;
                let end = match released {
                    Ok(r) => r.into_inner().revision,
                    // Rewritten under its holder: overlap with anything.
                    Err(_) => u64::MAX,
                };
                held.push((lease.fencing_token, end, exclusive));
            }
            held
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    drop(running);
    all
}

/// The overlaps of an exclusive holding with another, in revision order.
fn overlaps(held: &[Held]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, a) in held.iter().enumerate() {
        for b in &held[i + 1..] {
            if (a.2 || b.2) && a.0 < b.1 && b.0 < a.1 {
                out.push(format!("{a:?} and {b:?}"));
            }
        }
    }
    out
}

/// Both modes racing through three replicas on three nodes of an R3
/// bucket: no exclusive holding overlaps another in the stream's order,
/// and shared holdings did overlap (the race was real).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_exclusive_holder_is_alone_on_a_replicated_bucket() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = NatsCluster::start(3).await;
    let held = race(&cluster, None).await;
    assert_eq!(held.len(), 9 * GRANTS);
    let found = overlaps(&held);
    assert!(
        found.is_empty(),
        "{} overlaps: {:?}",
        found.len(),
        &found[..found.len().min(5)]
    );
    let shared_overlaps = held.iter().enumerate().any(|(i, a)| {
        held[i + 1..]
            .iter()
            .any(|b| !a.2 && !b.2 && a.0 < b.1 && b.0 < a.1)
    });
    assert!(
        shared_overlaps,
        "no two shared holdings overlapped: no race"
    );
}

/// The control: the same race with `shared-over-exclusive` in force is
/// caught by the same judge.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_replicated_judge_catches_a_shared_holder_beside_an_exclusive_one() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = NatsCluster::start(3).await;
    let held = race(&cluster, Some(tenure::TestFault::SharedOverExclusive)).await;
    assert!(!overlaps(&held).is_empty(), "the fault went unseen");
}

#[test]
fn the_judge_counts_only_overlaps_with_an_exclusive_holding() {
    // Two shared holdings overlapping: fine; an exclusive one inside a
    // shared one: not; an exclusive one after both: fine.
    let held = [(10, 20, false), (12, 25, false), (30, 40, true)];
    assert!(overlaps(&held).is_empty());
    let held = [(10, 20, false), (15, 18, true)];
    assert_eq!(overlaps(&held).len(), 1);
    // A release refused: the holding never ended.
    let held = [(10, u64::MAX, false), (50, 60, true)];
    assert_eq!(overlaps(&held).len(), 1);
}
