//! The mirror: the current holding of every name, rebuilt from the bucket's
//! messages by the shared watcher, and what it did not see.
//!
//! The mirror is a cache, never a source of decisions: it only says what to
//! tell watchers. It is what lets an expiry marker (which NATS writes with no
//! payload) name the holder and token that expired, lets a new watch get its
//! snapshot without a NATS round trip, and tells apart a real expiry from the
//! marker NATS writes when a release tombstone itself ages out. Expiries are
//! counted here, where they are classified.
//!
//! **Missed changes.** The bucket keeps one message per key, so a watcher
//! that falls behind (a burst, a slow replica, a consumer restarted after a
//! NATS failure) can find a key's messages gone, superseded before it read
//! them; a whole holding can vanish that way. The mirror notices every such
//! gap and says so with a `Missed` event instead of staying silent. Per key
//! it knows the last revision it applied (a holding's, or in `ended` a
//! free key's), and:
//!
//! - every conditional write Tenure makes carries, in its stored
//!   `Nats-Expected-Last-Subject-Sequence` header, the revision it replaced
//!   ([`Message::replaced`](crate::nats::Message)): the key's chain is
//!   unbroken exactly when that is the revision the mirror last applied;
//!   and a holding's record keeps what its acquiring write replaced
//!   (`Record::over`), for a watcher that first sees it at a renewal;
//! - a message without it (a NATS expiry marker, `nats kv` commands) is
//!   judged by the stream sequences the watcher never received
//!   ([`Skipped`]): a gap is possible only if one lies between the key's
//!   last applied revision and this one. That errs towards `Missed`, never
//!   towards silence.
//!
//! A gap in a holding's renewals loses nothing (the same holding goes on);
//! a gap that hides the end of the holding the mirror knew, or holdings
//! before the next one, is a `Missed` event for the key, before the event
//! of the message that revealed it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use crate::lease::event::{Event, EventKind};
use crate::lease::record::{Entry, Holding, Kind};
use crate::observe::METRICS;

/// Most separate skipped ranges kept; beyond it the oldest two merge into
/// one (which can only turn a silent key into a `Missed` one).
const MAX_SKIPPED_RANGES: usize = 4096;

/// The current holding of every name the hub has seen, and its position.
#[derive(Default)]
pub struct Mirror {
    /// name → its live holding; free names are absent.
    /// A persistent map: a watch's snapshot is a clone of it, which costs
    /// O(1) and shares every entry, however many names the bucket holds.
    pub names: imbl::OrdMap<String, Arc<Holding>>,
    /// The highest bucket revision applied.
    pub position: u64,
    /// Whether the initial load is done: events are only produced after it.
    pub live: bool,
    /// Keys not held, → the revision of the last message applied for them
    /// (an end, a marker, an unreadable value) and its time: where their
    /// chain of writes goes on from.
    ended: HashMap<String, (u64, u64)>,
    /// `ended` entries in the order they were made, to forget old ones.
    ended_order: VecDeque<(u64, u64, String)>,
    /// How long an `ended` entry is kept (ms): twice the marker TTL, after
    /// which NATS has removed the key's end message and the marker that
    /// follows it, so the key's next write is over an empty subject.
    /// `None`: kept for ever.
    pub forget_ended_after_ms: Option<u64>,
    /// The position when the mirror went live: keys it knows nothing of
    /// had no message at or before it.
    live_floor: u64,
    /// Stream sequences the watcher never received since it went live.
    skipped: Skipped,
}

/// What one message stands for: at most a `Missed` event, then the event
/// of the message itself.
#[derive(Debug, Default)]
pub struct Applied {
    /// What comes before the message's own event: the changes of the key
    /// this watcher did not see (`Missed`), or the end of a holding handed
    /// over by a Transfer (the giver's `Released`, at the same revision).
    pub missed: Option<Event>,
    /// The message's own event.
    pub event: Option<Event>,
}

