//! Transfer: a holder hands its lease to a waiter with no moment in which
//! the name is free: the named waiter (or the head) holds with a new,
//! higher token from the very write that ends the giver's holding, the
//! giver's key stops working at once, the recipient's waiting Acquire
//! returns the holding; NO_WAITER when nobody (or not the named one) waits.

use std::time::Duration;

use crate::common::*;
use tenure::proto::{AcquireRequest, EventType, GetLeaseRequest, TransferRequest};
use tokio::task::JoinHandle;

type Client = tenure::proto::lease_service_client::LeaseServiceClient<tonic::transport::Channel>;

/// A waiting Acquire of `name` by `holder` (the caller waits with
/// [`queued`] before starting the next, so that they queue in order).
async fn waiter(
    c: &Client,
    name: &str,
    holder: &str,
) -> JoinHandle<Result<tonic::Response<tenure::proto::AcquireResponse>, tonic::Status>> {
    let mut c = c.clone();
    let req = AcquireRequest {
        wait: Some(secs(20)),
        ..acquire_req(name, holder, 30)
    };
    tokio::spawn(async move { c.acquire(req).await })
}

/// Waits until `n` Acquires wait for `name`.
async fn queued(c: &mut Client, name: &str, n: u32) {
    within("the waiters to queue", async {
        loop {
            let waiting = c
                .get_lease(GetLeaseRequest { name: name.into() })
                .await
                .map(|r| r.into_inner().waiting)
                .unwrap_or(0);
            if waiting >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

#[tokio::test]
async fn a_holder_hands_its_lease_to_a_waiter_without_a_gap() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let name = "xfer.job";
    let mut w = watch(&mut c, name).await;
    next_of(&mut w, EventType::SnapshotComplete).await;
    let (a, key_a) = acquire(&mut c, acquire_req(name, "a", 30)).await;
    next_of(&mut w, EventType::Acquired).await;

    // Nobody waits yet: NO_WAITER, the holding unchanged.
    let err = c
        .transfer(TransferRequest {
            name: name.into(),
            expected_revision: a.revision,
            lease_key: key_a.clone(),
            to_holder: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(reason(&err), "NO_WAITER");

    // b queues first, then c.
    let b = waiter(&c, name, "b").await;
    queued(&mut c, name, 1).await;
    let cw = waiter(&c, name, "c").await;
    queued(&mut c, name, 2).await;

    // A waiter of another holder: NO_WAITER.
    let err = c
        .transfer(TransferRequest {
            name: name.into(),
            expected_revision: a.revision,
            lease_key: key_a.clone(),
            to_holder: "nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "NO_WAITER");

    // a hands it to c, past b.
    let given = c
        .transfer(TransferRequest {
            name: name.into(),
            expected_revision: a.revision,
            lease_key: key_a.clone(),
            to_holder: "c".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(given.holder, "c");
    assert!(given.fencing_token > a.fencing_token);
    let got = within("c's Acquire to return", cw)
        .await
        .unwrap()
        .unwrap()
        .into_inner();
    let got_lease = got.lease.unwrap();
    assert_eq!(
        (got_lease.holder.as_str(), got_lease.fencing_token),
        ("c", given.fencing_token),
        "c's waiting Acquire returns the holding it was given"
    );
    // No gap: a's holding ends (RELEASED) and c's begins (ACQUIRED) at one
    // and the same revision, the transfer's; nothing in between.
    let ended = next_event(&mut w).await;
    let began = next_event(&mut w).await;
    let kind = |e: &tenure::proto::LeaseEvent| EventType::try_from(e.r#type).unwrap();
    assert_eq!(
        (kind(&ended), ended.holder.as_str(), ended.fencing_token),
        (EventType::Released, "a", a.fencing_token)
    );
    assert_eq!(
        (kind(&began), began.holder.as_str(), began.fencing_token),
        (EventType::Acquired, "c", given.fencing_token)
    );
    assert_eq!(
        ended.revision, began.revision,
        "one write ends one and starts the other"
    );
    let ms = |t: &prost_types::Timestamp| t.seconds * 1000 + t.nanos as i64 / 1_000_000;
    let leaderless_ms = ms(began.time.as_ref().unwrap()) - ms(ended.time.as_ref().unwrap());
    assert_eq!(leaderless_ms, 0);
    eprintln!("transfer: leaderless window {leaderless_ms} ms (one write ends a's holding and starts c's)");
    // a's key stops working at once.
    let err = c
        .renew(renew_req(name, a.revision, &key_a))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");

    // c hands it on to the head of the queue: b.
    let given_b = c
        .transfer(TransferRequest {
            name: name.into(),
            expected_revision: got_lease.revision,
            lease_key: got.lease_key.clone(),
            to_holder: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(given_b.holder, "b");
    let got_b = within("b's Acquire to return", b)
        .await
        .unwrap()
        .unwrap()
        .into_inner();
    assert_eq!(got_b.lease.unwrap().fencing_token, given_b.fencing_token);
    assert!(given_b.fencing_token > given.fencing_token);
    // b holds it and renews with its own key.
    let revision = got_b_revision(&mut c, name).await;
    renew(&mut c, renew_req(name, revision, &got_b.lease_key)).await;
}

/// The current revision of `name`.
async fn got_b_revision(c: &mut Client, name: &str) -> u64 {
    c.get_lease(GetLeaseRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap()
        .revision
}

#[tokio::test]
async fn only_the_holder_transfers() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (a, _) = acquire(&mut c, acquire_req("xfer.key", "a", 30)).await;
    let err = c
        .transfer(TransferRequest {
            name: "xfer.key".into(),
            expected_revision: a.revision,
            lease_key: "not-the-lease-key-0123".into(),
            to_holder: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
}

/// A leader resigns to a waiting candidate: the candidate's Campaign
/// returns its term, with a higher token, from the very write that ends the
/// leader's; an observer sees RESIGNED then ELECTED at one revision.
#[tokio::test]
async fn a_leader_resigns_to_its_successor_without_a_leaderless_moment() {
    use tenure::proto::election_service_client::ElectionServiceClient;
    use tenure::proto::{CampaignRequest, ChangeType, ObserveRequest, ResignRequest};
    let t = Tenure::start().await;
    let mut e = ElectionServiceClient::new(t.channel().await);
    let mut lc = t.client().await;
    let campaign = |holder: &str, wait: i64| CampaignRequest {
        name: "xfer.leader".into(),
        holder: holder.into(),
        value: format!("{holder}:80"),
        ttl: Some(secs(30)),
        wait: (wait > 0).then(|| secs(wait)),
        ..Default::default()
    };
    let leader = e.campaign(campaign("a", 0)).await.unwrap().into_inner();
    let term_a = leader.leadership.unwrap();
    let mut observe = e
        .observe(ObserveRequest {
            name: "xfer.leader".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = within("observe", observe.message()).await.unwrap().unwrap();
    assert_eq!(first.r#type, ChangeType::Current as i32);
    let b = {
        let mut e = e.clone();
        let req = campaign("b", 20);
        tokio::spawn(async move { e.campaign(req).await })
    };
    queued(&mut lc, "xfer.leader", 1).await;
    let resigned = e
        .resign(ResignRequest {
            name: "xfer.leader".into(),
            expected_revision: term_a.revision,
            lease_key: leader.lease_key.clone(),
            successor: "b".into(),
            to_next_candidate: false,
        })
        .await
        .unwrap()
        .into_inner();
    let succ = resigned.successor.expect("the successor's term");
    assert_eq!(succ.holder, "b");
    assert_eq!(succ.value, "b:80", "the candidate's value goes with it");
    assert!(succ.fencing_token > term_a.fencing_token);
    let won = within("b's Campaign", b)
        .await
        .unwrap()
        .unwrap()
        .into_inner();
    assert_eq!(won.leadership.unwrap().fencing_token, succ.fencing_token);
    let stepped = within("observe", observe.message()).await.unwrap().unwrap();
    let elected = within("observe", observe.message()).await.unwrap().unwrap();
    assert_eq!(stepped.r#type, ChangeType::Resigned as i32);
    assert_eq!(stepped.ended_fencing_token, term_a.fencing_token);
    assert_eq!(elected.r#type, ChangeType::Elected as i32);
    assert_eq!(elected.leader.unwrap().holder, "b");
    assert_eq!(stepped.revision, elected.revision);
}

/// `tenure transfer` hands a holding acquired with `tenure acquire` to a
/// waiter; with nobody waiting it exits 1 naming NO_WAITER.
#[tokio::test]
async fn the_cli_transfers() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let url = format!("http://{}", t.running.as_ref().unwrap().addr());
    let out = run_to_end(tenure_cli(&url).args(["acquire", "xfer.cli", "-o", "json"])).await;
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let revision = v["revision"].as_u64().unwrap().to_string();
    let key = v["lease_key"].as_str().unwrap().to_string();
    let args = |to: &str| {
        let mut a = vec![
            "transfer",
            "xfer.cli",
            "--revision",
            &revision,
            "--lease-key",
            &key,
        ];
        if !to.is_empty() {
            a.extend(["--to", to]);
        }
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let out = run_to_end(tenure_cli(&url).args(args(""))).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("NO_WAITER"), "{out:?}");
    let w = waiter(&c, "xfer.cli", "next").await;
    queued(&mut c, "xfer.cli", 1).await;
    let out = run_to_end(tenure_cli(&url).args(args("next"))).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("transferred xfer.cli to next"),
        "{out:?}"
    );
    let got = within("the waiter", w).await.unwrap().unwrap().into_inner();
    assert_eq!(got.lease.unwrap().holder, "next");
}

/// A candidate that campaigns with a preference is named to every observer
/// (on any replica), in CURRENT and then as PREFERRED changes: the waiting
/// candidate of the highest preference, the earliest of equals; a candidate
/// without preference is never named. The leader resigns to it, and it
/// leads from the very write that ends the leader's term (no leaderless
/// moment, by the records' server times), with a higher token; the
/// observer is then told that no candidate is preferred.
#[tokio::test]
async fn a_preferred_candidate_is_named_to_the_leader_which_hands_over() {
    use tenure::proto::election_service_client::ElectionServiceClient;
    use tenure::proto::{CampaignRequest, Candidate, ChangeType, ObserveRequest, ResignRequest};
    let t = Tenure::start().await;
    let (other, _) = t.replica().await;
    let mut e = ElectionServiceClient::new(t.channel().await);
    let e2 = ElectionServiceClient::connect(format!("http://{}", other.addr()))
        .await
        .unwrap();
    let mut lc = t.client().await;
    let name = "pref.leader";
    let campaign = |holder: &str, wait: i64, preference: u32| CampaignRequest {
        name: name.into(),
        holder: holder.into(),
        value: format!("{holder}:80"),
        ttl: Some(secs(30)),
        wait: (wait > 0).then(|| secs(wait)),
        preference,
        ..Default::default()
    };
    let wait_for = |holder: &str, wait, preference| {
        let mut e = e2.clone();
        let req = campaign(holder, wait, preference);
        tokio::spawn(async move { e.campaign(req).await })
    };
    let named = |holder: &str, preference| {
        Some(Candidate {
            holder: holder.into(),
            preference,
        })
    };
    let leader = e.campaign(campaign("v1", 0, 1)).await.unwrap().into_inner();
    let term = leader.leadership.unwrap();
    // A candidate of no preference, then one of preference 1 (the
    // leader's own): waiting, named, though the leader need not step down.
    let plain = wait_for("plain", 20, 0);
    queued(&mut lc, name, 1).await;
    let same = wait_for("v1-b", 20, 1);
    queued(&mut lc, name, 2).await;
    let mut observe = e
        .observe(ObserveRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner();
    let first = next(&mut observe).await;
    assert_eq!(first.r#type, ChangeType::Current as i32);
    assert_eq!(
        first.preferred,
        named("v1-b", 1),
        "queued before the stream"
    );
    // Two of preference 2: the earlier is preferred, the later changes
    // nothing.
    let v2 = wait_for("v2", 20, 2);
    let change = next(&mut observe).await;
    assert_eq!(change.r#type, ChangeType::Preferred as i32);
    assert_eq!(change.preferred, named("v2", 2));
    assert_eq!(
        change.leader.unwrap().holder,
        "v1",
        "the leader is unchanged"
    );
    let v2b = wait_for("v2-b", 20, 2);
    queued(&mut lc, name, 4).await;
    // The leader (preference 1) resigns to the preferred candidate.
    let resigned = e
        .resign(ResignRequest {
            name: name.into(),
            expected_revision: term.revision,
            lease_key: leader.lease_key.clone(),
            successor: "v2".into(),
            to_next_candidate: false,
        })
        .await
        .unwrap()
        .into_inner();
    let succ = resigned.successor.expect("the successor's term");
    assert_eq!(succ.holder, "v2");
    assert!(succ.fencing_token > term.fencing_token);
    let won = within("v2's Campaign", v2)
        .await
        .unwrap()
        .unwrap()
        .into_inner();
    let won = won.leadership.unwrap();
    assert_eq!(won.fencing_token, succ.fencing_token);
    let resigned_at = next(&mut observe).await;
    assert_eq!(resigned_at.r#type, ChangeType::Resigned as i32);
    let elected = next(&mut observe).await;
    assert_eq!(elected.r#type, ChangeType::Elected as i32);
    assert_eq!(
        resigned_at.revision, elected.revision,
        "one write: no leaderless moment"
    );
    assert_eq!(elected.leader.unwrap().holder, "v2");
    // v2 leads now; the other 2 waits, of the same preference: it is named,
    // but a leader of preference 2 has no reason to step down for it.
    let mut preferred = elected.preferred;
    if preferred != named("v2-b", 2) {
        let change = next(&mut observe).await;
        assert_eq!(change.r#type, ChangeType::Preferred as i32);
        preferred = change.preferred;
    }
    assert_eq!(preferred, named("v2-b", 2));
    for waiter in [plain, same, v2b] {
        waiter.abort();
    }
    drop(other);
}

/// The next message of an Observe stream.
async fn next(
    s: &mut tonic::Streaming<tenure::proto::ObserveResponse>,
) -> tenure::proto::ObserveResponse {
    within("observe", s.message()).await.unwrap().unwrap()
}
