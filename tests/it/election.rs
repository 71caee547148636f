//! Leader election (`tenure.v1.ElectionService`) against a real nats-server
//! and two Tenure replicas: one campaigner leads, the other takes over after
//! a resignation and after the leader's expiry, with strictly greater
//! fencing tokens each time; a caller that is not (or no longer) the leader
//! cannot proclaim or resign; Observe reports the leader, every change and
//! "no leader" in order; Leader answers NOT_FOUND when nobody leads; an
//! election is the lease of the same name; Observe streams are watches;
//! three candidate processes survive SIGKILLed leaders.

use crate::common;

use crate::common::{reason, renew_req, secs, within, Tenure};
use tenure::proto::election_service_client::ElectionServiceClient;
use tenure::proto::{
    CampaignRequest, ChangeType, EventType, LeaderRequest, Leadership, ObserveRequest,
    ObserveResponse, ProclaimRequest, ResignRequest,
};
use tonic::transport::Channel;
use tonic::Code;

/// An election client of the first replica.
async fn elections(t: &Tenure) -> ElectionServiceClient<Channel> {
    ElectionServiceClient::new(t.channel().await)
}

/// A Campaign request with a TTL in seconds and an optional wait.
fn campaign_req(name: &str, holder: &str, value: &str, ttl_s: i64, wait_s: i64) -> CampaignRequest {
    CampaignRequest {
        name: name.into(),
        holder: holder.into(),
        value: value.into(),
        ttl: Some(secs(ttl_s)),
        wait: (wait_s > 0).then(|| secs(wait_s)),
        ..Default::default()
    }
}

/// Campaigns and unwraps the leadership and key.
async fn campaign(
    c: &mut ElectionServiceClient<Channel>,
    req: CampaignRequest,
) -> (Leadership, String) {
    let resp = within("campaign", c.campaign(req))
        .await
        .expect("campaign")
        .into_inner();
    (resp.leadership.expect("a leadership"), resp.lease_key)
}

/// Opens an Observe stream of `name`.
async fn observe(
    c: &mut ElectionServiceClient<Channel>,
    name: &str,
) -> tonic::Streaming<ObserveResponse> {
    c.observe(ObserveRequest { name: name.into() })
        .await
        .expect("observe opens")
        .into_inner()
}

/// The next change of an Observe stream (fails the test if it errs or
/// ends).
async fn next_change(s: &mut tonic::Streaming<ObserveResponse>) -> ObserveResponse {
    within("next leadership change", s.message())
        .await
        .expect("stream ok")
        .expect("stream open")
}