/// Stream sequences never received, as disjoint inclusive ranges.
#[derive(Default)]
struct Skipped {
    /// start → end (inclusive).
    ranges: BTreeMap<u64, u64>,
}

impl Skipped {
    fn add(&mut self, start: u64, end: u64) {
        self.ranges.insert(start, end);
        if self.ranges.len() > MAX_SKIPPED_RANGES {
            let mut oldest = self.ranges.iter().take(2).map(|(s, e)| (*s, *e));
            if let (Some((s1, _)), Some((s2, e2))) = (oldest.next(), oldest.next()) {
                self.ranges.remove(&s2);
                self.ranges.insert(s1, e2);
            }
        }
    }

    /// Whether a skipped sequence lies strictly between `after` and
    /// `before`.
    fn any_between(&self, after: u64, before: u64) -> bool {
        if before <= after + 1 {
            return false;
        }
        self.ranges
            .range(..before)
            .next_back()
            .is_some_and(|(_, end)| *end > after)
    }
}

impl Mirror {
    /// Applies a message (`replaced`: the revision it replaced, when a
    /// conditional write made it); returns what it stands for once live. A
    /// marker over a name that was not held (a tombstone or marker ageing
    /// out) stands for nothing. Only live holdings are kept.
    pub fn apply(&mut self, entry: Entry, replaced: Option<u64>) -> Applied {
        if self.live && entry.revision > self.position + 1 {
            self.skipped.add(self.position + 1, entry.revision - 1);
        }
        self.position = self.position.max(entry.revision);
        if !self.live {
            self.live_floor = self.position;
        }
        self.forget_old_ends(entry.time_ms);
        // A semaphore slot key stands for one holder of the semaphore: it is
        // kept under its key and shown under the semaphore's name and slot.
        // Tenure's own other keys (fences, definitions, tickets) are not
        // leases.
        let Some((shown, slot)) = crate::lease::keys::shown_as(&entry.name) else {
            return Applied::default();
        };
        let shown = shown.to_string();
        let key = entry.name.clone();
        let before = self.names.get(&key).cloned();
        let last_seen = before
            .as_ref()
            .map(|h| h.revision)
            .or_else(|| self.ended.get(&key).map(|e| e.0));
        // An acquiring write conditional on a wildcard rather than its own
        // key (a read-write lock's, design section 23; a lease's grant,
        // conditional on its record and queue together, section 16)
        // carries no replaced revision of its key; its record names the
        // one it replaced, which the wildcard's condition made exact.
        let replaced = replaced.or(match &entry.kind {
            Kind::Held(record) if record.token == 0 => record.over,
            _ => None,
        });
        // Whether messages of this key between the last one applied and
        // this one were not seen.
        let broken = match (replaced, last_seen) {
            (Some(p), seen) => p != seen.unwrap_or(0),
            (None, Some(seen)) => self.skipped.any_between(seen, entry.revision),
            // A marker (or unconditional write) over a key never seen since
            // the load: what it follows was never received.
            (None, None) => true,
        };
        let live = self.live;
        let missed = |known: Option<&Arc<Holding>>| -> Option<Event> {
            live.then(|| Event {
                kind: EventKind::Missed,
                name: shown.clone(),
                revision: entry.revision,
                holder: known.map(|h| h.record.holder.clone()).unwrap_or_default(),
                token: known.map_or(0, |h| h.token),
                holding: None,
                time_ms: entry.time_ms,
                slot,
                missed_after: last_seen.unwrap_or(0),
            })
        };
        let mut out = Applied::default();
        let (kind, holder, token, holding) = match entry.kind {
            Kind::Held(record) => {
                let token = record.token_at(entry.revision);
                let same = before.as_ref().is_some_and(|b| b.token == token);
                let handed_over = match (&record.transferred_from, &before) {
                    (Some(from), Some(b)) => from.token == b.token && !broken,
                    _ => false,
                };
                if handed_over && live {
                    // A Transfer: the holding known ended at this very
                    // write, handed to this one.
                    let b = before.as_ref().expect("handed over from the known holding");
                    out.missed = Some(Event {
                        kind: EventKind::Released,
                        name: shown.clone(),
                        revision: entry.revision,
                        holder: b.record.holder.clone(),
                        token: b.token,
                        holding: None,
                        time_ms: entry.time_ms,
                        slot,
                        missed_after: 0,
                    });
                } else if !same {
                    out.missed = match &before {
                        // The holding it knew ended unseen.
                        Some(b) => missed(Some(b)),
                        // This holding's acquiring write: its chain says
                        // whether holdings came and went before it.
                        None if record.token == 0 => broken.then(|| missed(None)).flatten(),
                        // A holding first seen after its acquiring write:
                        // the record says what that write replaced (older
                        // records do not: then anything skipped before it
                        // may have been the key's).
                        None => {
                            let gap = match record.over {
                                Some(over) => over != last_seen.unwrap_or(0),
                                None => self
                                    .skipped
                                    .any_between(last_seen.unwrap_or(self.live_floor), token),
                            };
                            gap.then(|| missed(None)).flatten()
                        }
                    };
                }
                // A renewal of a holding the mirror has not seen begin is
                // that holding's first appearance: with history 1, a write
                // superseded before this consumer read it is gone.
                let kind = if record.token == 0 || !same {
                    EventKind::Acquired
                } else {
                    EventKind::Renewed
                };
                let holding = Arc::new(
                    Holding::at(&entry.name, entry.revision, record).in_slot(&shown, slot),
                );
                self.names.insert(key.clone(), holding.clone());
                self.ended.remove(&key);
                (kind, holding.record.holder.clone(), token, Some(holding))
            }
            Kind::Unreadable => {
                self.names.remove(&key);
                self.end(&key, entry.revision, entry.time_ms);
                return out;
            }
            Kind::Released(payload) => {
                self.names.remove(&key);
                self.end(&key, entry.revision, entry.time_ms);
                let ended_known = match (&payload, &before) {
                    (Some(p), Some(b)) => p.token == b.token,
                    (None, Some(_)) => !broken,
                    (_, None) => false,
                };
                if !ended_known && (before.is_some() || broken) {
                    out.missed = missed(before.as_ref());
                }
                if slot > 0 && before.is_none() && payload.is_none() {
                    // A tombstone a semaphore's (re)definition wrote over a
                    // free slot.
                    return out;
                }
                let (holder, token) = match (payload, before) {
                    (Some(p), _) => (p.holder, p.token),
                    (None, Some(b)) => (b.record.holder.clone(), b.token),
                    (None, None) => (String::new(), 0),
                };
                (EventKind::Released, holder, token, None)
            }
            Kind::Expired | Kind::Revoked(_) => {
                let kind = if entry.kind == Kind::Expired {
                    EventKind::Expired
                } else {
                    EventKind::Revoked
                };
                self.names.remove(&key);
                self.end(&key, entry.revision, entry.time_ms);
                if broken {
                    // What NATS expired or the purge removed may be a
                    // later message than the holding known: say so rather
                    // than name a holding that may not be the one that
                    // ended.
                    out.missed = missed(before.as_ref());
                    return out;
                }
                // A marker over a free key is an end message ageing out.
                let Some(before) = before else {
                    return out;
                };
                (kind, before.record.holder.clone(), before.token, None)
            }
        };
        if !self.live {
            return Applied::default();
        }
        if kind == EventKind::Expired {
            METRICS.expired.inc();
        }
        out.event = Some(Event {
            kind,
            name: shown,
            revision: entry.revision,
            holder,
            token,
            holding,
            time_ms: entry.time_ms,
            slot,
            missed_after: 0,
        });
        out
    }

