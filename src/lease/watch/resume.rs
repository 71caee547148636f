//! Resuming a watch after a revision (`WatchLease.start_revision`): the
//! proof that the bucket still holds every change after it, and the replay
//! of those changes before the live feed.
//!
//! The bucket keeps one message per name, so a resume from revision `N`
//! replays the last message of every name changed after `N`, in revision
//! order. That misses nothing as long as no message written after `N` has
//! left the bucket without a successor: every end of a holding (release
//! tombstone, revoke purge, expiry marker) stays for the marker TTL, and
//! only markers leave without one. So a resume is served only while the
//! oldest message that can follow `N` is younger than the marker TTL by the
//! leader's clock; the hub keeps [`Checkpoints`] (revision, time) to bound
//! that age from below. See `docs/design.md`, "Resuming a watch".

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

use crate::error::{Error, Reason, Result};
use crate::lease::event::{Event, EventKind, Filter};
use crate::lease::record::{Entry, Holding, Kind};
use crate::nats::Follow;

/// Slack for clocks: the leader's clock against the times it stamped on
/// earlier messages (a leader change, a clock step), and the hub's own
/// clock against the leader's while a replay runs.
pub const CLOCK_MARGIN: Duration = Duration::from_secs(2);
/// Checkpoints closer in time than this to the previous one are not kept:
/// the bound they give is at most this much older than the exact one.
const CHECKPOINT_STEP_MS: u64 = 100;
/// Most checkpoints kept (16 bytes each); older ones are dropped first,
/// which only makes resumes from long ago refused.
const MAX_CHECKPOINTS: usize = 65_536;

/// Lower bounds on the time of the bucket's messages: `(revision, time)`
/// means every message at or after `revision` was stored at `time` or
/// later. Kept in revision order with non-decreasing times, covering about
/// the marker TTL.
#[derive(Default)]
pub struct Checkpoints {
    /// The checkpoints, oldest first.
    points: VecDeque<(u64, u64)>,
}

impl Checkpoints {
    /// Notes a message at `revision` stored at `time_ms` (messages come in
    /// revision order). A time earlier than the last checkpoints (a clock
    /// step back) lowers them, so each stays a lower bound.
    pub fn note(&mut self, revision: u64, time_ms: u64) {
        while matches!(self.points.back(), Some(&(_, t)) if t > time_ms) {
            self.points.pop_back();
        }
        match self.points.back() {
            Some(&(_, t)) if time_ms - t < CHECKPOINT_STEP_MS => {}
            _ => self.points.push_back((revision, time_ms)),
        }
        if self.points.len() > MAX_CHECKPOINTS {
            self.points.pop_front();
        }
    }

    /// Drops the checkpoints that can no longer prove a resume: those
    /// older than `keep` before the newest, keeping the last of them.
    pub fn prune(&mut self, keep: Duration) {
        let Some(&(_, newest)) = self.points.back() else {
            return;
        };
        let cutoff = newest.saturating_sub(keep.as_millis() as u64);
        while self.points.len() > 1 && self.points[1].1 <= cutoff {
            self.points.pop_front();
        }
    }

    /// A lower bound on the time of every message after `revision`: the
    /// time of the last checkpoint at or before it, if any.
    pub fn after(&self, revision: u64) -> Option<u64> {
        let i = self.points.partition_point(|&(r, _)| r <= revision);
        i.checked_sub(1).map(|i| self.points[i].1)
    }

    /// The oldest revision a resume can start from when every message
    /// after it must be younger than `cutoff_ms`.
    pub fn oldest_after(&self, cutoff_ms: u64) -> Option<u64> {
        self.points
            .iter()
            .find(|&&(_, t)| t > cutoff_ms)
            .map(|&(r, _)| r)
    }

    /// How many checkpoints are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.points.len()
    }
}

/// How the hub saw a name's holding end, for classifying that end again
/// in a replay (an expiry marker or a purge carries no holder or token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// The revision of the end message.
    pub revision: u64,
    /// When it was stored, Unix milliseconds.
    pub time_ms: u64,
    /// The holder and token that ended; `None` for a marker over a name
    /// that was already free (a tombstone or marker ageing out), which
    /// stands for no event.
    pub ended: Option<(String, u64)>,
}

