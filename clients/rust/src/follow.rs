//! [`Follower`]: the one `WatchLease` stream per [`Client`](crate::Client)
//! that follows the leases of all its live sessions, so a session learns at
//! once (not at its next renewal) that its holding was revoked, expired,
//! released or taken by another holder.
//!
//! The stream watches the smallest pattern covering every live session's
//! name: the name itself for one name, else the longest common dotted prefix
//! as a subtree (`jobs.>`), else `>`. A session whose name the open stream
//! does not cover reopens it with a wider pattern. A session is lost when
//! the stream shows, for its name and slot (0 for a plain lease, the slot
//! of a semaphore holder: other holders of the semaphore acquiring or
//! releasing do not concern it), `REVOKED`, `EXPIRED` or `RELEASED` of its
//! holding, or any event but `MISSED` of a holding with a greater fencing
//! token; when the stream says it missed changes of the name (`MISSED`: its
//! server's watcher fell behind the bucket) naming the session's own fencing
//! token, the holding ended among them (a `MISSED` naming another token, or
//! none, does not end it: the events after it say what holds the name); and
//! when a (re)opened stream's snapshot does not show its holding (the
//! holding ended while no stream was open). A stream that fails is reopened with
//! backoff and resumes after the last revision it showed (the server
//! replays the changes meanwhile, which show any loss), or starts afresh
//! with the snapshot check when the server answers
//! `WATCH_HISTORY_COMPACTED`; one that is refused for good (e.g. `PERMISSION_DENIED`: no
//! `watch` grant for the pattern) is not, and the sessions fall back to
//! noticing loss at their next renewal.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use tokio_util::sync::CancellationToken;

use crate::error::Reason;
use crate::proto::{EventType, LeaseEvent, WatchLeaseRequest};
use crate::stub::{open_watch, Stub};
use crate::watch::{next, FIRST_BACKOFF, MAX_BACKOFF};

/// The event types the stream asks for: RENEWED is not needed (a new
/// holding is always ACQUIRED first) and would be most of the traffic.
/// MISSED is sent whatever a watch asks for (and a server older than it
/// would refuse the type), so it is not listed.
const TYPES: [EventType; 5] = [
    EventType::Current,
    EventType::Acquired,
    EventType::Released,
    EventType::Expired,
    EventType::Revoked,
];

/// What the follower needs of a session (a lease [`Session`](crate::Session)
/// or a [`GroupSession`](crate::GroupSession)): the holdings it follows, and
/// how to end it.
pub(crate) trait Followed: Send + Sync {
    /// Its holdings: (name, slot, fencing token); slot 0 for a plain lease.
    fn members(&self) -> Vec<(&str, u32, u64)>;
    /// Whether it was lost or released.
    fn is_over(&self) -> bool;
    /// The watch saw one of its holdings end (`what`, how it saw it in
    /// `seen`), judging by that holding's fencing token `judged` as
    /// [`members`](Followed::members) gave it: it is lost as a whole
    /// ([`LossCause::NotHeld`](crate::LossCause::NotHeld), or
    /// [`LossCause::Missed`](crate::LossCause::Missed) for a `MISSED`),
    /// unless the holding has changed in place since (a downgrade: its
    /// token is no longer `judged`), which the session checks itself.
    fn lose_observed(&self, seen: Seen, what: String, judged: u64);
}

/// How the watch saw a holding end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// An event of its end (`REVOKED`, `EXPIRED`, `RELEASED`, another
    /// holding), or a snapshot without it.
    Ended,
    /// A `MISSED` naming its fencing token: it ended among changes the
    /// stream did not see.
    Missed,
}

/// Follows the leases of one client's sessions with one watch stream.
#[derive(Debug)]
pub(crate) struct Follower {
    /// The client's stub.
    stub: Stub,
    /// The server, for errors.
    target: Arc<str>,
    /// What is followed and the stream doing it.
    state: Mutex<FollowState>,
}

/// The mutable part of [`Follower`].
#[derive(Debug, Default)]
struct FollowState {
    /// The live sessions (pruned as they end).
    sessions: Vec<Weak<dyn Followed>>,
    /// The pattern the open stream watches, if one is open.
    pattern: Option<String>,
    /// Cancels the task of the open stream.
    task: Option<CancellationToken>,
    /// The server refused the watch for good: loss is noticed at renewal.
    refused: bool,
}

