//! Hostile requests (issue 10, items 1, 4, 6 and 7), over real sockets
//! against a real nats-server: stalled request bodies, a flood of waiting
//! Acquires, a flood of short calls, malformed messages and oversized
//! names. Raw HTTP/2 (the `h2` crate) sends what no gRPC client would.

use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{AcquireRequest, GetLeaseRequest};
use tenure::{Action, Grant};
use tokio::time::Instant;
use tonic::Code;
use tonic_types::StatusExt;

fn grant(identity: &str, prefixes: &[&str]) -> Grant {
    Grant {
        identity: identity.into(),
        prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
        actions: vec![Action::All],
    }
}

/// Tenure with bearer tokens for `alice` (names under `alice.`) and `bob`
/// (names under `bob.`), adjusted by `adjust`.
async fn with_tokens(adjust: impl FnOnce(&mut tenure::Config)) -> (Tenure, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "alice alice-token-0123456789abcdef\nbob bob-token-0123456789abcdef\n",
    )
    .unwrap();
    let t = Tenure::start_with(|c| {
        c.auth_tokens = Some(tokens);
        c.grants = vec![grant("alice", &["alice."]), grant("bob", &["bob."])];
        adjust(c);
    })
    .await;
    (t, dir)
}

/// `message` sent as `who` (token `<who>-token-0123456789abcdef`).
fn as_caller<T>(who: &str, message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {who}-token-0123456789abcdef")
            .parse()
            .unwrap(),
    );
    r
}

/// Item 1: 1,000 calls that send headers and never their message (8
/// connections, no credentials) hold no capacity: the victim's Renews and
/// another identity's calls go through while they stall, and every stalled
/// call is ended (INVALID_ARGUMENT) once `--request-body-timeout` passes.
#[tokio::test]
async fn stalled_requests_hold_no_capacity() {
    let body_timeout = Duration::from_secs(3);
    let (t, _dir) = with_tokens(|c| c.request_body_timeout = body_timeout).await;
    let addr = t.running.as_ref().unwrap().addr();
    let mut victim = t.client().await;
    let acquired = victim
        .acquire(as_caller("alice", acquire_req("alice.job", "w1", 5)))
        .await
        .expect("acquire")
        .into_inner();
    let (lease, key) = (acquired.lease.unwrap(), acquired.lease_key);

    // 1,000 stalled calls over 8 connections: HEADERS without END_STREAM,
    // never any DATA.
    let mut stalled = Vec::new();
    let mut conns = Vec::new();
    for _ in 0..8 {
        let mut send = h2_connect(addr).await;
        for _ in 0..125 {
            send = send.ready().await.unwrap();
            let (response, stream) = send
                .send_request(grpc_headers(addr, "Renew"), false)
                .unwrap();
            stalled.push((response, stream));
        }
        conns.push(send);
    }
    let sent = Instant::now();

    // While they stall: the victim renews, the other identity works.
    let mut revision = lease.revision;
    for _ in 0..10 {
        let renewed = victim
            .renew(as_caller(
                "alice",
                renew_req("alice.job", revision, key.clone()),
            ))
            .await
            .expect("the victim's Renew gets through during the stall")
            .into_inner();
        revision = renewed.lease.unwrap().revision;
        victim
            .acquire(as_caller(
                "bob",
                acquire_req(&format!("bob.{revision}"), "b", 5),
            ))
            .await
            .expect("another identity's Acquire gets through");
        victim
            .get_lease(as_caller(
                "alice",
                GetLeaseRequest {
                    name: "alice.job".into(),
                },
            ))
            .await
            .expect("GetLease gets through");
    }

    // Every stalled call is ended by the body timeout, not left open.
    let statuses = stalled_statuses("the stalled calls to be ended", stalled).await;
    let ended_after = sent.elapsed();
    eprintln!("measured: 1000 stalled calls ended {ended_after:?} after sending");
    assert!(
        ended_after >= body_timeout - Duration::from_millis(500),
        "ended after {ended_after:?}, before the body timeout"
    );
    assert!(
        ended_after < body_timeout + Duration::from_secs(10),
        "ended after {ended_after:?}"
    );
    for status in &statuses {
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert_eq!(reason(status), "INVALID_ARGUMENT");
        assert!(status.message().contains("--request-body-timeout"));
    }
    // The holding never lapsed.
    let held = victim
        .get_lease(as_caller(
            "alice",
            GetLeaseRequest {
                name: "alice.job".into(),
            },
        ))
        .await
        .expect("still held")
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(held.fencing_token, lease.fencing_token);
}

