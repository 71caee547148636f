//! All-or-nothing groups (AcquireGroup, RenewGroup, ReleaseGroup) against a
//! real nats-server and two Tenure replicas on one bucket: no observer
//! (WatchLease, GetLease) ever sees part of a group, a waiting group never
//! holds a subset, renewals are all or none, and refusals name the member
//! that caused them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::common::*;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{
    self, AcquireGroupRequest, EventType, GetLeaseRequest, GroupMember, ListLeasesRequest,
    ReleaseGroupRequest, RenewGroupRequest, RevokeLeaseRequest,
};
use tokio::sync::Mutex;
use tonic::transport::Channel;
use tonic::Code;
use tonic_types::StatusExt;

/// The group counters are one per process: tests that read them must not
/// run while another test of this file moves them.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// An AcquireGroup of `names` by `holder`, TTL 30 s, no wait.
fn group_req(names: &[&str], holder: &str) -> AcquireGroupRequest {
    AcquireGroupRequest {
        names: names.iter().map(|n| n.to_string()).collect(),
        holder: holder.into(),
        ttl: Some(secs(30)),
        ..Default::default()
    }
}

/// The members of an acquired or renewed group, for RenewGroup/ReleaseGroup.
fn members(leases: &[proto::Lease]) -> Vec<GroupMember> {
    leases
        .iter()
        .map(|l| GroupMember {
            name: l.name.clone(),
            expected_revision: l.revision,
        })
        .collect()
}

/// An ErrorInfo metadata entry of a status.
fn meta(status: &tonic::Status, key: &str) -> String {
    status
        .get_details_error_info()
        .and_then(|i| i.metadata.get(key).cloned())
        .unwrap_or_else(|| panic!("no {key:?} in {status:?}"))
}

/// The lease GetLease shows for `name`, or `None` when it is not held.
async fn get(c: &mut LeaseServiceClient<Channel>, name: &str) -> Option<proto::Lease> {
    match c.get_lease(GetLeaseRequest { name: name.into() }).await {
        Ok(r) => r.into_inner().lease,
        Err(s) if s.code() == Code::NotFound => None,
        Err(s) => panic!("GetLease {name}: {s:?}"),
    }
}

/// Tenure with its metrics listener on.
async fn start() -> Tenure {
    Tenure::start_with(|c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap())).await
}

/// A counter of this process's metrics.
async fn counter(t: &Tenure, name: &str) -> f64 {
    metric(t.running.as_ref().unwrap().metrics_addr().unwrap(), name).await
}

