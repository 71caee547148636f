//! Sharded buckets on a 3-node JetStream cluster on loopback.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use common::NatsCluster;

/// The leader of `stream`, awaited (a new stream elects one at once).
async fn await_leader(js: &jetstream::Context, cluster: &NatsCluster, stream: &str) -> String {
    common::within("a stream leader", async {
        loop {
            if let Some(l) = cluster.leader(js, stream).await {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Where nats-server places the leaders of 3 new KV buckets' streams, over
/// `trials` trials, for `replicas`; returns "n1,n2,n1"-style rows counted.
async fn survey(cluster: &NatsCluster, replicas: usize, trials: usize) -> BTreeMap<String, usize> {
    let js = cluster.jetstream().await;
    let mut rows = BTreeMap::new();
    for t in 0..trials {
        let mut leaders = Vec::new();
        for k in 0..3 {
            let bucket = format!("survey-r{replicas}-t{t}-{k}");
            js.create_key_value(kv::Config {
                bucket: bucket.clone(),
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .expect("create bucket");
            leaders.push(await_leader(&js, cluster, &format!("KV_{bucket}")).await);
        }
        for k in 0..3 {
            js.delete_key_value(format!("survey-r{replicas}-t{t}-{k}"))
                .await
                .expect("delete bucket");
        }
        let mut distinct = leaders.clone();
        distinct.sort();
        distinct.dedup();
        println!(
            "R{replicas} trial {t}: leaders {leaders:?} ({} distinct)",
            distinct.len()
        );
        *rows
            .entry(format!("{} distinct", distinct.len()))
            .or_default() += 1;
    }
    rows
}

/// Throw-away survey (step 2 of the sharding work): where nats-server puts
/// new streams' leaders, and which client request moves one. Run with
/// `cargo test --test shards_cluster survey -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a survey that prints numbers, not a check"]
async fn survey_leader_placement() {
    for (label, extra) in [
        ("default", ""),
        ("max_file_store: 1G", "max_file_store: 1G"),
    ] {
        let cluster = NatsCluster::start_with(3, extra).await;
        for replicas in [1, 3] {
            let rows = survey(&cluster, replicas, 10).await;
            println!("[{label}] R{replicas}: {rows:?}");
        }
        drop(cluster);
    }

    let cluster = NatsCluster::start(3).await;
    let client = cluster.client().await;
    let js = jetstream::new(client.clone());

    // Stream create with a preferred leader in its placement.
    let reply = client
        .request(
            "$JS.API.STREAM.CREATE.PREF",
            r#"{"name":"PREF","subjects":["pref.>"],"num_replicas":3,"placement":{"preferred":"n2"}}"#.into(),
        )
        .await
        .unwrap();
    println!(
        "create with placement.preferred: {}",
        String::from_utf8_lossy(&reply.payload)
    );

    // R1 pinned by a placement tag.
    let reply = client
        .request(
            "$JS.API.STREAM.CREATE.TAGGED",
            r#"{"name":"TAGGED","subjects":["tagged.>"],"num_replicas":1,"placement":{"tags":["node:n3"]}}"#.into(),
        )
        .await
        .unwrap();
    println!(
        "R1 create with placement.tags [node:n3]: leader {:?}; reply {}",
        cluster.leader(&js, "TAGGED").await,
        String::from_utf8_lossy(&reply.payload)
    );

    // Ten times: three R3 buckets, then move leader k to node k by a
    // stepdown naming it; count the moves and whether each took.
    let (mut moved, mut took) = (0, 0);
    for t in 0..10 {
        for k in 0..3 {
            js.create_key_value(kv::Config {
                bucket: format!("move-{t}-{k}"),
                num_replicas: 3,
                ..Default::default()
            })
            .await
            .unwrap();
        }
        let mut after_all = Vec::new();
        for k in 0..3 {
            let stream = format!("KV_move-{t}-{k}");
            let before = await_leader(&js, &cluster, &stream).await;
            let want = cluster.name(k).to_string();
            let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}");
            let body = format!(r#"{{"placement":{{"preferred":"{want}"}}}}"#);
            let reply = client
                .request(subject.clone(), body.clone().into())
                .await
                .unwrap();
            let reply = String::from_utf8_lossy(&reply.payload).to_string();
            if t == 0 {
                println!("{stream}: leader {before}; {subject} {body} -> {reply}");
            }
            if before != want {
                moved += 1;
                assert!(reply.contains(r#""success":true"#), "{reply}");
            } else {
                assert!(reply.contains("is already leader"), "{reply}");
            }
            let after = common::within("a leader after the stepdown", async {
                loop {
                    if let Some(l) = cluster.leader(&js, &stream).await {
                        if l != before || before == want {
                            return l;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
            if before != want && after == want {
                took += 1;
            }
            after_all.push(after);
        }
        println!("balance trial {t}: leaders after {after_all:?}");
        for k in 0..3 {
            js.delete_key_value(format!("move-{t}-{k}")).await.unwrap();
        }
    }
    println!("stepdowns sent {moved}, leader became the preferred node {took}");
}
