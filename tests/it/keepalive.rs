//! The KeepAlive stream against a real nats-server: many holdings renewed
//! per message, one result per entry with the same reasons as unary Renew,
//! per-entry grants, the bounds (entries per message, streams, idle), the
//! end after a half-close, and a holding revoked while its stream runs.

use std::time::Duration;

use crate::common::*;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{
    keep_alive_result::Outcome, KeepAliveEntry, KeepAliveRequest, KeepAliveResponse, Lease,
    RevokeLeaseRequest,
};
use tenure::{Action, Grant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};
use tonic_types::StatusExt;

/// An open KeepAlive stream: requests go in through `tx`.
pub(crate) struct Stream {
    /// Sends requests; dropping it half-closes the stream.
    pub(crate) tx: Option<mpsc::Sender<KeepAliveRequest>>,
    /// The responses.
    pub(crate) rx: Streaming<KeepAliveResponse>,
}

impl Stream {
    /// Opens a stream, with `token` as bearer token when given.
    pub(crate) async fn open(
        client: &mut LeaseServiceClient<Channel>,
        token: Option<&str>,
    ) -> Result<Stream, Status> {
        let (tx, rx) = mpsc::channel(16);
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if let Some(token) = token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        let rx = client.keep_alive(request).await?.into_inner();
        Ok(Stream { tx: Some(tx), rx })
    }

    /// Sends one request.
    pub(crate) async fn send(&self, entries: Vec<KeepAliveEntry>) {
        self.tx
            .as_ref()
            .expect("not half-closed")
            .send(KeepAliveRequest { entries })
            .await
            .expect("stream open");
    }

    /// The next response, or the status the stream ended with.
    pub(crate) async fn next(&mut self) -> Result<Option<KeepAliveResponse>, Status> {
        within("a KeepAlive response", self.rx.message()).await
    }

    /// Sends one request and returns its response.
    pub(crate) async fn call(&mut self, entries: Vec<KeepAliveEntry>) -> KeepAliveResponse {
        self.send(entries).await;
        self.next().await.expect("response").expect("not ended")
    }
}

/// An entry renewing `lease` with `key`.
pub(crate) fn entry(id: u64, lease: &Lease, key: &str) -> KeepAliveEntry {
    KeepAliveEntry {
        id,
        name: lease.name.clone(),
        expected_revision: lease.revision,
        lease_key: key.into(),
        ttl: None,
        slot: lease.slot,
    }
}

/// The renewed lease of a result, or a panic with its error.
pub(crate) fn renewed(outcome: &Option<Outcome>) -> &Lease {
    match outcome {
        Some(Outcome::Lease(l)) => l,
        other => panic!("expected a renewal, got {other:?}"),
    }
}

