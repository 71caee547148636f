//! Workload 10 (issue 14): does spreading names over several streams
//! (shards) raise throughput on a 3-node JetStream cluster?
//!
//! One stream is one leader, one serialized write path: every conditional
//! write to a bucket goes through the node that leads its stream. The
//! workload runs the same operations over one stream and over three:
//!
//! - **raw NATS KV**: the conditional writes Tenure makes (see `systems`),
//!   into one bucket, or spread over three buckets by the name's FNV-1a
//!   hash (Tenure's own name-to-shard mapping). With replicas 1 and 3. The
//!   three streams' leaders are moved to three different nodes (a leader
//!   step-down naming the preferred node) so that "3 streams" means 3
//!   leaders; the leaders each figure ran with are printed.
//! - **Tenure** with `--replicas 3`, `--shards 1` and `--shards 3`, one
//!   replica each. Where the shard leaders are once Tenure serves is
//!   recorded (Tenure spreads them at start); if two still share a node
//!   they are moved to three nodes like the raw streams'.
//!
//! Each is measured at `c` clients: acquire+release cycles (task `i`
//! cycles over its own 16 names, so `16 c` distinct names spread over the
//! shards) and renewals (one lease per task). As a reference, one raw
//! stream on a single node (file storage) runs first, alone.
//!
//! Besides rate and latency, each figure counts the CPU time of the
//! servers per 1,000 operations (`/proc/<pid>/stat` over the timed phase):
//! all processes together, the busiest nats-server node, and Tenure's own.
//! On a machine whose nodes share cores, the total says how many operations
//! the cores can carry at all, whatever the number of streams.
//!
//! Writes a replicated stream refuses with error 10164 although nobody
//! else wrote the name are retried and counted (see `again!`).
//!
//! Every figure is taken `runs` times, the systems alternating within each
//! run; the table has one row per configuration and the ratio of 3
//! streams to 1 per run. On the single node, after its figures, the memory
//! the shared watcher's mirror costs a Tenure replica per live lease.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;

use tenure::proto::EventType;

use crate::procs::{rss_bytes, Cluster, Launcher, R};
use crate::report::Report;
use crate::systems::{Kind, Raw, Session, Sys, Tenure};
use crate::workloads::{join, throughput, CpuMeter, Throughput};

/// TTL of the workload's holdings (none expires during a run).
const TTL_S: u64 = 60;

/// Evaluates `$call` (an awaited write) again, up to 20 times, backing
/// off 1, 2, 3... ms, while JetStream refuses it with error 10164 (the
/// "wrong last sequence" of a replicated stream), adding the refusals to
/// `$refused`. Nothing else writes the workload's names, so such a refusal
/// is not a race lost to another writer; it shows up only on replicated
/// streams under load. A client retries it like any conflict (an acquire
/// reads again first).
macro_rules! again {
    ($refused:expr, $call:expr) => {{
        let mut tries = 0;
        loop {
            match $call {
                Err(e) if e.contains("10164") && tries < 20 => {
                    tries += 1;
                    $refused += 1;
                    tokio::time::sleep(Duration::from_millis(tries)).await;
                }
                other => break other,
            }
        }
    }};
}

/// The row counting writes a replicated stream refused although their
/// expected revision was right (see `again!`).
const REFUSED: &str = "writes refused with 10164, retried";

/// Names each acquire+release task cycles over.
const NAMES_PER_TASK: usize = 16;

/// The shard of `name` among `n`: Tenure's own mapping (FNV-1a 64 of the
/// name's bytes, mod `n`), so raw spreads names over its streams exactly
/// as Tenure does.
pub fn shard_of(name: &str, n: usize) -> usize {
    tenure::shard_of(name, n as u32) as usize
}

/// One system measured in the workload: its column (raw or tenure), the
/// row label of its configuration, and where each name goes.
struct Setup {
    /// The table column.
    kind: Kind,
    /// Configuration, e.g. `3 nodes, R3, 3 streams`.
    label: String,
    /// Raw: one client per stream, picked by [`shard_of`]; Tenure: one
    /// client (the server routes names to shards).
    streams: Vec<Arc<Sys>>,
    /// The streams' names, for leader look-ups.
    stream_names: Vec<String>,
    /// Shard count (1 or 3) for the 3-vs-1 ratio.
    shards: usize,
    /// Replicas of each stream.
    replicas: usize,
    /// The server processes whose CPU the figures count: every nats-server
    /// node, then (Tenure) the tenure process.
    pids: Vec<u32>,
}

