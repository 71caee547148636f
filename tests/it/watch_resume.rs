//! Resumable watches (`WatchLeaseRequest.start_revision`): a resume replays
//! exactly the changes after its revision, then SNAPSHOT_COMPLETE, then live
//! events, with no gap and no duplicate (also across a Tenure restart); a
//! resume the bucket can no longer prove complete is refused with
//! WATCH_HISTORY_COMPACTED, one beyond the bucket with INVALID_ARGUMENT.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{self, EventType, LeaseEvent, WatchLeaseRequest};
use tonic::transport::Channel;
use tonic_types::StatusExt;

fn kind(e: &LeaseEvent) -> EventType {
    EventType::try_from(e.r#type).unwrap()
}

/// A resumed watch whose first message was read to see whether it was
/// refused.
#[derive(Debug)]
struct Resumed {
    /// The first event, not yet returned.
    first: Option<LeaseEvent>,
    /// The stream.
    stream: tonic::Streaming<proto::WatchLeaseResponse>,
}

impl Resumed {
    /// The next event.
    async fn next(&mut self) -> LeaseEvent {
        match self.first.take() {
            Some(e) => e,
            None => next_event(&mut self.stream).await,
        }
    }

    /// The replayed events, up to SNAPSHOT_COMPLETE.
    async fn replayed(&mut self) -> Vec<LeaseEvent> {
        let mut events = Vec::new();
        loop {
            let e = self.next().await;
            if kind(&e) == EventType::SnapshotComplete {
                return events;
            }
            events.push(e);
        }
    }
}

/// Opens a watch of `target` resuming after `from`; a refusal (which comes
/// after the response headers) is the `Err`.
async fn resume(
    client: &mut LeaseServiceClient<Channel>,
    target: &str,
    from: u64,
) -> Result<Resumed, tonic::Status> {
    let mut stream = client
        .watch_lease(WatchLeaseRequest {
            name: target.into(),
            event_types: vec![],
            start_revision: from,
            shard_revisions: Vec::new(),
        })
        .await?
        .into_inner();
    let first = within("the first resumed event", stream.message())
        .await?
        .expect("stream open")
        .event;
    Ok(Resumed { first, stream })
}

/// The event's essentials, for comparing two watches.
fn brief(e: &LeaseEvent) -> (EventType, String, u64, String, u64) {
    (
        kind(e),
        e.name.clone(),
        e.revision,
        e.holder.clone(),
        e.fencing_token,
    )
}

/// The ErrorInfo metadata value `key` of a status.
fn meta(status: &tonic::Status, key: &str) -> Option<String> {
    status
        .get_details_error_info()
        .and_then(|i| i.metadata.get(key).cloned())
}

/// A resume after N replays exactly the changes after N (the later ones of
/// each name, classified as a fresh watch would have seen them), then
/// SNAPSHOT_COMPLETE, then live events; several changes of one name after N
/// come as its latest one.
#[tokio::test]
async fn resume_replays_exactly_the_later_changes() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut live = watch(&mut c, "jobs.>").await;
    assert_eq!(
        kind(&next_event(&mut live).await),
        EventType::SnapshotComplete
    );

    let (a, ka) = acquire(&mut c, acquire_req("jobs.a", "alice", 60)).await;
    next_event(&mut live).await;
    let (b, kb) = acquire(&mut c, acquire_req("jobs.b", "bob", 60)).await;
    let n = next_event(&mut live).await.revision;
    assert_eq!(n, b.revision);

    // After N: one change of each of a, b, c (and one outside the filter).
    let a2 = renew(&mut c, renew_req("jobs.a", a.revision, ka.clone())).await;
    let (cc, _) = acquire(&mut c, acquire_req("jobs.c", "carol", 60)).await;
    c.release(release_req("jobs.b", b.revision, kb))
        .await
        .unwrap();
    acquire(&mut c, acquire_req("other.x", "xavier", 60)).await;
    let mut later = Vec::new();
    for _ in 0..3 {
        later.push(brief(&next_event(&mut live).await));
    }
    assert_eq!(
        later.iter().map(|e| e.0).collect::<Vec<_>>(),
        [EventType::Renewed, EventType::Acquired, EventType::Released]
    );

    let mut s = resume(&mut c, "jobs.>", n).await.expect("resume");
    let got: Vec<_> = s.replayed().await.iter().map(brief).collect();
    assert_eq!(got, later, "the replay is the live watch's events after N");
    // Then live, with nothing replayed twice.
    let a3 = renew(&mut c, renew_req("jobs.a", a2.revision, ka.clone())).await;
    let e = s.next().await;
    assert_eq!((kind(&e), e.revision), (EventType::Renewed, a3.revision));

    // Two changes of a after N come as the latest one (a RENEWED, since its
    // token is not newer than N); c's holding began after N: ACQUIRED.
    let mut s = resume(&mut c, "jobs.>", n).await.expect("resume");
    let got: Vec<_> = s.replayed().await.iter().map(brief).collect();
    assert_eq!(
        got,
        [
            (
                EventType::Acquired,
                "jobs.c".into(),
                cc.revision,
                "carol".into(),
                cc.fencing_token
            ),
            later[2].clone(),
            (
                EventType::Renewed,
                "jobs.a".into(),
                a3.revision,
                "alice".into(),
                a.fencing_token
            ),
        ]
    );

    // A resume from the last revision replays nothing; one name only.
    let mut s = resume(&mut c, "jobs.a", a3.revision).await.expect("resume");
    assert!(s.replayed().await.is_empty());
    let a4 = renew(&mut c, renew_req("jobs.a", a3.revision, ka)).await;
    assert_eq!(s.next().await.revision, a4.revision);
}