/// The change's type.
fn kind(r: &ObserveResponse) -> ChangeType {
    ChangeType::try_from(r.r#type).expect("a known change type")
}

/// Two campaigners on two replicas: A leads, B's wait ends when A resigns,
/// A's when B expires; each new leader has a greater token; Observe
/// (opened before anyone led) sees every change in order, including "no
/// leader" after the resignation and after the expiry.
#[tokio::test]
async fn leadership_passes_on_resign_and_on_expiry() {
    let t = Tenure::start().await;
    let (other, _) = t.replica().await;
    let mut a = elections(&t).await;
    let mut b = ElectionServiceClient::connect(format!("http://{}", other.addr()))
        .await
        .unwrap();
    let mut watcher = elections(&t).await;
    let mut changes = observe(&mut watcher, "db.primary").await;
    let first = next_change(&mut changes).await;
    assert_eq!(kind(&first), ChangeType::Current);
    assert!(first.leader.is_none(), "nobody leads yet: {first:?}");

    let (lead_a, key_a) = campaign(
        &mut a,
        campaign_req("db.primary", "a", "10.0.0.1:5432", 30, 0),
    )
    .await;
    assert_eq!(
        (lead_a.holder.as_str(), lead_a.value.as_str()),
        ("a", "10.0.0.1:5432")
    );
    let elected = next_change(&mut changes).await;
    assert_eq!(kind(&elected), ChangeType::Elected);
    assert_eq!(
        elected.leader.as_ref().unwrap().fencing_token,
        lead_a.fencing_token
    );

    // B cannot lead while A does: at once it is refused, naming A.
    let refused = b
        .campaign(campaign_req("db.primary", "b", "10.0.0.2:5432", 2, 0))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert_eq!(reason(&refused), "LEASE_HELD");
    assert!(
        refused.message().contains("led by \"a\""),
        "{}",
        refused.message()
    );

    // B waits; A resigns; B leads with a greater token.
    let waiting_b = tokio::spawn(async move {
        let won = campaign(
            &mut b,
            campaign_req("db.primary", "b", "10.0.0.2:5432", 2, 30),
        )
        .await;
        (won, b)
    });
    a.resign(ResignRequest {
        name: "db.primary".into(),
        expected_revision: lead_a.revision,
        lease_key: key_a.clone(),
        ..Default::default()
    })
    .await
    .expect("the leader resigns");
    let resigned = next_change(&mut changes).await;
    assert_eq!(kind(&resigned), ChangeType::Resigned);
    assert!(resigned.leader.is_none());
    assert_eq!(
        (resigned.ended_holder.as_str(), resigned.ended_fencing_token),
        ("a", lead_a.fencing_token)
    );
    let ((lead_b, key_b), mut b) = within("B to win", waiting_b).await.unwrap();
    assert_eq!(lead_b.holder, "b");
    assert!(
        lead_b.fencing_token > lead_a.fencing_token,
        "{lead_b:?} after {lead_a:?}"
    );
    let elected = next_change(&mut changes).await;
    assert_eq!(kind(&elected), ChangeType::Elected);
    let shown = elected.leader.unwrap();
    assert_eq!(
        (shown.holder.as_str(), shown.value.as_str()),
        ("b", "10.0.0.2:5432")
    );
    assert_eq!(shown.fencing_token, lead_b.fencing_token);

    // The deposed leader can neither proclaim nor resign.
    let deposed = a
        .proclaim(ProclaimRequest {
            name: "db.primary".into(),
            expected_revision: lead_a.revision,
            lease_key: key_a.clone(),
            value: "10.0.0.1:5433".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(deposed.code(), Code::FailedPrecondition);
    assert_eq!(reason(&deposed), "LEASE_NOT_HELD");
    assert!(
        deposed.message().contains("not the leader"),
        "{}",
        deposed.message()
    );
    let deposed = a
        .resign(ResignRequest {
            name: "db.primary".into(),
            expected_revision: lead_a.revision,
            lease_key: key_a,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&deposed), "LEASE_NOT_HELD");

    // B stops renewing: A, waiting, leads once B's term expires.
    let waiting_a = tokio::spawn(async move {
        campaign(
            &mut a,
            campaign_req("db.primary", "a", "10.0.0.1:5432", 30, 30),
        )
        .await
    });
    let expired = next_change(&mut changes).await;
    assert_eq!(kind(&expired), ChangeType::Expired);
    assert!(expired.leader.is_none());
    assert_eq!(
        (expired.ended_holder.as_str(), expired.ended_fencing_token),
        ("b", lead_b.fencing_token)
    );
    let (lead_a2, _) = within("A to win again", waiting_a).await.unwrap();
    assert!(
        lead_a2.fencing_token > lead_b.fencing_token,
        "{lead_a2:?} after {lead_b:?}"
    );
    let elected = next_change(&mut changes).await;
    assert_eq!(kind(&elected), ChangeType::Elected);
    assert_eq!(elected.leader.unwrap().fencing_token, lead_a2.fencing_token);

    // B, deposed by expiry, cannot proclaim either.
    let deposed = b
        .proclaim(ProclaimRequest {
            name: "db.primary".into(),
            expected_revision: lead_b.revision,
            lease_key: key_b,
            value: "x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&deposed), "LEASE_NOT_HELD");
    other.shutdown().await;
}

/// The leader proclaims a new value (same token, new revision), renews
/// with LeaseService.Renew, and Leader and Observe show the value; a
/// caller with the wrong key cannot proclaim; a renewal that changes
/// nothing is not a leadership change.
#[tokio::test]
async fn proclaim_changes_the_value_only_for_the_leader() {
    let t = Tenure::start().await;
    let mut c = elections(&t).await;
    let (lead, key) = campaign(&mut c, campaign_req("svc.leader", "a", "v1", 30, 0)).await;
    let mut changes = observe(&mut c, "svc.leader").await;
    let current = next_change(&mut changes).await;
    assert_eq!(kind(&current), ChangeType::Current);
    assert_eq!(current.leader.as_ref().unwrap().value, "v1");

    // Another key, even with the right revision, is not the leader.
    let refused = c
        .proclaim(ProclaimRequest {
            name: "svc.leader".into(),
            expected_revision: lead.revision,
            lease_key: "some-other-lease-key-0123456789".into(),
            value: "stolen".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "LEASE_NOT_HELD");

    // A plain renewal (LeaseService.Renew) keeps the leadership and is no
    // change; the Proclaim after it is.
    let mut leases = t.client().await;
    let renewed = leases
        .renew(renew_req("svc.leader", lead.revision, key.clone()))
        .await
        .expect("the leadership renews as a lease")
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(renewed.fencing_token, lead.fencing_token);
    assert_eq!(
        renewed.metadata.get("value").map(String::as_str),
        Some("v1")
    );
    let proclaimed = c
        .proclaim(ProclaimRequest {
            name: "svc.leader".into(),
            expected_revision: renewed.revision,
            lease_key: key.clone(),
            value: "v2".into(),
        })
        .await
        .expect("the leader proclaims")
        .into_inner()
        .leadership
        .unwrap();
    assert_eq!(proclaimed.fencing_token, lead.fencing_token);
    assert!(proclaimed.revision > renewed.revision);
    assert_eq!(proclaimed.value, "v2");
    let change = next_change(&mut changes).await;
    assert_eq!(kind(&change), ChangeType::Proclaimed, "{change:?}");
    assert_eq!(change.leader.as_ref().unwrap().value, "v2");

    let leader = c
        .leader(LeaderRequest {
            name: "svc.leader".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .leadership
        .unwrap();
    assert_eq!(
        (
            leader.holder.as_str(),
            leader.value.as_str(),
            leader.fencing_token
        ),
        ("a", "v2", lead.fencing_token)
    );
    let left = leader.ttl_left.expect("ttl_left is set");
    assert!(left.seconds <= 30, "{left:?}");

    // Invalid values are refused before anything is written.
    let bad = c
        .proclaim(ProclaimRequest {
            name: "svc.leader".into(),
            expected_revision: proclaimed.revision,
            lease_key: key,
            value: "line\nbreak".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&bad), "INVALID_ARGUMENT");
}

/// Leader of an election nobody leads is NOT_FOUND with a message that
/// says so; after a revoke, Observe reports REVOKED ("no leader").
#[tokio::test]
async fn no_leader_is_not_found_and_revoke_is_observed() {
    let t = Tenure::start().await;
    let mut c = elections(&t).await;
    let none = c
        .leader(LeaderRequest {
            name: "nobody.leads".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(none.code(), Code::NotFound);
    assert_eq!(reason(&none), "LEASE_NOT_FOUND");
    assert!(
        none.message().contains("has no leader"),
        "{}",
        none.message()
    );

    let (lead, _) = campaign(&mut c, campaign_req("ops.leader", "a", "v", 30, 0)).await;
    let mut changes = observe(&mut c, "ops.leader").await;
    assert_eq!(kind(&next_change(&mut changes).await), ChangeType::Current);
    t.client()
        .await
        .revoke_lease(tenure::proto::RevokeLeaseRequest {
            name: "ops.leader".into(),
            reason: "test".into(),
            fencing_token: 0,
            slot: 0,
        })
        .await
        .expect("revoke");
    let revoked = next_change(&mut changes).await;
    assert_eq!(kind(&revoked), ChangeType::Revoked);
    assert!(revoked.leader.is_none());
    assert_eq!(revoked.ended_fencing_token, lead.fencing_token);
}

/// An election is the lease of the same name: a plain Acquire of it makes
/// its holder the leader (empty value), and Campaign waits for it.
#[tokio::test]
async fn an_election_is_the_lease_of_its_name() {
    let t = Tenure::start().await;
    let mut leases = t.client().await;
    let (lock, _) = common::acquire(
        &mut leases,
        common::acquire_req("shared.name", "locker", 30),
    )
    .await;
    let mut c = elections(&t).await;
    let leader = c
        .leader(LeaderRequest {
            name: "shared.name".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .leadership
        .unwrap();
    assert_eq!(
        (
            leader.holder.as_str(),
            leader.value.as_str(),
            leader.fencing_token
        ),
        ("locker", "", lock.fencing_token)
    );
    let refused = c
        .campaign(campaign_req("shared.name", "b", "v", 30, 0))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "LEASE_HELD");
}

/// Observe streams are watches: they count against the per-identity cap,
/// and closing one frees its slot.
#[tokio::test]
async fn observe_streams_count_as_watches() {
    let t = Tenure::start_with(|c| c.max_watch_streams_per_identity = 1).await;
    let mut c = elections(&t).await;
    let mut first = observe(&mut c, "e.one").await;
    assert_eq!(kind(&next_change(&mut first).await), ChangeType::Current);
    let refused = c
        .observe(ObserveRequest {
            name: "e.two".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(reason(&refused), "TOO_MANY_WATCHES");
    drop(first);
    within("the slot to free up", async {
        loop {
            match c
                .observe(ObserveRequest {
                    name: "e.two".into(),
                })
                .await
            {
                Ok(_) => return,
                Err(err) => {
                    assert_eq!(reason(&err), "TOO_MANY_WATCHES");
                    tokio::task::yield_now().await;
                }
            }
        }
    })
    .await;
}

/// The environment of a candidate child process (see [`candidate_process`]).
const CANDIDATE_ENV: &str = "TENURE_TEST_CANDIDATE";

/// Not a test on its own: the body of a candidate process that
/// [`three_candidates_survive_sigkilled_leaders`] starts (this test binary,
/// run again with `--exact election::candidate_process --ignored` and the candidate in
/// its environment). It campaigns, then renews its leadership every 500 ms
/// until it is killed; it exits non-zero if it ever loses it.
#[tokio::test]
#[ignore = "a child process of three_candidates_survive_sigkilled_leaders"]
async fn candidate_process() {
    let Ok(spec) = std::env::var(CANDIDATE_ENV) else {
        return;
    };
    // ADDR NAME HOLDER KEY
    let parts: Vec<&str> = spec.split(' ').collect();
    let [addr, name, holder, key] = parts[..] else {
        panic!("bad {CANDIDATE_ENV}: {spec}");
    };
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect");
    let mut e = ElectionServiceClient::new(channel.clone());
    let mut l = tenure::proto::lease_service_client::LeaseServiceClient::new(channel);
    let won = e
        .campaign(CampaignRequest {
            lease_key: key.into(),
            ..campaign_req(name, holder, holder, CANDIDATE_TTL_S, 120)
        })
        .await
        .expect("campaign")
        .into_inner()
        .leadership
        .expect("a leadership");
    let mut revision = won.revision;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        revision = l
            .renew(renew_req(name, revision, key))
            .await
            .expect("the leader renews until it is killed")
            .into_inner()
            .lease
            .unwrap()
            .revision;
    }
}

/// The TTL candidates campaign with, seconds.
const CANDIDATE_TTL_S: i64 = 2;

/// Milliseconds of a server timestamp.
fn unix_ms(t: &Option<prost_types::Timestamp>) -> i64 {
    let t = t.as_ref().expect("a timestamp");
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

/// Three candidate processes on two replicas: the leader is SIGKILLed, the
/// next one leads with a greater token no earlier than the dead leader's
/// last write + its TTL and no later than that + 1 s (plus slack for a
/// loaded CI machine; measured on the server's clock, from the records'
/// and the expiry's timestamps); then that leader is killed too. Observe
/// reports every change in order, "no leader" (EXPIRED) between terms, and
/// a deposed leader can no longer proclaim.
#[tokio::test]
async fn three_candidates_survive_sigkilled_leaders() {
    /// How late after the dead leader's expiry the next may be elected:
    /// the 1 s, plus slack for a loaded CI machine.
    const LATE_MS: i64 = 1000 + 3000;
    let name = "db.sigkill";
    let t = Tenure::start().await;
    let (other, mut lease) = t.replica().await;
    let addrs = [t.running.as_ref().unwrap().addr(), other.addr()];
    let mut watcher = elections(&t).await;
    let mut changes = observe(&mut watcher, name).await;
    assert!(next_change(&mut changes).await.leader.is_none());
    // The lease's own events carry every write's server time.
    let mut events = common::watch(&mut lease, name).await;
    common::next_of(&mut events, EventType::SnapshotComplete).await;

    let mut children = std::collections::HashMap::new();
    for (i, holder) in ["c1", "c2", "c3"].into_iter().enumerate() {
        let key = format!("{holder}-secret-lease-key-000");
        let child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "election::candidate_process",
                "--ignored",
                "--nocapture",
            ])
            .env(
                CANDIDATE_ENV,
                format!("{} {name} {holder} {key}", addrs[i % 2]),
            )
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        children.insert(holder.to_string(), (child, key));
    }

    let mut last_token = 0;
    let mut deposed: Option<(Leadership, String)> = None;
    // When the killed leader's TTL ran out (server clock).
    let mut due: Option<i64> = None;
    for term in 0..3 {
        let elected = next_change(&mut changes).await;
        assert_eq!(
            kind(&elected),
            ChangeType::Elected,
            "term {term}: {elected:?}"
        );
        let leader = elected.leader.unwrap();
        assert!(leader.fencing_token > last_token, "tokens increase");
        last_token = leader.fencing_token;
        if let Some(due) = due {
            let late = unix_ms(&leader.elected_time) - due;
            assert!(late >= 0, "elected {} ms before the TTL ran out", -late);
            assert!(late <= LATE_MS, "elected {late} ms after the TTL ran out");
            println!(
                "{} elected {late} ms after the killed leader's TTL ran out",
                leader.holder
            );
        }
        if term == 2 {
            break;
        }
        // SIGKILL the leader, then follow its lease to its expiry: the last
        // write before the EXPIRED event is its last renewal.
        let (child, key) = children.get_mut(&leader.holder).expect("a candidate leads");
        child.start_kill().unwrap();
        child.wait().await.unwrap();
        let mut last_write = unix_ms(&leader.renew_time);
        let expired_at = loop {
            let e = common::next_event(&mut events).await;
            if e.fencing_token != leader.fencing_token {
                continue;
            }
            match EventType::try_from(e.r#type).unwrap() {
                EventType::Renewed => last_write = unix_ms(&e.lease.unwrap().renew_time),
                EventType::Expired => break unix_ms(&e.time),
                _ => {}
            }
        };
        let ttl_ran_out = last_write + CANDIDATE_TTL_S * 1000;
        assert!(
            expired_at >= ttl_ran_out,
            "expired {} ms early",
            ttl_ran_out - expired_at
        );
        due = Some(ttl_ran_out);
        let ended = next_change(&mut changes).await;
        assert_eq!(
            kind(&ended),
            ChangeType::Expired,
            "no leader after the kill"
        );
        assert!(ended.leader.is_none());
        assert_eq!(ended.ended_fencing_token, leader.fencing_token);
        assert_eq!(ended.ended_holder, leader.holder);
        deposed = Some((leader, key.clone()));
    }
    // The last deposed leader cannot proclaim.
    let (old, key) = deposed.unwrap();
    let err = elections(&t)
        .await
        .proclaim(ProclaimRequest {
            name: name.into(),
            expected_revision: old.revision,
            lease_key: key,
            value: "stale".into(),
        })
        .await
        .expect_err("a deposed leader cannot proclaim");
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
}