/// The proof a resume needs, and what to say when it fails.
#[derive(Debug, Clone, Copy)]
pub struct Proof {
    /// The revision the watch resumes after.
    pub from: u64,
    /// A lower bound on the time of every message after `from`.
    pub since_ms: Option<u64>,
    /// The leader's clock, Unix milliseconds.
    pub now_ms: Option<u64>,
    /// How long markers stay in the bucket.
    pub marker_ttl: Duration,
    /// The oldest revision a resume could start from now.
    pub oldest: Option<u64>,
}

impl Proof {
    /// The leader-clock time after which the proof no longer holds (a
    /// marker written after `from` may have aged out): the earliest
    /// message after `from` plus the marker TTL, less [`CLOCK_MARGIN`].
    pub fn cutoff_ms(now_ms: u64, marker_ttl: Duration) -> u64 {
        (now_ms + CLOCK_MARGIN.as_millis() as u64).saturating_sub(marker_ttl.as_millis() as u64)
    }

    /// How long, from now, the replay may take before the proof expires;
    /// `Err(WATCH_HISTORY_COMPACTED)` when it does not hold now.
    pub fn check(&self) -> Result<Duration> {
        let (Some(since), Some(now)) = (self.since_ms, self.now_ms) else {
            return Err(self.refusal());
        };
        let cutoff = Proof::cutoff_ms(now, self.marker_ttl);
        if since <= cutoff {
            return Err(self.refusal());
        }
        Ok(Duration::from_millis(since - cutoff))
    }

    /// WATCH_HISTORY_COMPACTED for this resume.
    pub fn refusal(&self) -> Error {
        let mut err = Error::new(
            Reason::WatchHistoryCompacted,
            format!(
                "cannot resume the watch after revision {}: changes after it may have left the bucket \
                 (its markers last {}s); watch again with start_revision 0 for a fresh snapshot",
                self.from,
                self.marker_ttl.as_secs()
            ),
        )
        .with("start_revision", self.from)
        .with("marker_ttl_seconds", self.marker_ttl.as_secs());
        if let Some(oldest) = self.oldest {
            err = err.with("oldest_resumable_revision", oldest);
        }
        err
    }
}

/// The KV key filter of a watch filter, for a consumer.
pub fn subject(filter: &Filter) -> String {
    match filter {
        Filter::Name(name) => name.clone(),
        Filter::Subtree(prefix) if prefix.is_empty() => ">".into(),
        Filter::Subtree(prefix) => format!("{prefix}.>"),
    }
}

/// The changes after a revision, read from a short-lived ordered consumer
/// up to the hub's position at registration, as events.
pub struct Replay {
    /// The consumer; `None` once the replay is done.
    follow: Option<Follow>,
    /// The revision resumed after (fencing tokens above it are new).
    from: u64,
    /// The last revision to replay: the hub's position when the live
    /// subscription was registered (later changes come from the hub).
    until: u64,
    /// What the watch follows.
    filter: Filter,
    /// Which kinds to deliver (empty: all).
    kinds: Vec<EventKind>,
    /// How the hub saw holdings end (shared with the hub, O(1) clone).
    ends: imbl::OrdMap<String, End>,
    /// When the proof expires: a replay not done by then is refused.
    deadline: Instant,
    /// The proof, for the refusal.
    proof: Proof,
}