/// A replay longer than one fetch arrives whole and in order, and its
/// consumer is deleted once the replay is done (the hub's stays).
#[tokio::test]
async fn a_large_replay_arrives_whole_and_leaves_no_consumer() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    // A watch elsewhere keeps the shared watcher (and its consumer) on, so
    // the count below is the baseline the replay's consumer returns to.
    let mut keep = watch(&mut c, "elsewhere.>").await;
    next_of(&mut keep, EventType::SnapshotComplete).await;
    let (first, _) = acquire(&mut c, acquire_req("big.first", "h", 60)).await;
    let mut written = Vec::new();
    for i in 0..300 {
        let (l, _) = acquire(&mut c, acquire_req(&format!("big.n{i:03}"), "h", 60)).await;
        written.push(l.revision);
    }
    let js = t.nats.jetstream().await;
    let mut stream = js
        .get_stream(format!("KV_{}", t.config.bucket))
        .await
        .unwrap();
    let before = stream.info().await.unwrap().state.consumer_count;
    let mut s = resume(&mut c, "big.>", first.revision)
        .await
        .expect("resume");
    let got: Vec<u64> = s.replayed().await.iter().map(|e| e.revision).collect();
    assert_eq!(got, written);
    within("the replay consumer to be deleted", async {
        while stream.info().await.unwrap().state.consumer_count != before {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// A replayed expiry names the holder and token that expired (the replica
/// saw the holding), like the live event did.
#[tokio::test]
async fn a_replayed_expiry_names_its_holding() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut live = watch(&mut c, "exp.>").await;
    assert_eq!(
        kind(&next_event(&mut live).await),
        EventType::SnapshotComplete
    );
    let (a, _) = acquire(&mut c, acquire_req("exp.a", "erin", 1)).await;
    next_event(&mut live).await;
    let expired = next_of(&mut live, EventType::Expired).await;
    assert_eq!(
        (expired.holder.as_str(), expired.fencing_token),
        ("erin", a.fencing_token)
    );
    let mut s = resume(&mut c, "exp.>", a.revision).await.expect("resume");
    let got: Vec<_> = s.replayed().await.iter().map(brief).collect();
    assert_eq!(got, [brief(&expired)]);
}

/// `tenure watch --from-revision N` prints the replay, SNAPSHOT_COMPLETE,
/// then live events; a refused resume exits non-zero naming the reason.
#[tokio::test]
async fn the_cli_resumes_a_watch() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (a, k) = acquire(&mut c, acquire_req("cli.a", "alice", 60)).await;
    let a2 = renew(&mut c, renew_req("cli.a", a.revision, k)).await;
    let run = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"));
        cmd.env(
            "TENURE_SERVER",
            format!("http://{}", t.running.as_ref().unwrap().addr()),
        )
        .env_remove("TENURE_TOKEN")
        .env_remove("TENURE_TOKEN_FILE")
        .env_remove("TENURE_OUTPUT")
        .args(args)
        .kill_on_drop(true);
        async move { within("tenure watch", cmd.output()).await.unwrap() }
    };
    let from = a.revision.to_string();
    let out = run(&[
        "watch",
        "cli.>",
        "--from-revision",
        &from,
        "--count",
        "2",
        "-o",
        "json",
    ])
    .await;
    assert!(out.status.success(), "{out:?}");
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "RENEWED");
    assert_eq!(events[0]["revision"].as_u64(), Some(a2.revision));
    assert_eq!(events[1]["type"], "SNAPSHOT_COMPLETE");

    let ahead = (a2.revision + 10).to_string();
    let out = run(&["watch", "cli.>", "--from-revision", &ahead]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("INVALID_ARGUMENT"),
        "{out:?}"
    );
}