impl Setup {
    /// The client for `name`.
    fn pick(&self, name: &str) -> &Arc<Sys> {
        &self.streams[shard_of(name, self.streams.len())]
    }
}

/// What the workload needs from the command line.
pub struct Opts<'a> {
    /// nats-server.
    pub nats_bin: &'a Path,
    /// tenure.
    pub tenure_bin: &'a Path,
    /// Where stores and logs go.
    pub dir: &'a Path,
    /// Runs per figure.
    pub runs: usize,
    /// Length of each timed run.
    pub dur: Duration,
    /// Clients.
    pub c: usize,
    /// Also measure replicas 1 on the cluster.
    pub with_r1: bool,
    /// `sync_interval: always`.
    pub sync_always: bool,
    /// Live leases for the mirror's memory figure.
    pub mirror_leases: usize,
}

/// Runs workload 10 and adds its rows to `rep`.
pub async fn run(o: &Opts<'_>, launcher: &Launcher, rep: &mut Report) -> R<()> {
    // The reference: one stream on one node, alone on the machine.
    let single = launcher
        .nats(o.nats_bin, &o.dir.join("single"), o.sync_always)
        .await?;
    let url = format!("nats://127.0.0.1:{}", single.port);
    let result = async {
        let client = single.connect_nats().await?;
        let raw = Raw::open_on(client, "one", true, 1, None).await?;
        let setup = Setup {
            kind: Kind::Raw,
            label: "1 node, R1, 1 stream".into(),
            stream_names: vec![raw.stream_name()],
            streams: vec![Arc::new(Sys::Raw(raw))],
            shards: 1,
            replicas: 1,
            pids: vec![single.pid()],
        };
        measure(o, rep, &[setup], None).await?;
        mirror_cost(o, launcher, &url, rep).await
    }
    .await;
    single.stop().await;
    result?;

    let cluster = launcher
        .nats_cluster(o.nats_bin, &o.dir.join("cluster"), 3, o.sync_always)
        .await?;
    let mut tenures = Vec::new();
    let result = on_cluster(o, launcher, rep, &cluster, &mut tenures).await;
    for t in tenures {
        t.stop().await;
    }
    cluster.stop().await;
    result
}

/// What the shared watcher's mirror costs a replica per live lease: a
/// Tenure replica with its watcher always on (`--watcher-idle-timeout 0`),
/// its RSS once the (empty) bucket is loaded and again after `n` live
/// leases were written straight into the bucket and the mirror has applied
/// them (an exact-name watch's snapshot waits for that). Adds the RSS
/// growth per lease, in bytes, and the RSS with `n` leases, in MiB.
async fn mirror_cost(o: &Opts<'_>, launcher: &Launcher, url: &str, rep: &mut Report) -> R<()> {
    let n = o.mirror_leases;
    let mut server = launcher
        .tenure_with(
            o.tenure_bin,
            o.dir,
            url,
            "tenure-mirror",
            &[
                "--bucket".into(),
                "mirror".into(),
                "--watcher-idle-timeout".into(),
                "0s".into(),
            ],
        )
        .await?;
    let pid = server.pid();
    let result = async {
        let t = Tenure::connect(&format!("127.0.0.1:{}", server.port), 1).await?;
        t.ready().await?;
        caught_up(&t).await?;
        let before = rss_bytes(pid);
        let bg = Raw::open(url, "mirror", false).await?;
        for (chunk, start) in (0..n).step_by(10_000).enumerate() {
            bg.background(&format!("m.c{chunk}"), 10_000.min(n - start), 600)
                .await?;
        }
        caught_up(&t).await?;
        let after = rss_bytes(pid);
        let per = after.saturating_sub(before) as f64 / n.max(1) as f64;
        let w = format!("10. shards: mirror memory, {n} live leases, 1 replica");
        rep.add(&w, "RSS growth bytes/lease", Kind::Tenure, per);
        rep.add(
            &w,
            "tenure RSS MiB",
            Kind::Tenure,
            after as f64 / 1_048_576.0,
        );
        eprintln!(
            "{w}: RSS {:.1} -> {:.1} MiB, {per:.0} bytes per live lease",
            before as f64 / 1_048_576.0,
            after as f64 / 1_048_576.0
        );
        Ok(())
    }
    .await;
    server.check_alive()?;
    server.stop().await;
    result
}

