//! Single-client latency of Acquire, Renew and Release through Tenure, next to
//! the same JetStream operations made directly with async-nats (the floor),
//! measured in the same run, alternating, 3 rounds each.
//!
//! Run: `cargo bench --bench latency` (add `-- --quick` for a smoke run).
//! Needs `.tools/bin/nats-server` (scripts/tools.sh).

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, message::PublishMessage};
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{AcquireRequest, ReleaseRequest, RenewRequest};
use tenure::Config;
use tenure::{find_binary, NatsProcess};

/// Latencies of one operation in one round.
type Samples = Vec<Duration>;

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, ops) = if quick { (1, 50) } else { (3, 2000) };
    let dir = tempfile::tempdir().unwrap();
    let bin = find_binary(None).expect("nats-server: run scripts/tools.sh");
    let mut nats = NatsProcess::spawn(&bin, dir.path(), None).await.unwrap();
    let config = Config::for_nats(&nats.url());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = tenure::start(&config, &nats.url(), listener).await.unwrap();
    let mut client = LeaseServiceClient::connect(format!("http://{}", running.addr()))
        .await
        .unwrap();
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let stream = js.get_stream("KV_tenure").await.unwrap();

    let mut results: Vec<[Samples; 6]> = Vec::new();
    for round in 0..rounds {
        let mut s: [Samples; 6] = Default::default();
        // raw: read last + CAS create, CAS renew, CAS tombstone.
        for i in 0..ops {
            let subject = format!("$KV.tenure.raw.r{round}.k{i}");
            let t = Instant::now();
            let _ = stream.get_last_raw_message_by_subject(&subject).await;
            let rev = publish(
                &js,
                &subject,
                PublishMessage::build()
                    .payload("{}".into())
                    .expected_last_subject_sequence(0),
            )
            .await;
            s[0].push(t.elapsed());
            let t = Instant::now();
            let rev = publish(
                &js,
                &subject,
                PublishMessage::build()
                    .payload("{}".into())
                    .expected_last_subject_sequence(rev),
            )
            .await;
            s[1].push(t.elapsed());
            let t = Instant::now();
            publish(
                &js,
                &subject,
                PublishMessage::build()
                    .header("KV-Operation", "DEL")
                    .expected_last_subject_sequence(rev),
            )
            .await;
            s[2].push(t.elapsed());
        }
        // tenure: the same through gRPC.
        for i in 0..ops {
            let name = format!("tenure.r{round}.k{i}");
            let t = Instant::now();
            let acq = client
                .acquire(AcquireRequest {
                    name: name.clone(),
                    holder: "bench".into(),
                    ttl: Some(prost_types::Duration {
                        seconds: 30,
                        nanos: 0,
                    }),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            s[3].push(t.elapsed());
            let lease = acq.lease.unwrap();
            let t = Instant::now();
            let renewed = client
                .renew(RenewRequest {
                    name: name.clone(),
                    expected_revision: lease.revision,
                    lease_key: acq.lease_key.clone(),
                    ttl: None,
                    slot: 0,
                })
                .await
                .unwrap()
                .into_inner()
                .lease
                .unwrap();
            s[4].push(t.elapsed());
            let t = Instant::now();
            client
                .release(ReleaseRequest {
                    name,
                    expected_revision: renewed.revision,
                    lease_key: acq.lease_key,
                    slot: 0,
                })
                .await
                .unwrap();
            s[5].push(t.elapsed());
        }
        results.push(s);
    }

    println!("single-client sequential latency, {ops} ops x {rounds} round(s); median over rounds; nats-server file store, default sync");
    println!("| op      | raw p50 (ms) | tenure p50 (ms) | p50 ratio | raw p99 (ms) | tenure p99 (ms) | p99 ratio |");
    println!("|---------|-------------:|----------------:|----------:|-------------:|----------------:|----------:|");
    for (k, op) in ["acquire", "renew", "release"].iter().enumerate() {
        let raw50 = median(results.iter().map(|r| pct(&r[k], 50.0)));
        let ten50 = median(results.iter().map(|r| pct(&r[k + 3], 50.0)));
        let raw99 = median(results.iter().map(|r| pct(&r[k], 99.0)));
        let ten99 = median(results.iter().map(|r| pct(&r[k + 3], 99.0)));
        println!(
            "| {op:<7} | {raw50:>12.3} | {ten50:>15.3} | {:>8.2}x | {raw99:>12.3} | {ten99:>15.3} | {:>8.2}x |",
            ten50 / raw50,
            ten99 / raw99
        );
    }
    running.shutdown().await;
    nats.stop().await;
}

/// Publishes and returns the new revision.
async fn publish(js: &jetstream::Context, subject: &str, msg: PublishMessage) -> u64 {
    let msg = msg.ttl(Duration::from_secs(30));
    js.send_publish(subject.to_string(), msg)
        .await
        .unwrap()
        .await
        .unwrap()
        .sequence
}

/// The p-th percentile in milliseconds.
fn pct(samples: &Samples, p: f64) -> f64 {
    let mut v: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    v.sort_by(f64::total_cmp);
    v[((p / 100.0) * (v.len() - 1) as f64).round() as usize]
}

/// The median of some numbers.
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
