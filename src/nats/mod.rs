//! The NATS adapter: everything Tenure asks of NATS and nothing about
//! leases. [`bucket`] opens the bucket's stream (every shard of it),
//! makes conditional publishes and atomic batches on it and reads from its
//! leader; [`leaders`] spreads a sharded bucket's stream leaders over the
//! cluster; [`consumer`] follows and
//! replays it with ordered consumers; [`changes`] hears its writes as they
//! are published (a hint that wakes waiters early); [`message`] tells its messages apart
//! by their headers; [`connection`] connects with the configured
//! credentials; [`embedded`] starts and supervises a local nats-server.

mod bucket;
mod changes;
mod connection;
mod consumer;
pub mod embedded;
mod history;
mod leaders;
mod message;

pub use bucket::{CasError, Store, Write, WriteOp};
pub use connection::connect;
pub use consumer::{Follow, Start};
pub use history::History;
pub use leaders::balance_leaders;
pub use message::{Message, Op};