    /// The revision of the last message of `key` applied, if the mirror
    /// knows it (a holding's, or a free key's for a while).
    pub fn last_seen(&self, key: &str) -> Option<u64> {
        self.names
            .get(key)
            .map(|h| h.revision)
            .or_else(|| self.ended.get(key).map(|e| e.0))
    }

    /// Notes that `key` is not held as of its message at `revision`.
    fn end(&mut self, key: &str, revision: u64, time_ms: u64) {
        self.ended.insert(key.to_string(), (revision, time_ms));
        if self.forget_ended_after_ms.is_some() {
            self.ended_order
                .push_back((time_ms, revision, key.to_string()));
        }
    }

    /// Forgets `ended` entries older than [`Mirror::forget_ended_after_ms`]
    /// by `now_ms` (the newest message's time).
    fn forget_old_ends(&mut self, now_ms: u64) {
        let Some(after) = self.forget_ended_after_ms else {
            return;
        };
        while let Some((time, revision, _)) = self.ended_order.front() {
            if time.saturating_add(after) >= now_ms {
                break;
            }
            let revision = *revision;
            let Some((_, _, key)) = self.ended_order.pop_front() else {
                break;
            };
            if self.ended.get(&key).is_some_and(|e| e.0 == revision) {
                self.ended.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::record::fixtures::{entry, held as rec, held_over};
    use crate::lease::record::Released;

    /// A live mirror.
    fn live() -> Mirror {
        Mirror {
            live: true,
            ..Mirror::default()
        }
    }

    /// The one event a message stands for (asserting no `Missed`).
    fn one(m: &mut Mirror, e: Entry, replaced: Option<u64>) -> Option<Event> {
        let a = m.apply(e, replaced);
        assert!(a.missed.is_none(), "unexpected {:?}", a.missed);
        a.event
    }

    fn released(holder: &str, token: u64) -> Kind {
        Kind::Released(Some(Released {
            holder: holder.into(),
            token,
        }))
    }

    /// A semaphore slot key reads as a holder of the semaphore, with its
    /// slot; a tombstone over a free slot (a definition's) is no event, and
    /// the definition key is never a lease.
    #[test]
    fn slot_keys_are_semaphore_holders() {
        let mut m = live();
        let key = crate::lease::keys::semaphore_slot("jobs.render", 2);
        let e = one(&mut m, entry(&key, 1, rec("h", 0)), Some(0)).unwrap();
        assert_eq!(
            (e.kind, e.name.as_str(), e.slot, e.token),
            (EventKind::Acquired, "jobs.render", 2, 1)
        );
        let h = e.holding.unwrap();
        assert_eq!((h.name.as_str(), h.slot), ("jobs.render", 2));
        let other = crate::lease::keys::semaphore_slot("jobs.render", 3);
        assert!(one(&mut m, entry(&other, 2, Kind::Released(None)), Some(0)).is_none());
        assert!(one(
            &mut m,
            entry("_tenure.sem.jobs.render.limit", 3, rec("h", 0)),
            Some(0)
        )
        .is_none());
        let e = one(&mut m, entry(&key, 4, Kind::Expired), None).unwrap();
        assert_eq!((e.kind, e.slot, e.token), (EventKind::Expired, 2, 1));
    }

    /// The initial load produces no events; live messages map to ACQUIRED,
    /// RENEWED, RELEASED, EXPIRED; a marker over a free name is silent.
    #[test]
    fn mirror_classifies_a_lifecycle() {
        let mut m = Mirror::default();
        assert!(one(&mut m, entry("a", 1, rec("h", 0)), Some(0)).is_none());
        assert!(one(&mut m, entry("b", 2, Kind::Released(None)), Some(0)).is_none());
        m.live = true;
        let e = one(&mut m, entry("a", 3, rec("h", 1)), Some(1)).unwrap();
        assert_eq!((e.kind, e.token), (EventKind::Renewed, 1));
        let e = one(&mut m, entry("a", 4, Kind::Expired), None).unwrap();
        assert_eq!(
            (e.kind, e.holder.as_str(), e.token),
            (EventKind::Expired, "h", 1)
        );
        let e = one(&mut m, entry("a", 5, rec("g", 0)), Some(4)).unwrap();
        assert_eq!((e.kind, e.token), (EventKind::Acquired, 5));
        let e = one(&mut m, entry("a", 6, released("g", 5)), Some(5)).unwrap();
        assert_eq!((e.kind, e.token), (EventKind::Released, 5));
        assert!(one(&mut m, entry("a", 7, Kind::Expired), None).is_none());
        assert!(m.names.is_empty(), "free names are not kept");
        assert_eq!(m.position, 7);
    }

    /// Renewals superseded before the watcher read them lose nothing: the
    /// same holding goes on, and no `Missed` is said.
    #[test]
    fn skipped_renewals_are_not_missed_holdings() {
        let mut m = live();
        one(&mut m, entry("a", 1, rec("h", 0)), Some(0));
        // 2 and 3 (renewals) were superseded before they were read.
        let e = one(&mut m, entry("a", 4, rec("h", 1)), Some(3)).unwrap();
        assert_eq!((e.kind, e.token), (EventKind::Renewed, 1));
        // The acquiring write itself skipped: the first write seen is the
        // holding's ACQUIRED; its record says it was made over an empty
        // name, so nothing came before it.
        let e = one(&mut m, entry("b", 6, held_over("k", 5, 0)), Some(5)).unwrap();
        assert_eq!((e.kind, e.token, e.revision), (EventKind::Acquired, 5, 6));
    }

    /// The end of the holding the mirror knew was superseded by the next
    /// holding: `Missed` names the known holding, then the new one's
    /// ACQUIRED.
    #[test]
    fn an_unseen_end_is_missed() {
        let mut m = live();
        one(&mut m, entry("a", 1, rec("h", 0)), Some(0));
        // 2: h released; 3: g acquired; 4: g renewed (read).
        let a = m.apply(entry("a", 4, rec("g", 3)), Some(3));
        let missed = a.missed.expect("missed");
        assert_eq!(
            (
                missed.kind,
                missed.holder.as_str(),
                missed.token,
                missed.missed_after,
                missed.revision
            ),
            (EventKind::Missed, "h", 1, 1, 4)
        );
        let e = a.event.unwrap();
        assert_eq!(
            (e.kind, e.token, e.holder.as_str()),
            (EventKind::Acquired, 3, "g")
        );
    }

    /// A whole holding came and went between two seen changes: the next
    /// acquiring write's chain says so.
    #[test]
    fn a_vanished_holding_is_missed() {
        let mut m = live();
        one(&mut m, entry("a", 1, rec("h", 0)), Some(0));
        one(&mut m, entry("a", 2, released("h", 1)), Some(1));
        // 3: x acquired, 4: x released, both superseded; 5: y acquires
        // over 4.
        let a = m.apply(entry("a", 5, rec("y", 0)), Some(4));
        let missed = a.missed.expect("missed");
        assert_eq!((missed.token, missed.missed_after), (0, 2));
        assert_eq!(a.event.unwrap().kind, EventKind::Acquired);
        // The same with the new holding first seen at a renewal: its record
        // says its acquiring write replaced 8, not the 6 seen.
        one(&mut m, entry("b", 6, released("q", 1)), Some(0));
        // 7 (b acquired), 8 (b released), 9 (z acquired over 8), all
        // skipped; 10: z renewed.
        let a = m.apply(entry("b", 10, held_over("z", 9, 8)), Some(9));
        assert_eq!(a.missed.expect("missed").missed_after, 6);
        assert_eq!(a.event.unwrap().token, 9);
        // Over the end it saw: nothing missed.
        one(&mut m, entry("c", 11, released("q", 1)), Some(0));
        let e = one(&mut m, entry("c", 14, held_over("w", 13, 11)), Some(13)).unwrap();
        assert_eq!(e.kind, EventKind::Acquired);
        // A record of an older version (no `over`): anything skipped before
        // its token may have been the key's.
        let a = m.apply(entry("d", 20, rec("v", 18)), Some(19));
        assert!(a.missed.is_some());
    }

    /// Markers carry no chain: with nothing skipped since the key's last
    /// change they are exact; with a skip in between they are `Missed`
    /// (the expired message may be a later holding's), never silence.
    #[test]
    fn markers_are_judged_by_what_was_skipped() {
        let mut m = live();
        one(&mut m, entry("a", 1, rec("h", 0)), Some(0));
        one(&mut m, entry("other", 2, rec("o", 0)), Some(0));
        // 3 skipped (any key), then a's marker: maybe not h's end.
        let a = m.apply(entry("a", 4, Kind::Expired), None);
        let missed = a.missed.expect("missed");
        assert_eq!((missed.holder.as_str(), missed.token), ("h", 1));
        assert!(
            a.event.is_none(),
            "no EXPIRED for a holding that may not be the one"
        );
        // A tombstone seen, then its age-out marker with no skip: silent.
        one(&mut m, entry("c", 5, rec("h", 0)), Some(0));
        one(&mut m, entry("c", 6, released("h", 5)), Some(5));
        let a = m.apply(entry("c", 7, Kind::Expired), None);
        assert!(a.missed.is_none() && a.event.is_none());
        // A marker over a key never seen: what it follows was never read.
        let a = m.apply(entry("d", 8, Kind::Expired), None);
        assert_eq!(a.missed.expect("missed").missed_after, 0);
    }

    /// A release of a holding the mirror never saw: `Missed`, then the
    /// RELEASED with the payload's holder and token.
    #[test]
    fn a_release_of_an_unseen_holding_is_missed_first() {
        let mut m = live();
        one(&mut m, entry("a", 1, rec("h", 0)), Some(0));
        // 2: h released, 3: g acquired (both skipped); 4: g releases.
        let a = m.apply(entry("a", 4, released("g", 3)), Some(3));
        assert_eq!(a.missed.expect("missed").token, 1);
        let e = a.event.unwrap();
        assert_eq!(
            (e.kind, e.holder.as_str(), e.token),
            (EventKind::Released, "g", 3)
        );
    }

    /// `ended` entries are forgotten after the horizon; a key's write over
    /// an empty subject (replaced 0) is then no gap.
    #[test]
    fn old_ends_are_forgotten() {
        let mut m = Mirror {
            forget_ended_after_ms: Some(1_000),
            ..live()
        };
        let at = |name: &str, rev, ms, kind| Entry {
            time_ms: ms,
            ..entry(name, rev, kind)
        };
        one(&mut m, at("a", 1, 0, rec("h", 0)), Some(0));
        one(&mut m, at("a", 2, 10, released("h", 1)), Some(1));
        assert_eq!(m.ended.len(), 1);
        one(&mut m, at("b", 3, 5_000, rec("h", 0)), Some(0));
        assert!(m.ended.is_empty());
        let e = one(&mut m, at("a", 4, 5_001, rec("k", 0)), Some(0)).unwrap();
        assert_eq!(e.kind, EventKind::Acquired);
    }

    #[test]
    fn skipped_ranges_answer_between_and_stay_bounded() {
        let mut s = Skipped::default();
        s.add(5, 7);
        assert!(s.any_between(4, 6) && s.any_between(6, 8) && s.any_between(1, 100));
        assert!(!s.any_between(7, 20) && !s.any_between(0, 5) && !s.any_between(5, 6));
        for i in 0..(MAX_SKIPPED_RANGES as u64 + 10) {
            s.add(100 + 3 * i, 100 + 3 * i);
        }
        assert!(s.ranges.len() <= MAX_SKIPPED_RANGES);
        assert!(
            s.any_between(6, 8),
            "merged ranges still cover what they covered"
        );
    }
}
