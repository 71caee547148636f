//! A bucket made with `--shards 3` on one nats-server: each name lives in the
//! shard [`tenure::shard_of`] names (its record is in that shard's stream),
//! replicas adopt the bucket's count and refuse a different one, and what
//! spans shards (listing, subtree watches and their resume, groups) works or
//! is refused with a reason.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{self, AcquireGroupRequest, EventType, ListLeasesRequest, WatchLeaseRequest};
use tenure::{shard_of, Config};
use tokio::net::TcpListener;
use tonic::transport::Channel;
use tonic::Code;

/// Shards of the buckets these tests make.
const SHARDS: u32 = 3;

/// Two names in each shard: `jobs.<i>` for the first `i`s that land there.
fn names_per_shard() -> BTreeMap<u32, Vec<String>> {
    let mut by_shard: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for i in 0.. {
        let name = format!("jobs.{i}");
        let names = by_shard.entry(shard_of(&name, SHARDS)).or_default();
        if names.len() < 2 {
            names.push(name);
        }
        if by_shard.len() == SHARDS as usize && by_shard.values().all(|n| n.len() == 2) {
            return by_shard;
        }
    }
    unreachable!()
}

/// The KV bucket of shard `i` of `bucket`.
fn bucket_of(bucket: &str, i: u32) -> String {
    match i {
        0 => bucket.to_string(),
        i => format!("{bucket}-shard{i}"),
    }
}

/// The stream of shard `i` of `bucket`.
fn stream_of(bucket: &str, i: u32) -> String {
    format!("KV_{}", bucket_of(bucket, i))
}

/// Tenure over a fresh 3-shard bucket.
async fn start() -> Tenure {
    Tenure::start_with(|c| c.shards = SHARDS).await
}

/// A replica over the same NATS with `shards` asked for.
async fn replica(t: &Tenure, shards: u32) -> Result<tenure::Running, tenure::StartError> {
    let config = Config {
        metrics_listen: None,
        shards,
        ..t.config.clone()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    tenure::start(&config, &t.nats.url(), listener).await
}

/// A client of `running`.
async fn client_of(running: &tenure::Running) -> LeaseServiceClient<Channel> {
    LeaseServiceClient::connect(format!("http://{}", running.addr()))
        .await
        .unwrap()
}

/// Every name's record is in its shard's stream and nowhere else; two
/// replicas (the second adopting the count) exclude each other per name and
/// tokens rise per name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_name_lives_in_its_shard_and_replicas_agree() {
    let t = start().await;
    let js = t.nats.jetstream().await;
    for i in 0..SHARDS {
        let mut stream = js
            .get_stream(stream_of(&t.config.bucket, i))
            .await
            .unwrap_or_else(|e| panic!("shard {i} stream: {e}"));
        let info = stream.info().await.unwrap();
        assert_eq!(
            info.config.description.as_deref(),
            Some(format!("Tenure leases: shard {i} of {SHARDS}; key layout 2").as_str())
        );
    }
    let adopted = replica(&t, 0)
        .await
        .expect("a replica with --shards 0 adopts 3");
    let mut a = t.client().await;
    let mut b = client_of(&adopted).await;
    for (shard, names) in names_per_shard() {
        for name in names {
            let (first, key) = acquire(&mut a, acquire_req(&name, "a", 30)).await;
            // The record is in the name's shard, not in the others.
            for i in 0..SHARDS {
                let stream = js.get_stream(stream_of(&t.config.bucket, i)).await.unwrap();
                let subject = format!(
                    "$KV.{}._tenure.q.{name}.lease.holder",
                    bucket_of(&t.config.bucket, i)
                );
                let found = stream.get_last_raw_message_by_subject(&subject).await;
                assert_eq!(found.is_ok(), i == shard, "{name} in shard {i}");
            }
            // The other replica routes it to the same shard: held.
            let refused = b.acquire(acquire_req(&name, "b", 30)).await.unwrap_err();
            assert_eq!(
                refused.code(),
                Code::FailedPrecondition,
                "{name}: {refused:?}"
            );
            assert_eq!(reason(&refused), "LEASE_HELD");
            let renewed = renew(&mut b, renew_req(&name, first.revision, &key)).await;
            assert_eq!(renewed.fencing_token, first.fencing_token);
            b.release(release_req(&name, renewed.revision, &key))
                .await
                .unwrap();
            let (second, _) = acquire(&mut b, acquire_req(&name, "b", 30)).await;
            assert!(second.fencing_token > first.fencing_token, "{name}");
        }
    }
    drop(adopted);
}