/// The (code, reason) of a failed result.
fn failed(outcome: &Option<Outcome>) -> (i32, &str) {
    match outcome {
        Some(Outcome::Error(e)) => (e.code, e.reason.as_str()),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// Acquires `n` leases named `prefix.i`.
async fn hold(
    client: &mut LeaseServiceClient<Channel>,
    prefix: &str,
    n: usize,
) -> Vec<(Lease, String)> {
    let mut held = Vec::new();
    for i in 0..n {
        held.push(acquire(client, acquire_req(&format!("{prefix}.{i}"), "h", 30)).await);
    }
    held
}

/// One message renews many holdings: one result per entry in entry order,
/// ids echoed, every revision advanced, every token and TTL unchanged; the
/// next message with the new revisions renews them again.
#[tokio::test]
async fn one_message_renews_many_holdings() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let held = hold(&mut c, "many", 100).await;
    let mut s = Stream::open(&mut c, None).await.unwrap();
    let entries = held
        .iter()
        .enumerate()
        .map(|(i, (l, k))| entry(1000 + i as u64, l, k))
        .collect();
    let response = s.call(entries).await;
    assert_eq!(response.results.len(), held.len());
    let mut now = Vec::new();
    for (i, (result, (before, key))) in response.results.iter().zip(&held).enumerate() {
        assert_eq!(result.id, 1000 + i as u64);
        let after = renewed(&result.outcome);
        assert_eq!(after.name, before.name);
        assert!(after.revision > before.revision);
        assert_eq!(after.fencing_token, before.fencing_token);
        assert_eq!(after.ttl, before.ttl);
        now.push((after.clone(), key.clone()));
    }
    // The bucket agrees: each name's current revision is the renewal's.
    for (l, _) in &now {
        let current = c
            .get_lease(tenure::proto::GetLeaseRequest {
                name: l.name.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .lease
            .unwrap();
        assert_eq!(current.revision, l.revision);
    }
    let again = s
        .call(now.iter().map(|(l, k)| entry(0, l, k)).collect())
        .await;
    for (result, (before, _)) in again.results.iter().zip(&now) {
        assert!(renewed(&result.outcome).revision > before.revision);
    }
}

/// Entries that a unary Renew would refuse fail alone, with Renew's code
/// and reason; the others in the same message are renewed.
#[tokio::test]
async fn a_bad_entry_fails_alone() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let held = hold(&mut c, "mixed", 3).await;
    // A holding that ended: released, then taken by someone else.
    let (gone, gone_key) = acquire(&mut c, acquire_req("mixed.gone", "h", 30)).await;
    c.release(release_req("mixed.gone", gone.revision, &gone_key))
        .await
        .unwrap();
    acquire(&mut c, acquire_req("mixed.gone", "other", 30)).await;
    let mut s = Stream::open(&mut c, None).await.unwrap();
    let (l0, k0) = &held[0];
    let (l1, _) = &held[1];
    let (l2, k2) = &held[2];
    let entries = vec![
        entry(1, l0, k0),
        entry(2, l1, "the-wrong-key-0123456789"),
        entry(3, &gone, &gone_key),
        KeepAliveEntry {
            expected_revision: 0,
            ..entry(4, l2, k2)
        },
        KeepAliveEntry {
            name: "not a name!".into(),
            ..entry(5, l2, k2)
        },
        KeepAliveEntry {
            ttl: Some(secs(1_000_000)),
            ..entry(6, l2, k2)
        },
        entry(7, l2, k2),
    ];
    let r = s.call(entries).await.results;
    let ids: Vec<u64> = r.iter().map(|r| r.id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(renewed(&r[0].outcome).fencing_token, l0.fencing_token);
    let precondition = Code::FailedPrecondition as i32;
    let invalid = Code::InvalidArgument as i32;
    assert_eq!(failed(&r[1].outcome), (precondition, "LEASE_NOT_HELD"));
    assert_eq!(failed(&r[2].outcome), (precondition, "LEASE_NOT_HELD"));
    assert_eq!(failed(&r[3].outcome), (invalid, "INVALID_REVISION"));
    assert_eq!(failed(&r[4].outcome), (invalid, "INVALID_NAME"));
    assert_eq!(failed(&r[5].outcome), (invalid, "INVALID_TTL"));
    assert_eq!(renewed(&r[6].outcome).fencing_token, l2.fencing_token);
    // The same entry as a unary Renew fails the same way.
    let err = c
        .renew(renew_req(&l1.name, l1.revision, "the-wrong-key-0123456789"))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    // The stream is still open and serving.
    let again = s.call(vec![entry(8, renewed(&r[0].outcome), k0)]).await;
    renewed(&again.results[0].outcome);
}

/// Each entry is authorized on its own name: an entry for a name the caller
/// may not renew fails alone with PERMISSION_DENIED.
#[tokio::test]
async fn grants_apply_per_entry() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "batch batch-token-0123456789abcdef\n").unwrap();
    let grant = |prefix: &str, actions: &[Action]| Grant {
        identity: "batch".into(),
        prefixes: vec![prefix.into()],
        actions: actions.to_vec(),
    };
    let t = Tenure::start_with(|c| {
        c.auth_tokens = Some(tokens);
        c.grants = vec![
            grant("free.", &[Action::Acquire, Action::Renew]),
            grant("fixed.", &[Action::Acquire]),
        ];
    })
    .await;
    let token = "batch-token-0123456789abcdef";
    let mut c = t.client().await;
    let mut held = Vec::new();
    for name in ["free.a", "fixed.a"] {
        let mut r = tonic::Request::new(acquire_req(name, "h", 30));
        r.metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        let resp = c.acquire(r).await.unwrap().into_inner();
        held.push((resp.lease.unwrap(), resp.lease_key));
    }
    let err = Stream::open(&mut c, None).await.err().expect("refused");
    assert_eq!(reason(&err), "UNAUTHENTICATED");
    let mut s = Stream::open(&mut c, Some(token)).await.unwrap();
    let r = s
        .call(
            held.iter()
                .enumerate()
                .map(|(i, (l, k))| entry(i as u64, l, k))
                .collect(),
        )
        .await
        .results;
    renewed(&r[0].outcome);
    assert_eq!(
        failed(&r[1].outcome),
        (Code::PermissionDenied as i32, "PERMISSION_DENIED")
    );
}

/// A message with more entries than --max-keepalive-entries ends the stream
/// with REQUEST_TOO_LARGE, after the earlier messages are answered.
#[tokio::test]
async fn too_many_entries_end_the_stream() {
    let t = Tenure::start_with(|c| {
        c.max_keepalive_entries = 3;
        c.max_keepalive_in_flight = 3;
    })
    .await;
    let mut c = t.client().await;
    let held = hold(&mut c, "big", 4).await;
    let mut s = Stream::open(&mut c, None).await.unwrap();
    let all: Vec<_> = held.iter().map(|(l, k)| entry(0, l, k)).collect();
    s.send(all[..3].to_vec()).await;
    s.send(all.clone()).await;
    let first = s.next().await.unwrap().unwrap();
    assert_eq!(first.results.len(), 3);
    let err = s.next().await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(reason(&err), "REQUEST_TOO_LARGE");
}

/// Streams per replica and per identity are bounded: the stream past the
/// limit is refused with TOO_MANY_REQUESTS and a RetryInfo; once a stream
/// has ended, its slot is free again.
#[tokio::test]
async fn too_many_streams_are_refused() {
    let t = Tenure::start_with(|c| c.max_keepalive_streams = 2).await;
    let mut c = t.client().await;
    let (l, k) = acquire(&mut c, acquire_req("streams.a", "h", 30)).await;
    let mut first = Stream::open(&mut c, None).await.unwrap();
    let r = first.call(vec![entry(0, &l, &k)]).await;
    let l = renewed(&r.results[0].outcome).clone();
    let _second = Stream::open(&mut c, None).await.unwrap();
    let err = Stream::open(&mut c, None).await.err().expect("refused");
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(reason(&err), "TOO_MANY_REQUESTS");
    assert!(err.get_details_retry_info().is_some());
    first.tx = None;
    assert!(first.next().await.unwrap().is_none());
    let mut third = Stream::open(&mut c, None).await.unwrap();
    renewed(&third.call(vec![entry(0, &l, &k)]).await.results[0].outcome);
}

/// After the client half-closes, every pending request is answered, in
/// order, then the stream ends with OK.
#[tokio::test]
async fn half_close_gets_every_pending_result() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let held = hold(&mut c, "close", 10).await;
    let mut s = Stream::open(&mut c, None).await.unwrap();
    for (i, (l, k)) in held.iter().enumerate() {
        s.send(vec![entry(i as u64, l, k)]).await;
    }
    s.send(Vec::new()).await;
    s.tx = None;
    for (i, (l, _)) in held.iter().enumerate() {
        let response = s.next().await.unwrap().expect("a pending response");
        assert_eq!(response.results[0].id, i as u64);
        assert!(renewed(&response.results[0].outcome).revision > l.revision);
    }
    let ping = s
        .next()
        .await
        .unwrap()
        .expect("the empty request's response");
    assert!(ping.results.is_empty());
    assert!(s.next().await.unwrap().is_none(), "ends with OK");
}