/// Under single-name Acquires (both replicas, many tasks) racing
/// AcquireGroups over overlapping names, the watch stream shows every
/// group as one block of consecutive ACQUIRED events (and its release as
/// one block of RELEASED events), never a member taken while another
/// holding of it was live, and GetLease never shows a group member while
/// another member of it is held by someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_observers_never_see_a_partial_group() {
    let _serial = SERIAL.lock().await;
    let t = start().await;
    let (_b, cb) = t.replica().await;
    let ca = t.client().await;
    let names: Vec<String> = (0..6).map(|i| format!("race.n{i}")).collect();
    let mut w = watch(&mut ca.clone(), ">").await;
    next_of(&mut w, EventType::SnapshotComplete).await;

    let groups: Vec<Vec<usize>> = vec![
        vec![0, 1, 2],
        vec![2, 3, 4],
        vec![4, 5, 0],
        vec![5, 3, 1],
        vec![1, 0, 3, 2],
    ];
    let granted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (i, indices) in groups.into_iter().enumerate() {
        let mut c = if i % 2 == 0 { ca.clone() } else { cb.clone() };
        let group: Vec<String> = indices.iter().map(|&m| names[m].clone()).collect();
        let (granted, refused) = (granted.clone(), refused.clone());
        tasks.push(tokio::spawn(async move {
            let refs: Vec<&str> = group.iter().map(String::as_str).collect();
            for _ in 0..25 {
                match c
                    .acquire_group(group_req(&refs, &format!("group-{i}")))
                    .await
                {
                    Ok(resp) => {
                        let resp = resp.into_inner();
                        let first = resp.leases[0].fencing_token;
                        for (j, l) in resp.leases.iter().enumerate() {
                            assert_eq!(l.name, group[j], "leases come in request order");
                            assert_eq!(
                                l.fencing_token,
                                first + j as u64,
                                "one batch: consecutive tokens"
                            );
                            assert_eq!(l.revision, l.fencing_token);
                            assert_eq!(l.group, group);
                        }
                        granted.fetch_add(1, Ordering::Relaxed);
                        let done = c
                            .release_group(ReleaseGroupRequest {
                                members: members(&resp.leases),
                                lease_key: resp.lease_key,
                            })
                            .await
                            .expect("release group")
                            .into_inner();
                        assert_eq!(done.released, group);
                        assert!(done.not_held.is_empty());
                    }
                    Err(s) => {
                        assert_eq!(reason(&s), "LEASE_HELD", "{s:?}");
                        assert!(group.contains(&meta(&s, "name")), "{s:?}");
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for i in 0..6 {
        let mut c = if i % 2 == 0 { ca.clone() } else { cb.clone() };
        let names = names.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..50 {
                let name = &names[(i + round) % names.len()];
                if let Ok(resp) = c
                    .acquire(acquire_req(name, &format!("single-{i}"), 30))
                    .await
                {
                    let resp = resp.into_inner();
                    let lease = resp.lease.unwrap();
                    assert!(lease.group.is_empty());
                    c.release(release_req(name, lease.revision, resp.lease_key))
                        .await
                        .expect("release");
                }
            }
        }));
    }
    // GetLease: a member seen held by a group means every other member is
    // held by that group, or was taken later (a later token) or is free.
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));
    let check_done = Arc::new(tokio::sync::Notify::new());
    let poller = {
        let (mut c, names, stop, checked, check_done) = (
            cb.clone(),
            names.clone(),
            stop.clone(),
            checked.clone(),
            check_done.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for name in &names {
                    let Some(seen) = get(&mut c, name).await else {
                        continue;
                    };
                    if seen.group.is_empty() {
                        continue;
                    }
                    let k = seen.group.len() as u64;
                    let pos = seen.group.iter().position(|n| n == name).unwrap() as u64;
                    let first = seen.fencing_token - pos;
                    for (j, other) in seen.group.iter().enumerate() {
                        if other == name {
                            continue;
                        }
                        if let Some(o) = get(&mut c, other).await {
                            if o.holder == seen.holder
                                && o.group == seen.group
                                && o.fencing_token >= first
                                && o.fencing_token < first + k
                            {
                                assert_eq!(o.fencing_token, first + j as u64);
                            } else {
                                assert!(
                                    o.fencing_token >= first + k,
                                    "{other} held by {} (token {}) while {name} was held by group {:?} (token {})",
                                    o.holder, o.fencing_token, seen.group, seen.fencing_token
                                );
                            }
                        }
                    }
                    checked.fetch_add(1, Ordering::Relaxed);
                    check_done.notify_one();
                }
            }
        })
    };
    for task in tasks {
        within("the racing tasks", task).await.unwrap();
    }
    // On a loaded machine the poller may never have caught a group held:
    // hold one until it has checked it.
    if checked.load(Ordering::Relaxed) == 0 {
        let mut c = ca.clone();
        let refs: Vec<&str> = names[..3].iter().map(String::as_str).collect();
        let held = c
            .acquire_group(group_req(&refs, "group-held"))
            .await
            .expect("the race is over: the group is free")
            .into_inner();
        granted.fetch_add(1, Ordering::Relaxed);
        within("the poller's check of a held group", async {
            while checked.load(Ordering::Relaxed) == 0 {
                check_done.notified().await;
            }
        })
        .await;
        c.release_group(ReleaseGroupRequest {
            members: members(&held.leases),
            lease_key: held.lease_key,
        })
        .await
        .expect("release the held group");
    }
    stop.store(true, Ordering::Relaxed);
    within("the poller", poller).await.unwrap();
    acquire(&mut ca.clone(), acquire_req("race.end", "sentinel", 30)).await;

    // Replay the watch stream up to the sentinel. Nothing may be lost
    // silently: a release whose acquisition the watch did not deliver must
    // come right after a MISSED for its name (the bucket keeps one message
    // per name, so a watcher behind the stream can find a holding gone:
    // design section 9), and with no MISSED at all every granted group is
    // one block.
    let mut held: HashMap<String, (String, Vec<String>)> = HashMap::new();
    let mut blocks = 0;
    let mut missed_events = 0;
    let mut just_missed: HashSet<String> = HashSet::new();
    let mut released_unseen = 0;
    loop {
        let e = next_event(&mut w).await;
        if e.name == "race.end" {
            break;
        }
        let kind = EventType::try_from(e.r#type).unwrap();
        let was_missed = just_missed.remove(&e.name);
        match kind {
            EventType::Missed => {
                missed_events += 1;
                // The holding it knew (if any) has ended.
                held.remove(&e.name);
                just_missed.insert(e.name.clone());
            }
            EventType::Acquired => {
                let lease = e.lease.clone().unwrap();
                assert!(
                    !held.contains_key(&e.name),
                    "{} taken while held: {e:?}",
                    e.name
                );
                if lease.group.is_empty() {
                    held.insert(e.name.clone(), (e.holder.clone(), vec![]));
                    continue;
                }
                let group = lease.group.clone();
                assert_eq!(
                    e.name, group[0],
                    "a group's block starts with its first member"
                );
                held.insert(e.name.clone(), (e.holder.clone(), group.clone()));
                for (j, member) in group.iter().enumerate().skip(1) {
                    let mut next = next_event(&mut w).await;
                    if next.r#type == EventType::Missed as i32 && &next.name == member {
                        // A member's earlier holding ended unseen: said
                        // before the member's ACQUIRED.
                        missed_events += 1;
                        held.remove(member);
                        next = next_event(&mut w).await;
                    }
                    assert_eq!(
                        next.r#type,
                        EventType::Acquired as i32,
                        "partial group: {next:?} inside {group:?}"
                    );
                    assert_eq!(&next.name, member);
                    assert_eq!(next.holder, e.holder);
                    assert_eq!(next.revision, e.revision + j as u64);
                    assert!(!held.contains_key(member), "{member} taken while held");
                    held.insert(member.clone(), (e.holder.clone(), group.clone()));
                }
                blocks += 1;
            }
            EventType::Released => {
                let Some((_, group)) = held.remove(&e.name) else {
                    assert!(
                        was_missed,
                        "a release of a holding the watch never delivered, with no MISSED before it: {e:?}"
                    );
                    released_unseen += 1;
                    continue;
                };
                for member in group.iter().filter(|m| **m != e.name) {
                    let next = next_event(&mut w).await;
                    assert_eq!(
                        next.r#type,
                        EventType::Released as i32,
                        "partial release: {next:?} inside {group:?}"
                    );
                    assert!(group.contains(&next.name));
                    assert!(
                        held.remove(&next.name).is_some(),
                        "{member}'s group released twice"
                    );
                }
            }
            other => panic!("unexpected {other:?} in the race: {e:?}"),
        }
    }
    let granted = granted.load(Ordering::Relaxed);
    assert!(
        granted > 0,
        "no group was ever granted: the race proves nothing"
    );
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "no group was ever refused: no race"
    );
    assert!(
        checked.load(Ordering::Relaxed) > 0,
        "the poller checked nothing"
    );
    assert!(blocks <= granted, "{blocks} blocks for {granted} groups");
    if missed_events == 0 {
        assert_eq!(
            blocks, granted,
            "{granted} groups granted, {blocks} seen as blocks, and the watch said it missed nothing"
        );
    }
    assert!(blocks > 0, "no group seen as a block");
    eprintln!("groups: {granted} granted, {blocks} blocks, {missed_events} MISSED, {released_unseen} releases after a MISSED");
}

