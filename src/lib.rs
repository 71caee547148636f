//! Tenure: stateless lease coordination with fencing tokens over NATS
//! JetStream KV.
//!
//! Clients call `Acquire`, `Renew`, `Release`, `GetLease` and `WatchLease`
//! over gRPC (`proto/tenure/v1/`), and elect leaders with the
//! `ElectionService` (`Campaign`, `Proclaim`, `Resign`, `Leader`,
//! `Observe`), whose elections are leases of the same name. Each call
//! becomes one compare-and-set publish on a JetStream KV bucket; the
//! revision of the write that acquired a holding is its fencing token. No
//! lease state lives in the process, so any number of replicas can serve
//! one bucket. `docs/design.md` explains the protocol and why it is safe.
//!
//! # Layout
//!
//! Dependencies run one way, top to bottom; the leaves depend on nothing
//! above them (`tests/layers.rs` checks this):
//!
//! - `cli/`: the `tenure` command line: `serve`, `check-config`, and the
//!   client subcommands for people (`lock`, `get`, `list`, `watch`, `top`,
//!   ...), which use only the generated [`proto`] types.
//! - `server.rs`: wiring only: connect, open the bucket, start the shared
//!   watcher, serve the API with health and reflection, shut down.
//! - `api/`: the gRPC glue: every RPC written once behind one wrapper
//!   (authentication, authorization, spans, metrics), request validation,
//!   proto ↔ domain conversion, the limits layer.
//! - `lease/`: the protocol: acquire, renew, release, revoke, list; the
//!   decisions as pure rules; the key cache; records and holdings; the
//!   shared bucket watcher, its mirror and its events.
//! - `nats/`: the NATS adapter: conditional publishes, leader reads,
//!   ordered consumers and message kinds on the bucket; the connection; the
//!   managed local nats-server.
//! - Leaves: `observe/` (metrics and their HTTP listener, logs, traces),
//!   `config/` (flags, environment, config file, grants), `error.rs` (the
//!   error type and the one reason → gRPC code mapping), and [`proto`] (the
//!   generated types).
//!
//! Modules are private; what the binary, the tests, the benchmark and the
//! safety checker use is re-exported here.

mod api;
pub mod cli;
mod config;
mod error;
mod lease;
mod nats;
mod observe;
mod server;

pub use config::{Action, Config, Grant, LogFormat};
pub use error::{Reason, StartError};
pub use lease::{shard_of, KeyHash, Record, Released};
pub use nats::embedded::{find_binary, NatsProcess, PINNED_VERSION};
pub use observe::{init as init_telemetry, log_filter, Telemetry};
pub use server::{check_config, run, shutdown_signal, start, Running, SERVICE_NAME};

/// The generated protobuf and gRPC types of `tenure.v1`.
pub mod proto {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("tenure.v1");

    /// The encoded file descriptor set, served by gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("tenure_descriptor");
}
