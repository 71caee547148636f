//! Lease history (LeaseHistory, `tenure history`): the history stream NATS
//! copies from the bucket (a mirror; a sourced stream an older Tenure made
//! is kept and read alike) answers who held a name, when, with which token
//! and how each holding ended (released, revoked with who and why,
//! expired, still held), after the bucket kept only the latest message;
//! semaphore holdings come with their slots; `at` picks the holding of an
//! instant; a page says where to go on; a server without history says so.

use std::time::Duration;

use crate::common::*;
use tenure::proto::{
    AcquireRequest, EventType, HistoricHolding, HoldingEnding, LeaseHistoryRequest,
    LeaseHistoryResponse, RevokeLeaseRequest,
};

type Client = tenure::proto::lease_service_client::LeaseServiceClient<tonic::transport::Channel>;

/// Waits until the history stream has copied revision `revision` of key
/// `key` (NATS sources the bucket asynchronously; a message superseded
/// before it is copied never is, so each step of a test that wants every
/// message recorded waits for it).
async fn recorded(t: &Tenure, key: &str, revision: u64) {
    let js = t.nats.jetstream().await;
    let stream = js
        .get_stream(format!("TENURE_HISTORY_{}", t.config.bucket))
        .await
        .unwrap();
    // A lease's record is kept beside its queue (design section 2).
    let subject = match key.starts_with("_tenure.") {
        true => format!("$KV.{}.{key}", t.config.bucket),
        false => format!("$KV.{}._tenure.q.{key}.lease.holder", t.config.bucket),
    };
    within("the history to copy the write", async {
        loop {
            if let Ok(m) = stream.get_last_raw_message_by_subject(&subject).await {
                // A mirror keeps the bucket's sequence; a sourced stream
                // names it in a header.
                let copied: u64 = match m.headers.get("Nats-Stream-Source") {
                    Some(source) => source
                        .as_str()
                        .split_whitespace()
                        .nth(1)
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0),
                    None => m.sequence,
                };
                if copied >= revision {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// The history of `name` once it records a holding with `token` (NATS
/// sources the bucket into the history stream asynchronously).
async fn history_with(
    c: &mut Client,
    req: LeaseHistoryRequest,
    token: u64,
) -> LeaseHistoryResponse {
    within("the history to record the last write", async {
        loop {
            let resp = c.lease_history(req.clone()).await.unwrap().into_inner();
            if resp.holdings.iter().any(|h| h.fencing_token == token) {
                return resp;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

fn ending(h: &HistoricHolding) -> HoldingEnding {
    HoldingEnding::try_from(h.ending).unwrap()
}

fn ms(t: &prost_types::Timestamp) -> i64 {
    t.seconds * 1000 + t.nanos as i64 / 1_000_000
}

#[tokio::test]
async fn history_answers_who_held_a_name_and_how_it_ended() {
    let t = Tenure::start_with(|c| c.min_ttl = Duration::from_secs(1)).await;
    let mut c = t.client().await;
    let name = "hist.job";
    // Each step waits until the history copied it: messages superseded
    // before NATS copies them are gaps (the next test), not holdings.
    // w1: acquired, renewed, released.
    let (l1, k1) = acquire(&mut c, acquire_req(name, "w1", 30)).await;
    recorded(&t, name, l1.revision).await;
    let r1 = renew(&mut c, renew_req(name, l1.revision, &k1)).await;
    recorded(&t, name, r1.revision).await;
    let rel = c
        .release(release_req(name, r1.revision, &k1))
        .await
        .unwrap()
        .into_inner();
    recorded(&t, name, rel.revision).await;
    // w2: revoked by an operator.
    let (l2, _) = acquire(&mut c, acquire_req(name, "w2", 30)).await;
    recorded(&t, name, l2.revision).await;
    let rev = c
        .revoke_lease(RevokeLeaseRequest {
            name: name.into(),
            reason: "stuck in GC".into(),
            fencing_token: l2.fencing_token,
            slot: 0,
        })
        .await
        .unwrap()
        .into_inner();
    recorded(&t, name, rev.revision).await;
    // w3: expires (1 s TTL).
    let mut w = watch(&mut c, name).await;
    next_of(&mut w, EventType::SnapshotComplete).await;
    let (l3, _) = acquire(&mut c, acquire_req(name, "w3", 1)).await;
    next_of(&mut w, EventType::Acquired).await;
    let expired = next_of(&mut w, EventType::Expired).await;
    recorded(&t, name, expired.revision).await;
    // w4: held now.
    let (l4, _) = acquire(&mut c, acquire_req(name, "w4", 30)).await;
    recorded(&t, name, l4.revision).await;

    let req = LeaseHistoryRequest {
        name: name.into(),
        ..Default::default()
    };
    let resp = history_with(&mut c, req, l4.fencing_token).await;
    assert!(resp.gaps.is_empty(), "{:?}", resp.gaps);
    let seen: Vec<(u64, &str, HoldingEnding)> = resp
        .holdings
        .iter()
        .map(|h| (h.fencing_token, h.holder.as_str(), ending(h)))
        .collect();
    assert_eq!(
        seen,
        vec![
            (l1.fencing_token, "w1", HoldingEnding::Released),
            (l2.fencing_token, "w2", HoldingEnding::Revoked),
            (l3.fencing_token, "w3", HoldingEnding::Expired),
            (l4.fencing_token, "w4", HoldingEnding::Held),
        ]
    );
    let revoked = &resp.holdings[1];
    assert_eq!(revoked.revoke_reason, "stuck in GC");
    assert_eq!(revoked.revoked_by, "anonymous");
    let first = &resp.holdings[0];
    assert_eq!(first.acquire_time, l1.acquire_time);
    assert!(ms(first.end_time.as_ref().unwrap()) >= ms(first.acquire_time.as_ref().unwrap()));
    assert!(resp.holdings[3].end_time.is_none());
    assert!(resp.oldest.is_some());
    assert_eq!(resp.retention.unwrap().seconds, 168 * 3600);

    // The bucket keeps only the latest message of the name; the history
    // has all four holdings. At an instant inside w1's holding: w1 alone.
    let inside = first.renew_time.unwrap();
    let at = c
        .lease_history(LeaseHistoryRequest {
            name: name.into(),
            at: Some(inside),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let holders: Vec<&str> = at.holdings.iter().map(|h| h.holder.as_str()).collect();
    assert_eq!(holders, ["w1"]);

    // A page of two says where to go on.
    let page = c
        .lease_history(LeaseHistoryRequest {
            name: name.into(),
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.holdings.len(), 2);
    let more = page.more_since.expect("more_since on a full page");
    let rest = c
        .lease_history(LeaseHistoryRequest {
            name: name.into(),
            since: Some(more),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(rest.holdings.iter().any(|h| h.holder == "w4"));

    // The CLI shows the same.
    let url = format!("http://{}", t.running.as_ref().unwrap().addr());
    let out = run_to_end(tenure_cli(&url).args(["history", name, "-o", "json"])).await;
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let endings: Vec<&str> = v["holdings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["ending"].as_str().unwrap())
        .collect();
    assert_eq!(
        endings,
        [
            "RELEASED",
            "REVOKED by anonymous: stuck in GC",
            "EXPIRED",
            "HELD"
        ]
    );
    let out = run_to_end(tenure_cli(&url).args(["history", name])).await;
    assert!(out.stdout.starts_with("TOKEN"), "{out:?}");
}

#[tokio::test]
async fn semaphore_holdings_come_with_their_slots() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut last = 0;
    for holder in ["a", "b"] {
        let (l, key) = acquire(
            &mut c,
            AcquireRequest {
                limit: 2,
                ..acquire_req("hist.pool", holder, 30)
            },
        )
        .await;
        let slot_key = format!("_tenure.sem.hist.pool.{}", l.slot);
        recorded(&t, &slot_key, l.revision).await;
        let released = c
            .release(tenure::proto::ReleaseRequest {
                slot: l.slot,
                ..release_req("hist.pool", l.revision, &key)
            })
            .await
            .unwrap()
            .into_inner();
        recorded(&t, &slot_key, released.revision).await;
        last = l.fencing_token;
    }
    let resp = history_with(
        &mut c,
        LeaseHistoryRequest {
            name: "hist.pool".into(),
            ..Default::default()
        },
        last,
    )
    .await;
    assert_eq!(resp.holdings.len(), 2);
    for h in &resp.holdings {
        assert_eq!(h.name, "hist.pool");
        assert!(h.slot >= 1, "{h:?}");
        assert_eq!(ending(h), HoldingEnding::Released);
    }
}

#[tokio::test]
async fn a_server_without_history_says_so() {
    let t = Tenure::start_with(|c| c.history_retention = Duration::ZERO).await;
    let mut c = t.client().await;
    let err = c
        .lease_history(LeaseHistoryRequest {
            name: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(reason(&err), "HISTORY_OFF");
    assert!(err.message().contains("--history-retention"), "{err:?}");
    let err = c
        .lease_history(LeaseHistoryRequest {
            name: "x".into(),
            page_size: 5000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "INVALID_ARGUMENT");
}

/// Holdings that come and go faster than NATS copies them: the history
/// never hides one. Every holding granted is in the answer or inside a
/// gap it reports.
#[tokio::test]
async fn what_the_history_did_not_copy_is_a_gap() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let name = "hist.burst";
    let mut tokens = Vec::new();
    for i in 0..30 {
        let (l, k) = acquire(&mut c, acquire_req(name, &format!("b{i}"), 30)).await;
        tokens.push(l.fencing_token);
        c.release(release_req(name, l.revision, &k)).await.unwrap();
    }
    let (last, _) = acquire(&mut c, acquire_req(name, "end", 30)).await;
    recorded(&t, name, last.revision).await;
    let resp = history_with(
        &mut c,
        LeaseHistoryRequest {
            name: name.into(),
            page_size: 1000,
            ..Default::default()
        },
        last.fencing_token,
    )
    .await;
    for token in tokens {
        let listed = resp.holdings.iter().any(|h| h.fencing_token == token);
        let in_gap = resp
            .gaps
            .iter()
            .any(|g| g.after_revision < token && token < g.before_revision);
        assert!(
            listed || in_gap,
            "holding {token} neither listed nor in a gap: {resp:?}"
        );
    }
    eprintln!(
        "history burst: {} holdings listed, {} gaps",
        resp.holdings.len(),
        resp.gaps.len()
    );
}

/// A fresh server makes the history a mirror of the bucket's stream: the
/// copies keep the bucket's sequences, so a copy's sequence is its
/// revision and it carries no `Nats-Stream-Source`.
#[tokio::test]
async fn the_history_mirrors_the_bucket() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (l, _) = acquire(&mut c, acquire_req("hist.mirror", "m", 30)).await;
    recorded(&t, "hist.mirror", l.revision).await;
    let js = t.nats.jetstream().await;
    let mut stream = js
        .get_stream(format!("TENURE_HISTORY_{}", t.config.bucket))
        .await
        .unwrap();
    let info = stream.info().await.unwrap();
    let mirror = info.config.mirror.as_ref().expect("a mirror");
    assert_eq!(mirror.name, format!("KV_{}", t.config.bucket));
    assert!(info.config.sources.as_ref().is_none_or(|s| s.is_empty()));
    let copy = stream
        .get_raw_message(l.revision)
        .await
        .expect("the grant's copy at its revision");
    assert_eq!(
        copy.subject.as_str(),
        format!("$KV.{}._tenure.q.hist.mirror.lease.holder", t.config.bucket)
    );
    assert!(copy.headers.get("Nats-Stream-Source").is_none());
}

/// A history stream an older Tenure made (sourced from the one bucket
/// stream, which NATS cannot turn into a mirror) is kept as it is, and
/// read: tokens come from its `Nats-Stream-Source` headers.
#[tokio::test]
async fn a_sourced_history_stream_is_kept_and_read() {
    use async_nats::jetstream::stream;
    let nats = Nats::start().await;
    let bucket = tenure::Config::for_nats(&nats.url()).bucket;
    let js = nats.jetstream().await;
    js.create_stream(stream::Config {
        name: format!("TENURE_HISTORY_{bucket}"),
        sources: Some(vec![stream::Source {
            name: format!("KV_{bucket}"),
            ..Default::default()
        }]),
        max_age: Duration::from_secs(7 * 24 * 3600),
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
    let t = Tenure::start_on(nats, |_| {}).await;
    let mut c = t.client().await;
    let name = "hist.sourced";
    let (l1, k1) = acquire(&mut c, acquire_req(name, "s1", 30)).await;
    recorded(&t, name, l1.revision).await;
    let rel = c
        .release(release_req(name, l1.revision, &k1))
        .await
        .unwrap()
        .into_inner();
    recorded(&t, name, rel.revision).await;
    let (l2, _) = acquire(&mut c, acquire_req(name, "s2", 30)).await;
    recorded(&t, name, l2.revision).await;
    let resp = history_with(
        &mut c,
        LeaseHistoryRequest {
            name: name.into(),
            ..Default::default()
        },
        l2.fencing_token,
    )
    .await;
    let tokens: Vec<(u64, HoldingEnding)> = resp
        .holdings
        .iter()
        .map(|h| (h.fencing_token, ending(h)))
        .collect();
    assert_eq!(
        tokens,
        vec![
            (l1.fencing_token, HoldingEnding::Released),
            (l2.fencing_token, HoldingEnding::Held)
        ],
        "{resp:?}"
    );
    let info = js
        .get_stream(format!("TENURE_HISTORY_{bucket}"))
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    assert!(info.mirror.is_none(), "still sourced");
    assert_eq!(info.sources.map(|s| s.len()), Some(1));
}
