//! `tenure-bench`: Tenure next to raw NATS JetStream KV and etcd, in one run
//! on one machine (issue 5).
//!
//! It starts nats-server, the `tenure` binary (a separate process, as in
//! production) and, when `etcd` is found, two single-node etcd servers (one
//! default, one `--unsafe-no-fsync`); optionally pins them to the servers'
//! CPUs with `taskset` while the load runs on other CPUs. Then it runs
//! workloads 1 to 6 of issue 5 (3: fair handoff, issue 12), 7 and 9 (the
//! KeepAlive stream, issue 14) and 8 (semaphores, issue 13) against each
//! system, and 10 (shards, issue 14: one stream vs three on a 3-node
//! cluster it starts for that workload alone) and 11 (an atomic batch
//! beside a conditional put, raw NATS on one node and on a 3-node R3
//! cluster, issue 25), alternating systems
//! within every run (the order rotates each run), each figure over several
//! runs, and prints one Markdown table: the median and spread of each
//! figure, and Tenure's ratio to raw NATS and to etcd.
//!
//! `scripts/bench.sh` installs what is missing, builds, pins and runs it;
//! `BENCHMARKS.md` explains every number. `--quick` is the CI smoke run.

mod batches;
mod ghz;
mod hostile;
mod procs;
mod report;
mod shards;
mod stats;
mod systems;
mod workloads;

#[cfg(feature = "etcd")]
mod etcd;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::procs::{find_program, Launcher, Server, R};
use crate::report::Report;
use crate::stats::pct_ms;
use crate::systems::{HistoryCopy, Kind, Raw, Sys, Tenure};

/// Benchmarks Tenure against raw NATS JetStream KV and etcd.
#[derive(Parser, Debug)]
#[command(name = "tenure-bench")]
struct Args {
    /// CI smoke run: tiny counts, one run, no etcd, no 10,000-stream
    /// watch; finishes in well under a minute.
    #[arg(long)]
    quick: bool,
    /// Runs per figure (default 3; 1 with --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// Length of each timed throughput run, ms (default 3000; 300 with --quick).
    #[arg(long)]
    duration_ms: Option<u64>,
    /// Workloads to run, e.g. `1,2,5` (default all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<u32>,
    /// The tenure binary (default: target/release/tenure of this repository).
    #[arg(long)]
    tenure_bin: Option<PathBuf>,
    /// nats-server (default: .tools/bin/nats-server, then PATH).
    #[arg(long)]
    nats_server: Option<PathBuf>,
    /// etcd (default: `etcd` on PATH; etcd workloads are skipped without it).
    #[arg(long)]
    etcd: Option<PathBuf>,
    /// Skip etcd even when it is installed.
    #[arg(long)]
    no_etcd: bool,
    /// ghz (default: .tools/bin/ghz, then PATH; workload 6 is skipped without it).
    #[arg(long)]
    ghz: Option<PathBuf>,
    /// Make JetStream fsync every write (`sync_interval: always`) instead of
    /// the server default (fsync every 2 minutes).
    #[arg(long)]
    nats_sync_always: bool,
    /// Give raw NATS's bucket a history stream as Tenure's has (a stream
    /// NATS copies every write into, kept 7 days), `mirror` or `source`,
    /// to measure what that copy costs NATS apart from Tenure (design
    /// section 9, "Why a mirror"); default none.
    #[arg(long, value_enum)]
    raw_history: Option<HistoryCopy>,
    /// CPUs for the servers (`taskset -c` list), e.g. `0`.
    #[arg(long)]
    server_cpus: Option<String>,
    /// CPUs for this load generator (and ghz), e.g. `1`.
    #[arg(long)]
    load_cpus: Option<String>,
    /// WatchLease stream counts for workload 5 (default 1000,10000; 100
    /// with --quick).
    #[arg(long, value_delimiter = ',')]
    watchers: Vec<usize>,
    /// Client connections per system (HTTP/2 for tenure and etcd).
    #[arg(long, default_value_t = 4)]
    conns: usize,
    /// Also write the table (Markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run the hostile-client attacks of issue 30 instead (bench/src/hostile.rs):
    /// `--only` picks attacks (0 baseline, 1 to 7), `--duration-ms` sets
    /// each window (default 10000).
    #[arg(long)]
    hostile: bool,
}