/// The client's view of the leases a watch follows: name → (holder, token).
type View = BTreeMap<String, (String, u64)>;

/// Applies a change event to a view.
fn apply(view: &mut View, e: &LeaseEvent) {
    match kind(e) {
        EventType::Current | EventType::Acquired | EventType::Renewed => {
            view.insert(e.name.clone(), (e.holder.clone(), e.fencing_token));
        }
        // MISSED: the holding known has ended; what follows says what is
        // held now.
        EventType::Released | EventType::Expired | EventType::Revoked | EventType::Missed => {
            view.remove(&e.name);
        }
        _ => {}
    }
}

/// A watch resumed on a new Tenure process (same NATS) from the last
/// revision the old one delivered, while another replica keeps writing,
/// has no gap and no duplicate: revisions only grow, and the view built
/// from the old watch then the resumed one matches the bucket.
#[tokio::test]
async fn resume_across_a_tenure_restart_has_no_gap_and_no_duplicate() {
    let mut t = Tenure::start().await;
    let (writer_replica, mut w) = t.replica().await;
    let mut c = t.client().await;
    let names: Vec<String> = (0..6).map(|i| format!("w.n{i}")).collect();

    // A real bucket holds older messages (every release and expiry leaves
    // one for the marker TTL); a new process proves a resume from one at
    // or before the revision (see the next test for a bucket without).
    acquire(&mut c, acquire_req("anchor", "a", 600)).await;
    let mut old = watch(&mut c, "w.>").await;
    let mut view = View::new();
    assert_eq!(
        kind(&next_event(&mut old).await),
        EventType::SnapshotComplete
    );
    let mut keys = BTreeMap::new();
    for name in &names {
        let (l, k) = acquire(&mut w, acquire_req(name, "h", 60)).await;
        keys.insert(name.clone(), (l.revision, k));
    }
    let mut last = 0;
    for _ in &names {
        let e = next_event(&mut old).await;
        apply(&mut view, &e);
        last = e.revision;
    }

    // The writer keeps going through the other replica while this Tenure
    // stops and a new one starts.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let names = names.clone();
        let mut keys = keys.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            // At least 30 writes, and on until the resumed watch is live.
            for round in 0u64.. {
                if round >= 30 && stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let name = &names[(round as usize) % names.len()];
                let (rev, key) = keys.get(name).cloned().unwrap();
                if round % 7 == 3 {
                    w.release(release_req(name, rev, key)).await.unwrap();
                    let (l, k) = acquire(&mut w, acquire_req(name, "h2", 60)).await;
                    keys.insert(name.clone(), (l.revision, k));
                } else {
                    let l = renew(&mut w, renew_req(name, rev, key.clone())).await;
                    keys.insert(name.clone(), (l.revision, key));
                }
            }
            (w, keys)
        })
    };
    t.running.take().unwrap().shutdown().await;
    drop(old);
    let (fresh, mut c2) = t.replica().await;
    let mut s = resume(&mut c2, "w.>", last).await.expect("resume");
    // A MISSED (a release superseded by the next acquire before the
    // resume read it) carries the revision of the change that revealed it,
    // which comes next: it is not counted twice.
    let mut revisions = vec![last];
    let mut missed = 0;
    for e in s.replayed().await {
        if kind(&e) == EventType::Missed {
            missed += 1;
        } else {
            revisions.push(e.revision);
        }
        apply(&mut view, &e);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut w, _) = writer.await.unwrap();
    // A marker write after the writer is done: read until it arrives.
    let (fin, _) = acquire(&mut w, acquire_req("w.final", "end", 60)).await;
    loop {
        let e = s.next().await;
        if kind(&e) == EventType::Missed {
            missed += 1;
        } else {
            revisions.push(e.revision);
        }
        apply(&mut view, &e);
        if e.revision == fin.revision {
            break;
        }
    }
    eprintln!("resume: {missed} MISSED");
    assert!(
        revisions.windows(2).all(|p| p[0] < p[1]),
        "revisions only grow (no duplicate, in order): {revisions:?}"
    );
    let mut bucket = View::new();
    let listed = w
        .list_leases(proto::ListLeasesRequest {
            prefix: "w.".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    for l in listed.leases {
        bucket.insert(l.name.clone(), (l.holder.clone(), l.fencing_token));
    }
    assert_eq!(view, bucket, "no change was missed");
    fresh.shutdown().await;
    writer_replica.shutdown().await;
}

/// A new process proves a resume from the bucket alone: when every message
/// at or before N (and N+1) has been overwritten, it cannot bound the age
/// of the changes after N and refuses, while the process that watched the
/// bucket all along resumes.
#[tokio::test]
async fn a_new_process_refuses_what_it_cannot_prove() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    // A watch keeps this process's shared watcher following the bucket
    // (idle, it would not see the history either).
    let mut all_along = watch(&mut c, "only.>").await;
    next_of(&mut all_along, EventType::SnapshotComplete).await;
    let (a, k) = acquire(&mut c, acquire_req("only.a", "alice", 60)).await;
    let a2 = renew(&mut c, renew_req("only.a", a.revision, k.clone())).await;
    let a3 = renew(&mut c, renew_req("only.a", a2.revision, k)).await;
    // Tenure's other keys (the name's queue guard, written before the
    // record) would still bound the time; remove them so only a3 is left.
    let js = t.nats.jetstream().await;
    let stream = js
        .get_stream(format!("KV_{}", t.config.bucket))
        .await
        .unwrap();
    for others in [
        "_tenure.q.only.a.ticket.plain",
        "_tenure.q.only.a.ticket.0",
        "_tenure.delay.>",
    ] {
        stream
            .purge()
            .filter(format!("$KV.{}.{others}", t.config.bucket))
            .await
            .unwrap();
    }
    let (fresh, mut c2) = t.replica().await;
    let err = resume(&mut c2, "only.a", a.revision).await.unwrap_err();
    assert_eq!(reason(&err), "WATCH_HISTORY_COMPACTED");
    // The first process saw the bucket's history as it was written.
    let mut s = resume(&mut c, "only.a", a.revision).await.expect("resume");
    let got: Vec<_> = s.replayed().await.iter().map(brief).collect();
    assert_eq!(
        got,
        [(
            EventType::Renewed,
            "only.a".into(),
            a3.revision,
            "alice".into(),
            a.fencing_token
        )]
    );
    fresh.shutdown().await;
}

