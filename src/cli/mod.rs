//! The `tenure` subcommands for people and scripts: `lock`, `get`, `list`,
//! `watch`, `acquire`, `renew`, `release`, `revoke`, `top` and
//! `completions`.
//!
//! The server does not depend on anything here, and this module uses
//! nothing of the server but the generated `crate::proto` types: it is a
//! gRPC client that happens to ship in the same binary, so it talks to
//! every Tenure replica the way any other client does.
//!
//! Only [`ClientCommand`], [`run`] and [`completions`] are public: the
//! binary's wiring needs nothing else.
//!
//! - `args`: the command line of each subcommand and the shared connection
//!   flags.
//! - `connect`: endpoint, TLS and bearer token.
//! - `error`: one-line errors and the documented exit codes.
//! - `output`: tables, JSON and time formatting.
//! - `commands`: the one-shot subcommands.
//! - `lock`: run a command under a lease.
//! - `top`: the live terminal view.

mod args;
mod commands;
mod connect;
mod error;
mod lock;
mod output;
mod top;

use std::process::ExitCode;

pub use args::ClientCommand;

/// Runs one client subcommand and returns the process exit code.
/// `completions` here covers the client subcommands only; the binary calls
/// [`completions`] with its whole command line instead.
pub async fn run(cmd: ClientCommand) -> ExitCode {
    let result = match cmd {
        ClientCommand::Lock(a) => return ExitCode::from(lock::lock(a).await),
        ClientCommand::Get(a) => commands::get(a).await,
        ClientCommand::List(a) => commands::list(a).await,
        ClientCommand::Watch(a) => commands::watch(a).await,
        ClientCommand::Acquire(a) => commands::acquire(a).await,
        ClientCommand::Renew(a) => commands::renew(a).await,
        ClientCommand::Release(a) => commands::release(a).await,
        ClientCommand::Revoke(a) => commands::revoke(a).await,
        ClientCommand::Top(a) => top::top(a).await,
        ClientCommand::Completions(a) => {
            use clap::Subcommand;
            let root = ClientCommand::augment_subcommands(clap::Command::new("tenure"));
            return completions(a.shell, root);
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

/// Writes the completion script for `shell` of the whole `tenure` command
/// line (`root`, e.g. `Cli::command()`) to stdout.
pub fn completions(shell: clap_complete::Shell, mut root: clap::Command) -> ExitCode {
    let name = root.get_name().to_string();
    clap_complete::generate(shell, &mut root, name, &mut std::io::stdout());
    ExitCode::SUCCESS
}