/// A waiting AcquireGroup takes nothing while any member is held: after one
/// member frees it stays out, and the last release is followed at once by
/// the whole group, as one block.
#[tokio::test]
async fn a_waiting_group_takes_all_members_at_once() {
    let _serial = SERIAL.lock().await;
    let t = start().await;
    let (_b, mut cb) = t.replica().await;
    let mut ca = t.client().await;
    let (a, key_a) = acquire(&mut ca, acquire_req("wait.a", "x", 30)).await;
    let (b, key_b) = acquire(&mut ca, acquire_req("wait.b", "x", 30)).await;
    let mut w = watch(&mut ca, ">").await;
    next_of(&mut w, EventType::SnapshotComplete).await;
    let before = counter(&t, "tenure_group_refusals_total").await;
    let waiter = tokio::spawn(async move {
        cb.acquire_group(AcquireGroupRequest {
            wait: Some(secs(30)),
            ..group_req(&["wait.a", "wait.b", "wait.c"], "g")
        })
        .await
    });
    // The waiter has tried once and is waiting.
    within("the group's first try", async {
        while counter(&t, "tenure_group_refusals_total").await <= before {
            tokio::task::yield_now().await;
        }
    })
    .await;
    ca.release(release_req("wait.a", a.revision, key_a))
        .await
        .unwrap();
    // It tries again with wait.a free (woken by the release) and still
    // takes nothing: wait.b is held.
    let after_a = counter(&t, "tenure_group_refusals_total").await;
    within("the group's retry", async {
        while counter(&t, "tenure_group_refusals_total").await <= after_a {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(
        get(&mut ca, "wait.a").await.is_none(),
        "no member taken alone"
    );
    ca.release(release_req("wait.b", b.revision, key_b))
        .await
        .unwrap();
    let got = within("the group", waiter)
        .await
        .unwrap()
        .expect("granted")
        .into_inner();
    assert_eq!(got.leases.len(), 3);
    let mut seen = Vec::new();
    for _ in 0..5 {
        let e = next_event(&mut w).await;
        seen.push((EventType::try_from(e.r#type).unwrap(), e.name));
    }
    let expected: Vec<(EventType, String)> = [
        (EventType::Released, "wait.a"),
        (EventType::Released, "wait.b"),
        (EventType::Acquired, "wait.a"),
        (EventType::Acquired, "wait.b"),
        (EventType::Acquired, "wait.c"),
    ]
    .into_iter()
    .map(|(k, n)| (k, n.to_string()))
    .collect();
    assert_eq!(
        seen, expected,
        "nothing was taken before the last member freed, then all at once"
    );
}

/// RenewGroup is all or none: with one member revoked it fails naming that
/// member and renews none of the others; ReleaseGroup then releases what is
/// left and reports the lost member.
#[tokio::test]
async fn renew_is_all_or_none_and_release_reports_lost_members() {
    let _serial = SERIAL.lock().await;
    let t = start().await;
    let (_b, mut cb) = t.replica().await;
    let mut ca = t.client().await;
    let names = ["rn.a", "rn.b", "rn.c"];
    let got = ca
        .acquire_group(group_req(&names, "g"))
        .await
        .unwrap()
        .into_inner();
    // A renewal of every member keeps the tokens, in one batch.
    let renewed = cb
        .renew_group(RenewGroupRequest {
            members: members(&got.leases),
            lease_key: got.lease_key.clone(),
            ttl: Some(secs(20)),
        })
        .await
        .unwrap()
        .into_inner()
        .leases;
    for (r, l) in renewed.iter().zip(&got.leases) {
        assert_eq!(r.fencing_token, l.fencing_token);
        assert!(r.revision > l.revision);
        assert_eq!(r.ttl.as_ref().unwrap().seconds, 20);
    }
    assert_eq!(renewed[2].revision, renewed[0].revision + 2, "one batch");
    // The whole group shows in GetLease and ListLeases.
    let shown = get(&mut ca, "rn.b").await.unwrap();
    assert_eq!(shown.group, names);
    let listed = ca
        .list_leases(ListLeasesRequest {
            prefix: "rn".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .leases;
    assert_eq!(listed.len(), 3);
    assert!(listed.iter().all(|l| l.group == names));

    ca.revoke_lease(RevokeLeaseRequest {
        name: "rn.b".into(),
        reason: "test".into(),
        fencing_token: 0,
        slot: 0,
    })
    .await
    .unwrap();
    let refused = cb
        .renew_group(RenewGroupRequest {
            members: members(&renewed),
            lease_key: got.lease_key.clone(),
            ttl: None,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "LEASE_NOT_HELD");
    assert_eq!(meta(&refused, "name"), "rn.b");
    for l in [&renewed[0], &renewed[2]] {
        let now = get(&mut ca, &l.name).await.unwrap();
        assert_eq!(now.revision, l.revision, "{} was not renewed", l.name);
    }
    let done = ca
        .release_group(ReleaseGroupRequest {
            members: members(&renewed),
            lease_key: got.lease_key.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(done.released, ["rn.a", "rn.c"]);
    assert_eq!(done.not_held, ["rn.b"]);
    assert!(done.revision > renewed[2].revision);
    assert!(get(&mut ca, "rn.a").await.is_none());
    assert!(get(&mut ca, "rn.c").await.is_none());
    // Again: nothing is held, which is not an error.
    let again = ca
        .release_group(ReleaseGroupRequest {
            members: members(&renewed),
            lease_key: got.lease_key,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(again.released.is_empty());
    assert_eq!(again.not_held, names);
    assert_eq!(again.revision, 0);
}

/// A retried AcquireGroup (same holder and key) returns the same tokens; a
/// group over a held member is refused naming it and writes nothing; a
/// member in its lock delay refuses the group with when it frees.
#[tokio::test]
async fn retries_keep_tokens_and_refusals_name_the_member() {
    let _serial = SERIAL.lock().await;
    let t = start().await;
    let (_b, mut cb) = t.replica().await;
    let mut ca = t.client().await;
    let req = AcquireGroupRequest {
        lease_key: "group-key-0123456789".into(),
        ..group_req(&["rt.a", "rt.b"], "g")
    };
    let first = ca.acquire_group(req.clone()).await.unwrap().into_inner();
    let retry = cb.acquire_group(req.clone()).await.unwrap().into_inner();
    for (r, f) in retry.leases.iter().zip(&first.leases) {
        assert_eq!(r.fencing_token, f.fencing_token, "a retry keeps the tokens");
        assert!(r.revision > f.revision);
    }
    assert_eq!(retry.lease_key, first.lease_key);
    // Another holder with the same key, or the same holder with another
    // key, is someone else.
    let other = AcquireGroupRequest {
        holder: "h".into(),
        ..req.clone()
    };
    let refused = ca.acquire_group(other).await.unwrap_err();
    assert_eq!(reason(&refused), "LEASE_HELD");
    assert_eq!(meta(&refused, "name"), "rt.a");

    // A held member: refused, naming it, and nothing written.
    acquire(&mut ca, acquire_req("hd.b", "x", 30)).await;
    let before = t.last_sequence().await;
    let refused = cb
        .acquire_group(group_req(&["hd.a", "hd.b"], "g"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert_eq!(reason(&refused), "LEASE_HELD");
    assert_eq!(meta(&refused, "name"), "hd.b");
    assert_eq!(meta(&refused, "holder"), "x");
    assert_eq!(
        t.last_sequence().await,
        before,
        "a refused group writes nothing"
    );
    assert!(get(&mut ca, "hd.a").await.is_none());

    // A member in its lock delay (revoked): refused with when it frees.
    acquire(
        &mut ca,
        proto::AcquireRequest {
            lock_delay: Some(secs(30)),
            ..acquire_req("ld.a", "x", 30)
        },
    )
    .await;
    ca.revoke_lease(RevokeLeaseRequest {
        name: "ld.a".into(),
        reason: "test".into(),
        fencing_token: 0,
        slot: 0,
    })
    .await
    .unwrap();
    let refused = cb
        .acquire_group(group_req(&["ld.b", "ld.a"], "g"))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "LEASE_HELD");
    assert_eq!(meta(&refused, "name"), "ld.a");
    assert_eq!(meta(&refused, "state"), "LOCK_DELAY");
    assert!(refused.get_details_retry_info().is_some());
    assert!(get(&mut ca, "ld.b").await.is_none());
}

/// Bad groups are refused before anything is read: one name, a duplicate,
/// more than --max-group-size, a reserved name; RenewGroup and
/// ReleaseGroup check their members the same way.
#[tokio::test]
async fn invalid_groups_are_refused() {
    let _serial = SERIAL.lock().await;
    let t = Tenure::start_with(|c| c.max_group_size = 3).await;
    let mut c = t.client().await;
    let before = t.last_sequence().await;
    for (names, why) in [
        (vec!["v.a"], "one name"),
        (vec!["v.a", "v.b", "v.a"], "a duplicate"),
        (
            vec!["v.a", "v.b", "v.c", "v.d"],
            "more than --max-group-size",
        ),
    ] {
        let s = c.acquire_group(group_req(&names, "g")).await.unwrap_err();
        assert_eq!(s.code(), Code::InvalidArgument, "{why}: {s:?}");
        assert_eq!(reason(&s), "INVALID_ARGUMENT", "{why}");
    }
    // A size refusal states the limit in force, not the hard cap.
    for names in [vec!["v.a"], vec!["v.a", "v.b", "v.c", "v.d"]] {
        let s = c.acquire_group(group_req(&names, "g")).await.unwrap_err();
        assert!(s.message().contains("2 to 3 names"), "{s:?}");
        assert_eq!(meta(&s, "max_group_size"), "3", "{s:?}");
    }
    let s = c
        .acquire_group(group_req(&["v.a", "_tenure.q.v.a.ticket.0"], "g"))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument);
    assert_eq!(reason(&s), "INVALID_NAME");
    let s = c
        .renew_group(RenewGroupRequest {
            members: vec![],
            lease_key: "group-key-0123456789".into(),
            ttl: None,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&s), "INVALID_ARGUMENT");
    assert!(s.message().contains("1 to 3 names"), "{s:?}");
    assert_eq!(meta(&s, "max_group_size"), "3", "{s:?}");
    let s = c
        .release_group(ReleaseGroupRequest {
            members: vec![GroupMember {
                name: "v.a".into(),
                expected_revision: 0,
            }],
            lease_key: "group-key-0123456789".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&s), "INVALID_REVISION");
    assert_eq!(t.last_sequence().await, before, "nothing was written");
}

/// `tenure acquire A B` takes both names as one group and prints each
/// lease with the shared key; a second group over one of them is refused.
#[tokio::test]
async fn the_cli_acquires_a_group() {
    let _serial = SERIAL.lock().await;
    let t = Tenure::start().await;
    let addr = t.running.as_ref().unwrap().addr().to_string();
    let run = |args: &[&str]| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"));
        c.env("TENURE_SERVER", format!("http://{addr}"));
        for var in ["TENURE_TOKEN", "TENURE_TOKEN_FILE", "TENURE_LEASE_KEY"] {
            c.env_remove(var);
        }
        c.args(args)
            .args(["-o", "json"])
            .kill_on_drop(true)
            .output()
    };
    let out = within(
        "tenure acquire",
        run(&[
            "acquire", "cli.a", "cli.b", "--holder", "w1", "--ttl", "30s",
        ]),
    )
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let leases = v["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2);
    assert_eq!(leases[0]["group"], serde_json::json!(["cli.a", "cli.b"]));
    assert_eq!(
        leases[1]["fencing_token"].as_u64().unwrap(),
        leases[0]["fencing_token"].as_u64().unwrap() + 1
    );
    assert!(v["lease_key"].as_str().unwrap().len() >= 16);
    let refused = within("tenure acquire", run(&["acquire", "cli.c", "cli.b"]))
        .await
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("LEASE_HELD"));
    let mut c = t.client().await;
    assert!(get(&mut c, "cli.c").await.is_none());
}

/// A group is renewed and released as a whole: Renew, Release and a
/// KeepAlive entry naming one member are refused GROUP_MEMBER
/// (FAILED_PRECONDITION) and change nothing, so the other members still
/// show the group held by its holder.
#[tokio::test]
async fn one_member_is_not_renewed_or_released_alone() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let names = ["alone.a", "alone.b"];
    let got = c
        .acquire_group(group_req(&names, "g"))
        .await
        .unwrap()
        .into_inner();
    let a = &got.leases[0];
    let released = c
        .release(release_req(&a.name, a.revision, &got.lease_key))
        .await
        .unwrap_err();
    let renewed = c
        .renew(renew_req(&a.name, a.revision, &got.lease_key))
        .await
        .unwrap_err();
    for refused in [&released, &renewed] {
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        assert_eq!(reason(refused), "GROUP_MEMBER");
        assert_eq!(meta(refused, "group_size"), "2");
        assert!(refused.message().contains("Group"), "{}", refused.message());
    }
    assert!(released.message().contains("ReleaseGroup"));
    let mut stream = crate::keepalive::Stream::open(&mut c, None).await.unwrap();
    let r = stream
        .call(vec![crate::keepalive::entry(1, a, &got.lease_key)])
        .await;
    match &r.results[0].outcome {
        Some(proto::keep_alive_result::Outcome::Error(e)) => {
            assert_eq!(e.reason, "GROUP_MEMBER")
        }
        other => panic!("expected GROUP_MEMBER, got {other:?}"),
    }
    for name in names {
        let shown = get(&mut c, name).await.expect("still held");
        assert_eq!(
            (shown.holder.as_str(), shown.group.clone()),
            ("g", names.map(String::from).to_vec())
        );
        assert_eq!(
            shown.revision,
            got.leases.iter().find(|l| l.name == name).unwrap().revision
        );
    }
    // The group's own calls still work.
    c.release_group(ReleaseGroupRequest {
        members: members(&got.leases),
        lease_key: got.lease_key.clone(),
    })
    .await
    .unwrap();
    assert!(get(&mut c, "alone.a").await.is_none());
}

/// A waiting group kept out only by a member's queued waiter writes as soon
/// as that waiter leaves the queue (the name free), not on the backstop
/// tick: here the waiter's ticket is removed while the group waits 10 s,
/// shorter than the tick.
#[tokio::test]
async fn a_group_kept_out_by_a_queue_writes_when_it_empties() {
    let _serial = SERIAL.lock().await;
    let t = start().await;
    let mut c = t.client().await;
    let kv = t.kv().await;
    // A waiter queued on the free name (as if its Acquire had just lost
    // the name to a holder that released it since).
    let slot = "_tenure.q.qg.a.ticket.0";
    // The shared watcher is live, so the group waits on its events (with
    // the backstop tick), not on the short poll of a waiter without them.
    let mut w = watch(&mut c, ">").await;
    next_of(&mut w, EventType::SnapshotComplete).await;
    kv.put(slot, r#"{"place":0,"holder":"w"}"#.into())
        .await
        .unwrap();
    let before = counter(&t, "tenure_group_refusals_total").await;
    let mut cg = c.clone();
    let group = tokio::spawn(async move {
        cg.acquire_group(AcquireGroupRequest {
            wait: Some(secs(10)),
            ..group_req(&["qg.a", "qg.b"], "g")
        })
        .await
    });
    // Its first try, and the second one made once it follows the names:
    // it sleeps now, and only an event (or the tick) wakes it.
    within("the group's first tries", async {
        while counter(&t, "tenure_group_refusals_total").await < before + 2.0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    kv.delete(slot).await.unwrap();
    let got = within("the group", group)
        .await
        .unwrap()
        .expect("granted once the queue emptied")
        .into_inner();
    assert_eq!(got.leases.len(), 2);
    assert!(get(&mut c, "qg.a").await.is_some());
}
