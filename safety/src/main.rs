//! `tenure-safety`: evidence that Tenure's leases stay safe when things
//! break. `run` plays the scenarios (holders paused and killed, a Tenure
//! replica killed, nats-server killed, a 3-node JetStream cluster losing its
//! stream leader or having nodes stopped, election leaders paused,
//! semaphore holders, read-write lock holders, and groups racing single
//! leases, and a negative
//! control per property family) with at least 8 client processes contending
//! for 3 names through real Tenure processes that sign fence proofs, every
//! holder verifying its grant's proof and writing through a fence kit:
//! PostgreSQL's, or Redis's in one scenario, while hostile clients forge
//! tokens in another; then checks the recorded history (and the queue
//! tickets and lease events the runner watched, and what the store holds)
//! and prints one table row per scenario. `client` is one of those client
//! processes (started by `run`).
//!
//! `scripts/safety.sh` sets up PostgreSQL and Redis and runs this; the
//! properties are explained in `checker.rs` and the results in
//! `docs/safety.md`.

mod admit;
mod checker;
mod client;
mod clock;
mod fenced;
mod forge;
mod history;
mod hostile;
mod procs;
mod redis_kit;
mod scenario;
mod store;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "tenure-safety",
    about = "Fault-injection safety checker for Tenure"
)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Cmd,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the scenarios and print the table.
    Run(RunArgs),
    /// One workload client (started by `run`).
    Client(client::ClientArgs),
    /// List the scenarios.
    List,
}

/// Settings of `run`.
#[derive(Args, Debug)]
struct RunArgs {
    /// PostgreSQL connection string (scripts/postgres.sh prints one).
    #[arg(long, env = "TENURE_SAFETY_PG")]
    pg: String,
    /// Redis URL, for the scenario on the Redis kit
    /// (fence/kits/scripts/redis.sh prints one); without it that scenario
    /// fails.
    #[arg(long, env = "TENURE_SAFETY_REDIS")]
    redis: Option<String>,
    /// The CI variant: 12 s of load per scenario instead of 120 s.
    #[arg(long)]
    quick: bool,
    /// Load per scenario in seconds (overrides --quick).
    #[arg(long)]
    seconds: Option<u64>,
    /// Client processes.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Lease names contended for.
    #[arg(long, default_value_t = 3)]
    names: usize,
    /// Only these scenarios (comma-separated; see `list`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Allowed expiry lag beyond the TTL, ms (NATS batches expiries ~250 ms).
    #[arg(long, default_value_t = 1000)]
    allowed_lag_ms: u64,
    /// Holders' safety margin in ms for every scenario but the negative
    /// controls (default 50).
    #[arg(long, allow_hyphen_values = true)]
    margin_ms: Option<i64>,
    /// How long the partition scenario cuts a node off, seconds.
    #[arg(long, default_value_t = 5)]
    partition_secs: u64,
    /// Folder for histories and logs (kept; default: a new temp folder).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// nats-server binary (default: .tools/bin/nats-server, then PATH).
    #[arg(long)]
    nats_server: Option<PathBuf>,
    /// A deliberate bug in the clients, for showing a control catches it:
    /// `no-proof-check` (every write's token reaches the kit unchecked).
    /// Refused unless TENURE_TEST_FAULTS=1 is set.
    #[arg(long, hide = true, value_parser = ["no-proof-check"])]
    test_fault: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::Client(args) => match client::run(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("tenure-safety client: {err}");
                ExitCode::FAILURE
            }
        },
        Cmd::List => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            for s in scenario::all() {
                // A reader that stops early (`| head`) closes the pipe:
                // stop there, not panic.
                if writeln!(out, "{}", s.name).is_err() {
                    break;
                }
            }
            ExitCode::SUCCESS
        }
        Cmd::Run(args) => match run(args).await {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(err) => {
                eprintln!("tenure-safety: {err}");
                ExitCode::from(2)
            }
        },
    }
}