/// A holding revoked while its stream runs: its next entry fails with
/// LEASE_NOT_HELD; the other entries of the message are renewed.
#[tokio::test]
async fn revoked_mid_stream_is_not_held() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let held = hold(&mut c, "rev", 2).await;
    let mut s = Stream::open(&mut c, None).await.unwrap();
    let r = s
        .call(held.iter().map(|(l, k)| entry(0, l, k)).collect())
        .await
        .results;
    let a = renewed(&r[0].outcome).clone();
    let b = renewed(&r[1].outcome).clone();
    c.revoke_lease(RevokeLeaseRequest {
        name: a.name.clone(),
        reason: "test".into(),
        fencing_token: a.fencing_token,
        slot: 0,
    })
    .await
    .unwrap();
    let r = s
        .call(vec![entry(1, &a, &held[0].1), entry(2, &b, &held[1].1)])
        .await
        .results;
    assert_eq!(
        failed(&r[0].outcome),
        (Code::FailedPrecondition as i32, "LEASE_NOT_HELD")
    );
    renewed(&r[1].outcome);
}

/// A stream that sends nothing for --keepalive-idle-timeout is ended with
/// INVALID_ARGUMENT naming the flag, and not by --request-body-timeout
/// (shorter here), which applies to single-message requests only.
#[tokio::test]
async fn an_idle_stream_is_ended() {
    let t = Tenure::start_with(|c| {
        c.keepalive_idle_timeout = Duration::from_millis(500);
        c.request_body_timeout = Duration::from_millis(100);
    })
    .await;
    let mut c = t.client().await;
    let (l, k) = acquire(&mut c, acquire_req("idle.a", "h", 30)).await;
    let mut s = Stream::open(&mut c, None).await.unwrap();
    renewed(&s.call(vec![entry(0, &l, &k)]).await.results[0].outcome);
    let err = s.next().await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("--keepalive-idle-timeout"));
}

