//! Renewals over the KeepAlive stream against a real Tenure: every session
//! of a connection renews over it (no unary Renew), and a connection whose
//! stream is refused falls back to unary Renew without losing a session.
//! The server's `/metrics` counts each renewal by method (`KeepAlive` per
//! stream entry, `Renew` per unary call), which tells the two paths apart.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::{expect_event, metrics_text, server_with_metrics, within};
use tenure_client::proto::{KeepAliveRequest, KeepAliveResponse};
use tenure_client::{AcquireOptions, Client, EventType, Semaphore, Session};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `tenure_rpc_requests_total{code="OK"}` by method.
async fn ok_calls(metrics: &str) -> HashMap<String, u64> {
    let text = metrics_text(metrics).await;
    let mut calls = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("tenure_rpc_requests_total{") else {
            continue;
        };
        let (labels, value) = rest.split_once("} ").unwrap();
        if !labels.contains("code=\"OK\"") {
            continue;
        }
        let method = labels
            .split(',')
            .find_map(|l| l.strip_prefix("method=\""))
            .unwrap()
            .trim_end_matches('"');
        calls.insert(method.to_string(), value.trim().parse().unwrap());
    }
    calls
}

/// Three sessions of one connection (two leases and a semaphore slot) with
/// a 1 s TTL; returns them once each was renewed twice in the background.
async fn renewed_sessions(client: &Client) -> Vec<Session> {
    let mut renewals = client
        .watch_filtered("ka.>", &[EventType::Renewed])
        .await
        .unwrap();
    expect_event(&mut renewals, EventType::SnapshotComplete).await;
    let opts = AcquireOptions::default;
    let sessions = vec![
        client
            .acquire("ka.one", "w", secs(1), opts())
            .await
            .unwrap(),
        client
            .acquire("ka.two", "w", secs(1), opts())
            .await
            .unwrap(),
        Semaphore::new(client, "ka.sem", 2)
            .acquire("w", secs(1), opts())
            .await
            .unwrap(),
    ];
    let mut seen: HashMap<String, usize> = HashMap::new();
    while seen.len() < 3 || seen.values().any(|&n| n < 2) {
        let event = expect_event(&mut renewals, EventType::Renewed).await;
        *seen.entry(event.name).or_default() += 1;
    }
    for s in &sessions {
        assert!(s.is_held(), "{s:?}");
    }
    sessions
}

#[tokio::test]
async fn every_session_of_a_connection_renews_over_the_keepalive_stream() {
    let (server, metrics) = server_with_metrics(&[]).await;
    let client = server.client().await;
    let sessions = renewed_sessions(&client).await;
    // An on-demand renewal takes the same path.
    let lease = sessions[2].renew().await.unwrap();
    assert_eq!(lease.slot, sessions[2].slot());
    let calls = ok_calls(&metrics).await;
    assert!(
        calls.get("KeepAlive").copied().unwrap_or(0) >= 7,
        "{calls:?}"
    );
    assert_eq!(calls.get("Renew"), None, "no unary renewal: {calls:?}");
    for s in sessions {
        assert!(s.release().await.unwrap());
    }
}

#[tokio::test]
async fn a_refused_stream_falls_back_to_unary_renew() {
    // One stream per replica, taken by another connection: this client's
    // stream is refused (TOO_MANY_REQUESTS) and it renews with unary Renew.
    let (server, metrics) = server_with_metrics(&["--max-keepalive-streams", "1"]).await;
    let other = server.client().await;
    let (pings, rx) = tokio::sync::mpsc::unbounded_channel::<KeepAliveRequest>();
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut taken = other.stub().keep_alive(stream).await.unwrap().into_inner();
    pings.send(KeepAliveRequest::default()).unwrap();
    let pong: KeepAliveResponse = within("the ping's answer", taken.message())
        .await
        .unwrap()
        .unwrap();
    assert!(pong.results.is_empty());

    let client = server.client().await;
    let sessions = renewed_sessions(&client).await;
    let calls = ok_calls(&metrics).await;
    assert!(calls.get("Renew").copied().unwrap_or(0) >= 6, "{calls:?}");
    assert_eq!(calls.get("KeepAlive"), None, "{calls:?}");
    for s in sessions {
        assert!(s.release().await.unwrap());
    }
    drop(pings);
}
