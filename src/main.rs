//! The `tenure` binary: runs the command line (see [`tenure::cli`]).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    tenure::cli::main(std::env::args_os().collect()).await
}
