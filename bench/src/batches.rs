//! Workload 11 (issue 25 §1): what a JetStream atomic batch costs beside
//! the conditional put it would replace, on one node (R1, file storage)
//! and on a 3-node cluster (R3).
//!
//! Fair waiting could name a queue's exact guard key in every ticket's
//! write if a batch were cheap: a ticket and its guard in one atomic batch.
//! On one node a batch costs milliseconds against a tenth of one for a put
//! (design section 16), because nats-server stages an R1 file stream's
//! batch in a store of its own per batch; an R3 batch is one replicated
//! proposal, so the ratio differs once replication is paid either way
//! (`docs/scaling.md` has the figures).
//! Each setup measures, on a raw KV bucket with atomic publish on:
//!
//! - **serial latency** (one task, back to back): a conditional put of one
//!   key, and a batch of two conditional writes of two keys (a ticket and
//!   its guard), sent as Tenure sends batches (the first and the last
//!   message as requests, the commit on the last);
//! - **throughput** with `c` tasks, each on its own two keys, for `dur`.
//!
//! All figures are raw NATS (the table's raw column), with a batch/put row
//! per figure. On the cluster the client is connected to the stream's
//! leader, so neither shape pays an extra hop.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv, stream};
use async_nats::HeaderMap;

use crate::procs::{Launcher, R};
use crate::report::Report;
use crate::systems::Kind;
use crate::workloads::{join, throughput, Throughput};

/// Serial operations per shape and run.
const SERIAL_OPS: usize = 300;

/// What the workload needs from the command line.
pub struct Opts<'a> {
    /// nats-server.
    pub nats_bin: &'a std::path::Path,
    /// Where stores and logs go.
    pub dir: &'a std::path::Path,
    /// Runs per figure.
    pub runs: usize,
    /// Length of each timed throughput run.
    pub dur: Duration,
    /// Tasks of the throughput runs.
    pub c: usize,
    /// `sync_interval: always`.
    pub sync_always: bool,
}

/// Runs workload 11 and adds its rows to `rep`.
pub async fn run(o: &Opts<'_>, launcher: &Launcher, rep: &mut Report) -> R<()> {
    let single = launcher
        .nats(o.nats_bin, &o.dir.join("batch-single"), o.sync_always)
        .await?;
    let result = async {
        let client = single.connect_nats().await?;
        measure(o, rep, client, "1 node, R1", 1).await
    }
    .await;
    single.stop().await;
    result?;

    let cluster = launcher
        .nats_cluster(o.nats_bin, &o.dir.join("batch-cluster"), 3, o.sync_always)
        .await?;
    let result = async {
        // Any node, to create the bucket and find its leader; then a client
        // of the leader's node alone.
        let any = cluster.connect().await?;
        let bucket = open(&any, 3).await?;
        let leader = jetstream::new(any)
            .get_stream(format!("KV_{bucket}"))
            .await
            .map_err(|e| format!("stream of {bucket}: {e}"))?
            .info()
            .await
            .map_err(|e| format!("stream info of {bucket}: {e}"))?
            .cluster
            .as_ref()
            .and_then(|c| c.leader.clone())
            .ok_or("the R3 bucket has no leader")?;
        let i = cluster
            .names
            .iter()
            .position(|n| *n == leader)
            .ok_or_else(|| format!("leader {leader} is not a node of the cluster"))?;
        let client = cluster.nodes[i].connect_nats().await?;
        figures(o, rep, &client, &bucket, "3 nodes, R3").await
    }
    .await;
    cluster.stop().await;
    result
}

/// Creates the bucket on `client`'s server (replicas `r`) and measures it.
async fn measure(
    o: &Opts<'_>,
    rep: &mut Report,
    client: async_nats::Client,
    label: &str,
    r: usize,
) -> R<()> {
    let bucket = open(&client, r).await?;
    figures(o, rep, &client, &bucket, label).await
}