/// Runs the chosen scenarios; true when every one met its expectation.
async fn run(args: RunArgs) -> Result<bool, String> {
    let no_proof_check = args.test_fault.is_some();
    admit::check_test_fault(
        no_proof_check,
        std::env::var(admit::TEST_FAULTS_ENV).ok().as_deref(),
    )?;
    if no_proof_check {
        eprintln!(
            "tenure-safety: WARNING: test fault no-proof-check: the clients admit every token without its proof; the stores can be poisoned"
        );
    }
    let self_bin = std::env::current_exe().map_err(|e| e.to_string())?;
    let tenure_bin = self_bin.with_file_name("tenure");
    if !tenure_bin.is_file() {
        return Err(format!(
            "{} not found: build it with `cargo build -p tenure`",
            tenure_bin.display()
        ));
    }
    let nats_bin = tenure::find_binary(args.nats_server.as_deref())?;
    let work_dir = match args.work_dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("tenure-safety-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work_dir).map_err(|e| e.to_string())?;
    let fence_key = work_dir.join("fence.pem");
    procs::generate_fence_key(&tenure_bin, &fence_key)?;
    let pg = fenced::connect(&args.pg).await?;
    fenced::setup(&pg).await?;
    let seconds = args.seconds.unwrap_or(if args.quick { 12 } else { 120 });
    let set = scenario::Settings {
        pg: args.pg.clone(),
        clients: args.clients.max(1),
        names: (0..args.names.max(1))
            .map(|i| format!("res.{}", (b'a' + i as u8) as char))
            .collect(),
        duration: Duration::from_secs(seconds),
        quick: args.quick && args.seconds.is_none(),
        work_dir: work_dir.clone(),
        nats_bin,
        tenure_bin,
        self_bin,
        allowed_lag_ms: args.allowed_lag_ms,
        margin_ms: args.margin_ms,
        partition: Duration::from_secs(args.partition_secs),
        run_id: format!("run-{}-{}", clock::real_ms(), std::process::id()),
        redis: args.redis.clone(),
        fence_key,
        no_proof_check,
    };
    let scenarios: Vec<_> = scenario::all()
        .into_iter()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|o| o == s.name))
        .collect();
    if scenarios.is_empty() {
        return Err("no scenario matches --only; see `tenure-safety list`".into());
    }
    eprintln!(
        "tenure-safety: {} scenarios, {} clients on {} names, {seconds}s of load each; files in {}",
        scenarios.len(),
        set.clients,
        set.names.len(),
        work_dir.display()
    );
    let mut outcomes = Vec::new();
    for sc in &scenarios {
        if sc.fault == scenario::Fault::IsolateLeaderThenFollower {
            // A scenario that cannot run is a failed scenario, not a pass.
            if let Err(err) = procs::Netns::setup(1) {
                let why =
                    format!("network namespaces unavailable (run as root with `ip netns`): {err}");
                eprintln!("== {}: FAILED, {why}", sc.name);
                outcomes.push(scenario::Outcome::not_run(sc, why));
                continue;
            }
        }
        if sc.store == store::Kind::Redis && set.redis.is_none() {
            let why = "no Redis: pass --redis URL (scripts/safety.sh starts one with fence/kits/scripts/redis.sh)".to_string();
            eprintln!("== {}: FAILED, {why}", sc.name);
            outcomes.push(scenario::Outcome::not_run(sc, why));
            continue;
        }
        eprintln!("== {} ...", sc.name);
        let mut outcome = scenario::run(sc, &set).await?;
        if let Some(short) = outcome.short_only() {
            // Too little happened to judge (a slow machine): once more,
            // with twice the load. Violations are never run again.
            let first = scenario::load(sc, &set);
            let longer = scenario::Settings {
                duration: first * 2,
                quick: false,
                // Its own rows in the fenced store: the new bucket's tokens
                // start again at 1.
                run_id: format!("{}-again", set.run_id),
                ..set.clone()
            };
            eprintln!(
                "== {}: short of its minimums in {} s ({short}); running it again with {} s of load",
                sc.name,
                first.as_secs(),
                longer.duration.as_secs()
            );
            outcome = scenario::run(sc, &longer).await?;
            outcome.first_try = Some(format!(
                "second run, with {} s of load: the first ({} s) broke nothing but fell short ({short})",
                longer.duration.as_secs(),
                first.as_secs()
            ));
        }
        eprintln!(
            "== {}: {} ({} violations)",
            sc.name,
            if outcome.passed() { "ok" } else { "FAILED" },
            outcome.report.violations()
        );
        let r = &outcome.report;
        eprintln!(
            "   {} holdings, {} writes accepted, {} stale writes refused, {} stale writes accepted, {} early losses; expiries: {} measured (max lag {} ms), {} under faults (max lag {} ms, bounded), {} by handoff, {} unverified",
            r.holdings,
            r.writes_accepted,
            r.stale_refused,
            r.stale_accepted,
            r.early_losses,
            r.expiries_measured,
            r.max_expiry_lag_ms,
            r.expiry_excused,
            r.max_excused_lag_ms,
            r.expiry_by_handoff,
            r.expiry_unverified
        );
        eprintln!(
            "   FIFO: {} queued waiters, {} grants without a ticket judged, {} contended pairs judged, {} excused, {} overtaken; semaphore: {} holders at most, {} over the limit; read-write: {} exclusive holdings judged, {} pairs of readers at once, {} holdings beside an exclusive one; groups: {} taken, {} complete blocks watched, {} in part ({} in the watch stream)",
            r.fifo_waiters,
            r.fifo_ticketless,
            r.fifo_pairs, r.fifo_excused, r.p6_fifo, r.max_concurrent, r.p7_limit,
            r.rw_exclusive, r.rw_shared_pairs, r.p10_rw,
            r.groups_taken, r.group_blocks, r.p8_group, r.p8_watch
        );
        eprintln!(
            "   P5: {} pairs judged, {} lock delays judged ({} granted inside one); revokes: {} holdings revoked, their writes after the revoke {} refused / {} accepted; {} acted after a loss; {} renewals on KeepAlive streams; {} releases answered LEASE_NOT_HELD though their own tombstone landed; {} leaderships handed over",
            r.p5_pairs,
            r.delays_judged,
            r.p5_delay,
            r.revoked,
            r.revoked_writes_refused,
            r.revoked_writes_accepted,
            r.acted_after_loss,
            r.keepalive_renewals,
            r.released_though_refused,
            r.handovers
        );
        eprintln!(
            "   watch: {} streams resumed ({} refused WATCH_HISTORY_COMPACTED, {} ended WATCH_LAGGED); {} changes judged ({} in replays, {} coalesced, {} inside a MISSED), {} skipped or repeated",
            r.watch_resumes,
            r.watch_compacted,
            r.watch_lagged,
            r.watch_judged,
            r.watch_replayed,
            r.watch_coalesced,
            r.watch_missed,
            r.p9_watch
        );
        let kinds: Vec<String> = forge::Forgery::ALL
            .iter()
            .zip(r.forged_kinds)
            .map(|(k, n)| format!("{n} {}", k.name()))
            .collect();
        eprintln!(
            "   store: {} tokens not granted, {} genuine proofs refused; forged writes: {} sent ({}), {} refused, {} accepted; {} genuine writes accepted after the first",
            r.foreign_tokens,
            r.bad_proofs,
            r.forged_sent,
            kinds.join(", "),
            r.forged_refused,
            r.forged_accepted,
            r.writes_after_forgery
        );
        for e in &outcome.report.examples {
            eprintln!("   {e}");
        }
        for p in outcome.problems.iter().chain(&outcome.shortfalls()) {
            eprintln!("   problem: {p}");
        }
        outcomes.push(outcome);
    }
    print_table(&outcomes);
    for o in &outcomes {
        let r = &o.report;
        let unrefused = r.forged_sent - r.forged_refused.min(r.forged_sent);
        if unrefused + r.foreign_tokens > 0 {
            println!(
                "\n{}: {unrefused} forged writes not refused; the store took {} tokens Tenure never granted for their resources",
                o.scenario.name, r.foreign_tokens
            );
        }
        for p in o.first_try.iter().chain(&o.problems).chain(&o.shortfalls()) {
            println!("\n{}: {p}", o.scenario.name);
        }
    }
    Ok(outcomes.iter().all(|o| o.passed()))
}

