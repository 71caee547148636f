//! Hostile KeepAlive streams (issue 30): an identity that may renew nothing
//! holds no stream; a message of many failing entries is answered
//! compactly; every entry that reaches NATS takes a renewal permit of its
//! own; and streams that never read their replies hold a bounded amount
//! of Tenure's memory (its own process, so its RSS is its own) while an
//! honest stream keeps renewing.

use std::time::Duration;

use crate::common::*;
use crate::keepalive::{entry, renewed, Stream};
use prost::Message;
use tenure::proto::keep_alive_result::Outcome;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{KeepAliveEntry, KeepAliveError, KeepAliveRequest, KeepAliveResult};
use tenure::{Action, Grant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

/// Tenure with tokens for `alice` (every action under `alice.`) and
/// `viewer` (watch only), adjusted by `adjust`.
async fn with_tokens(adjust: impl FnOnce(&mut tenure::Config)) -> (Tenure, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "alice alice-token-0123456789abcdef\nviewer viewer-token-0123456789abcdef\n",
    )
    .unwrap();
    let t = Tenure::start_with(|c| {
        c.auth_tokens = Some(tokens);
        c.grants = vec![
            Grant {
                identity: "alice".into(),
                prefixes: vec!["alice.".into()],
                actions: vec![Action::All],
            },
            Grant {
                identity: "viewer".into(),
                prefixes: vec!["".into()],
                actions: vec![Action::Watch],
            },
        ];
        adjust(c);
    })
    .await;
    (t, dir)
}