/// Creates a raw KV bucket `batch-r<r>` with history 1 and atomic publish
/// on, as Tenure's bucket is; returns its name.
async fn open(client: &async_nats::Client, r: usize) -> R<String> {
    let bucket = format!("batch-r{r}");
    let js = jetstream::new(client.clone());
    js.create_key_value(kv::Config {
        bucket: bucket.clone(),
        history: 1,
        storage: stream::StorageType::File,
        num_replicas: r,
        ..Default::default()
    })
    .await
    .map_err(|e| format!("creating bucket {bucket}: {e}"))?;
    let mut s = js
        .get_stream(format!("KV_{bucket}"))
        .await
        .map_err(|e| format!("stream of {bucket}: {e}"))?;
    let config = s
        .info()
        .await
        .map_err(|e| format!("stream info of {bucket}: {e}"))?
        .config
        .clone();
    let updated = js
        .update_stream(stream::Config {
            allow_atomic_publish: true,
            ..config
        })
        .await
        .map_err(|e| format!("enabling atomic publish on {bucket}: {e}"))?;
    if !updated.config.allow_atomic_publish {
        return Err(format!("nats-server kept atomic publish off on {bucket}"));
    }
    Ok(bucket)
}

/// The serial and throughput figures of both shapes on `bucket`, `runs`
/// times, the shapes alternating within each run.
async fn figures(
    o: &Opts<'_>,
    rep: &mut Report,
    client: &async_nats::Client,
    bucket: &str,
    label: &str,
) -> R<()> {
    let w = format!("11. atomic batch vs put, {label}");
    for run in 0..o.runs {
        let mut serial = Vec::new();
        let mut loaded = Vec::new();
        for shape in [Shape::Put, Shape::Batch] {
            let n = shape.name();
            let keys = Keys::new(bucket, &format!("{n}-serial-{run}"), 0);
            let t = timed(client, shape, keys, Until::Count(SERIAL_OPS)).await?;
            serial.push(t);
            let t = load(
                client,
                bucket,
                shape,
                &format!("{n}-load-{run}"),
                o.c,
                o.dur,
            )
            .await?;
            loaded.push(t);
        }
        for (shape, (s, l)) in [Shape::Put, Shape::Batch]
            .iter()
            .zip(serial.iter().zip(&loaded))
        {
            let n = shape.name();
            rep.add(&w, &format!("{n} serial p50 ms"), Kind::Raw, s.p50);
            rep.add(&w, &format!("{n} serial p99 ms"), Kind::Raw, s.p99);
            rep.add(
                &w,
                &format!("{}/s c={}", shape.plural(), o.c),
                Kind::Raw,
                l.per_s,
            );
            rep.add(&w, &format!("{n} p50 ms c={}", o.c), Kind::Raw, l.p50);
        }
        rep.add(
            &w,
            "batch/put serial p50",
            Kind::Raw,
            serial[1].p50 / serial[0].p50,
        );
        rep.add(
            &w,
            &format!("batch/put throughput c={}", o.c),
            Kind::Raw,
            loaded[1].per_s / loaded[0].per_s,
        );
    }
    Ok(())
}

/// The two write shapes compared.
#[derive(Clone, Copy)]
enum Shape {
    /// One conditional publish of one key.
    Put,
    /// An atomic batch of two conditional writes of two keys.
    Batch,
}

impl Shape {
    /// Row label.
    fn name(self) -> &'static str {
        match self {
            Shape::Put => "put",
            Shape::Batch => "batch",
        }
    }

    /// Row label of a rate.
    fn plural(self) -> &'static str {
        match self {
            Shape::Put => "puts",
            Shape::Batch => "batches",
        }
    }
}

/// One task's two keys and the last revision of each.
struct Keys {
    /// The KV subjects of the two keys.
    subjects: [String; 2],
    /// Their last revisions (0: none yet).
    last: [u64; 2],
    /// The task's batch ids: `<tag>.<n>`.
    tag: String,
    /// Batches sent.
    sent: u64,
}