/// Prints the results as a Markdown table.
fn print_table(outcomes: &[scenario::Outcome]) {
    println!(
        "| scenario | NATS | secs | ops | faults | handoffs | writes | stale writes refused | P1 tokens | P2 store (stale writes accepted) | P3 overlap | P4 late | P5 early (pairs / lock delays judged) | P6 FIFO (pairs judged / excused) | P7 limit (most holders) | P8 groups (taken / blocks watched) | P9 watch resume (resumes / changes judged) | P10 rw exclusion (exclusive holdings / reader pairs judged) | holdings revoked | expiries measured / under faults (bounded) / by handoff / unverified | max expiry lag ms | closest expiry handoff ms | longest unavailable ms | store tokens not granted | forged writes sent / refused | verdict |"
    );
    println!(
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|---|---|---|---|---:|---|---:|---:|---:|---:|---|---|"
    );
    for o in outcomes {
        let r = &o.report;
        let verdict = match (o.passed(), o.scenario.expect_violations) {
            (true, false) if o.scenario.forgers > 0 => "pass (every forged write refused)",
            (true, false) => "pass",
            (true, true) => "pass (violations expected and found)",
            (false, _) if !o.problems.is_empty() || !o.shortfalls().is_empty() => {
                "FAIL (see below)"
            }
            (false, false) => "FAIL",
            (false, true) => "FAIL (checker missed the violations)",
        };
        println!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} ({} / {}) | {} ({} / {}) | {} | {} | {} ({} / {}) | {} | {} | {} / {} / {} / {} | {} | {} | {:.0} | {} | {} | {} |",
            o.scenario.name,
            if o.scenario.nats_nodes > 1 { "R3" } else { "R1" },
            o.seconds,
            r.operations,
            o.faults,
            r.handoffs,
            r.writes_accepted,
            r.stale_refused,
            r.p1_tokens,
            r.p2_store,
            r.stale_accepted,
            r.p3_overlap,
            r.p4_expiry,
            r.p5_early,
            r.p5_pairs,
            r.delays_judged,
            r.p6_fifo,
            r.fifo_pairs,
            r.fifo_excused,
            if o.scenario.limit > 0 {
                format!("{} ({} of {})", r.p7_limit, r.max_concurrent, o.scenario.limit)
            } else {
                "-".to_string()
            },
            if o.scenario.group > 0 {
                format!("{} ({} / {})", r.p8_group, r.groups_taken, r.group_blocks)
            } else {
                "-".to_string()
            },
            r.p9_watch,
            r.watch_resumes,
            r.watch_judged,
            if o.scenario.rw {
                format!(
                    "{} ({} / {})",
                    r.p10_rw, r.rw_exclusive, r.rw_shared_pairs
                )
            } else {
                "-".to_string()
            },
            if o.scenario.revokes {
                r.revoked.to_string()
            } else {
                "-".to_string()
            },
            r.expiries_measured,
            r.expiry_excused,
            r.expiry_by_handoff,
            r.expiry_unverified,
            r.max_expiry_lag_ms,
            r.closest_expiry_handoff_ms
                .map_or("-".to_string(), |g| format!("{g:.1}")),
            r.longest_unavailable_ms,
            r.foreign_tokens,
            if o.scenario.forgers > 0 {
                format!("{} / {}", r.forged_sent, r.forged_refused)
            } else {
                "-".to_string()
            },
            verdict
        );
    }
}
