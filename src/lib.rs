//! Tenure: stateless lease coordination with fencing tokens over NATS
//! JetStream KV.
//!
//! Clients call `Acquire`, `Renew`, `Release`, `GetLease` and `WatchLease`
//! over gRPC (`proto/tenure/v1/lease.proto`). Each call becomes one
//! compare-and-set publish on a JetStream KV bucket; the revision of the write
//! that acquired a holding is its fencing token. No lease state lives in the
//! process, so any number of replicas can serve one bucket.
//!
//! The protocol and the NATS facts it rests on are in
//! `../shared/design/lease-protocol.md`; `src/lease.rs` is where it lives.
//!
//! # Layout
//!
//! - [`config`]: command line, environment and their validation.
//! - [`config_file`]: the TOML config file, its precedence, `check-config`.
//! - [`guard`]: what wraps every RPC: authentication, authorization, watch
//!   limits, metrics and the trace span.
//! - [`auth`]: caller identity (token or client certificate) and grants.
//! - [`limits`]: request, metadata and watch-stream limits.
//! - [`metrics`]: Prometheus metrics and their HTTP listener.
//! - [`admin`]: the operator RPCs, ListLeases and RevokeLease.
//! - [`server`]: wiring: connect to NATS, open the bucket, health, reflection,
//!   graceful shutdown.
//! - [`service`]: gRPC glue: request validation, proto ↔ domain conversion.
//! - [`validate`]: the input rules (names, holders, TTLs, keys, metadata).
//! - [`lease`]: the lease protocol: acquire, renew, release, get, wait.
//! - [`watch`]: the shared bucket watcher that fans lease events out to
//!   `WatchLease` streams and waiting Acquires.
//! - [`store`]: the KV adapter: bucket set-up, CAS publishes, leader reads,
//!   ordered consumers, message classification.
//! - [`record`]: the JSON value stored under each lease name.
//! - [`error`]: the one error type and its mapping to gRPC statuses.
//! - [`embedded`]: starts and supervises a local nats-server when no NATS URL
//!   is given.
//! - [`shutdown`]: the shutdown signal shared by long-running tasks.
//! - [`telemetry`]: logs, OTLP traces and W3C trace-context propagation.
//! - [`proto`]: the generated gRPC types.

pub mod admin;
pub mod auth;
pub mod cli;
pub mod config;
pub mod config_file;
pub mod embedded;
pub mod error;
pub mod guard;
pub mod lease;
pub mod limits;
pub mod metrics;
pub mod record;
pub mod server;
pub mod service;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod validate;
pub mod watch;

/// The generated protobuf and gRPC types of `tenure.v1`.
pub mod proto {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("tenure.v1");

    /// The encoded file descriptor set, served by gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("tenure_descriptor");
}
