//! Free loopback ports for servers a test starts as their own processes
//! (a `tenure serve`, a cluster node, a monitoring listener), which must be
//! told a port before they bind it.
//!
//! A port found by binding port 0 and releasing it comes from the kernel's
//! ephemeral range, where the next `bind(0)` or outgoing connection of any
//! test running beside it (a nats-server started with `-p -1`, a client)
//! may be handed the same port before the server binds it: a clean-clone
//! CI run once failed on "address already in use" that way. So ports are
//! taken from just below the ephemeral range, which the kernel hands out
//! to nobody, one after another from a place that depends on the process
//! (no two calls of one test binary get the same port), each checked free
//! by binding it. Only a process that picks that exact port by number
//! could still take it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// How many ports below the ephemeral range are used.
const SPAN: u32 = 8_000;

/// The first port of the ephemeral range (`ip_local_port_range`).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A free TCP port on 127.0.0.1 that the kernel gives nobody else (see
/// the module doc); a port from the kernel's ephemeral range only when
/// there is no room below it.
pub fn free_port() -> u16 {
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let top = ephemeral_start();
    if top < 1_024 + SPAN {
        return ephemeral_port();
    }
    let base = top - SPAN;
    let next = NEXT.get_or_init(|| AtomicU32::new(std::process::id() % SPAN));
    for _ in 0..SPAN {
        let port = base + next.fetch_add(1, Ordering::Relaxed) % SPAN;
        let port = u16::try_from(port).expect("a port below the ephemeral range");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    ephemeral_port()
}

/// A port the kernel picks (bound, then released).
fn ephemeral_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