/// Renewals over the stream are counted in the RPC metrics like unary
/// ones, under method "KeepAlive", one per entry. (The metrics are
/// process-wide and other tests here add to them: the counts grow by at
/// least this message's.)
#[tokio::test]
async fn stream_renewals_are_counted() {
    let t = Tenure::start_with(|c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let addr = t.running.as_ref().unwrap().metrics_addr().expect("metrics");
    let ok = r#"tenure_rpc_requests_total{code="OK",method="KeepAlive"}"#;
    let not_held = r#"tenure_rpc_requests_total{code="FAILED_PRECONDITION",method="KeepAlive"}"#;
    let mut c = t.client().await;
    let held = hold(&mut c, "count", 3).await;
    let (_, before) = http_get(addr, "/metrics").await;
    let mut s = Stream::open(&mut c, None).await.unwrap();
    let mut entries: Vec<_> = held.iter().map(|(l, k)| entry(0, l, k)).collect();
    entries.push(entry(9, &held[0].0, "the-wrong-key-0123456789"));
    s.call(entries).await;
    let (_, after) = http_get(addr, "/metrics").await;
    assert!(sample(&after, ok) >= sample(&before, ok) + 3.0);
    assert!(sample(&after, not_held) >= sample(&before, not_held) + 1.0);
}

/// A message over --max-request-bytes (with few entries) ends the stream
/// with REQUEST_TOO_LARGE, like any request over the size limit.
#[tokio::test]
async fn an_oversized_message_ends_the_stream() {
    let t = Tenure::start_with(|c| c.max_request_bytes = 1024).await;
    let mut c = t.client().await;
    let (l, k) = acquire(&mut c, acquire_req("size.a", "h", 30)).await;
    let mut s = Stream::open(&mut c, None).await.unwrap();
    renewed(&s.call(vec![entry(0, &l, &k)]).await.results[0].outcome);
    s.send(vec![entry(1, &l, &k); 20]).await;
    let err = s.next().await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(reason(&err), "REQUEST_TOO_LARGE");
}

/// Holders of a semaphore renew over the stream with their slot: each
/// slot's holding is renewed, its token unchanged; the wrong slot for a
/// key fails alone with LEASE_NOT_HELD.
#[tokio::test]
async fn semaphore_holders_renew_with_their_slot() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut held = Vec::new();
    for holder in ["a", "b"] {
        let req = tenure::proto::AcquireRequest {
            limit: 2,
            ..acquire_req("sem.ka", holder, 30)
        };
        held.push(acquire(&mut c, req).await);
    }
    assert_ne!(held[0].0.slot, held[1].0.slot);
    assert!(held.iter().all(|(l, _)| l.slot > 0));
    let mut s = Stream::open(&mut c, None).await.unwrap();
    let mut wrong = entry(9, &held[0].0, &held[0].1);
    wrong.slot = held[1].0.slot;
    let response = s
        .call(vec![
            entry(1, &held[0].0, &held[0].1),
            entry(2, &held[1].0, &held[1].1),
            wrong,
        ])
        .await;
    for (result, (before, _)) in response.results.iter().zip(&held) {
        let after = renewed(&result.outcome);
        assert_eq!(after.slot, before.slot);
        assert_eq!(after.fencing_token, before.fencing_token);
        assert!(after.revision > before.revision);
    }
    assert_eq!(failed(&response.results[2].outcome).1, "LEASE_NOT_HELD");
}
