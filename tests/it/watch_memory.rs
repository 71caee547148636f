//! Unread watch streams cannot grow Tenure's memory without bound: a
//! release build of `tenure serve` (its own process, so its RSS is its own)
//! with many watch streams that never read, under a stream of heavy events,
//! stays under a stated bound, ends the streams that fell behind, and frees
//! everything once they are gone.

use std::time::Duration;

use crate::common::*;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{AcquireRequest, WatchLeaseRequest};

/// Unread streams opened.
const STREAMS: usize = 200;
/// Renewals made while they do not read.
const RENEWALS: usize = 600;
/// What Tenure's RSS may grow by, in MiB: the replica's watch buffers are
/// capped at 32 MiB here; the rest is HTTP/2 and allocator slack.
const GROWTH_BOUND_MIB: u64 = 160;

#[tokio::test]
async fn unread_watches_are_bounded_and_freed() {
    let nats = Nats::start().await;
    let server = Serve::start(
        &nats,
        &["--max-watch-buffer-total-bytes", &(32 << 20).to_string()],
    )
    .await;
    let (pid, metrics_addr) = (server.pid, server.metrics);
    let mut c = server.client().await;
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
        let channel = server
            .endpoint()
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
                start_revision: 0,
                shard_revisions: Vec::new(),
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
    server.stop().await;
}
