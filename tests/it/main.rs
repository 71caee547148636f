//! The integration tests: one test binary, one module per area (the layout
//! cargo and jj use), so the server and its dependencies are linked once.
//! Every test starts its own nats-server (and, where it needs one, its own
//! `tenure serve` process) on free loopback ports, so modules run in
//! parallel; tests that need a process-global resource (a tracing
//! subscriber, the metrics registry) drive `tenure serve` as a subprocess.
//!
//! The full run runs `shards_cluster` on its own after the rest: its tests
//! time a 3-node cluster forming, which 170 tests beside it can slow past
//! Tenure's start-up patience.
//!
//! `scripts/test.sh --fast` skips the slow modules listed in `SLOW_MODULES`
//! there; the full run (`scripts/test.sh`, CI) runs all of them. One module:
//! `cargo test --test it acquire::`.

#[path = "../common/mod.rs"]
mod common;

mod acquire;
mod admin;
mod build_info;
mod check_config;
mod cli;
mod cli_hostile;
mod cli_top;
mod connect;
mod contract;
mod deadline;
mod docs;
mod election;
mod expiry;
mod expiry_bounds;
mod fence_proofs;
mod fencing;
mod fifo;
mod fifo_r3;
mod fuzz;
mod groups;
mod health;
mod history;
mod hostile_connections;
mod hostile_keepalive;
mod hostile_load;
mod hostile_requests;
mod hostile_waiters;
mod keepalive;
mod layers;
mod limits;
mod lock_delay;
mod logs;
mod metrics;
mod nats_auth;
mod no_atomic;
mod one_write;
mod one_write_r3;
mod ownership;
mod partition;
mod restart;
mod rwlock;
mod rwlock_r3;
mod security;
mod semaphore;
mod shards;
mod shards_cluster;
mod startup;
mod test_faults;
mod traces;
mod transfer;
mod validation;
mod walkthrough;
mod watch;
mod watch_heals;
mod watch_memory;
mod watch_missed;
mod watch_resume;
mod watcher_idle;
