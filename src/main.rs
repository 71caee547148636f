//! The `tenure` binary: resolve the command line (flags, `TENURE_*`
//! environment, config file), set up logs, then serve or check a config.

use std::process::ExitCode;

use tenure::config_file::{self, ResolveError, Resolved};
use tenure::{config, server, telemetry};

#[tokio::main]
async fn main() -> ExitCode {
    let resolved = match config_file::resolve(std::env::args_os().collect()) {
        Ok(r) => r,
        Err(ResolveError::Clap(e)) => e.exit(),
        Err(ResolveError::File(e)) => {
            eprintln!("tenure: {e}");
            return ExitCode::from(2);
        }
    };
    let config = match resolved {
        Resolved::Serve(config) => *config,
        Resolved::Client(cmd) => {
            return match *cmd {
                tenure::cli::ClientCommand::Completions(a) => tenure::cli::completions(
                    a.shell,
                    <config::Cli as clap::CommandFactory>::command(),
                ),
                cmd => tenure::cli::run(cmd).await,
            }
        }
        Resolved::CheckConfig(config, report) => {
            print!("{report}");
            return match config_file::check(&config) {
                Ok(summary) => {
                    println!("{summary}");
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("tenure: {err}");
                    ExitCode::from(2)
                }
            };
        }
    };
    let _telemetry = match telemetry::init(config.log_format, config.otlp_endpoint.as_deref()) {
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
    match server::run(config, server::shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tenure: {err}");
            ExitCode::FAILURE
        }
    }
}
