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

use std::collections::{HashMap, VecDeque};
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
    /// The revision of the name's message before it, as the hub knew it
    /// (0: unknown): what a marker (which names no predecessor) followed.
    pub after: u64,
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

/// The KV key filters of a watch filter, for a consumer: the lease keys it
/// covers and the slot keys of the semaphores it covers (a semaphore's
/// holders are kept under `_tenure.sem.<name>.<slot>`); the whole bucket's
/// `>` covers both.
pub fn subjects(filter: &Filter) -> Vec<String> {
    match filter {
        Filter::Name(name) => vec![
            crate::lease::keys::lease(name),
            format!("{}.*", crate::lease::keys::semaphore_prefix(name)),
        ],
        Filter::Subtree(prefix) if prefix.is_empty() => vec![">".into()],
        Filter::Subtree(prefix) => vec![
            crate::lease::keys::leases_under(&format!("{prefix}.")),
            format!("{}.>", crate::lease::keys::semaphore_prefix(prefix)),
        ],
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
    /// Per name replayed so far: the revision and token (0: an end) of its
    /// last replayed message, to tell whether the next one follows it.
    last: HashMap<String, (u64, u64)>,
    /// An event to deliver after the `Missed` just delivered.
    queued: Option<Event>,
    /// The last revision the consumer delivered (`from` before any).
    reached: u64,
    /// Messages at or before it are skipped: `from`, but for the test
    /// fault `replay-repeats`.
    floor: u64,
    /// The consumer counts nothing pending after `reached`: the replay
    /// ends there unless the stream leader has a change up to `until`.
    drained: bool,
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
        let follow = follow.filter(|_| until > proof.from);
        let drained = follow.as_ref().is_some_and(|f| f.initially_pending == 0);
        Replay {
            follow,
            from: proof.from,
            until,
            filter,
            kinds,
            ends,
            deadline,
            proof,
            last: HashMap::new(),
            queued: None,
            reached: proof.from,
            floor: proof.from,
            drained,
        }
    }

    /// The next replayed event; `Ok(None)` once caught up (then
    /// `SnapshotComplete` follows). Fails when the proof expired before
    /// the replay was done, or the consumer failed.
    pub async fn next(&mut self) -> Result<Option<Event>> {
        loop {
            if let Some(event) = self.queued.take() {
                if self.kinds.is_empty() || self.kinds.contains(&event.kind) {
                    return Ok(Some(event));
                }
            }
            if self.drained && !self.more_at_leader().await? {
                self.follow = None;
            }
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
            self.reached = self.reached.max(message.revision);
            if message.revision == self.until {
                self.follow = None;
            }
            self.drained = pending == 0;
            if message.revision <= self.floor {
                // Never before the resumed revision (a consumer restarted
                // by its reconnect may deliver from earlier).
                continue;
            }
            let replaced = message.replaced;
            // Kept as the hub keys it: a lease record under its name.
            let entry = Entry {
                name: crate::lease::keys::watched_as(&message.name).to_string(),
                ..Entry::from(message)
            };
            // A semaphore slot key stands for one holder of the semaphore,
            // shown under the semaphore's name and slot (as the hub shows
            // it); Tenure's other keys are not leases.
            let Some((shown, slot)) = crate::lease::keys::shown_as(&entry.name) else {
                continue;
            };
            let shown = shown.to_string();
            if !self.filter.matches(&shown) {
                continue;
            }
            let missed = self.missed(&entry, replaced).map(|e| e.shown(&shown, slot));
            let event = self
                .classify(entry)
                .map(|e| e.shown(&shown, slot))
                // A tombstone a semaphore's (re)definition wrote over a
                // free slot ends no holding.
                .filter(|e| !(slot > 0 && e.kind == EventKind::Released && e.token == 0));
            match missed {
                // Always delivered; the event after it on the next call.
                Some(missed) => {
                    self.queued = event;
                    return Ok(Some(missed));
                }
                None => {
                    if let Some(event) = event {
                        if self.kinds.is_empty() || self.kinds.contains(&event.kind) {
                            return Ok(Some(event));
                        }
                    }
                }
            }
        }
    }

    /// The event before the replayed `entry`'s own: the giver's `Released`
    /// when it was handed over by a Transfer, or a `Missed` event when it
    /// shows that changes of its
    /// name after the resumed revision are gone from the bucket (the
    /// resuming client knew the name as of `from`, and every later message
    /// still there is replayed): its predecessor, from the write's stored
    /// condition (`replaced`), the record's `over`, a tombstone's payload
    /// or how the hub saw a marker land, is neither at or before `from` nor
    /// the last message replayed. Errs towards `Missed` when nothing says.
    fn missed(&mut self, entry: &Entry, replaced: Option<u64>) -> Option<Event> {
        let from = self.from;
        let last = self.last.get(&entry.name).copied();
        // Whether the message follows what the client knows: the last one
        // replayed, or (for the first) anything up to `from`.
        let follows = |p: u64| match last {
            Some((l, _)) => p == l,
            None => p <= from,
        };
        let (gap, token) = match &entry.kind {
            Kind::Unreadable => (false, 0),
            Kind::Held(record) => {
                let token = record.token_at(entry.revision);
                let gap = match last {
                    // The same holding goes on: missed renewals lose nothing.
                    Some((_, t)) if t == token => false,
                    _ if token <= from && last.is_none() => false,
                    _ => {
                        let over = if record.token == 0 {
                            replaced.or(record.over)
                        } else {
                            record.over
                        };
                        !over.is_some_and(follows)
                    }
                };
                (gap, token)
            }
            Kind::Released(payload) => {
                let gap = match (payload, last) {
                    (Some(p), Some((_, t))) => p.token != t && !replaced.is_some_and(follows),
                    (Some(p), None) => p.token > from,
                    (None, _) => !replaced.is_some_and(follows),
                };
                (gap, 0)
            }
            Kind::Expired | Kind::Revoked(_) => {
                let gap = match (replaced, last) {
                    (Some(p), _) => !follows(p),
                    // A marker after a replayed message: it followed it.
                    (None, Some(_)) => false,
                    (None, None) => {
                        let end = self
                            .ends
                            .get(&entry.name)
                            .filter(|end| end.revision == entry.revision);
                        match end {
                            Some(End {
                                ended: Some((_, token)),
                                ..
                            }) => *token > from,
                            Some(End { after, .. }) => *after == 0 || *after > from,
                            None => true,
                        }
                    }
                };
                (gap, 0)
            }
        };
        let known = last;
        self.last
            .insert(entry.name.clone(), (entry.revision, token));
        // A holding handed over by a Transfer from the one the client knew
        // (or the one just replayed): the giver's end, at this revision.
        // A renewal of a recipient keeps `transferred_from`: when the
        // Transfer itself (the recipient's token) is at or before `from`,
        // the client has seen the giver's end already.
        if let (false, Kind::Held(record)) = (gap, &entry.kind) {
            if let Some(from) = &record.transferred_from {
                let recipient = record.token_at(entry.revision);
                let knew = match known {
                    Some((_, t)) => t == from.token,
                    None => from.token <= self.from && recipient > self.from,
                };
                if knew && recipient != from.token {
                    return Some(Event {
                        kind: EventKind::Released,
                        name: entry.name.clone(),
                        revision: entry.revision,
                        holder: from.holder.clone(),
                        token: from.token,
                        holding: None,
                        time_ms: entry.time_ms,
                        slot: 0,
                        missed_after: 0,
                    });
                }
            }
        }
        gap.then(|| Event {
            kind: EventKind::Missed,
            name: entry.name.clone(),
            revision: entry.revision,
            holder: String::new(),
            token: known.map_or(0, |(_, t)| t),
            holding: None,
            time_ms: entry.time_ms,
            slot: 0,
            missed_after: known.map_or(from, |(l, _)| l),
        })
    }

    /// Whether the stream leader holds a change for the replay after the
    /// last one the consumer delivered, up to `until`: the consumer may sit
    /// on a replica still catching up (see [`crate::nats::Follow::leader`]).
    /// Without a leader to ask (unit tests) the consumer's count stands.
    /// Asked again each time the consumer drains; bounded by the proof's
    /// deadline like the rest of the replay.
    async fn more_at_leader(&mut self) -> Result<bool> {
        self.drained = false;
        let Some(leader) = self.follow.as_ref().and_then(|f| f.leader.clone()) else {
            return Ok(false);
        };
        let read = tokio::time::timeout_at(self.deadline, leader.first_after(self.reached));
        match read.await {
            Err(_) => Err(self.proof.refusal()),
            Ok(first) => Ok(first?.is_some_and(|r| r <= self.until)),
        }
    }

    /// TEST FAULT (`replay-repeats`): delivers what the consumer reads
    /// after `floor` (below the resume point), not only after `from`.
    pub fn repeat_from(&mut self, floor: u64) {
        self.floor = floor;
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
            // Set by `next` for a semaphore slot.
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

    /// A proof for a resume after `from` whose history is young enough.
    fn young_proof(from: u64) -> Proof {
        Proof {
            from,
            since_ms: Some(0),
            now_ms: Some(0),
            marker_ttl: Duration::from_secs(60),
            oldest: None,
        }
    }

    /// Replayed messages are classified without the state before them: a
    /// token above the resumed revision is a new holding; ends are named
    /// from the payload or from how the hub saw them, and a marker the hub
    /// saw land on a free name is no event.
    #[test]
    fn replay_classifies_without_prior_state() {
        let proof = young_proof(10);
        let mut ends = imbl::OrdMap::new();
        let end = |revision, ended: Option<(&str, u64)>| End {
            revision,
            time_ms: 0,
            ended: ended.map(|(h, t)| (h.to_string(), t)),
            after: 0,
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

    /// A resumed watch says what the bucket no longer has: a change of a
    /// name after the resumed revision whose predecessor (from the write's
    /// condition, the record's `over`, a tombstone's payload or how the hub
    /// saw a marker land) is neither known to the client nor replayed is a
    /// `Missed`; what follows the client's knowledge is not.
    #[test]
    fn replay_says_what_it_cannot_replay() {
        let proof = young_proof(10);
        let mut ends = imbl::OrdMap::new();
        let end = |revision, after| End {
            revision,
            time_ms: 0,
            ended: None,
            after,
        };
        ends.insert("aged-old".to_string(), end(14, 9));
        ends.insert("aged-new".to_string(), end(15, 12));
        let mut replay = Replay::new(
            None,
            40,
            Filter::parse(">"),
            Vec::new(),
            ends,
            Instant::now() + Duration::from_secs(60),
            proof,
        );
        let over = |holder: &str, token, over| {
            Kind::Held(crate::lease::record::Record {
                over: Some(over),
                ..crate::lease::record::fixtures::record(holder, "k", token)
            })
        };
        let mut missed = |e: Entry, replaced| replay.missed(&e, replaced).map(|m| m.missed_after);
        // Held since before the resume: renewals only.
        assert_eq!(missed(entry("r", 11, held("h", 4)), Some(10)), None);
        // Acquired over what the client knew; then released.
        assert_eq!(missed(entry("a", 12, over("h", 0, 8)), Some(8)), None);
        let rel = |t| {
            Kind::Released(Some(Released {
                holder: "h".into(),
                token: t,
            }))
        };
        assert_eq!(missed(entry("a", 13, rel(12)), Some(12)), None);
        // Acquired over a message after the resume that is gone.
        assert_eq!(
            missed(entry("b", 16, over("h", 15, 12)), Some(15)),
            Some(10)
        );
        // A release of a holding granted after the resume, never replayed.
        assert_eq!(missed(entry("c", 17, rel(11)), Some(11)), Some(10));
        // A chain broken between two replayed messages.
        assert_eq!(missed(entry("a", 20, over("g", 0, 18)), Some(18)), Some(13));
        // Markers: over an end the client knew, silent; over one after the
        // resume, missed.
        assert_eq!(missed(entry("aged-old", 14, Kind::Expired), None), None);
        assert_eq!(missed(entry("aged-new", 15, Kind::Expired), None), Some(10));
        // Unknown to the hub: missed rather than silent.
        assert_eq!(missed(entry("d", 21, Kind::Expired), None), Some(10));
    }

    /// A replayed holding handed over by a Transfer names the giver's end
    /// only when the Transfer came after the resumed revision: a renewal
    /// of the recipient keeps `transferred_from`, and a client that
    /// resumed after the Transfer has seen that end already.
    #[test]
    fn replay_names_a_transfer_once() {
        let replay = || {
            Replay::new(
                None,
                40,
                Filter::parse(">"),
                Vec::new(),
                imbl::OrdMap::new(),
                Instant::now() + Duration::from_secs(60),
                young_proof(20),
            )
        };
        // The giver "g" held with token 5; the Transfer at 18 (the
        // recipient's token) wrote over it; a renewal of the recipient at 25.
        let handed = |token| {
            Kind::Held(crate::lease::record::Record {
                over: Some(17),
                transferred_from: Some(Released {
                    holder: "g".into(),
                    token: 5,
                }),
                ..crate::lease::record::fixtures::record("r", "k", token)
            })
        };
        // Each write replaced the giver's message at 17.
        let ended = |e: Entry| {
            replay()
                .missed(&e, Some(17))
                .map(|m| (m.kind, m.holder, m.token))
        };
        // Resumed after 20: the Transfer at 18 was seen.
        assert_eq!(ended(entry("t", 25, handed(18))), None);
        // The Transfer itself after the resume (token 0: the write's own
        // revision, 22): the giver's end, at that revision.
        assert_eq!(
            ended(entry("t", 22, handed(0))),
            Some((EventKind::Released, "g".to_string(), 5))
        );
        // A renewal after a Transfer that came after the resume: the
        // client never saw that end either.
        assert_eq!(
            ended(entry("t", 25, handed(22))),
            Some((EventKind::Released, "g".to_string(), 5))
        );
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

    /// A replay never delivers a message at or before the resumed revision
    /// (a consumer recreated after a reconnect may start earlier), and
    /// shows a semaphore slot's change under the semaphore's name and slot.
    #[tokio::test]
    async fn replay_skips_what_the_client_has_and_shows_slots() {
        let proof = young_proof(10);
        // Each write replaced its key's message at `over`.
        let put = |name: &str, revision: u64, token: u64, over: u64| {
            let record = crate::lease::record::fixtures::record("h", "k", token);
            Ok((
                crate::nats::Message {
                    name: name.into(),
                    revision,
                    time_ms: 0,
                    op: crate::nats::Op::Put(record.encode()),
                    replaced: Some(over),
                },
                12 - revision,
            ))
        };
        let slot = crate::lease::keys::semaphore_slot("pool", 2);
        let a = crate::lease::keys::lease("a");
        let messages = vec![
            put(&a, 9, 0, 3),
            put(&a, 10, 9, 9),
            put(&a, 11, 9, 10),
            put(&slot, 12, 0, 5),
        ];
        let follow = crate::nats::Follow {
            initially_pending: 4,
            messages: futures::stream::iter(messages).boxed(),
            leader: None,
        };
        let mut replay = Replay::new(
            Some(follow),
            12,
            Filter::parse(">"),
            Vec::new(),
            imbl::OrdMap::new(),
            Instant::now() + Duration::from_secs(60),
            proof,
        );
        let mut got = Vec::new();
        while let Some(e) = replay.next().await.expect("the replay") {
            got.push((e.kind, e.name, e.revision, e.slot));
        }
        assert_eq!(
            got,
            [
                (EventKind::Renewed, "a".to_string(), 11, 0),
                (EventKind::Acquired, "pool".to_string(), 12, 2),
            ]
        );
    }
}
