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
//! above them (`tests/it/layers.rs` fails when a file refers to a higher
//! layer, or files of one layer refer to each other in a circle). This is
//! the one description of the server's code; `docs/design.md` explains the
//! protocol it implements.
//!
//! - `main.rs`: thin: builds the runtime (its LIFO slot off, design
//!   section 20) and hands the command line to `cli`.
//! - `cli/`: the `tenure` command line: `serve`, `check-config`, and the
//!   client subcommands for people (`lock`, `get`, `list`, `watch`, `top`,
//!   `health` for probes, ...), which use only the generated [`proto`]
//!   types; `man` (hidden) writes the man pages of the release archive.
//! - `server.rs`: wiring only: connect, open the bucket, start the shared
//!   watcher, serve the API with health and reflection (gRPC, and on the
//!   same port gRPC-Web and Connect), shut down.
//! - `api/`: the gRPC glue: every RPC written once behind one wrapper
//!   (authentication, authorization, spans, metrics; `service.rs`), the
//!   ElectionService through the same wrapper (`election.rs`), the
//!   KeepAlive stream (`keepalive/`: the stream's loop and the batch of
//!   entries), request validation, proto ↔ domain conversion, the
//!   connection listener and the limits (`limits/`: the tower layer, call
//!   budgets, watch slots, KeepAlive reply bytes); `connect/`, the Connect
//!   protocol (JSON or protobuf over HTTP/1.1 or HTTP/2) as a tower layer
//!   that makes each Connect call a gRPC call of the same services.
//! - `lease/`: the protocol. It knows no proto or gRPC types: it takes
//!   validated arguments and returns holdings or reasoned errors. Its
//!   `mod.rs` is the public face (`Leases`); the rooms along the call
//!   path are `keys.rs` (every key of the data model, built and parsed),
//!   `record.rs`, `rules.rs` (the decisions as pure functions), `cache.rs`,
//!   `acquire.rs` (with its fair queue, `fifo.rs`), `wait.rs` (the one
//!   sleep of every waiting call), `renew.rs`, `end.rs` (release, revoke),
//!   `list.rs`, `refusals.rs` (every error a lease call answers with);
//!   beyond one lease, `semaphore/` (with the read-write locks kept as
//!   semaphores, `rwlock.rs`, and the sweep), `group.rs`, `election.rs` and
//!   `shards.rs` (the one place that knows a bucket can be several
//!   streams); and `watch/`, the shared bucket watcher: its handle
//!   (`mod.rs`) and task (`task.rs`), the mirror of current holdings, the
//!   queue view of the fair queues, the bounded event queue of each watch
//!   (`outbox.rs`) and the replay of a resumed watch.
//! - `nats/`: the NATS adapter: conditional publishes, atomic batches,
//!   leader reads and ordered consumers on the bucket's streams; it
//!   classifies a message by its headers (value, `DEL`, `PURGE`, a marker)
//!   and hands back the payload (decoding records is the lease layer's
//!   job); the connection; the managed local nats-server.
//! - Leaves: `observe/` (metrics and their HTTP listener, logs, traces,
//!   `version.rs`: which build this is),
//!   `config/` (flags, `TENURE_*` environment, the config file, grants as
//!   plain data that `api` interprets), `error.rs` (the error type and the
//!   one reason → gRPC code mapping), and [`proto`] (the generated types).
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

pub use config::{Action, Config, Grant, LogFormat, TestFault, WatcherHold};
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
