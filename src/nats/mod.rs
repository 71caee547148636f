//! The NATS adapter: everything Tenure asks of NATS and nothing about
//! leases. [`kv`] makes conditional publishes, leader reads and ordered
//! consumers on the bucket's stream and tells messages apart by their
//! headers; [`connection`] connects with the configured credentials;
//! [`embedded`] starts and supervises a local nats-server.

mod connection;
mod consumer;
pub mod embedded;
mod kv;
mod message;

pub use connection::connect;
pub use consumer::{Follow, Start};
pub use kv::{balance_leaders, CasError, Store, Write, WriteOp};
pub use message::{Message, Op};
