//! The mirror: the current holding of every name, rebuilt from the bucket's
//! messages by the shared watcher.
//!
//! The mirror is a cache, never a source of decisions: it only says what to
//! tell watchers. It is what lets an expiry marker (which NATS writes with no
//! payload) name the holder and token that expired, lets a new watch get its
//! snapshot without a NATS round trip, and tells apart a real expiry from the
//! marker NATS writes when a release tombstone itself ages out. Expiries are
//! counted here, where they are classified.

use std::sync::Arc;

use crate::lease::event::{Event, EventKind};
use crate::lease::record::{Entry, Holding, Kind};
use crate::observe::METRICS;

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
}

impl Mirror {
    /// Applies a message; returns the event it stands for once live. A
    /// marker over a name that was not held (a tombstone or marker ageing
    /// out) stands for nothing. Only live holdings are kept.
    pub fn apply(&mut self, entry: Entry) -> Option<Event> {
        self.position = self.position.max(entry.revision);
        // A semaphore slot key stands for one holder of the semaphore: it is
        // kept under its key and shown under the semaphore's name and slot.
        let (shown, slot) = match crate::lease::keys::parse_semaphore_slot(&entry.name) {
            Some((name, slot)) => (name.to_string(), slot),
            // Tenure's own other keys (fences, definitions, tickets) are not
            // leases.
            None if crate::lease::keys::is_reserved(&entry.name) => return None,
            None => (entry.name.clone(), 0),
        };
        let (kind, holder, token, holding) = match entry.kind {
            Kind::Held(record) => {
                let token = record.token_at(entry.revision);
                // A renewal of a holding the mirror has not seen begin is
                // that holding's first appearance: with history 1, a write
                // superseded before this consumer read it (it lagged, or
                // resumed after a failure) is gone from the stream.
                let known = self.names.get(&entry.name).map(|h| h.token);
                let kind = if record.token == 0 || known != Some(token) {
                    EventKind::Acquired
                } else {
                    EventKind::Renewed
                };
                let holding = Arc::new(
                    Holding::at(&entry.name, entry.revision, record).in_slot(&shown, slot),
                );
                self.names.insert(entry.name.clone(), holding.clone());
                (kind, holding.record.holder.clone(), token, Some(holding))
            }
            Kind::Unreadable => {
                self.names.remove(&entry.name);
                return None;
            }
            Kind::Released(payload) => {
                let before = self.names.remove(&entry.name);
                if slot > 0 && before.is_none() {
                    // A tombstone a semaphore's (re)definition wrote over a
                    // free slot, or the release of a holding never seen.
                    return None;
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
                let before = self.names.remove(&entry.name)?;
                (kind, before.record.holder.clone(), before.token, None)
            }
        };
        if !self.live {
            return None;
        }
        if kind == EventKind::Expired {
            METRICS.expired.inc();
        }
        Some(Event {
            kind,
            name: shown,
            revision: entry.revision,
            holder,
            token,
            holding,
            time_ms: entry.time_ms,
            slot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::record::fixtures::{entry, held as rec};
    use crate::lease::record::Released;

    /// A semaphore slot key reads as a holder of the semaphore, with its
    /// slot; a tombstone over a free slot (a definition's) is no event, and
    /// the definition key is never a lease.
    #[test]
    fn slot_keys_are_semaphore_holders() {
        let mut m = Mirror {
            live: true,
            ..Mirror::default()
        };
        let key = crate::lease::keys::semaphore_slot("jobs.render", 2);
        let e = m.apply(entry(&key, 5, rec("h", 0))).unwrap();
        assert_eq!(
            (e.kind, e.name.as_str(), e.slot, e.token),
            (EventKind::Acquired, "jobs.render", 2, 5)
        );
        let h = e.holding.unwrap();
        assert_eq!((h.name.as_str(), h.slot), ("jobs.render", 2));
        let other = crate::lease::keys::semaphore_slot("jobs.render", 3);
        assert!(m.apply(entry(&other, 6, Kind::Released(None))).is_none());
        assert!(m
            .apply(entry("_tenure.sem.jobs.render.limit", 6, rec("h", 0)))
            .is_none());
        let e = m.apply(entry(&key, 7, Kind::Expired)).unwrap();
        assert_eq!((e.kind, e.slot, e.token), (EventKind::Expired, 2, 5));
    }

    /// The initial load produces no events; live messages map to ACQUIRED,
    /// RENEWED, RELEASED, EXPIRED; a marker over a free name is silent.
    #[test]
    fn mirror_classifies_a_lifecycle() {
        let mut m = Mirror::default();
        assert!(m.apply(entry("a", 1, rec("h", 0))).is_none());
        assert!(m.apply(entry("b", 2, Kind::Released(None))).is_none());
        m.live = true;
        let e = m.apply(entry("a", 3, rec("h", 1))).unwrap();
        assert_eq!((e.kind, e.token), (EventKind::Renewed, 1));
        let e = m.apply(entry("a", 4, Kind::Expired)).unwrap();
        assert_eq!(
            (e.kind, e.holder.as_str(), e.token),
            (EventKind::Expired, "h", 1)
        );
        let e = m.apply(entry("a", 5, rec("g", 0))).unwrap();
        assert_eq!((e.kind, e.token), (EventKind::Acquired, 5));
        let e = m
            .apply(entry(
                "a",
                6,
                Kind::Released(Some(Released {
                    holder: "g".into(),
                    token: 5,
                })),
            ))
            .unwrap();
        assert_eq!((e.kind, e.token), (EventKind::Released, 5));
        assert!(m.apply(entry("a", 7, Kind::Expired)).is_none());
        assert!(m.names.is_empty(), "free names are not kept");
        // The acquiring write was superseded before it was read: the first
        // write seen of a new holding is its ACQUIRED.
        let e = m.apply(entry("b", 9, rec("k", 8))).unwrap();
        assert_eq!((e.kind, e.token, e.revision), (EventKind::Acquired, 8, 9));
        let e = m.apply(entry("b", 10, rec("k", 8))).unwrap();
        assert_eq!(e.kind, EventKind::Renewed);
        assert_eq!(m.position, 10);
    }
}