/// Once the markers of changes after N may have aged out, a resume from N
/// is refused with OUT_OF_RANGE / WATCH_HISTORY_COMPACTED naming the
/// revision and the oldest one still resumable; a fresh watch works.
#[tokio::test]
async fn a_compacted_history_is_refused() {
    let t = Tenure::start_with(|c| {
        c.marker_ttl = Duration::from_secs(3);
        c.max_lock_delay = Duration::from_secs(1);
    })
    .await;
    let mut c = t.client().await;
    let (a, ka) = acquire(&mut c, acquire_req("gone.a", "alice", 60)).await;
    c.release(release_req("gone.a", a.revision, ka))
        .await
        .unwrap();
    // The tombstone ages out into an expiry marker, which ages out too:
    // await the name having no message at all.
    let js = t.nats.jetstream().await;
    let stream = js
        .get_stream(format!("KV_{}", t.config.bucket))
        .await
        .unwrap();
    within("the release's markers to age out", async {
        while stream
            .get_last_raw_message_by_subject(&format!(
                "$KV.{}._tenure.q.gone.a.lease.holder",
                t.config.bucket
            ))
            .await
            .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    // Something newer, so there is a revision one could resume from.
    let (b, _) = acquire(&mut c, acquire_req("gone.b", "bob", 60)).await;

    let err = resume(&mut c, "gone.>", a.revision).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err:?}");
    assert_eq!(reason(&err), "WATCH_HISTORY_COMPACTED");
    assert_eq!(
        meta(&err, "start_revision").as_deref(),
        Some(a.revision.to_string().as_str())
    );
    let oldest: u64 = meta(&err, "oldest_resumable_revision")
        .expect("oldest_resumable_revision")
        .parse()
        .unwrap();
    assert!(
        oldest > a.revision && oldest <= b.revision,
        "{oldest} in ({}, {}]",
        a.revision,
        b.revision
    );
    // A resume from there works and replays nothing before it.
    let mut s = resume(&mut c, "gone.>", oldest).await.expect("resume");
    for e in s.replayed().await {
        assert!(e.revision > oldest);
    }
}

/// A start_revision beyond the bucket's last revision is INVALID_ARGUMENT
/// naming the field; nothing is held for it.
#[tokio::test]
async fn a_revision_ahead_of_the_bucket_is_invalid() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (a, _) = acquire(&mut c, acquire_req("ahead.a", "alice", 60)).await;
    let err = resume(&mut c, "ahead.a", a.revision + 100)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert_eq!(reason(&err), "INVALID_ARGUMENT");
    assert_eq!(meta(&err, "field").as_deref(), Some("start_revision"));
    assert_eq!(
        meta(&err, "last_revision").as_deref(),
        Some(a.revision.to_string().as_str())
    );
}

