//! The `tenure` binary: builds the runtime and runs the command line (see
//! [`tenure::cli`]).
//!
//! The runtime is tokio's multi-thread scheduler (one worker per CPU, or
//! `TOKIO_WORKER_THREADS`) with its LIFO slot off where the build allows it
//! (`--cfg tokio_unstable`, set in `.cargo/config.toml`). Each renewal or
//! Acquire publishes to NATS from its own task; with the slot, every publish
//! wakes the NATS connection task into the slot, which runs next and writes
//! that one message: a `writev` per message on each socket. Without it, the
//! tasks that became ready together all run first and each connection writes
//! their messages in one syscall.
//!
//! Memory comes from mimalloc, not the system allocator: each RPC allocates
//! and frees its request, futures, NATS message and reply, and malloc/free
//! were about 12 % of the process's CPU in a profile of bench workload 2.
//! Measured A/B with the release profile's LTO (BENCHMARKS.md, "Issue 25 §3"):
//! Tenure's CPU per 1,000 KeepAlive renewals fell by about a tenth with
//! mimalloc alone and a fifth with LTO as well.

use std::process::ExitCode;

/// The process's allocator (see the module docs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    match builder.build() {
        Ok(runtime) => runtime.block_on(tenure::cli::main(std::env::args_os().collect())),
        Err(err) => {
            eprintln!("tenure: cannot start the async runtime: {err}");
            ExitCode::FAILURE
        }
    }
}
