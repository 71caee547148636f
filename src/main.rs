//! The `tenure` binary: parse the command line, set up logs, serve.

use std::process::ExitCode;

use clap::Parser;
use tenure::config::{Cli, Command};
use tenure::{server, telemetry};

#[tokio::main]
async fn main() -> ExitCode {
    let Cli {
        command: Command::Serve(config),
    } = Cli::parse();
    telemetry::init(config.log_format);
    if let Err(err) = config.validate() {
        eprintln!("tenure: {err}");
        return ExitCode::from(2);
    }
    match server::run(config, server::shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tenure: {err}");
            ExitCode::FAILURE
        }
    }
}
