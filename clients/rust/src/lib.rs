//! Client for Tenure, the gRPC lease-coordination service: the tonic stubs
//! generated from `proto/tenure/v1/lease.proto` (at build time, in
//! [`proto`]) and a thin session helper over them.
//!
//! - [`Client`]: a connection ([`Client::connect`], or
//!   [`Client::connect_with`] a [`ClientConfig`]: TLS, mTLS, bearer token,
//!   metadata); [`Client::acquire`], [`Client::get`], [`Client::watch`], and
//!   the admin helpers [`Client::list`] and [`Client::revoke`].
//! - [`Session`]: one held lease, renewed in the background at a third of
//!   its TTL (the renewals of all a client's sessions share one `KeepAlive`
//!   stream, with unary `Renew` as the fallback). It knows its [safe deadline](Session::safe_deadline), signals
//!   loss through a [`CancellationToken`](tokio_util::sync::CancellationToken)
//!   ([`Session::lost`]), releases with [`Session::release`] and schedules a
//!   release when dropped. The client's one watch stream follows every
//!   session's lease, so a revoke or another holder is noticed at once.
//! - [`GroupSession`]: several leases taken all or none
//!   ([`Client::acquire_group`]), renewed together, lost as a whole.
//! - [`Semaphore`]: up to N holders of a name at once, each a [`Session`]
//!   with its own slot and fencing token.
//! - [`RwLock`] ([`Client::rwlock`]): one exclusive holder
//!   ([`RwLock::write`]) or many shared holders ([`RwLock::read`]) of a
//!   name, each a [`Session`] with its own slot, fencing token and
//!   [mode](Session::mode); an exclusive holder turns shared in place with
//!   [`Session::downgrade`].
//! - [`Watch`]: a [`Stream`](futures_core::Stream) of [`Event`]s.
//! - [`Error`] with a typed [`Reason`] (the generated `ErrorReason`) read
//!   from the `google.rpc.ErrorInfo`, and whether retrying can help.
//! - [`FencingGuard`]: the downstream fencing check (see [`fencing`] for the
//!   SQL pattern).
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure_client::{AcquireOptions, Client};
//!
//! # async fn f() -> Result<(), tenure_client::Error> {
//! let client = Client::connect("127.0.0.1:7419").await?;
//! let session = client
//!     .acquire("jobs.nightly", "worker-1", Duration::from_secs(10), AcquireOptions::default())
//!     .await?;
//! tokio::select! {
//!     _ = session.lost().cancelled() => eprintln!("lost the lease: stop"),
//!     _ = do_the_job(session.fencing_token()) => {}
//! }
//! session.release().await?;
//! # Ok(()) }
//! # async fn do_the_job(_token: u64) {}
//! ```
//!
//! The helper needs a Tokio runtime (it spawns the renewal task with
//! `tokio::spawn`).
//!
//! # Layout
//!
//! A module uses only modules before it in this order (lowest first), so
//! there is no circle among them:
//!
//! 1. `proto` (generated, declared here), then `error`, `config`;
//! 2. `stub`: the stub types, the call deadline, opening a `WatchLease`;
//! 3. `watch`, then `follow` (the client's one watch that notices loss);
//! 4. `keepalive` (the client's one `KeepAlive` stream);
//! 5. `lifecycle`: what a [`Session`] and a [`GroupSession`] share (the
//!    safe deadline, the renewal loop, loss, release, release on drop),
//!    parameterised by a `Holding`;
//! 6. `session`, then `group`: the two holdings;
//! 7. `client`, then `semaphore`, `rwlock` and `election` on top of it.
//!
//! `fencing` uses none of them.

#![warn(missing_docs)]

mod client;
mod config;
mod election;
mod error;
pub mod fencing;
mod follow;
mod group;
mod keepalive;
mod lifecycle;
mod rwlock;
mod semaphore;
mod session;
mod stub;
mod watch;

/// The generated protobuf types and gRPC client of `tenure.v1`
/// (`proto/tenure/v1/lease.proto` and `error_reason.proto`, compiled by
/// `build.rs`).
pub mod proto {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("tenure.v1");
}

pub use client::{AcquireOptions, Client, LeaseInfo};
pub use config::{CallCredentials, ClientConfig, TokenFn, DEFAULT_CONNECT_TIMEOUT};
pub use election::{Candidate, Election, Leader, LeaderChange, VALUE_KEY};
pub use error::{code_name, required_nats_server, Error, Reason, DOMAIN, RETRYABLE_REASONS};
pub use fencing::{FencingGuard, StaleTokenError};
pub use group::{GroupRelease, GroupSession};
pub use lifecycle::{default_safety_margin, Loss, LossCause, DEFAULT_RENEW_FRACTION};
pub use proto::{ChangeType, EventType, Lease, LockMode};
pub use rwlock::{RwLock, RwLockAcquire};
pub use semaphore::{limit_in_force, Semaphore};
pub use session::Session;
pub use stub::{Stub, DEFAULT_CALL_TIMEOUT};
pub use watch::{Event, Watch};

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn public_types_can_cross_tasks() {
        assert_send_sync::<crate::Session>();
        assert_send_sync::<crate::GroupSession>();
        assert_send_sync::<crate::Client>();
        assert_send_sync::<crate::Error>();
        assert_send_sync::<crate::FencingGuard>();
        assert_send_sync::<crate::RwLock>();
        assert_send_sync::<crate::RwLockAcquire>();
        fn assert_send<T: Send>() {}
        assert_send::<crate::Watch>();
    }
}
