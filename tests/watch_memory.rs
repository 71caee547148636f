//! Unread watch streams cannot grow Tenure's memory without bound: a
//! release build of `tenure serve` (its own process, so its RSS is its own)
//! with many watch streams that never read, under a stream of heavy events,
//! stays under a stated bound, ends the streams that fell behind, and frees
//! everything once they are gone.

mod common;

use std::time::Duration;

use common::*;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{AcquireRequest, WatchLeaseRequest};

/// Unread streams opened.
const STREAMS: usize = 200;
/// Renewals made while they do not read.
const RENEWALS: usize = 600;
/// What Tenure's RSS may grow by, in MiB: the replica's watch buffers are
/// capped at 32 MiB here; the rest is HTTP/2 and allocator slack.
const GROWTH_BOUND_MIB: u64 = 160;

/// The resident set size of a process, in MiB.
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib / 1024
}

/// The value of an unlabelled metric.
fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn unread_watches_are_bounded_and_freed() {
    let nats = Nats::start().await;
    let grpc = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (grpc_addr, metrics_addr) = (grpc.local_addr().unwrap(), metrics.local_addr().unwrap());
    drop((grpc, metrics));
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["serve", "--nats-url", &nats.url()])
        .args(["--listen", &grpc_addr.to_string()])
        .args(["--metrics-listen", &metrics_addr.to_string()])
        .args(["--max-watch-buffer-total-bytes", &(32 << 20).to_string()])
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("start tenure");
    let pid = server.id().unwrap();
    let url = format!("http://{grpc_addr}");
    let mut c = within("tenure to listen", async {
        loop {
            match LeaseServiceClient::connect(url.clone()).await {
                Ok(c) => return c,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    let metadata: std::collections::HashMap<String, String> =
        [("blob".to_string(), "m".repeat(900))].into();
    let (lease, key) = acquire(
        &mut c,
        AcquireRequest {
            metadata,
            ..acquire_req("mem.heavy", "writer", 60)
        },
    )
    .await;
    let before = rss_mib(pid);

    // Streams that never read, each on its own connection with a small
    // HTTP/2 window, so what they do not read backs up into Tenure.
    let mut unread = Vec::new();
    for _ in 0..STREAMS {
        let channel = tonic::transport::Endpoint::from_shared(url.clone())
            .unwrap()
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .connect()
            .await
            .unwrap();
        let mut w = LeaseServiceClient::new(channel);
        let s = w
            .watch_lease(WatchLeaseRequest {
                name: "mem.>".into(),
                event_types: vec![],
            })
            .await
            .unwrap()
            .into_inner();
        unread.push((w, s));
    }
    let mut revision = lease.revision;
    let mut peak = 0;
    for i in 0..RENEWALS {
        revision = renew(&mut c, renew_req("mem.heavy", revision, &key))
            .await
            .revision;
        if i % 100 == 0 {
            peak = peak.max(rss_mib(pid));
        }
    }
    peak = peak.max(rss_mib(pid));
    let (_, body) = http_get(metrics_addr, "/metrics").await;
    let open = sample(&body, "tenure_watch_streams_active");
    println!(
        "RSS before {before} MiB, peak {peak} MiB ({STREAMS} unread streams, {RENEWALS} renewals); {open} streams still open"
    );
    assert!(
        peak < before + GROWTH_BOUND_MIB,
        "RSS grew from {before} MiB to {peak} MiB"
    );
    assert!(
        open < STREAMS as f64,
        "streams that fell behind were ended ({open} of {STREAMS} open)"
    );

    // Gone clients free everything.
    drop(unread);
    within("watch streams and buffers to be freed", async {
        loop {
            let (_, body) = http_get(metrics_addr, "/metrics").await;
            if sample(&body, "tenure_watch_streams_active") == 0.0
                && sample(&body, "tenure_watch_buffer_bytes") == 0.0
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    server.start_kill().unwrap();
    let _ = server.wait().await;
}