/// Item 4: 1,000 Acquires waiting on one held name (one identity) fill
/// only the waiting budget: other callers' GetLease and Acquire, and the
/// holder's Renew, still succeed.
#[tokio::test]
async fn waiting_acquires_do_not_starve_short_calls() {
    let t = Tenure::start_with(|c| c.max_waiting_acquires = 1000).await;
    let mut holder = t.client().await;
    let (lease, key) = acquire(&mut holder, acquire_req("contended", "h", 60)).await;
    let waiting_acquire = || AcquireRequest {
        wait: Some(secs(60)),
        ..acquire_req("contended", "waiter", 10)
    };
    // 1,001 waiting Acquires: 1,000 wait, one finds the budget full.
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(t.channel().await);
    }
    let mut waiters = Vec::new();
    for i in 0..1001 {
        let mut c = LeaseServiceClient::new(channels[i % 4].clone());
        let req = waiting_acquire();
        waiters.push(tokio::spawn(async move { c.acquire(req).await }));
        if i % 250 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let refused = within("the waiting budget to fill", async {
        loop {
            if let Some(i) = waiters.iter().position(|w| w.is_finished()) {
                break waiters.remove(i).await.unwrap().unwrap_err();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "TOO_MANY_REQUESTS");
    let info = refused.get_details_error_info().unwrap();
    assert_eq!(info.metadata["limit"], "--max-waiting-acquires");

    let mut other = t.client().await;
    for i in 0..20 {
        other
            .get_lease(GetLeaseRequest {
                name: "contended".into(),
            })
            .await
            .expect("GetLease beside 1,000 waiting Acquires");
        acquire(&mut other, acquire_req(&format!("other.{i}"), "o", 10)).await;
    }
    let renewed = renew(&mut holder, renew_req("contended", lease.revision, key)).await;
    assert_eq!(renewed.fencing_token, lease.fencing_token);
    for w in waiters {
        w.abort();
    }
}

/// Item 4, per identity: one identity's waiting Acquires are capped; another
/// identity can still wait.
#[tokio::test]
async fn waiting_acquires_are_capped_per_identity() {
    let (t, _dir) = with_tokens(|c| c.max_waiting_acquires_per_identity = 5).await;
    let mut c = t.client().await;
    c.acquire(as_caller("alice", acquire_req("alice.x", "h", 30)))
        .await
        .unwrap();
    c.acquire(as_caller("bob", acquire_req("bob.x", "h", 30)))
        .await
        .unwrap();
    let waiting = |name: &str, wait_s: i64| AcquireRequest {
        wait: Some(secs(wait_s)),
        ..acquire_req(name, "w", 10)
    };
    let mut waiters = Vec::new();
    for _ in 0..5 {
        let mut w = t.client().await;
        let req = as_caller("alice", waiting("alice.x", 60));
        waiters.push(tokio::spawn(async move { w.acquire(req).await }));
    }
    let refused = within("alice's share to fill", async {
        loop {
            let mut req = as_caller("alice", waiting("alice.x", 1));
            req.set_timeout(Duration::from_secs(3));
            match c.acquire(req).await {
                Err(s) if s.code() == Code::ResourceExhausted => break s,
                Err(s) if s.code() == Code::FailedPrecondition => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(reason(&refused), "TOO_MANY_REQUESTS");
    assert_eq!(
        refused.get_details_error_info().unwrap().metadata["limit"],
        "--max-waiting-acquires-per-identity"
    );
    // Bob waits his second out and is told the lease is held.
    let err = c
        .acquire(as_caller("bob", waiting("bob.x", 1)))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_HELD");
    for w in waiters {
        w.abort();
    }
}

/// Item 1: when short calls are shed, Renew and Release of existing
/// holdings still get through (the renewal reserve).
#[tokio::test]
async fn renewals_get_through_while_new_work_is_shed() {
    let t = Tenure::start_with(|c| c.max_concurrent_requests = 1).await;
    let mut holder = t.client().await;
    let (lease, key) = acquire(&mut holder, acquire_req("kept", "h", 10)).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let shed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut flood = Vec::new();
    for _ in 0..4 {
        let channel = t.channel().await;
        for _ in 0..16 {
            let mut c = LeaseServiceClient::new(channel.clone());
            let (stop, shed) = (stop.clone(), shed.clone());
            flood.push(tokio::spawn(async move {
                while !stop.is_cancelled() {
                    let r = c
                        .get_lease(GetLeaseRequest {
                            name: "kept".into(),
                        })
                        .await;
                    if let Err(s) = r {
                        assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
                        shed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    let mut revision = lease.revision;
    let mut renewals = 0;
    within("renewals while GetLease is shed", async {
        while renewals < 30 || shed.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            let r = holder
                .renew(renew_req("kept", revision, key.clone()))
                .await
                .expect("a Renew is never shed");
            revision = r.into_inner().lease.unwrap().revision;
            renewals += 1;
        }
    })
    .await;
    stop.cancel();
    for f in flood {
        f.await.unwrap();
    }
    holder
        .release(release_req("kept", revision, key))
        .await
        .expect("the holder releases");
}

/// Item 6: requests tonic cannot decode are INVALID_ARGUMENT with an
/// ErrorInfo, not INTERNAL: invalid UTF-8, a truncated varint, an empty
/// body, a frame cut short.
#[tokio::test]
async fn malformed_requests_are_invalid_argument() {
    let t = Tenure::start().await;
    let addr = t.running.as_ref().unwrap().addr();
    let mut send = h2_connect(addr).await;
    let cases: [(&str, Option<Bytes>); 4] = [
        // GetLeaseRequest.name (field 1, bytes) = 0xff 0xfe.
        ("invalid UTF-8", Some(frame(&[0x0a, 0x02, 0xff, 0xfe]))),
        // Field 1 with a length varint that never ends.
        ("truncated varint", Some(frame(&[0x0a, 0xff]))),
        ("empty body", None),
        // A frame announcing 10 bytes that carries 2.
        (
            "frame cut short",
            Some(Bytes::from_static(&[0, 0, 0, 0, 10, 0x0a, 0x00])),
        ),
    ];
    for (what, body) in cases {
        send = send.ready().await.unwrap();
        let (response, mut stream) = send
            .send_request(grpc_headers(addr, "GetLease"), body.is_none())
            .unwrap();
        if let Some(body) = body {
            stream.send_data(body, true).unwrap();
        }
        let status = within(what, grpc_status(response)).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
        assert_eq!(reason(&status), "INVALID_ARGUMENT", "{what}");
    }
}

/// Item 7: an invalid name is refused as INVALID_NAME before authorization
/// (never quoted in full), and a PERMISSION_DENIED quotes at most 64 bytes
/// of the name.
#[tokio::test]
async fn refusals_quote_little_of_the_input() {
    let (t, _dir) = with_tokens(|_| {}).await;
    let mut c = t.client().await;
    let huge = "x".repeat(8000);
    let err = c
        .get_lease(as_caller("alice", GetLeaseRequest { name: huge.clone() }))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "INVALID_NAME", "validated before authorizing");
    assert!(err.message().len() < 512, "{} bytes", err.message().len());

    let long_valid = format!("bob.{}", "y".repeat(250));
    let err = c
        .acquire(as_caller("alice", acquire_req(&long_valid, "h", 5)))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "PERMISSION_DENIED");
    assert!(!err.message().contains(&long_valid));
    assert!(err.message().len() < 300, "{} bytes", err.message().len());
    // Another identity's watch of a huge filter: INVALID_NAME too.
    let err = c
        .watch_lease(as_caller(
            "alice",
            tenure::proto::WatchLeaseRequest {
                name: format!("{huge}.>"),
                event_types: vec![],
                start_revision: 0,
                shard_revisions: Vec::new(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "INVALID_NAME");
    assert!(err.message().len() < 512);
}