/// Waits until the replica's mirror has applied every write made so far:
/// an exact-name watch of an unused name, whose snapshot is served once
/// the mirror reaches the bucket's last revision.
async fn caught_up(t: &Tenure) -> R<()> {
    let mut stream = t
        .client()
        .watch_lease(tenure::proto::WatchLeaseRequest {
            name: "bench.mirror.none".into(),
            ..Default::default()
        })
        .await
        .map_err(|s| format!("WatchLease: {:?} {}", s.code(), s.message()))?
        .into_inner();
    loop {
        match stream.message().await {
            Ok(Some(m)) => {
                if m.event.map_or(0, |e| e.r#type) == EventType::SnapshotComplete as i32 {
                    return Ok(());
                }
            }
            Ok(None) => return Err("watch ended during its snapshot".into()),
            Err(s) => return Err(format!("watch: {:?} {}", s.code(), s.message())),
        }
    }
}

/// The cluster part: raw 1 vs 3 streams (R1 optionally, R3), Tenure
/// `--shards 1` vs `--shards 3`; `tenures` collects the Tenure processes
/// for the caller to stop.
async fn on_cluster(
    o: &Opts<'_>,
    launcher: &Launcher,
    rep: &mut Report,
    cluster: &Cluster,
    tenures: &mut Vec<crate::procs::Server>,
) -> R<()> {
    let urls = cluster.urls();
    let client = cluster.connect().await?;
    let js = jetstream::new(client.clone());
    let node_pids: Vec<u32> = cluster.nodes.iter().map(|n| n.pid()).collect();
    let mut setups = Vec::new();
    let replicas: &[usize] = if o.with_r1 { &[1, 3] } else { &[3] };
    for &r in replicas {
        for shards in [1usize, 3] {
            let mut streams = Vec::new();
            let mut names = Vec::new();
            for i in 0..shards {
                let bucket = format!("raw-r{r}-s{shards}-{i}");
                // R1: stream i lives on node i (placement tag); R3: its
                // leader is moved below.
                let tag =
                    (r == 1).then(|| format!("node:{}", cluster.names[i % cluster.names.len()]));
                let raw = Raw::open_on(client.clone(), &bucket, true, r, tag.as_deref()).await?;
                names.push(raw.stream_name());
                streams.push(Arc::new(Sys::Raw(raw)));
            }
            if r > 1 && shards > 1 {
                for (i, s) in names.iter().enumerate() {
                    place_leader(&client, &js, s, &cluster.names[i % cluster.names.len()]).await?;
                }
            }
            setups.push(Setup {
                kind: Kind::Raw,
                label: format!("3 nodes, R{r}, {shards} stream{}", plural(shards)),
                streams,
                stream_names: names,
                shards,
                replicas: r,
                pids: node_pids.clone(),
            });
        }
    }

    let help = std::process::Command::new(o.tenure_bin)
        .args(["serve", "--help"])
        .output()
        .map_err(|e| format!("{}: {e}", o.tenure_bin.display()))?;
    if String::from_utf8_lossy(&help.stdout).contains("--shards") {
        for shards in [1usize, 3] {
            let bucket = format!("tenure-s{shards}");
            let server = launcher
                .tenure_with(
                    o.tenure_bin,
                    o.dir,
                    &urls,
                    &format!("tenure-s{shards}"),
                    &[
                        "--bucket".into(),
                        bucket.clone(),
                        "--replicas".into(),
                        "3".into(),
                        "--shards".into(),
                        shards.to_string(),
                    ],
                )
                .await?;
            let addr = format!("127.0.0.1:{}", server.port);
            let mut pids = node_pids.clone();
            pids.push(server.pid());
            tenures.push(server);
            let t = Tenure::connect(&addr, 4).await?;
            t.ready().await?;
            let bg = Raw::open_on(client.clone(), &bucket, false, 3, None).await?;
            let names: Vec<String> = (0..shards)
                .map(|i| match i {
                    0 => format!("KV_{bucket}"),
                    i => format!("KV_{bucket}-shard{i}"),
                })
                .collect();
            // Where the leaders are once Tenure serves (it spreads a
            // sharded bucket's leaders at start; older builds leave them
            // where NATS put them), recorded; if two shards still share a
            // node, they are moved one per node like the raw streams', so
            // that "3 streams" means three leaders here too.
            let mut at_start = Vec::new();
            for name in &names {
                at_start.push(
                    Cluster::leader(&js, name)
                        .await
                        .unwrap_or_else(|| "?".into()),
                );
            }
            eprintln!("10. shards, tenure --shards {shards}: leaders once serving: {at_start:?}");
            at_start.sort_unstable();
            at_start.dedup();
            rep.add(
                &format!(
                    "10. shards acquire+release c={}, 3 nodes, R3, {shards} stream{}",
                    o.c,
                    plural(shards)
                ),
                "nodes leading its streams once tenure serves",
                Kind::Tenure,
                at_start.len() as f64,
            );
            if at_start.len() < shards.min(cluster.names.len()) {
                for (i, name) in names.iter().enumerate() {
                    place_leader(&client, &js, name, &cluster.names[i % cluster.names.len()])
                        .await?;
                }
                t.ready().await?;
            }
            setups.push(Setup {
                kind: Kind::Tenure,
                label: format!("3 nodes, R3, {shards} stream{}", plural(shards)),
                streams: vec![Arc::new(Sys::Tenure(t, bg))],
                stream_names: names,
                shards,
                replicas: 3,
                pids,
            });
        }
    } else {
        rep.note(format!(
            "10. shards, tenure: skipped ({} has no --shards flag)",
            o.tenure_bin.display()
        ));
    }
    measure(o, rep, &setups, Some(&js)).await
}

