//! The `tenure` command line: parses it and runs the subcommand.
//!
//! `serve` resolves its settings (flags, `TENURE_*` environment, config
//! file), sets up logs and traces, and runs the server until SIGINT or
//! SIGTERM; `check-config` resolves a config file the same way and reports.
//!
//! The other subcommands are for people and scripts: `lock`, `get`, `list`,
//! `watch`, `acquire`, `renew`, `release`, `revoke`, `top`, `health` and
//! `completions` (and, hidden, `man`). They use nothing of the server but
//! the generated `crate::proto` types and the gRPC health client: a gRPC
//! client that happens to ship in the same binary, talking to every replica
//! the way any other client does. `tenure --version` names the build
//! (`crate::observe::version`).
//!
//! - `args`: the command line of each client subcommand and the shared
//!   connection flags.
//! - `connect`: endpoint, TLS and bearer token.
//! - `error`: one-line errors and the documented exit codes.
//! - `output`: tables, JSON and time formatting.
//! - `commands`: the one-shot subcommands.
//! - `lock`: run a command under a lease.
//! - `top`: the live terminal view.
//! - `health`: the gRPC health check, for probes and containers.
//! - `man`: the manual pages, generated from these definitions.

mod args;
mod commands;
mod connect;
mod error;
mod fence_keys;
mod health;
mod history;
mod lock;
mod man;
mod output;
mod top;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use args::ClientCommand;

use crate::config::{self, Config, ResolveError};
use crate::observe::version::LONG_VERSION;
use crate::{observe, server};

/// Tenure: lease coordination with fencing tokens over NATS JetStream.
#[derive(Debug, Parser)]
#[command(name = "tenure", version = LONG_VERSION, about)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
// Parsed once per process: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Serve the gRPC API. Without --nats-url, starts a local nats-server.
    Serve(Config),
    /// Validate a TOML configuration file (with the TENURE_* environment
    /// applied), print the settings it resolves to, and exit.
    CheckConfig {
        /// The configuration file to check.
        file: PathBuf,
    },
    /// The client subcommands (lock, get, list, watch, top, ...).
    #[command(flatten)]
    Client(ClientCommand),
}

/// Runs the command line `args` (program name first); returns the exit
/// code: 0 on success, 2 for unusable settings, 1 when serving failed.
pub async fn main(args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // Everything after the program name: `serve` or `check-config`, then
    // its own arguments.
    let rest: Vec<OsString> = args.into_iter().skip(1).collect();
    match cli.command {
        Command::Serve(_) => serve(rest).await,
        Command::CheckConfig { file } => check_config(file),
        Command::Client(cmd) => run_client(cmd).await,
    }
}

/// Runs one client subcommand and returns the process exit code.
async fn run_client(cmd: ClientCommand) -> ExitCode {
    let result = match cmd {
        ClientCommand::Lock(a) => return ExitCode::from(lock::lock(a).await),
        ClientCommand::Get(a) => commands::get(a).await,
        ClientCommand::List(a) => commands::list(a).await,
        ClientCommand::Watch(a) => commands::watch(a).await,
        ClientCommand::Acquire(a) => commands::acquire(a).await,
        ClientCommand::Renew(a) => commands::renew(a).await,
        ClientCommand::Release(a) => commands::release(a).await,
        ClientCommand::Revoke(a) => commands::revoke(a).await,
        ClientCommand::Transfer(a) => commands::transfer(a).await,
        ClientCommand::Top(a) => top::top(a).await,
        ClientCommand::Health(a) => health::health(a).await,
        ClientCommand::FenceKeys(a) => fence_keys::fence_keys(a).await,
        ClientCommand::History(a) => history::history(a).await,
        ClientCommand::Man(a) => man::man(Cli::command(), a),
        ClientCommand::Completions(a) => {
            // The whole command line, `serve` and `check-config` included.
            let mut root = Cli::command();
            clap_complete::generate(a.shell, &mut root, "tenure", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.print();
            ExitCode::from(e.code)
        }
    }
}

/// `tenure serve`.
async fn serve(args: Vec<OsString>) -> ExitCode {
    let config = match resolve(args) {
        Ok((config, _)) => config,
        Err(code) => return code,
    };
    let _telemetry = match observe::init(config.log_format, config.otlp_endpoint.as_deref()) {
        Ok(guard) => guard,
        Err(err) => {
            eprintln!("tenure: {err}");
            return ExitCode::from(2);
        }
    };
    if let Err(err) = config.validate() {
        eprintln!("tenure: {err}");
        return ExitCode::from(2);
    }
    if !config.test_fault.is_empty() {
        let faults: Vec<String> = config.test_fault.iter().map(|f| f.name()).collect();
        tracing::warn!(
            faults = %faults.join(","),
            "TEST FAULTS ON: this server breaks lease safety on purpose (--test-fault); never use it outside a test"
        );
    }
    match server::run(config, server::shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tenure: {err}");
            ExitCode::FAILURE
        }
    }
}

/// `tenure check-config FILE`: resolved as `serve --config FILE` would be.
fn check_config(file: PathBuf) -> ExitCode {
    let args = vec!["serve".into(), "--config".into(), file.into_os_string()];
    let (config, report) = match resolve(args) {
        Ok(resolved) => resolved,
        Err(code) => return code,
    };
    // A reader that stops early (`| head`) closes stdout: no panic.
    output::write_out(&report);
    match server::check_config(&config) {
        Ok(summary) => {
            output::write_out(&format!("{summary}\n"));
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("tenure: {err}");
            ExitCode::from(2)
        }
    }
}

/// Resolves a `serve` command line; on failure prints why and returns the
/// exit code (clap's own for usage errors and help).
fn resolve(args: Vec<OsString>) -> Result<(Config, String), ExitCode> {
    match config::resolve(args) {
        Ok(resolved) => Ok(resolved),
        Err(ResolveError::Clap(e)) => e.exit(),
        Err(ResolveError::File(e)) => {
            eprintln!("tenure: {e}");
            Err(ExitCode::from(2))
        }
    }
}
