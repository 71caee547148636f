//! The NATS adapter: everything Tenure asks of NATS and nothing about
//! leases. [`bucket`] opens the bucket's stream (every shard of it),
//! makes conditional publishes and atomic batches on it, reads from its
//! leader and spreads the shards' leaders; [`consumer`] follows and
//! replays it with ordered consumers; [`message`] tells its messages apart
//! by their headers; [`connection`] connects with the configured
//! credentials; [`embedded`] starts and supervises a local nats-server.

mod bucket;
mod connection;
mod consumer;
pub mod embedded;
mod message;

pub use bucket::{balance_leaders, CasError, Store, Write, WriteOp};
pub use connection::connect;
pub use consumer::{Follow, Start};
pub use message::{Message, Op};