impl Keys {
    /// Task `i`'s keys in run `tag`.
    fn new(bucket: &str, tag: &str, i: usize) -> Keys {
        Keys {
            subjects: [
                format!("$KV.{bucket}.q.{tag}.{i}.ticket"),
                format!("$KV.{bucket}.q.{tag}.{i}.guard"),
            ],
            last: [0, 0],
            tag: format!("{tag}-{i}"),
            sent: 0,
        }
    }
}

/// How long a task runs.
#[derive(Clone, Copy)]
enum Until {
    /// This many operations.
    Count(usize),
    /// Until this instant.
    Deadline(Instant),
}

/// `c` tasks, each on its own keys, writing `shape` back to back for `dur`.
async fn load(
    client: &async_nats::Client,
    bucket: &str,
    shape: Shape,
    tag: &str,
    c: usize,
    dur: Duration,
) -> R<Throughput> {
    let start = Instant::now();
    let until = Until::Deadline(start + dur);
    let tasks = (0..c)
        .map(|i| {
            let client = client.clone();
            let keys = Keys::new(bucket, tag, i);
            tokio::spawn(async move { latencies(&client, shape, keys, until).await })
        })
        .collect();
    let lat: Vec<Duration> = join(tasks).await?.into_iter().flatten().collect();
    Ok(throughput(lat, start.elapsed()))
}

/// One task writing `shape` until `until`: its figure.
async fn timed(
    client: &async_nats::Client,
    shape: Shape,
    keys: Keys,
    until: Until,
) -> R<Throughput> {
    let start = Instant::now();
    let lat = latencies(client, shape, keys, until).await?;
    Ok(throughput(lat, start.elapsed()))
}

/// Writes `shape` back to back until `until`; the latency of each write.
async fn latencies(
    client: &async_nats::Client,
    shape: Shape,
    mut keys: Keys,
    until: Until,
) -> R<Vec<Duration>> {
    let mut lat = Vec::new();
    loop {
        match until {
            Until::Count(n) if lat.len() >= n => break,
            Until::Deadline(d) if Instant::now() >= d => break,
            _ => {}
        }
        let t0 = Instant::now();
        match shape {
            Shape::Put => {
                let seq = write(client, &keys.subjects[0], keys.last[0], None).await?;
                keys.last[0] = seq;
            }
            Shape::Batch => {
                keys.sent += 1;
                let id = format!("{}.{}", keys.tag, keys.sent);
                write(
                    client,
                    &keys.subjects[0],
                    keys.last[0],
                    Some((&id, 1, false)),
                )
                .await?;
                let seq = write(
                    client,
                    &keys.subjects[1],
                    keys.last[1],
                    Some((&id, 2, true)),
                )
                .await?;
                // A batch's messages are stored consecutively.
                keys.last = [seq - 1, seq];
            }
        }
        lat.push(t0.elapsed());
    }
    Ok(lat)
}

/// One conditional message on `subject` over revision `expected`, alone or
/// as message `n` of batch `id` (`commit`: the last); a request, answered
/// with the stored sequence (0 for a batch message before the commit).
async fn write(
    client: &async_nats::Client,
    subject: &str,
    expected: u64,
    batch: Option<(&str, u32, bool)>,
) -> R<u64> {
    let mut headers = HeaderMap::new();
    headers.insert(
        "Nats-Expected-Last-Subject-Sequence",
        expected.to_string().as_str(),
    );
    if let Some((id, n, commit)) = batch {
        headers.insert("Nats-Batch-Id", id);
        headers.insert("Nats-Batch-Sequence", n.to_string().as_str());
        if commit {
            headers.insert("Nats-Batch-Commit", "1");
        }
    }
    let reply = client
        .request_with_headers(subject.to_string(), headers, "ticket".into())
        .await
        .map_err(|e| format!("{subject}: {e}"))?;
    if reply.payload.is_empty() {
        return Ok(0);
    }
    let ack: serde_json::Value = serde_json::from_slice(&reply.payload)
        .map_err(|e| format!("{subject}: unreadable reply: {e}"))?;
    if let Some(err) = ack.get("error") {
        return Err(format!("{subject}: {err}"));
    }
    Ok(ack.get("seq").and_then(|s| s.as_u64()).unwrap_or(0))
}
