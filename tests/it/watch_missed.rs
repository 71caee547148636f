//! A watch never loses a holding silently (issue 24 §2): a replica whose
//! shared watcher is held far behind the stream ([`tenure::WatcherHold`])
//! while plain leases, semaphore slots and groups come and go, then reads
//! the stream as a reader that far behind does (messages rewritten since
//! are gone), must deliver, for every holding granted meanwhile, its
//! ACQUIRED and its end, or a MISSED for its name whose range covers it.
//! A watcher that keeps up delivers every holding and no MISSED.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{
    AcquireGroupRequest, AcquireRequest, EventType, LeaseEvent, ReleaseGroupRequest,
};
use tonic::transport::Channel;

type Client = LeaseServiceClient<Channel>;

/// One holding granted: where it shows in a watch (name, slot) and its
/// token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Granted<'a> {
    name: &'a str,
    slot: u32,
    token: u64,
}

/// Plain leases, semaphore slots and groups taken and released, some of
/// them several times over; returns every holding granted.
async fn churn(c: &mut Client) -> Vec<(String, u32, u64)> {
    let mut granted = Vec::new();
    for round in 0..3 {
        // A plain lease, renewed, released, taken again.
        for _ in 0..2 {
            let (l, key) = acquire(c, acquire_req("m.plain", &format!("p{round}"), 30)).await;
            granted.push((l.name.clone(), 0, l.fencing_token));
            let r = renew(c, renew_req("m.plain", l.revision, &key)).await;
            c.release(release_req("m.plain", r.revision, &key))
                .await
                .unwrap();
        }
        // Two slots of a semaphore, released.
        for holder in ["s1", "s2"] {
            let (l, key) = acquire(
                c,
                AcquireRequest {
                    limit: 2,
                    ..acquire_req("m.sem", holder, 30)
                },
            )
            .await;
            granted.push((l.name.clone(), l.slot, l.fencing_token));
            c.release(tenure::proto::ReleaseRequest {
                slot: l.slot,
                ..release_req("m.sem", l.revision, &key)
            })
            .await
            .unwrap();
        }
        // A group, released.
        let g = c
            .acquire_group(AcquireGroupRequest {
                names: vec!["m.g1".into(), "m.g2".into()],
                holder: format!("g{round}"),
                ttl: Some(secs(30)),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        for l in &g.leases {
            granted.push((l.name.clone(), 0, l.fencing_token));
        }
        c.release_group(ReleaseGroupRequest {
            members: g
                .leases
                .iter()
                .map(|l| tenure::proto::GroupMember {
                    name: l.name.clone(),
                    expected_revision: l.revision,
                })
                .collect(),
            lease_key: g.lease_key,
        })
        .await
        .unwrap();
    }
    granted
}

/// Reads `w` up to the sentinel's ACQUIRED; checks that every holding
/// of `granted` was delivered (ACQUIRED, then an end or a MISSED naming
/// it) or falls in the range of a MISSED for its name; returns how many
/// MISSED events came.
async fn judge(
    w: &mut tonic::Streaming<tenure::proto::WatchLeaseResponse>,
    granted: &[(String, u32, u64)],
) -> usize {
    let mut events: Vec<LeaseEvent> = Vec::new();
    loop {
        let e = next_event(w).await;
        if e.name == "m.end" && e.r#type == EventType::Acquired as i32 {
            break;
        }
        events.push(e);
    }
    let is = |e: &LeaseEvent, t: EventType| e.r#type == t as i32;
    let missed: Vec<&LeaseEvent> = events.iter().filter(|e| is(e, EventType::Missed)).collect();
    // Per (name, slot): which tokens were acquired, which ended.
    let mut acquired: HashMap<Granted, usize> = HashMap::new();
    let mut ended: HashMap<Granted, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let g = Granted {
            name: &e.name,
            slot: e.slot,
            token: e.fencing_token,
        };
        if is(e, EventType::Acquired) {
            acquired.insert(g, i);
        } else if is(e, EventType::Released)
            || is(e, EventType::Expired)
            || is(e, EventType::Revoked)
            || (is(e, EventType::Missed) && e.fencing_token != 0)
        {
            ended.insert(g, i);
        }
    }
    for (name, slot, token) in granted {
        let g = Granted {
            name,
            slot: *slot,
            token: *token,
        };
        let covered = missed.iter().any(|m| {
            &m.name == name
                && m.slot == *slot
                && m.missed_after_revision < *token
                && *token < m.revision
        });
        match (acquired.get(&g), ended.get(&g)) {
            (Some(a), Some(e)) => assert!(a < e, "{g:?} ended before it began"),
            (Some(_), None) => {
                panic!("{g:?}: ACQUIRED delivered, its end never, no MISSED naming it")
            }
            (None, _) => assert!(
                covered,
                "{g:?}: granted, never delivered, and no MISSED covers it; MISSED: {missed:?}"
            ),
        }
    }
    missed.len()
}

/// A watcher far behind: holdings vanish from the stream before it reads
/// them, and every one is still accounted for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_behind_the_stream_reports_every_missed_holding() {
    let t = Tenure::start_with(|c| c.watcher_idle_timeout = Duration::ZERO).await;
    let mut a = t.client().await;
    let hold = tenure::WatcherHold::default();
    let (b_replica, mut b) = t.replica_held(&hold).await;
    let mut w = watch(&mut b, "m.>").await;
    next_of(&mut w, EventType::SnapshotComplete).await;
    hold.hold_after(t.last_sequence().await);

    let granted = churn(&mut a).await;
    acquire(&mut a, acquire_req("m.end", "sentinel", 30)).await;
    hold.release();
    let missed = judge(&mut w, &granted).await;
    assert!(
        missed > 0,
        "the held watcher reported nothing missed: the lag was not real"
    );
    b_replica.shutdown().await;
}

/// A watcher that keeps up: every holding delivered, nothing MISSED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_keeps_up_misses_nothing() {
    let t = Tenure::start().await;
    let mut a = t.client().await;
    let mut w = watch(&mut a, "m.>").await;
    next_of(&mut w, EventType::SnapshotComplete).await;
    let granted = churn(&mut a).await;
    acquire(&mut a, acquire_req("m.end", "sentinel", 30)).await;
    assert_eq!(
        judge(&mut w, &granted).await,
        0,
        "MISSED from a watch that kept up"
    );
}