/// "s" for more than one.
fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Moves `stream`'s leader to node `preferred` (a step-down naming it),
/// unless it is there already, and waits until the stream reports it.
async fn place_leader(
    client: &async_nats::Client,
    js: &jetstream::Context,
    stream: &str,
    preferred: &str,
) -> R<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let leader = Cluster::leader(js, stream).await;
        if leader.as_deref() == Some(preferred) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{stream}: leader {leader:?}, could not move it to {preferred}"
            ));
        }
        if leader.is_some() {
            let body = format!(r#"{{"placement":{{"preferred":"{preferred}"}}}}"#);
            // The reply says whether the step-down started; the new leader
            // is read back above.
            let _ = client
                .request(
                    format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}"),
                    body.into(),
                )
                .await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Measures every setup `o.runs` times (the order rotating each run) with
/// both operations, and adds rows: per setup, cycles/s, renewals/s and
/// their p50/p99; per system and replica count, the 3-vs-1 ratio of each
/// run. Prints where each stream's leader was before each run.
async fn measure(
    o: &Opts<'_>,
    rep: &mut Report,
    setups: &[Setup],
    js: Option<&jetstream::Context>,
) -> R<()> {
    for run in 0..o.runs {
        let mut order: Vec<&Setup> = setups.iter().collect();
        let len = order.len().max(1);
        order.rotate_left(run % len);
        for s in order {
            let leaders = match js {
                Some(js) => {
                    let mut v = Vec::new();
                    for name in &s.stream_names {
                        let l = Cluster::leader(js, name).await;
                        v.push(format!("{name}@{}", l.as_deref().unwrap_or("?")));
                    }
                    let distinct = {
                        let mut l: Vec<&str> = v
                            .iter()
                            .map(|x| x.rsplit('@').next().unwrap_or("?"))
                            .collect();
                        l.sort_unstable();
                        l.dedup();
                        l.len()
                    };
                    rep.add(
                        &row(s, "acquire+release", o.c),
                        "nodes leading its streams",
                        s.kind,
                        distinct as f64,
                    );
                    v.join(" ")
                }
                None => "single node".into(),
            };
            let tag = format!(
                "w10.{}.r{}.s{}.run{run}",
                s.kind.name(),
                s.replicas,
                s.shards
            );
            for (op, metric) in [("acquire+release", "cycles/s"), ("renew", "renewals/s")] {
                let w = row(s, op, o.c);
                let measured = if op == "renew" {
                    renew(s, &format!("{tag}.ren"), o.c, o.dur).await
                } else {
                    cycles(s, &format!("{tag}.cyc"), o.c, o.dur).await
                };
                match measured {
                    Ok((t, refused)) => {
                        add(rep, &w, metric, s, &t, &leaders);
                        rep.add(&w, REFUSED, s.kind, refused as f64);
                    }
                    Err(e) => rep.note(format!("{w}, {}, run {run}: {e}", s.kind.name())),
                }
            }
        }
        // The 3-vs-1 ratio of this run, per system and replica count.
        for three in setups.iter().filter(|s| s.shards == 3) {
            let Some(one) = setups
                .iter()
                .find(|s| s.shards == 1 && s.kind == three.kind && s.replicas == three.replicas)
            else {
                continue;
            };
            for (op, unit) in [("acquire+release", "cycles/s"), ("renew", "renewals/s")] {
                let (a, b) = (
                    last(rep, &row(three, op, o.c), unit, three.kind),
                    last(rep, &row(one, op, o.c), unit, one.kind),
                );
                if let (Some(a), Some(b)) = (a, b) {
                    if b > 0.0 {
                        rep.add(
                            &format!(
                                "10. shards {op} c={}, 3 nodes, R{}, 3 streams / 1",
                                o.c, three.replicas
                            ),
                            &format!("{unit} ratio"),
                            three.kind,
                            a / b,
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// The row name of a setup's operation.
fn row(s: &Setup, op: &str, c: usize) -> String {
    format!("10. shards {op} c={c}, {}", s.label)
}

/// The last value recorded for a row (this run's).
fn last(rep: &Report, w: &str, metric: &str, k: Kind) -> Option<f64> {
    rep.rows
        .iter()
        .find(|r| r.workload == w && r.metric == metric)
        .and_then(|r| r.vals.get(&k))
        .and_then(|v| v.last().copied())
}

/// Records one run's rate and latencies and prints them with the leaders.
fn add(rep: &mut Report, w: &str, unit: &str, s: &Setup, t: &Throughput, leaders: &str) {
    rep.add(w, unit, s.kind, t.per_s);
    rep.add(w, "p50 ms", s.kind, t.p50);
    rep.add(w, "p99 ms", s.kind, t.p99);
    // CPU per 1,000 operations: all server processes together, the
    // busiest nats-server node, and (Tenure) the tenure process.
    let nodes = if s.kind == Kind::Tenure {
        &t.cpu_ms_per_1k[..t.cpu_ms_per_1k.len().saturating_sub(1)]
    } else {
        &t.cpu_ms_per_1k[..]
    };
    let total: f64 = t.cpu_ms_per_1k.iter().sum();
    let busiest = nodes.iter().copied().fold(0.0, f64::max);
    rep.add(w, "server CPU ms/1k ops", s.kind, total);
    rep.add(w, "busiest nats node CPU ms/1k ops", s.kind, busiest);
    if s.kind == Kind::Tenure {
        if let Some(tenure) = t.cpu_ms_per_1k.last() {
            rep.add(w, "tenure CPU ms/1k ops", s.kind, *tenure);
        }
    }
    eprintln!(
        "{w} {}: {:.0}/s p50 {:.3} ms p99 {:.3} ms, server CPU {total:.1} ms/1k (per process {:?}) (leaders: {leaders})",
        s.kind.name(),
        t.per_s,
        t.p50,
        t.p99,
        t.cpu_ms_per_1k.iter().map(|v| format!("{v:.1}")).collect::<Vec<_>>()
    );
}

/// `c` tasks, task `i` cycling acquire+release over its own
/// [`NAMES_PER_TASK`] names `<tag>.<i>.<k>` (each name's holding goes to
/// its shard's stream), back to back for `dur`.
async fn cycles(s: &Setup, tag: &str, c: usize, dur: Duration) -> R<(Throughput, usize)> {
    let mut tasks = Vec::with_capacity(c);
    let cpu = CpuMeter::start(&s.pids);
    let start = Instant::now();
    let end = start + dur;
    for i in 0..c {
        let names: Vec<(String, Arc<Sys>)> = (0..NAMES_PER_TASK)
            .map(|k| {
                let name = format!("{tag}.{i}.{k}");
                let sys = s.pick(&name).clone();
                (name, sys)
            })
            .collect();
        let session = Session::plain(TTL_S);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut refused = 0;
            let mut k = 0;
            while Instant::now() < end {
                let (name, sys) = &names[k % names.len()];
                k += 1;
                let t = Instant::now();
                let h = again!(refused, sys.acquire(name, &session, false).await)?;
                again!(refused, sys.release(&h).await)?;
                lat.push(t.elapsed());
            }
            Ok((lat, refused))
        }));
    }
    let done = join(tasks).await?;
    let elapsed = start.elapsed();
    Ok(measured(done, elapsed, &cpu, 0))
}

/// `c` tasks, each holding one lease `<tag>.<i>` (in its shard's stream)
/// and renewing it back to back for `dur`; released afterwards.
async fn renew(s: &Setup, tag: &str, c: usize, dur: Duration) -> R<(Throughput, usize)> {
    let session = Session::plain(TTL_S);
    let mut held = Vec::with_capacity(c);
    let mut setup_refused = 0;
    for i in 0..c {
        let name = format!("{tag}.{i}");
        let sys = s.pick(&name).clone();
        let h = again!(setup_refused, sys.acquire(&name, &session, false).await)?;
        held.push((sys, h));
    }
    let cpu = CpuMeter::start(&s.pids);
    let start = Instant::now();
    let end = start + dur;
    let tasks: Vec<_> = held
        .into_iter()
        .map(|(sys, mut h)| {
            let session = session.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut refused = 0;
                let mut failed = None;
                while Instant::now() < end {
                    let t = Instant::now();
                    if let Err(e) = again!(refused, sys.renew(&mut h, &session).await) {
                        failed = Some(e);
                        break;
                    }
                    lat.push(t.elapsed());
                }
                let _ = again!(refused, sys.release(&h).await);
                match failed {
                    Some(e) => Err(e),
                    None => Ok((lat, refused)),
                }
            })
        })
        .collect();
    let done = join(tasks).await?;
    let elapsed = start.elapsed();
    Ok(measured(done, elapsed, &cpu, setup_refused))
}

/// The throughput (with the CPU per 1,000 operations) of the tasks' latencies
/// `done`, and the writes refused with 10164: the tasks' and `earlier` ones.
fn measured(
    done: Vec<(Vec<Duration>, usize)>,
    elapsed: Duration,
    cpu: &CpuMeter,
    earlier: usize,
) -> (Throughput, usize) {
    let refused = earlier + done.iter().map(|(_, r)| r).sum::<usize>();
    let lat: Vec<Duration> = done.into_iter().flat_map(|(l, _)| l).collect();
    (
        Throughput {
            cpu_ms_per_1k: cpu.per_1k(lat.len()),
            ..throughput(lat, elapsed)
        },
        refused,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every task's names, and the renewal workload's 64 leases, reach
    /// all three shards, so "3 streams" loads all three.
    #[test]
    fn workload_names_reach_every_shard() {
        let mut cycles = [0usize; 3];
        let mut renewals = [0usize; 3];
        for i in 0..64 {
            for k in 0..NAMES_PER_TASK {
                cycles[shard_of(&format!("w10.raw.r3.s3.run0.cyc.{i}.{k}"), 3)] += 1;
            }
            renewals[shard_of(&format!("w10.raw.r3.s3.run0.ren.{i}"), 3)] += 1;
        }
        assert!(cycles.iter().all(|&n| n > 0), "{cycles:?}");
        assert!(renewals.iter().all(|&n| n > 0), "{renewals:?}");
        assert_eq!(shard_of("anything", 1), 0);
    }

    /// The 3-node cluster starts ready for 3-replica buckets, an R1 bucket
    /// lands on the node its tag names, and three R3 buckets' leaders can
    /// be moved one per node: what "3 streams" relies on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cluster_places_streams_and_leaders() {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let bin = crate::procs::find_program(
            "nats-server",
            None,
            &[root.join("../.tools/bin/nats-server")],
        )
        .expect("nats-server (scripts/tools.sh installs it)");
        let dir = tempfile::tempdir().unwrap();
        let launcher = Launcher { cpus: None };
        let cluster = launcher
            .nats_cluster(&bin, dir.path(), 3, false)
            .await
            .unwrap();
        let result = async {
            let client = cluster.connect().await?;
            let js = jetstream::new(client.clone());
            let r1 = Raw::open_on(client.clone(), "tagged", true, 1, Some("node:n2")).await?;
            let l = Cluster::leader(&js, &r1.stream_name()).await;
            if l.as_deref() != Some("n2") {
                return Err(format!("R1 stream tagged node:n2 is on {l:?}"));
            }
            let mut leaders = Vec::new();
            for i in 0..3 {
                let raw =
                    Raw::open_on(client.clone(), &format!("spread-{i}"), true, 3, None).await?;
                let name = raw.stream_name();
                place_leader(&client, &js, &name, &cluster.names[i]).await?;
                leaders.push(Cluster::leader(&js, &name).await);
            }
            Ok(leaders)
        }
        .await;
        cluster.stop().await;
        let leaders = result.unwrap();
        assert_eq!(
            leaders,
            vec![Some("n1".into()), Some("n2".into()), Some("n3".into())]
        );
    }
}
