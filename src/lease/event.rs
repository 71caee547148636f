//! Lease events and watch filters: what the shared watcher tells
//! `WatchLease` streams and waiting Acquires.

use std::sync::Arc;

use super::record::Holding;

/// What happened to a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Held when the watch started (snapshot).
    Current,
    /// End of the snapshot.
    SnapshotComplete,
    /// A new holding.
    Acquired,
    /// A renewal of the current holding.
    Renewed,
    /// A holder ended its holding.
    Released,
    /// A holding ran out of time.
    Expired,
    /// An operator removed the holding.
    Revoked,
    /// The watcher did not see every change of the name: a holding (the one
    /// in `holder` and `token`, when the watch knew it) ended, or holdings
    /// came and went, after `missed_after` and before `revision`, and NATS
    /// no longer has those messages (it keeps one per name). Never filtered
    /// out by a watch's event types: a watch says when it is incomplete.
    Missed,
    /// Internal, never sent to a watch: the name is free and its queue lost
    /// a live ticket (a waiter left or its ticket expired), so the next
    /// waiter may now be the head. Delivered only to subscribers that ask
    /// for it by name (waiting Acquires).
    Turn,
    /// Internal, never sent to a watch: the preferred candidate of the
    /// election of this name changed (it is in `holder`, its preference in
    /// `token`; "" and 0: none) (a candidate with a preference began
    /// or stopped waiting; see [`crate::lease::election`]). Delivered only
    /// to subscribers that ask for it by name (Observe streams).
    Candidate,
}

impl EventKind {
    /// Whether events of this kind are the server's own signals, never
    /// sent to a watch and delivered only to subscribers that ask.
    pub fn is_internal(self) -> bool {
        matches!(self, EventKind::Turn | EventKind::Candidate)
    }
}

/// One lease event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The lease name (empty for `SnapshotComplete`).
    pub name: String,
    /// The bucket revision of the change.
    pub revision: u64,
    /// The holder concerned, where known.
    pub holder: String,
    /// The fencing token concerned, where known (0 when not).
    pub token: u64,
    /// The full holding for `Current`, `Acquired` and `Renewed`, shared
    /// with the mirror (never copied per watcher).
    pub holding: Option<Arc<Holding>>,
    /// When the change was stored, Unix milliseconds.
    pub time_ms: u64,
    /// The semaphore slot concerned; 0 for a plain lease.
    pub slot: u32,
    /// For `Missed`: the last revision of the name the watcher saw (0: it
    /// saw none); 0 for every other kind.
    pub missed_after: u64,
}

impl Event {
    /// The end-of-snapshot marker.
    pub fn snapshot_complete() -> Event {
        Event {
            kind: EventKind::SnapshotComplete,
            name: String::new(),
            revision: 0,
            holder: String::new(),
            token: 0,
            holding: None,
            time_ms: 0,
            slot: 0,
            missed_after: 0,
        }
    }

    /// A `Current` event for a live holding.
    pub fn current(h: &Arc<Holding>) -> Event {
        Event {
            kind: EventKind::Current,
            name: h.name.clone(),
            revision: h.revision,
            holder: h.record.holder.clone(),
            token: h.token,
            holding: Some(h.clone()),
            time_ms: h.record.renewed_ms,
            slot: h.slot,
            missed_after: 0,
        }
    }

    /// The same event shown under `name` and `slot`: a semaphore slot's
    /// change, read under the slot's key, is shown as slot `slot` of
    /// semaphore `name` (a plain lease keeps its name and slot 0).
    pub fn shown(self, name: &str, slot: u32) -> Event {
        if slot == 0 {
            return self;
        }
        Event {
            name: name.to_string(),
            slot,
            holding: self
                .holding
                .map(|h| Arc::new(Holding::clone(&h).in_slot(name, slot))),
            ..self
        }
    }

    /// Roughly how many bytes this event holds (its strings and holding),
    /// for the watch buffer budgets.
    pub fn weight(&self) -> usize {
        let holding = self.holding.as_ref().map_or(0, |h| {
            std::mem::size_of::<Holding>()
                + h.name.len()
                + h.record.holder.len()
                + h.record.key_sha256.len()
                + h.record
                    .metadata
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 48)
                    .sum::<usize>()
                + h.record.group.iter().map(|n| n.len() + 24).sum::<usize>()
        });
        std::mem::size_of::<Event>() + self.name.len() + self.holder.len() + holding
    }
}

/// What a subscription follows: one name, or every name under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Exactly this name.
    Name(String),
    /// Every name starting with this prefix followed by '.' (empty: all).
    Subtree(String),
}

impl Filter {
    /// Parses a validated watch target: `name`, `prefix.>` or `>`.
    pub fn parse(target: &str) -> Filter {
        if target == ">" {
            Filter::Subtree(String::new())
        } else if let Some(prefix) = target.strip_suffix(".>") {
            Filter::Subtree(prefix.to_string())
        } else {
            Filter::Name(target.to_string())
        }
    }

    /// Whether `name` is followed.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Filter::Name(n) => n == name,
            Filter::Subtree(p) if p.is_empty() => true,
            Filter::Subtree(p) => {
                name.len() > p.len() + 1
                    && name.starts_with(p.as_str())
                    && name.as_bytes()[p.len()] == b'.'
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Filters match a name or the names strictly below a prefix.
    #[test]
    fn filters() {
        assert!(Filter::parse("a.b").matches("a.b"));
        assert!(!Filter::parse("a.b").matches("a.b.c"));
        assert!(Filter::parse("a.>").matches("a.b.c"));
        assert!(!Filter::parse("a.>").matches("a"));
        assert!(!Filter::parse("a.>").matches("ab.c"));
        assert!(Filter::parse(">").matches("x"));
    }
}