/// A replica asking for another count refuses to start and says why; so
/// does one asking for shards over a bucket made with one.
#[tokio::test]
async fn a_different_shard_count_is_refused() {
    let t = start().await;
    let err = replica(&t, 2).await.err().expect("--shards 2 is refused");
    let text = err.to_string();
    assert!(
        text.contains("--shards 2 disagrees") && text.contains("3 shard"),
        "{text}"
    );

    let one = Tenure::start().await;
    let config = Config {
        metrics_listen: None,
        shards: 3,
        ..one.config.clone()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = tenure::start(&config, &one.nats.url(), listener)
        .await
        .err()
        .expect("--shards 3 over a 1-shard bucket is refused");
    assert!(err.to_string().contains("made with 1 shard"), "{err}");
}

/// ListLeases pages through every shard in name order, each name once.
#[tokio::test]
async fn listing_spans_the_shards() {
    let t = start().await;
    let mut c = t.client().await;
    let names: BTreeSet<String> = names_per_shard().into_values().flatten().collect();
    for name in &names {
        acquire(&mut c, acquire_req(name, "h", 30)).await;
    }
    let mut listed = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .list_leases(ListLeasesRequest {
                prefix: "jobs.".into(),
                page_size: 4,
                page_token: token.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.leases.len() <= 4);
        listed.extend(page.leases.into_iter().map(|l| l.name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(listed, names.into_iter().collect::<Vec<_>>());
}

/// A `>` watch shows every shard's holdings, one SNAPSHOT_COMPLETE with a
/// position per shard, then live events tagged with their shard; resumed
/// from those positions it replays exactly what changed meanwhile; a single
/// start_revision is refused as history it cannot place.
#[tokio::test]
async fn subtree_watches_span_and_resume_per_shard() {
    let t = start().await;
    let mut c = t.client().await;
    let by_shard = names_per_shard();
    let first: Vec<&String> = by_shard.values().map(|n| &n[0]).collect();
    for name in &first {
        acquire(&mut c, acquire_req(name, "h", 30)).await;
    }
    let mut w = watch(&mut c, ">").await;
    let mut current = BTreeSet::new();
    let positions = loop {
        let e = next_event(&mut w).await;
        match EventType::try_from(e.r#type).unwrap() {
            EventType::Current => {
                assert_eq!(e.shard, shard_of(&e.name, SHARDS), "{e:?}");
                current.insert(e.name);
            }
            EventType::SnapshotComplete => break e.shard_revisions,
            other => panic!("unexpected {other:?} before SNAPSHOT_COMPLETE"),
        }
    };
    assert_eq!(current, first.iter().map(|n| n.to_string()).collect());
    assert_eq!(positions.len(), SHARDS as usize);
    // Live events from every shard, each with its shard.
    let second: Vec<&String> = by_shard.values().map(|n| &n[1]).collect();
    for name in &second {
        let (lease, _) = acquire(&mut c, acquire_req(name, "h", 30)).await;
        let e = next_of(&mut w, EventType::Acquired).await;
        assert_eq!((&e.name, e.revision), (*name, lease.revision));
        assert_eq!(e.shard, shard_of(name, SHARDS));
    }
    drop(w);
    // Resumed from the snapshot's positions: the three acquisitions again.
    let mut resumed = c
        .watch_lease(WatchLeaseRequest {
            name: ">".into(),
            shard_revisions: positions.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut replayed = BTreeSet::new();
    loop {
        let e = next_event(&mut resumed).await;
        match EventType::try_from(e.r#type).unwrap() {
            EventType::Acquired => {
                assert!(e.revision > positions[e.shard as usize], "{e:?}");
                replayed.insert(e.name);
            }
            EventType::SnapshotComplete => {
                assert_eq!(e.shard_revisions.len(), SHARDS as usize);
                break;
            }
            other => panic!("unexpected {other:?} in a replay"),
        }
    }
    assert_eq!(replayed, second.iter().map(|n| n.to_string()).collect());
    // One revision cannot say where each shard stood.
    let refused = c
        .watch_lease(WatchLeaseRequest {
            name: ">".into(),
            start_revision: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::OutOfRange);
    assert_eq!(reason(&refused), "WATCH_HISTORY_COMPACTED");
    let refused = c
        .watch_lease(WatchLeaseRequest {
            name: ">".into(),
            shard_revisions: vec![1, 1],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert_eq!(reason(&refused), "INVALID_REVISION");
    // A name's watch resumes with start_revision: it lives in one shard.
    let name = second[0];
    let mut one = c
        .watch_lease(WatchLeaseRequest {
            name: name.clone(),
            start_revision: positions[shard_of(name, SHARDS) as usize],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = next_event(&mut one).await;
    assert_eq!((e.r#type, &e.name), (EventType::Acquired as i32, name));
}

/// A group's members must share a shard: the refusal names two that do
/// not; a group within one shard is taken whole.
#[tokio::test]
async fn groups_stay_within_a_shard() {
    let t = start().await;
    let mut c = t.client().await;
    let by_shard = names_per_shard();
    let group = |names: Vec<String>| AcquireGroupRequest {
        names,
        holder: "g".into(),
        ttl: Some(secs(30)),
        ..Default::default()
    };
    let apart = vec![by_shard[&0][0].clone(), by_shard[&1][0].clone()];
    let refused = c.acquire_group(group(apart.clone())).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert_eq!(reason(&refused), "INVALID_ARGUMENT");
    assert!(
        refused.message().contains(&apart[0]) && refused.message().contains(&apart[1]),
        "{}",
        refused.message()
    );
    // Nothing was taken.
    for name in &apart {
        let got = c
            .get_lease(proto::GetLeaseRequest { name: name.clone() })
            .await;
        assert_eq!(got.unwrap_err().code(), Code::NotFound, "{name}");
    }
    let together = by_shard[&2].clone();
    let held = c
        .acquire_group(group(together.clone()))
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = held.leases.iter().map(|l| l.name.clone()).collect();
    assert_eq!(names, together);
}