impl Replay {
    /// A replay of `follow` (a consumer after `proof.from`) up to `until`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        follow: Option<Follow>,
        until: u64,
        filter: Filter,
        kinds: Vec<EventKind>,
        ends: imbl::OrdMap<String, End>,
        deadline: Instant,
        proof: Proof,
    ) -> Replay {
        let follow = follow.filter(|f| f.initially_pending > 0 && until > proof.from);
        Replay {
            follow,
            from: proof.from,
            until,
            filter,
            kinds,
            ends,
            deadline,
            proof,
        }
    }

    /// The next replayed event; `Ok(None)` once caught up (then
    /// `SnapshotComplete` follows). Fails when the proof expired before
    /// the replay was done, or the consumer failed.
    pub async fn next(&mut self) -> Result<Option<Event>> {
        loop {
            let Some(follow) = self.follow.as_mut() else {
                return self.finish().map(|()| None);
            };
            // Only a marker after `from` ageing out can leave a message
            // counted as pending that never comes; that ends the proof too.
            let next = tokio::time::timeout_at(self.deadline, follow.messages.next());
            let (message, pending) = match next.await {
                Err(_) => return Err(self.proof.refusal()),
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(err))) => return Err(err),
                Ok(None) => {
                    return Err(Error::new(
                        Reason::NatsUnavailable,
                        "the watch's replay consumer ended; watch again shortly",
                    ))
                }
            };
            if message.revision > self.until {
                self.follow = None;
                continue;
            }
            if pending == 0 || message.revision == self.until {
                self.follow = None;
            }
            let entry = Entry::from(message);
            if crate::lease::keys::is_reserved(&entry.name) || !self.filter.matches(&entry.name) {
                continue;
            }
            if let Some(event) = self.classify(entry) {
                if self.kinds.is_empty() || self.kinds.contains(&event.kind) {
                    return Ok(Some(event));
                }
            }
        }
    }

    /// Checks, at the seam, that the replay ended while the proof held.
    fn finish(&self) -> Result<()> {
        if Instant::now() >= self.deadline {
            return Err(self.proof.refusal());
        }
        Ok(())
    }

    /// The event a replayed message stands for, classified without the
    /// state before it: a holding with a fencing token after the resumed
    /// revision is ACQUIRED, an older one RENEWED; ends are named from the
    /// tombstone's payload or from how the hub saw them.
    fn classify(&self, entry: Entry) -> Option<Event> {
        // How the hub saw this very message: `Some(None)` for a marker over
        // a name that was already free.
        let seen = self
            .ends
            .get(&entry.name)
            .filter(|end| end.revision == entry.revision)
            .map(|end| end.ended.clone());
        let (kind, holder, token, holding) = match entry.kind {
            Kind::Held(record) => {
                let token = record.token_at(entry.revision);
                let kind = if token > self.from {
                    EventKind::Acquired
                } else {
                    EventKind::Renewed
                };
                let holding = Arc::new(Holding::at(&entry.name, entry.revision, record));
                (kind, holding.record.holder.clone(), token, Some(holding))
            }
            Kind::Unreadable => return None,
            Kind::Released(payload) => {
                let (holder, token) = payload
                    .map(|p| (p.holder, p.token))
                    .or_else(|| seen.flatten())
                    .unwrap_or_default();
                (EventKind::Released, holder, token, None)
            }
            Kind::Expired | Kind::Revoked(_) => {
                let kind = if entry.kind == Kind::Expired {
                    EventKind::Expired
                } else {
                    EventKind::Revoked
                };
                let (holder, token) = match seen {
                    // The hub saw this marker land on a free name: an
                    // age-out, which stands for nothing.
                    Some(None) => return None,
                    Some(Some(ended)) => ended,
                    // Before this process's time: the holding is unknown.
                    None => (String::new(), 0),
                };
                (kind, holder, token, None)
            }
        };
        Some(Event {
            kind,
            name: entry.name,
            revision: entry.revision,
            holder,
            token,
            holding,
            time_ms: entry.time_ms,
            // Semaphore slot keys are reserved and not replayed (above).
            slot: 0,
            missed_after: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::record::fixtures::{entry, held};
    use crate::lease::record::Released;

    /// Replayed messages are classified without the state before them: a
    /// token above the resumed revision is a new holding; ends are named
    /// from the payload or from how the hub saw them, and a marker the hub
    /// saw land on a free name is no event.
    #[test]
    fn replay_classifies_without_prior_state() {
        let proof = Proof {
            from: 10,
            since_ms: Some(0),
            now_ms: Some(0),
            marker_ttl: Duration::from_secs(60),
            oldest: None,
        };
        let mut ends = imbl::OrdMap::new();
        let end = |revision, ended: Option<(&str, u64)>| End {
            revision,
            time_ms: 0,
            ended: ended.map(|(h, t)| (h.to_string(), t)),
        };
        ends.insert("exp".to_string(), end(13, Some(("erin", 7))));
        ends.insert("aged".to_string(), end(14, None));
        ends.insert("old".to_string(), end(3, Some(("olga", 2))));
        let replay = Replay::new(
            None,
            20,
            Filter::parse(">"),
            Vec::new(),
            ends,
            Instant::now() + Duration::from_secs(60),
            proof,
        );
        let kind = |e: Entry| replay.classify(e).map(|e| (e.kind, e.holder, e.token));
        let some = |k, h: &str, t| Some((k, h.to_string(), t));
        assert_eq!(
            kind(entry("r", 11, held("h", 4))),
            some(EventKind::Renewed, "h", 4)
        );
        assert_eq!(
            kind(entry("n", 12, held("h", 0))),
            some(EventKind::Acquired, "h", 12)
        );
        assert_eq!(
            kind(entry("n", 15, held("h", 11))),
            some(EventKind::Acquired, "h", 11)
        );
        assert_eq!(
            kind(entry("exp", 13, Kind::Expired)),
            some(EventKind::Expired, "erin", 7)
        );
        assert_eq!(kind(entry("aged", 14, Kind::Expired)), None);
        // An end the hub did not see (its record is of an older message).
        assert_eq!(
            kind(entry("old", 16, Kind::Revoked(0))),
            some(EventKind::Revoked, "", 0)
        );
        assert_eq!(
            kind(entry(
                "rel",
                17,
                Kind::Released(Some(Released {
                    holder: "r".into(),
                    token: 9
                }))
            )),
            some(EventKind::Released, "r", 9)
        );
        assert_eq!(kind(entry("u", 18, Kind::Unreadable)), None);
    }

    /// Checkpoints bound the time of later messages from below, thin out
    /// close ones, survive a clock step back, and prune old ones.
    #[test]
    fn checkpoints_bound_later_messages() {
        let mut c = Checkpoints::default();
        c.note(10, 1_000);
        c.note(11, 1_050); // within the step: not kept
        c.note(12, 1_200);
        c.note(20, 5_000);
        assert_eq!(c.after(9), None);
        assert_eq!(c.after(10), Some(1_000));
        assert_eq!(c.after(11), Some(1_000));
        assert_eq!(c.after(15), Some(1_200));
        assert_eq!(c.after(25), Some(5_000));
        // A clock step back lowers the later bounds.
        c.note(21, 1_100);
        assert_eq!(c.after(15), Some(1_000));
        assert_eq!(c.after(21), Some(1_100));
        c.note(30, 9_000);
        assert_eq!(c.oldest_after(1_000), Some(21));
        assert_eq!(c.oldest_after(1_100), Some(30));
        // Pruning keeps the newest of the old ones.
        c.prune(Duration::from_millis(2_000));
        assert_eq!(c.len(), 2);
        assert_eq!(c.after(15), None);
        assert_eq!(c.after(30), Some(9_000));
    }

    /// A resume is proven only while every message after it is younger
    /// than the marker TTL (less the margin) by the leader's clock.
    #[test]
    fn proof_needs_young_history() {
        let ttl = Duration::from_secs(10);
        let proof = |since_ms, now_ms| Proof {
            from: 5,
            since_ms,
            now_ms,
            marker_ttl: ttl,
            oldest: Some(7),
        };
        assert_eq!(
            proof(Some(100_000), Some(100_000)).check().unwrap(),
            ttl - CLOCK_MARGIN
        );
        let err = proof(Some(100_000), Some(108_000)).check().unwrap_err();
        assert_eq!(err.reason, Reason::WatchHistoryCompacted);
        assert!(err
            .metadata
            .iter()
            .any(|(k, v)| *k == "oldest_resumable_revision" && v == "7"));
        assert!(proof(None, Some(1)).check().is_err());
        assert!(proof(Some(1), None).check().is_err());
    }
}