impl Follower {
    /// A follower with nothing to follow yet (no stream open).
    pub(crate) fn new(stub: Stub, target: Arc<str>) -> Arc<Follower> {
        Arc::new(Follower {
            stub,
            target,
            state: Mutex::new(FollowState::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, FollowState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts following `session`'s lease, (re)opening the stream with a
    /// wider pattern if the open one does not cover its name. Needs a Tokio
    /// runtime.
    pub(crate) fn follow(self: &Arc<Self>, session: Arc<dyn Followed>) {
        let mut state = self.state();
        state.sessions.retain(|s| live(s).is_some());
        state.sessions.push(Arc::downgrade(&session));
        if state.refused {
            return;
        }
        if let Some(pattern) = &state.pattern {
            if session.members().iter().all(|m| covers(pattern, m.0)) {
                return;
            }
        }
        let names: Vec<String> = state
            .sessions
            .iter()
            .filter_map(live)
            .flat_map(|s| {
                s.members()
                    .iter()
                    .map(|m| m.0.to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        let pattern = pattern_for(&names);
        if let Some(old) = state.task.take() {
            old.cancel();
        }
        let cancel = CancellationToken::new();
        state.pattern = Some(pattern.clone());
        state.task = Some(cancel.clone());
        drop(state);
        tokio::spawn(self.clone().run(pattern, cancel));
    }

    /// The live sessions with a name that `pattern` covers.
    fn covered(&self, pattern: &str) -> Vec<Arc<dyn Followed>> {
        let mut state = self.state();
        state.sessions.retain(|s| live(s).is_some());
        state
            .sessions
            .iter()
            .filter_map(live)
            .filter(|s| s.members().iter().any(|m| covers(pattern, m.0)))
            .collect()
    }

    /// The stream's task: open, read, reopen with backoff after a failure,
    /// until cancelled (a wider stream replaced it) or no session is left.
    async fn run(self: Arc<Self>, pattern: String, cancel: CancellationToken) {
        let mut backoff = FIRST_BACKOFF;
        // The highest revision this pattern's streams showed: a reopened
        // stream resumes after it (0: a fresh stream with a snapshot).
        let mut last = 0u64;
        loop {
            // The sessions acquired before this (re)opening: the snapshot
            // must show their holdings.
            let before = self.covered(&pattern);
            if before.is_empty() {
                let mut state = self.state();
                if !cancel.is_cancelled() {
                    state.task = None;
                    state.pattern = None;
                }
                return;
            }
            let request = WatchLeaseRequest {
                name: pattern.clone(),
                event_types: TYPES.iter().map(|t| *t as i32).collect(),
                start_revision: last,
                shard_revisions: Vec::new(),
            };
            let opened = tokio::select! {
                _ = cancel.cancelled() => return,
                opened = open_watch(&self.stub, request) => opened,
            };
            match opened {
                Ok(mut stream) => {
                    // A fresh stream's snapshot must show every session of
                    // `before`; a resumed one replays the changes since
                    // `last` instead, which show any loss.
                    let mut snapshot = (last == 0).then(HashSet::new);
                    loop {
                        let item = tokio::select! {
                            _ = cancel.cancelled() => return,
                            item = next(&mut stream) => item,
                        };
                        let response = match item {
                            Some(Ok(response)) => response,
                            Some(Err(status))
                                if crate::error::Error::from_status(&status).reason()
                                    == Reason::WatchHistoryCompacted =>
                            {
                                last = 0;
                                break;
                            }
                            _ => break,
                        };
                        let Some(event) = response.event else {
                            continue;
                        };
                        backoff = FIRST_BACKOFF;
                        last = last.max(event.revision);
                        self.on_event(&pattern, &before, &mut snapshot, event);
                    }
                }
                Err(err) if err.reason() == Reason::WatchHistoryCompacted => {
                    // The server cannot replay from `last`: start afresh,
                    // with the snapshot check.
                    last = 0;
                    continue;
                }
                Err(err) if !err.is_retryable() => {
                    // E.g. PERMISSION_DENIED: no `watch` grant for the
                    // pattern. Renewals still notice a loss.
                    let mut state = self.state();
                    if !cancel.is_cancelled() {
                        state.refused = true;
                        state.task = None;
                        state.pattern = None;
                    }
                    return;
                }
                Err(_) => {}
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Takes one event: marks the sessions it shows lost. `snapshot` holds
    /// the (name, token) pairs of the CURRENT events until
    /// SNAPSHOT_COMPLETE, when every session of `before` missing from it is
    /// lost.
    fn on_event(
        &self,
        pattern: &str,
        before: &[Arc<dyn Followed>],
        snapshot: &mut Option<HashSet<(String, u32, u64)>>,
        event: LeaseEvent,
    ) {
        let kind = EventType::try_from(event.r#type).unwrap_or(EventType::Unspecified);
        let token = if event.fencing_token != 0 {
            event.fencing_token
        } else {
            event.lease.as_ref().map_or(0, |l| l.fencing_token)
        };
        if kind == EventType::SnapshotComplete {
            if let Some(seen) = snapshot.take() {
                for s in before {
                    if s.is_over() {
                        continue;
                    }
                    let missing = s
                        .members()
                        .into_iter()
                        .find(|&(name, slot, token)| {
                            covers(pattern, name)
                                && !seen.contains(&(name.to_string(), slot, token))
                        })
                        .map(|(name, _, token)| (name.to_string(), token));
                    if let Some((name, token)) = missing {
                        s.lose_observed(Seen::Ended, format!(
                            "the lease {name:?} (fencing token {token}) is no longer held: the watch {pattern:?} at {} does not show it",
                            self.target
                        ), token);
                    }
                }
            }
            return;
        }
        if kind == EventType::Current {
            if let Some(seen) = snapshot.as_mut() {
                seen.insert((event.name.clone(), event.slot, token));
            }
        }
        for s in self.covered(pattern) {
            if s.is_over() {
                continue;
            }
            // A semaphore's holders are told apart by their slot: other
            // holders acquiring or releasing do not concern this one, and
            // a plain lease's events (slot 0) do not concern a semaphore's.
            let Some(mine) = s
                .members()
                .into_iter()
                .find(|&(name, slot, _)| name == event.name && slot == event.slot)
                .map(|m| m.2)
            else {
                continue;
            };
            if kind == EventType::Missed {
                // Only a MISSED of this very holding ends it; one of another
                // holding (or of none) leaves it to the events after it.
                if mine != 0 && token == mine {
                    s.lose_observed(
                        Seen::Missed,
                        format!(
                            "the lease {:?} (fencing token {mine}) was lost: the watch missed its changes after revision {} and before {}, among which the holding ended",
                            event.name, event.missed_after_revision, event.revision
                        ),
                        mine,
                    );
                }
                continue;
            }
            let ended = matches!(
                kind,
                EventType::Released | EventType::Expired | EventType::Revoked
            ) && (token == mine || token == 0);
            let taken = token > mine;
            if ended || taken {
                let what = if taken && !ended {
                    format!("held by {:?} with fencing token {token}", event.holder)
                } else {
                    kind.as_str_name().to_string()
                };
                s.lose_observed(Seen::Ended, format!(
                    "the lease {:?} (fencing token {mine}) was lost: the watch saw {what} at revision {}",
                    event.name, event.revision
                ), mine);
            }
        }
    }
}

/// The session if it is alive and not over.
fn live(session: &Weak<dyn Followed>) -> Option<Arc<dyn Followed>> {
    session.upgrade().filter(|s| !s.is_over())
}

/// Whether the watch pattern covers `name`: the name itself, `>` (all), or
/// a subtree `p.>` with `name` below `p.`.
pub(crate) fn covers(pattern: &str, name: &str) -> bool {
    if pattern == name || pattern == ">" {
        return true;
    }
    match pattern.strip_suffix('>') {
        Some(prefix) if prefix.ends_with('.') => {
            name.len() > prefix.len() && name.starts_with(prefix)
        }
        _ => false,
    }
}

/// The narrowest pattern covering every name: the name if there is one
/// distinct name, else the longest common dotted prefix as a subtree, else
/// `>`.
pub(crate) fn pattern_for(names: &[String]) -> String {
    let Some(first) = names.first() else {
        return ">".into();
    };
    if names.iter().all(|n| n == first) {
        return first.clone();
    }
    // A subtree must leave at least one token below it, for every name.
    let mut common: Vec<&str> = first.split('.').collect();
    common.pop();
    for name in &names[1..] {
        let parts: Vec<&str> = name.split('.').collect();
        let same = common
            .iter()
            .zip(&parts)
            .take_while(|(a, b)| a == b)
            .count();
        common.truncate(same.min(parts.len() - 1));
    }
    if common.is_empty() {
        ">".into()
    } else {
        format!("{}.>", common.join("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A followed holding of one name that records how it was lost.
    struct Fake {
        name: String,
        slot: u32,
        token: u64,
        lost: Mutex<Option<(Seen, String)>>,
    }

    impl Followed for Fake {
        fn members(&self) -> Vec<(&str, u32, u64)> {
            vec![(&self.name, self.slot, self.token)]
        }
        fn is_over(&self) -> bool {
            self.lost.lock().unwrap().is_some()
        }
        fn lose_observed(&self, seen: Seen, what: String, judged: u64) {
            assert_eq!(judged, self.token);
            self.lost.lock().unwrap().get_or_insert((seen, what));
        }
    }

    /// A follower over a channel that is never used, following a holding
    /// of "jobs.m" in `slot` with token 10.
    fn following(slot: u32) -> (Arc<Follower>, Arc<Fake>) {
        let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
        let credentials = crate::config::ClientConfig::new("127.0.0.1:9").credentials();
        let stub = crate::proto::lease_service_client::LeaseServiceClient::with_interceptor(
            channel,
            credentials,
        );
        let follower = Follower::new(stub, "t".into());
        let fake = Arc::new(Fake {
            name: "jobs.m".into(),
            slot,
            token: 10,
            lost: Mutex::new(None),
        });
        // The follower holds it weakly; `fake` keeps it alive.
        let followed: Arc<dyn Followed> = fake.clone();
        follower.state().sessions.push(Arc::downgrade(&followed));
        (follower, fake)
    }

    fn event(kind: EventType, name: &str, slot: u32, token: u64, revision: u64) -> LeaseEvent {
        LeaseEvent {
            r#type: kind as i32,
            name: name.into(),
            slot,
            fencing_token: token,
            revision,
            missed_after_revision: if kind == EventType::Missed { 10 } else { 0 },
            ..LeaseEvent::default()
        }
    }

    /// A MISSED naming the holding's token (in its slot) loses it as
    /// missed; a MISSED of another token (lower or greater), of none, of
    /// another slot or name does not, and the REVOKED after it is what ends
    /// the holding then.
    #[tokio::test]
    async fn a_missed_ends_only_its_own_holding() {
        let cases = [
            (
                0,
                event(EventType::Missed, "jobs.m", 0, 10, 14),
                Some(Seen::Missed),
            ),
            (
                2,
                event(EventType::Missed, "jobs.m", 2, 10, 14),
                Some(Seen::Missed),
            ),
            (0, event(EventType::Missed, "jobs.m", 0, 9, 14), None),
            (0, event(EventType::Missed, "jobs.m", 0, 12, 14), None),
            (0, event(EventType::Missed, "jobs.m", 0, 0, 14), None),
            (2, event(EventType::Missed, "jobs.m", 1, 10, 14), None),
            (0, event(EventType::Missed, "jobs.x", 0, 10, 14), None),
        ];
        for (slot, missed, want) in cases {
            let (follower, fake) = following(slot);
            let mut snapshot = None;
            follower.on_event("jobs.>", &[], &mut snapshot, missed.clone());
            let after_missed = fake.lost.lock().unwrap().clone();
            assert_eq!(after_missed.as_ref().map(|l| l.0), want, "{missed:?}");
            if let Some((_, what)) = after_missed {
                assert!(what.contains("after revision 10 and before 14"), "{what}");
            }
            follower.on_event(
                "jobs.>",
                &[],
                &mut snapshot,
                event(EventType::Revoked, "jobs.m", slot, 10, 20),
            );
            let seen = fake.lost.lock().unwrap().as_ref().map(|l| l.0);
            assert_eq!(seen, Some(want.unwrap_or(Seen::Ended)), "{missed:?}");
        }
    }

    /// Every event type of the proto has a name, MISSED included, and a
    /// watch event keeps a MISSED's `missed_after_revision`.
    #[test]
    fn missed_events_are_known() {
        assert_eq!(EventType::Missed.as_str_name(), "EVENT_TYPE_MISSED");
        assert_eq!(
            EventType::from_str_name("EVENT_TYPE_MISSED"),
            Some(EventType::Missed)
        );
        let e = crate::Event::from_proto(event(EventType::Missed, "jobs.m", 0, 10, 14)).unwrap();
        assert_eq!(
            (e.kind, e.fencing_token, e.revision, e.missed_after_revision),
            (EventType::Missed, 10, 14, 10)
        );
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_pattern_is_the_narrowest_covering_every_name() {
        assert_eq!(pattern_for(&names(&["jobs.a"])), "jobs.a");
        assert_eq!(pattern_for(&names(&["jobs.a", "jobs.a"])), "jobs.a");
        assert_eq!(pattern_for(&names(&["jobs.a", "jobs.b"])), "jobs.>");
        assert_eq!(pattern_for(&names(&["jobs.x.a", "jobs.x.b"])), "jobs.x.>");
        assert_eq!(pattern_for(&names(&["jobs", "jobs.a"])), ">");
        assert_eq!(pattern_for(&names(&["jobs.a", "jobs.a.b"])), "jobs.>");
        assert_eq!(pattern_for(&names(&["a.x", "b.x"])), ">");
        for set in [
            names(&["jobs.a", "jobs.b"]),
            names(&["jobs.a", "jobs.a.b"]),
            names(&["jobs", "jobs.a"]),
            names(&["a.x", "b.y.z"]),
        ] {
            let p = pattern_for(&set);
            for n in &set {
                assert!(covers(&p, n), "{p} does not cover {n}");
            }
        }
        assert!(!covers("jobs.>", "jobs"));
        assert!(!covers("jobs.>", "jobsx.a"));
        assert!(!covers("jobs.a", "jobs.b"));
    }
}
