//! The Rust client's integration tests: one test binary (one link) with a
//! module per area, each against a real `tenure serve` started per test by
//! [`common::Server`] (its own nats-server, temporary folder and free port).

#[path = "../common/mod.rs"]
mod common;

mod auth;
mod election;
mod fencing;
mod group;
mod keepalive;
mod options;
mod readme;
mod reasons;
mod rwlock;
mod semaphore;
mod session;
mod transfer;
mod unreachable;
mod watch;