/// SNAPSHOT_COMPLETE carries the revision its snapshot is complete up to,
/// even when the snapshot is empty: a watch that saw only that marker can
/// resume from it, getting exactly the changes made after it.
#[tokio::test]
async fn an_empty_snapshot_names_its_resume_point() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    // History that leaves nothing live under the filter.
    let (a, ka) = acquire(&mut c, acquire_req("empty.a", "alice", 60)).await;
    let released = c
        .release(release_req("empty.a", a.revision, ka))
        .await
        .unwrap()
        .into_inner()
        .revision;
    let mut fresh = watch(&mut c, "empty.>").await;
    let complete = next_event(&mut fresh).await;
    assert_eq!(kind(&complete), EventType::SnapshotComplete);
    assert!(
        complete.revision >= released,
        "complete up to {} but the release was {released}",
        complete.revision
    );
    drop(fresh);

    let (b, _) = acquire(&mut c, acquire_req("empty.b", "bob", 60)).await;
    let mut resumed = resume(&mut c, "empty.>", complete.revision)
        .await
        .expect("resumable from the marker's revision");
    let replayed: Vec<_> = resumed.replayed().await.iter().map(brief).collect();
    assert_eq!(
        replayed,
        [(
            EventType::Acquired,
            "empty.b".to_string(),
            b.revision,
            "bob".to_string(),
            b.fencing_token
        )],
        "exactly the change after the marker"
    );
}

/// A resume replays a semaphore's holders too, under the semaphore's name
/// and slot, as the live watch showed them: by name and by subtree, every
/// slot changed after the resumed revision and nothing at or before it.
#[tokio::test]
async fn a_resume_replays_semaphore_slots() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let mut live = watch(&mut c, "pool.>").await;
    assert_eq!(
        kind(&next_event(&mut live).await),
        EventType::SnapshotComplete
    );
    let sem = |holder: &str| proto::AcquireRequest {
        limit: 2,
        ..acquire_req("pool.gpu", holder, 60)
    };
    let (first, _) = acquire(&mut c, sem("s1")).await;
    let n = next_event(&mut live).await.revision;
    assert_eq!(n, first.revision);
    let (second, key) = acquire(&mut c, sem("s2")).await;
    c.release(proto::ReleaseRequest {
        slot: second.slot,
        ..release_req("pool.gpu", second.revision, key)
    })
    .await
    .unwrap();
    let mut later = Vec::new();
    for _ in 0..2 {
        let e = next_event(&mut live).await;
        assert_eq!((e.name.as_str(), e.slot), ("pool.gpu", second.slot));
        later.push((brief(&e), e.slot));
    }
    assert_eq!(
        later.iter().map(|e| e.0 .0).collect::<Vec<_>>(),
        [EventType::Acquired, EventType::Released]
    );
    for target in ["pool.gpu", "pool.>"] {
        let mut s = resume(&mut c, target, n).await.expect("resume");
        // The slot's holding began and ended after N, and its ACQUIRED is
        // gone from the bucket (its release replaced it): the replay says
        // a holding was missed, then the release.
        let got: Vec<_> = s.replayed().await;
        assert_eq!(
            got.iter().map(|e| (kind(e), e.slot)).collect::<Vec<_>>(),
            [
                (EventType::Missed, second.slot),
                (EventType::Released, second.slot)
            ],
            "{target}"
        );
        assert_eq!((brief(&got[1]), got[1].slot), later[1], "{target}");
        assert_eq!(got[0].name, "pool.gpu");
        let mut s = resume(&mut c, target, n - 1).await.expect("resume");
        let got: Vec<_> = s
            .replayed()
            .await
            .iter()
            .map(|e| (kind(e), e.slot))
            .collect();
        assert_eq!(
            got,
            [
                (EventType::Acquired, first.slot),
                (EventType::Missed, second.slot),
                (EventType::Released, second.slot)
            ],
            "{target}: both slots"
        );
    }
}