/// The error of a result.
fn error(r: &KeepAliveResult) -> &KeepAliveError {
    match &r.outcome {
        Some(Outcome::Error(e)) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A renewal entry for a lease nobody holds (a NATS read to find out).
fn unheld(id: u64, name: &str) -> KeepAliveEntry {
    KeepAliveEntry {
        lease_key: "k".repeat(32),
        ..bare(id, name)
    }
}

/// An entry with a name and nothing else (fails before reaching NATS).
fn bare(id: u64, name: &str) -> KeepAliveEntry {
    KeepAliveEntry {
        id,
        name: name.into(),
        expected_revision: 1,
        lease_key: String::new(),
        ttl: None,
        slot: 0,
    }
}

/// An identity with no renew grant (here: watch only) is refused the
/// stream itself, so it holds no stream slot and nothing to answer.
#[tokio::test]
async fn an_identity_that_may_renew_nothing_holds_no_stream() {
    let (t, _dir) = with_tokens(|_| {}).await;
    let mut c = t.client().await;
    let err = Stream::open(&mut c, Some("viewer-token-0123456789abcdef"))
        .await
        .err()
        .expect("refused");
    assert_eq!(err.code(), Code::PermissionDenied);
    assert_eq!(reason(&err), "PERMISSION_DENIED");
    assert!(err.message().contains("renew"), "{}", err.message());
    Stream::open(&mut c, Some("alice-token-0123456789abcdef"))
        .await
        .expect("alice may renew");
}

/// 1,000 entries failing alike (denied; then invalid) are answered with
/// the first error whole and the rest as references to it: a few bytes
/// per entry, code and reason kept, ids echoed.
#[tokio::test]
async fn entries_failing_alike_are_answered_compactly() {
    let (t, _dir) = with_tokens(|c| c.max_request_bytes = 1 << 16).await;
    let mut c = t.client().await;
    let mut s = Stream::open(&mut c, Some("alice-token-0123456789abcdef"))
        .await
        .unwrap();
    for (name, code, why) in [
        ("", Code::PermissionDenied, "PERMISSION_DENIED"),
        ("alice..x", Code::InvalidArgument, "INVALID_NAME"),
    ] {
        let entries = (0..1000).map(|i| bare(i, name)).collect();
        let response = s.call(entries).await;
        let bytes = response.encoded_len();
        assert!(
            bytes < 40_000,
            "1,000 entries failing alike answered in {bytes} bytes"
        );
        let results = &response.results;
        assert_eq!(results.len(), 1000);
        let first = error(&results[0]);
        assert_eq!((first.code, first.reason.as_str()), (code as i32, why));
        assert!(!first.message.is_empty() && first.same_as.is_none());
        for (i, r) in results.iter().enumerate().skip(1) {
            assert_eq!(r.id, i as u64);
            let e = error(r);
            assert_eq!((e.code, e.reason.as_str()), (code as i32, why));
            assert_eq!(e.same_as, Some(0), "entry {i}");
            assert!(e.message.is_empty());
        }
    }
}

/// Each entry that reaches NATS takes a renewal permit, and an entry
/// refused only by its identity's share waits for one of the identity's
/// permits to end instead of being refused: a message of 1,000 renewals on
/// a replica with 10 short permits and 5 reserved per identity is answered
/// in full, none refused for load (one permit per message let all 1,000
/// through at once; refusing past the share answered most of them
/// TOO_MANY_REQUESTS as fast as they came, which burned the replica's CPU).
#[tokio::test]
async fn entries_past_the_share_wait_for_it() {
    let (t, _dir) = with_tokens(|c| {
        c.max_concurrent_requests = 10;
        c.max_concurrent_requests_per_identity = 10;
        c.reserved_renewals = 20;
        c.reserved_renewals_per_identity = 5;
        c.max_request_bytes = 1 << 17;
    })
    .await;
    let mut c = t.client().await;
    let mut s = Stream::open(&mut c, Some("alice-token-0123456789abcdef"))
        .await
        .unwrap();
    let entries = (0..1000)
        .map(|i| unheld(i, &format!("alice.nobody.{i}")))
        .collect();
    let results = s.call(entries).await.results;
    assert_eq!(results.len(), 1000);
    let busy = results
        .iter()
        .map(error)
        .filter(|e| e.reason == "TOO_MANY_REQUESTS")
        .count();
    assert_eq!(busy, 0, "entries refused for load instead of waiting");
    // Every one was read from NATS: the lease is not held.
    assert!(results
        .iter()
        .map(error)
        .all(|e| e.reason == "LEASE_NOT_HELD"));
}

/// The share still bounds what one identity runs at once: with NATS frozen
/// (SIGSTOP) the identity's first 15 renewals hold its 10 short and 5
/// reserved permits, and every other entry of the message waits for them
/// and, when none ends within the patience, is refused TOO_MANY_REQUESTS
/// naming the per-identity limit.
#[tokio::test]
async fn the_share_bounds_an_identitys_renewals_in_flight() {
    let (t, _dir) = with_tokens(|c| {
        c.max_concurrent_requests = 100;
        c.max_concurrent_requests_per_identity = 10;
        c.reserved_renewals = 20;
        c.reserved_renewals_per_identity = 5;
        c.max_request_bytes = 1 << 17;
    })
    .await;
    let mut c = t.client().await;
    let mut s = Stream::open(&mut c, Some("alice-token-0123456789abcdef"))
        .await
        .unwrap();
    let pid = t.nats.process.as_ref().unwrap().pid().unwrap();
    freeze(pid).await;
    let entries = (0..100)
        .map(|i| unheld(i, &format!("alice.nobody.{i}")))
        .collect();
    // The reply waits for the 15 in flight, which end when their NATS
    // requests time out (10 s).
    let results = s.call(entries).await.results;
    thaw(pid);
    let mut reasons = std::collections::BTreeMap::<String, usize>::new();
    for r in &results {
        *reasons.entry(error(r).reason.clone()).or_default() += 1;
    }
    let busy: Vec<&KeepAliveError> = results
        .iter()
        .map(error)
        .filter(|e| e.reason == "TOO_MANY_REQUESTS")
        .collect();
    assert_eq!(
        busy.len(),
        85,
        "15 renewals in flight, the other 85 refused; the reasons were {reasons:?}"
    );
    let whole = busy
        .iter()
        .find(|e| e.same_as.is_none())
        .expect("one whole");
    assert_eq!(
        whole.metadata.get("limit").map(String::as_str),
        Some("--reserved-renewals-per-identity")
    );
    assert!(whole.retry_delay.is_some());
}

/// Unread streams opened.
const STREAMS: usize = 100;
/// Messages each unread stream sends.
const MESSAGES: usize = 40;
/// What Tenure's RSS may grow by with them open, in MiB: the replica's
/// unsent replies are capped at 16 MiB here; the rest is what HTTP/2
/// buffers per stream (requests received, replies taken by the transport)
/// and allocator slack. Without the bound each stream kept about 5 MB.
const GROWTH_BOUND_MIB: u64 = 100;

/// 100 streams that send messages of 1,000 empty entries each (2 KB; each
/// entry invalid) and never read a reply: Tenure stops reading them once
/// they owe their bound, its memory stays under the stated bound, and an
/// honest holder's KeepAlive stream renews all along.
#[tokio::test]
async fn unread_replies_are_bounded() {
    let nats = Nats::start().await;
    let server = Serve::start(
        &nats,
        &[
            "--max-keepalive-reply-bytes",
            &(256 << 10).to_string(),
            "--max-keepalive-reply-total-bytes",
            &(16 << 20).to_string(),
        ],
    )
    .await;
    let mut honest = server.client().await;
    let (mut lease, key) = acquire(&mut honest, acquire_req("honest.a", "h", 30)).await;
    let mut own = Stream::open(&mut honest, None).await.unwrap();
    lease = renewed(&own.call(vec![entry(0, &lease, &key)]).await.results[0].outcome).clone();
    let before = server.rss_mib();

    let message = || KeepAliveRequest {
        entries: (0..1000).map(|i| bare(i, "")).collect(),
    };
    let mut unread = Vec::new();
    for _ in 0..STREAMS {
        let channel = server
            .endpoint()
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .connect()
            .await
            .unwrap();
        let (tx, rx) = mpsc::channel(MESSAGES);
        for _ in 0..MESSAGES {
            tx.try_send(message()).unwrap();
        }
        let mut c = LeaseServiceClient::new(channel);
        let responses = c
            .keep_alive(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        unread.push((c, tx, responses));
    }
    // Every stream has had messages answered (a stream that owes nothing
    // is always read) ...
    let answered = STREAMS as f64 * 1000.0 * 2.0;
    within("the unread streams' messages to be answered", async {
        while invalid_keepalive_entries(&server).await < answered {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // ... and while they hold what they are owed, the honest stream renews.
    let mut peak = server.rss_mib();
    for i in 1..=50u64 {
        let r = own.call(vec![entry(i, &lease, &key)]).await;
        lease = renewed(&r.results[0].outcome).clone();
        peak = peak.max(server.rss_mib());
    }
    let done = invalid_keepalive_entries(&server).await;
    println!(
        "{STREAMS} unread KeepAlive streams: {done} entries answered of {}, RSS {before} MiB -> peak {peak} MiB",
        STREAMS * MESSAGES * 1000
    );
    assert!(
        done < (STREAMS * MESSAGES * 1000) as f64,
        "every message of every unread stream was read"
    );
    assert!(
        peak.saturating_sub(before) <= GROWTH_BOUND_MIB,
        "RSS grew from {before} MiB to {peak} MiB with {STREAMS} unread streams"
    );
    drop(unread);
    server.stop().await;
}

/// KeepAlive entries answered INVALID_ARGUMENT so far.
async fn invalid_keepalive_entries(server: &Serve) -> f64 {
    let (_, body) = http_get(server.metrics, "/metrics").await;
    body.lines()
        .filter(|l| {
            l.starts_with("tenure_rpc_requests_total{")
                && l.contains("method=\"KeepAlive\"")
                && l.contains("code=\"INVALID_ARGUMENT\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Denied KeepAlive entries are logged like unary denials, with the
/// identity and a count, at most one line a second: 3,000 denied entries
/// in three messages leave at least one line and far fewer than one per
/// entry. (They used to leave none.)
#[tokio::test]
async fn denied_entries_are_logged_at_a_bounded_rate() {
    let nats = Nats::start().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice alice-token-0123456789abcdef\n").unwrap();
    let config = dir.path().join("tenure.toml");
    std::fs::write(
        &config,
        "[[grant]]\nidentity = \"alice\"\nprefixes = [\"alice.\"]\nactions = [\"*\"]\n",
    )
    .unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let stderr = std::process::Stdio::from(log.reopen().unwrap());
    let args = [
        "--auth-tokens",
        tokens.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--max-request-bytes",
        "65536",
    ];
    let server = Serve::start_adjusted(&nats, &args, |cmd| {
        cmd.env("RUST_LOG", "info").stderr(stderr);
    })
    .await;
    let mut c = server.client().await;
    let mut s = Stream::open(&mut c, Some("alice-token-0123456789abcdef"))
        .await
        .unwrap();
    for m in 0..3 {
        let entries = (0..1000)
            .map(|i| bare(i, &format!("bob.{m}.{i}")))
            .collect();
        let r = s.call(entries).await;
        assert!(r
            .results
            .iter()
            .all(|r| error(r).reason == "PERMISSION_DENIED"));
    }
    server.stop().await;
    let text = String::from_utf8_lossy(&std::fs::read(log.path()).unwrap()).into_owned();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("KeepAlive entries since the last such line"))
        .collect();
    assert!(!lines.is_empty(), "no denial logged:\n{text}");
    assert!(lines.len() <= 3, "{} lines for 3 messages", lines.len());
    assert!(lines[0].contains("alice"), "{}", lines[0]);
    assert!(lines[0].contains("1000"), "{}", lines[0]);
}
