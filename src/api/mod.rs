//! The gRPC API: tonic glue over the lease protocol. [`service`] holds
//! every LeaseService RPC (validation with [`validate`], proto ↔ domain with
//! [`convert`]) behind one generic wrapper for authentication
//! ([`auth`]), spans and metrics, which [`election`]'s ElectionService
//! RPCs go through too; [`keepalive`] is the KeepAlive stream, which
//! renews many holdings per message; [`fence`] signs the fence proof of
//! each grant; [`limits`] and [`listener`] bound what
//! callers can make the server hold; [`connect`] serves the Connect
//! protocol (JSON over HTTP/1.1 or HTTP/2) by turning each Connect call
//! into a gRPC call of the same services.

mod auth;
mod connect;
mod convert;
mod election;
mod fence;
mod keepalive;
mod limits;
mod listener;
mod service;
mod validate;

pub use auth::{server_tls, Auth};
pub use connect::ConnectLayer;
pub use election::ElectionApi;
pub use fence::Fences;
pub use limits::{CallLimits, LimitLayer, WatchLimits};
pub use listener::Incoming;
pub use service::LeaseApi;