/// The repository root (this crate lives in `bench/`).
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if let Some(cpus) = &args.load_cpus {
        if let Err(e) = procs::pin_self(cpus) {
            eprintln!("tenure-bench: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    // Built after pinning, so the runtime sizes itself to the load CPUs.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Everything a run has started.
struct Env {
    /// The systems, in table order.
    systems: Vec<Arc<Sys>>,
    /// Their server processes (nats-server, tenure, etcd...).
    servers: Vec<Server>,
    /// Tenure's address.
    tenure_addr: String,
    /// Indexes into `servers`.
    nats_idx: usize,
    /// Index of tenure in `servers`.
    tenure_idx: usize,
    /// The server processes of each system (Tenure: tenure, then
    /// nats-server), for CPU figures.
    pids: std::collections::HashMap<Kind, Vec<u32>>,
}

/// Tenure's client among `systems` (Tenure is always one of them).
fn tenure_of(systems: &[Arc<Sys>]) -> &Tenure {
    systems
        .iter()
        .find_map(|s| match s.as_ref() {
            Sys::Tenure(t, _) => Some(t),
            _ => None,
        })
        .expect("tenure is always a system")
}

/// The tenure binary: `--tenure-bin`, or target/release/tenure.
fn tenure_bin(args: &Args) -> R<PathBuf> {
    let bin = args
        .tenure_bin
        .clone()
        .unwrap_or_else(|| repo_root().join("target/release/tenure"));
    if !bin.is_file() {
        return Err(format!(
            "{} not found: run `cargo build --release` at the repository root or pass --tenure-bin",
            bin.display()
        ));
    }
    Ok(bin)
}

/// Starts the servers and connects a client to each system.
async fn start(args: &Args, dir: &std::path::Path, launcher: &Launcher) -> R<Env> {
    let root = repo_root();
    let nats_bin = find_program(
        "nats-server",
        args.nats_server.as_deref(),
        &[root.join(".tools/bin/nats-server")],
    )
    .ok_or("nats-server not found: run scripts/tools.sh or pass --nats-server")?;
    let tenure_bin = tenure_bin(args)?;
    let mut servers = Vec::new();
    let nats = launcher.nats(&nats_bin, dir, args.nats_sync_always).await?;
    let nats_url = format!("nats://127.0.0.1:{}", nats.port);
    servers.push(nats);
    let tenure = launcher.tenure(&tenure_bin, dir, &nats_url).await?;
    let tenure_addr = format!("127.0.0.1:{}", tenure.port);
    servers.push(tenure);

    let raw = Raw::open(&nats_url, "raw", true).await?;
    if let Some(copy) = args.raw_history {
        raw.copy_into_history(copy).await?;
    }
    let client = Tenure::connect(&tenure_addr, args.conns).await?;
    // Tenure creates its bucket at start; wait until it answers.
    client.ready().await?;
    let tenure_bg = Raw::open(&nats_url, "tenure", false).await?;
    let mut pids = std::collections::HashMap::new();
    pids.insert(Kind::Raw, vec![servers[0].pid()]);
    pids.insert(Kind::Tenure, vec![servers[1].pid(), servers[0].pid()]);
    let mut systems = vec![
        Arc::new(Sys::Raw(raw)),
        Arc::new(Sys::Tenure(client, tenure_bg)),
    ];

    let etcd_bin = if args.no_etcd || args.quick {
        None
    } else {
        find_program("etcd", args.etcd.as_deref(), &[])
    };
    match etcd_bin {
        #[cfg(feature = "etcd")]
        Some(bin) => {
            for (kind, no_fsync) in [(Kind::Etcd, false), (Kind::EtcdNoFsync, true)] {
                let server = launcher.etcd(&bin, dir, no_fsync).await?;
                let addr = format!("127.0.0.1:{}", server.port);
                pids.insert(kind, vec![server.pid()]);
                servers.push(server);
                let e = crate::etcd::Etcd::connect(kind, &addr, args.conns).await?;
                systems.push(Arc::new(Sys::Etcd(e)));
            }
        }
        #[cfg(not(feature = "etcd"))]
        Some(_) => eprintln!("etcd found, but this build has no etcd feature: skipping etcd"),
        None => eprintln!("etcd: skipped (not found, --no-etcd or --quick)"),
    }
    Ok(Env {
        systems,
        servers,
        tenure_addr,
        nats_idx: 0,
        tenure_idx: 1,
        pids,
    })
}

/// The systems in this run's order: rotated by the run index so that no
/// system always goes first.
fn rotation(systems: &[Arc<Sys>], run: usize) -> Vec<Arc<Sys>> {
    let mut v = systems.to_vec();
    let len = v.len();
    v.rotate_left(run % len.max(1));
    v
}

/// Runs the benchmark and prints the table.
async fn run(args: Args) -> R<()> {
    if args.hostile {
        return hostile::run(&args).await;
    }
    let began = Instant::now();
    let quick = args.quick;
    let runs = args.runs.unwrap_or(if quick { 1 } else { 3 }).max(1);
    let dur = Duration::from_millis(args.duration_ms.unwrap_or(if quick { 300 } else { 3000 }));
    let want = |w: u32| args.only.is_empty() || args.only.contains(&w);
    let dir = tempfile::Builder::new()
        .prefix("tenure-bench-")
        .tempdir_in(repo_root().join("target"))
        .or_else(|_| tempfile::tempdir())
        .map_err(|e| format!("temp dir: {e}"))?;
    let launcher = Launcher {
        cpus: args.server_cpus.clone(),
    };
    // The single-node setup (workloads 1 to 9) starts only when one of
    // them runs; workload 10 starts its own servers.
    let mut env = if (1..=9).any(want) {
        Some(start(&args, dir.path(), &launcher).await?)
    } else {
        None
    };
    let mut rep = Report::default();
    let concurrencies: &[usize] = if quick { &[1, 8] } else { &[1, 64, 256] };
    eprintln!(
        "tenure-bench: {} system(s), {runs} run(s) per figure, {dur:?} per throughput run",
        env.as_ref().map_or(0, |e| e.systems.len())
    );

    if let Some(env) = env.as_mut() {
        if want(1) {
            for &c in concurrencies {
                let w = format!("1. renew, c={c}");
                for run in 0..runs {
                    for sys in rotation(&env.systems, run) {
                        let k = sys.kind();
                        let tag = format!("w1.{}.c{c}.r{run}", k.name());
                        match workloads::renew(&sys, &tag, c, dur, &[]).await {
                            Ok(t) => add_throughput(&mut rep, &w, "ops/s", k, &t),
                            Err(e) => rep.note(format!("{w}, {}, run {run}: {e}", k.name())),
                        }
                    }
                }
            }
        }

        if want(2) {
            for &c in concurrencies {
                let w = format!("2. acquire+release, c={c}");
                for run in 0..runs {
                    for sys in rotation(&env.systems, run) {
                        let k = sys.kind();
                        let tag = format!("w2.{}.c{c}.r{run}", k.name());
                        match workloads::cycles(&sys, &tag, c, dur).await {
                            Ok(t) => add_throughput(&mut rep, &w, "cycles/s", k, &t),
                            Err(e) => rep.note(format!("{w}, {}, run {run}: {e}", k.name())),
                        }
                    }
                }
            }
        }

        if want(3) {
            let w = "3. fair handoff, 16 waiters";
            for run in 0..runs {
                for sys in rotation(&env.systems, run) {
                    let k = sys.kind();
                    let tag = format!("w3.{}.r{run}", k.name());
                    match workloads::handoff(&sys, &tag, 16, dur).await {
                        Ok(mut h) => {
                            let (p50, p99) = (pct_ms(&mut h.lat, 50.0), pct_ms(&mut h.lat, 99.0));
                            rep.add(w, "p50 ms", k, p50);
                            rep.add(w, "p99 ms", k, p99);
                            rep.add(w, "handoffs/s", k, h.per_s);
                            rep.add(w, "overtakes by send time", k, h.overtakes as f64);
                            if let Some(by) = h.by_place {
                                rep.add(w, "overtakes by ticket place", k, by.overtakes as f64);
                                rep.add(w, "granted without a ticket", k, by.without_ticket as f64);
                            }
                            rep.add(w, "taken back by releaser", k, h.same_holder as f64);
                            eprintln!(
                                "{w} {}: {} handoffs ({:.0}/s), p50 {p50:.3} ms p99 {p99:.3} ms, {} overtakes ({} with no margin, the largest by {:?}), {} taken back",
                                k.name(),
                                h.lat.len(),
                                h.per_s,
                                h.overtakes,
                                h.strict_overtakes,
                                h.max_overtake,
                                h.same_holder
                            );
                        }
                        Err(e) => rep.note(format!("{w}, {}, run {run}: {e}", k.name())),
                    }
                }
            }
        }

        if want(4) {
            let big = if quick { 100 } else { 10_000 };
            for (background, pairs) in [
                (0usize, if quick { 1 } else { 5 }),
                (big, if quick { 2 } else { 10 }),
            ] {
                let w = format!(
                    "4. expiry lag, {} pending",
                    if background == 0 { 1 } else { background }
                );
                for run in 0..runs {
                    for sys in rotation(&env.systems, run) {
                        let k = sys.kind();
                        let tag = format!("w4.{}.b{background}.r{run}", k.name());
                        match workloads::expiry(&sys, &tag, pairs, background).await {
                            Ok(mut lags) => {
                                let (p50, p99) = (pct_ms(&mut lags, 50.0), pct_ms(&mut lags, 99.0));
                                rep.add(&w, "lag p50 ms", k, p50);
                                rep.add(&w, "lag p99 ms", k, p99);
                                eprintln!(
                                    "{w} {}: {} samples, p50 {p50:.1} ms p99 {p99:.1} ms",
                                    k.name(),
                                    lags.len()
                                );
                            }
                            Err(e) => rep.note(format!("{w}, {}, run {run}: {e}", k.name())),
                        }
                        if background > 0 {
                            // Let the background leases go before the next run
                            // (etcd revokes expired leases at a limited rate).
                            #[cfg(feature = "etcd")]
                            if let Sys::Etcd(e) = sys.as_ref() {
                                let t = Instant::now();
                                while e.lease_count().await > 50
                                    && t.elapsed() < Duration::from_secs(60)
                                {
                                    tokio::time::sleep(Duration::from_millis(250)).await;
                                }
                            }
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            }
        }

        if want(5) {
            let sizes: Vec<usize> = if !args.watchers.is_empty() {
                args.watchers.clone()
            } else if quick {
                vec![100]
            } else {
                vec![1_000, 10_000]
            };
            let tenure = tenure_of(&env.systems);
            let tenure_pid = env.servers[env.tenure_idx].pid();
            let nats_pid = env.servers[env.nats_idx].pid();
            for &n in &sizes {
                let w = format!("5. watch, {n} streams");
                for run in 0..runs {
                    let tag = format!("w5.n{n}.r{run}");
                    let (rate, wdur, open) = if quick {
                        (20, Duration::from_secs(1), Duration::from_secs(30))
                    } else {
                        (50, Duration::from_secs(5), Duration::from_secs(180))
                    };
                    match workloads::watch(
                        &env.tenure_addr,
                        tenure,
                        tenure_pid,
                        nats_pid,
                        &tag,
                        n,
                        rate,
                        wdur,
                        open,
                    )
                    .await
                    {
                        Ok(f) => {
                            let k = Kind::Tenure;
                            rep.add(&w, "streams open s", k, f.open_s);
                            rep.add(&w, "event p50 ms", k, f.p50);
                            rep.add(&w, "event p99 ms", k, f.p99);
                            rep.add(&w, "event p99 ms from send", k, f.p99_from_send);
                            rep.add(&w, "delivered %", k, f.delivered_pct);
                            rep.add(&w, "tenure RSS MiB", k, f.rss_mb);
                            rep.add(&w, "tenure CPU %", k, f.cpu_pct);
                            rep.add(&w, "nats-server RSS MiB", k, f.nats_rss_mb);
                            eprintln!(
                                "{w}: open {:.1} s, p50 {:.2} ms p99 {:.2} ms, delivered {:.1}%, RSS {:.0} MiB, CPU {:.0}%",
                                f.open_s, f.p50, f.p99, f.delivered_pct, f.rss_mb, f.cpu_pct
                            );
                        }
                        Err(e) => rep.note(format!("{w}, run {run}: {e}")),
                    }
                    env.servers[env.tenure_idx].check_alive()?;
                }
            }
        }

        if want(6) {
            let root = repo_root();
            match find_program("ghz", args.ghz.as_deref(), &[root.join(".tools/bin/ghz")]) {
                None => {
                    rep.note("6. ghz: skipped (not installed; scripts/bench.sh installs it)".into())
                }
                Some(ghz) => {
                    let tenure = tenure_of(&env.systems);
                    let (c, n) = if quick { (8, 200) } else { (64, 15_000) };
                    for rpc in ["Acquire", "Renew", "Release"] {
                        let w = format!("6. ghz {rpc}, c={c}");
                        for run in 0..runs {
                            let tag = format!("w6.{}.r{run}", rpc.to_lowercase());
                            match ghz::run(
                                &ghz,
                                &env.tenure_addr,
                                tenure,
                                dir.path(),
                                rpc,
                                &tag,
                                c,
                                n,
                                args.conns,
                            )
                            .await
                            {
                                Ok(g) => {
                                    rep.add(&w, "ops/s", Kind::Tenure, g.rps);
                                    rep.add(&w, "p50 ms", Kind::Tenure, g.p50);
                                    rep.add(&w, "p99 ms", Kind::Tenure, g.p99);
                                    rep.add(&w, "errors", Kind::Tenure, g.errors as f64);
                                    eprintln!(
                                        "{w}: {:.0}/s p50 {:.3} ms p99 {:.3} ms, {} errors",
                                        g.rps, g.p50, g.p99, g.errors
                                    );
                                }
                                Err(e) => rep.note(format!("{w}, run {run}: {e}")),
                            }
                        }
                    }
                }
            }
        }

        if want(7) {
            // Renewals over the KeepAlive stream: Tenure's column is the
            // stream, the other columns the same holdings renewed their usual
            // way (workload 1 with c x per tasks; etcd's is its own keep-alive
            // stream), in the same run.
            let shapes: &[(usize, usize)] = if quick {
                &[(1, 1), (8, 1), (1, 10)]
            } else {
                &[(1, 1), (64, 1), (1, 100)]
            };
            for &(c, per) in shapes {
                let w = if per == 1 {
                    format!("7. renew via KeepAlive, c={c}")
                } else {
                    format!("7. renew via KeepAlive, {c} client x {per} leases/msg")
                };
                for run in 0..runs {
                    for sys in rotation(&env.systems, run) {
                        let k = sys.kind();
                        let tag = format!("w7.{}.c{c}.p{per}.r{run}", k.name());
                        let pids = env.pids.get(&k).cloned().unwrap_or_default();
                        let result = match sys.as_ref() {
                            Sys::Tenure(t, _) => {
                                workloads::keepalive(&sys, t, &tag, (c, per), dur, &pids).await
                            }
                            _ => workloads::renew(&sys, &tag, c * per, dur, &pids).await,
                        };
                        add_renewals(&mut rep, &w, k, run, result);
                    }
                }
            }
        }

        if want(8) {
            // A semaphore of 8 slots shared by 64 clients (Tenure: limit 8;
            // etcd and raw: 8 lock names, client i on name i % 8).
            let (clients, slots) = (64, 8);
            let w = format!("8. semaphore, {slots} slots, {clients} clients");
            for run in 0..runs {
                for sys in rotation(&env.systems, run) {
                    let k = sys.kind();
                    let tag = format!("w8.{}.r{run}", k.name());
                    match workloads::semaphore(&sys, &tag, clients, slots, dur).await {
                        Ok(t) => add_throughput(&mut rep, &w, "cycles/s", k, &t),
                        Err(e) => rep.note(format!("{w}, {}, run {run}: {e}", k.name())),
                    }
                }
            }
        }

        if want(9) {
            // One client holding many leases: Tenure renews them all over one
            // KeepAlive stream, 100 entries a message; raw renews each with its
            // own task. etcd is not run: its client would attach every lock to
            // one session lease and renew that one lease.
            let (leases, per) = if quick { (1_000, 100) } else { (10_000, 100) };
            let w = format!("9. renew {leases} leases, 1 client");
            for run in 0..runs {
                for sys in rotation(&env.systems, run) {
                    let k = sys.kind();
                    let tag = format!("w9.{}.r{run}", k.name());
                    let pids = env.pids.get(&k).cloned().unwrap_or_default();
                    let result = match sys.as_ref() {
                        Sys::Tenure(t, _) => {
                            workloads::keepalive_sweeps(&sys, t, &tag, (leases, per), dur, &pids)
                                .await
                                .map(|s| {
                                    rep.add(&w, "sweep ms", k, s.sweep_ms);
                                    s.t
                                })
                        }
                        Sys::Raw(_) => workloads::renew(&sys, &tag, leases, dur, &pids).await,
                        #[cfg(feature = "etcd")]
                        Sys::Etcd(_) => continue,
                    };
                    add_renewals(&mut rep, &w, k, run, result);
                }
            }
        }
    }

    if want(10) {
        let nats_bin = find_program(
            "nats-server",
            args.nats_server.as_deref(),
            &[repo_root().join(".tools/bin/nats-server")],
        )
        .ok_or("nats-server not found: run scripts/tools.sh or pass --nats-server")?;
        let tenure_bin = tenure_bin(&args)?;
        let o = shards::Opts {
            nats_bin: &nats_bin,
            tenure_bin: &tenure_bin,
            dir: dir.path(),
            runs,
            dur,
            c: if quick { 8 } else { 64 },
            with_r1: !quick,
            sync_always: args.nats_sync_always,
            mirror_leases: if quick { 2_000 } else { 100_000 },
        };
        if let Err(e) = shards::run(&o, &launcher, &mut rep).await {
            rep.note(format!("10. shards: {e}"));
        }
    }

    if want(11) {
        let nats_bin = find_program(
            "nats-server",
            args.nats_server.as_deref(),
            &[repo_root().join(".tools/bin/nats-server")],
        )
        .ok_or("nats-server not found: run scripts/tools.sh or pass --nats-server")?;
        let o = batches::Opts {
            nats_bin: &nats_bin,
            dir: dir.path(),
            runs,
            dur,
            c: if quick { 8 } else { 40 },
            sync_always: args.nats_sync_always,
        };
        if let Err(e) = batches::run(&o, &launcher, &mut rep).await {
            rep.note(format!("11. atomic batch vs put: {e}"));
        }
    }

    for s in env.iter_mut().flat_map(|e| e.servers.iter_mut()) {
        if let Err(e) = s.check_alive() {
            rep.note(e);
        }
    }
    let sync = if args.nats_sync_always {
        "fsync each write"
    } else {
        "fsync every 2 min"
    };
    let headers = [
        format!("raw NATS ({sync})"),
        format!("tenure (NATS {sync})"),
        "etcd (fsync each commit)".to_string(),
        "etcd --unsafe-no-fsync".to_string(),
    ];
    let mut text = rep.render(&headers);
    if !rep.notes.is_empty() {
        text.push_str("\nNotes:\n");
        for n in &rep.notes {
            text.push_str(&format!("- {n}\n"));
        }
    }
    text.push_str(&format!(
        "\n{runs} run(s) per figure; cells are median ±half-range as % of the median; took {:.0} s; load average at end: {}\n",
        began.elapsed().as_secs_f64(),
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    ));
    println!("{text}");
    let summary = rep.target_summary();
    if !summary.is_empty() {
        println!("Targets:");
        for line in &summary {
            println!("- {line}");
        }
    }
    if let Some(out) = &args.out {
        std::fs::write(out, &text).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    for s in env.iter_mut().flat_map(|e| e.servers.drain(..)).rev() {
        s.stop().await;
    }
    // A quick run fails when any figure failed, so CI notices rot; in CI
    // (`CI=true`) a workload skipped for a missing tool fails it too.
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let failed = rep
        .notes
        .iter()
        .filter(|n| in_ci || !n.contains("skipped"))
        .count();
    if quick && failed > 0 {
        return Err(format!("{failed} workload run(s) failed or were skipped"));
    }
    Ok(())
}

/// Adds the renewals/s and CPU rows of one run of a renewal workload (7,
/// 9), or a note with its error.
fn add_renewals(
    rep: &mut report::Report,
    w: &str,
    k: Kind,
    run: usize,
    result: R<workloads::Throughput>,
) {
    match result {
        Ok(t) => {
            add_throughput(rep, w, "ops/s", k, &t);
            add_cpu(rep, w, k, &t);
        }
        Err(e) => rep.note(format!("{w}, {}, run {run}: {e}", k.name())),
    }
}

/// Records the CPU figures of a renewal run: Tenure's own process, and
/// every server process of the system together (Tenure: tenure +
/// nats-server; raw: nats-server; etcd: etcd).
fn add_cpu(rep: &mut report::Report, w: &str, k: Kind, t: &workloads::Throughput) {
    if t.cpu_ms_per_1k.is_empty() {
        return;
    }
    if k == Kind::Tenure {
        rep.add(w, "tenure CPU ms/1k renewals", k, t.cpu_ms_per_1k[0]);
    }
    let total: f64 = t.cpu_ms_per_1k.iter().sum();
    rep.add(w, "server CPU ms/1k renewals", k, total);
    eprintln!(
        "{w} {}: server CPU {total:.1} ms per 1,000 renewals",
        k.name()
    );
}

/// Records one throughput run (rate in `unit`, p50, p99) and prints it.
fn add_throughput(
    rep: &mut report::Report,
    w: &str,
    unit: &str,
    k: Kind,
    t: &workloads::Throughput,
) {
    rep.add(w, unit, k, t.per_s);
    rep.add(w, "p50 ms", k, t.p50);
    rep.add(w, "p99 ms", k, t.p99);
    eprintln!(
        "{w} {}: {:.0}/s p50 {:.3} ms p99 {:.3} ms",
        k.name(),
        t.per_s,
        t.p50,
        t.p99
    );
}
