//! The one clock every process of a run shares.
//!
//! Holding intervals of different client processes are compared with each
//! other, so they must be read from a clock all of them share: Linux's
//! `CLOCK_MONOTONIC` is one per machine (it is what `std::time::Instant`
//! reads, but `Instant` cannot be written to a file or sent to another
//! process). Wall-clock milliseconds are kept beside it only to compare with
//! the times NATS writes into messages (expiry markers, acquire times).

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds on the machine's monotonic clock, comparable across processes.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC
    // is always available on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wall-clock Unix milliseconds (the clock NATS stamps messages with).
pub fn real_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Milliseconds to nanoseconds, signed (margins may be negative).
pub fn ms_to_ns(ms: i64) -> i64 {
    ms * 1_000_000
}
