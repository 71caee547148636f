//! The key cache: the record this replica last wrote or read per name, with
//! its revision.
//!
//! A message at a given revision never changes, so an entry cannot be
//! wrong about that revision; it lets a renewal or release through the same
//! replica skip the leader read. An entry that is no longer the name's last
//! message only costs a failed compare-and-set and a read: the write's
//! condition, not the cache, decides.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::record::Record;

/// name → (revision, record at that revision), bounded.
#[derive(Default)]
pub struct KeyCache {
    /// name → (revision, record at that revision).
    entries: Mutex<HashMap<String, (u64, Arc<Record>)>>,
}

impl KeyCache {
    /// Most names remembered; the map is cleared when it grows past this.
    const CAPACITY: usize = 100_000;

    /// The record of `name` at exactly `revision`, if remembered.
    pub fn get(&self, name: &str, revision: u64) -> Option<Arc<Record>> {
        let entries = self.entries.lock().expect("cache lock");
        match entries.get(name) {
            Some((rev, rec)) if *rev == revision => Some(rec.clone()),
            _ => None,
        }
    }

    /// Remembers the record of `name` at `revision`.
    pub fn insert(&self, name: &str, revision: u64, record: &Record) {
        let mut entries = self.entries.lock().expect("cache lock");
        if entries.len() >= Self::CAPACITY && !entries.contains_key(name) {
            entries.clear();
        }
        entries.insert(name.to_string(), (revision, Arc::new(record.clone())));
    }

    /// Forgets `name`.
    pub fn remove(&self, name: &str) {
        self.entries.lock().expect("cache lock").remove(name);
    }
}

/// Names this replica took through an Acquire without a wait and then
/// released, with the revision of the release: the next Acquire of such a
/// name takes that tombstone as the name's last message and skips the
/// lease read. As with [`KeyCache`], a message at a revision never changes,
/// so a hint is either still the truth or fails the write's condition.
#[derive(Default)]
pub struct FreeHints {
    /// name → the revision of this replica's release of it (`None`: taken,
    /// not released yet).
    entries: Mutex<HashMap<String, Option<u64>>>,
}

impl FreeHints {
    /// Most names remembered; the map is cleared when it grows past this.
    const CAPACITY: usize = 100_000;

    /// The revision of this replica's release of `name`, if that is the
    /// last thing it knows of it.
    pub fn released_at(&self, name: &str) -> Option<u64> {
        *self.entries.lock().expect("hints lock").get(name)?
    }

    /// This replica took `name`.
    pub fn acquired(&self, name: &str) {
        let mut entries = self.entries.lock().expect("hints lock");
        if entries.len() >= Self::CAPACITY && !entries.contains_key(name) {
            entries.clear();
        }
        entries.insert(name.to_string(), None);
    }

    /// This replica released `name` at `revision`.
    pub fn released(&self, name: &str, revision: u64) {
        let mut entries = self.entries.lock().expect("hints lock");
        if let Some(entry) = entries.get_mut(name) {
            *entry = Some(revision);
        }
    }

    /// Forgets `name` (a hint failed its condition, or someone else wrote).
    pub fn forget(&self, name: &str) {
        self.entries.lock().expect("hints lock").remove(name);
    }
}

/// Names whose line (lease record and queue, `keys::line_filter`) this
/// replica wrote last, with a write conditional on the whole line made
/// from a state with no live ticket: at that revision the record was what
/// this replica wrote and nobody was queued. The next write conditional on
/// the line at that revision needs no read: a plain Acquire over this
/// replica's release, a release of this replica's grant (design section
/// 16, "One write"). Anything written to the line since fails that
/// write's condition, and the writer reads.
#[derive(Default)]
pub struct Lines {
    /// name → what this replica wrote last on its line.
    entries: Mutex<HashMap<String, Line>>,
}

/// This replica's last write on a name's line, with nobody queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    /// Its revision: the line's last revision when it was written.
    pub last: u64,
    /// Whether it freed the lease (a release) rather than took it (a
    /// grant, `false`).
    pub free: bool,
}

impl Lines {
    /// Most names remembered; the map is cleared when it grows past this.
    const CAPACITY: usize = 100_000;

    /// What this replica wrote last on `name`'s line, if it knows.
    pub fn get(&self, name: &str) -> Option<Line> {
        self.entries.lock().expect("lines lock").get(name).copied()
    }

    /// This replica wrote `line` on `name`'s line, conditional on the line.
    pub fn set(&self, name: &str, line: Line) {
        let mut entries = self.entries.lock().expect("lines lock");
        if entries.len() >= Self::CAPACITY && !entries.contains_key(name) {
            entries.clear();
        }
        entries.insert(name.to_string(), line);
    }

    /// Forgets `name` (its line changed since).
    pub fn forget(&self, name: &str) {
        self.entries.lock().expect("lines lock").remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::record::fixtures;

    fn record(holder: &str) -> Record {
        fixtures::record(holder, "fixture-lease-key", 0)
    }

    /// An entry answers only for its exact revision, and is forgotten on
    /// request.
    #[test]
    fn answers_only_for_the_exact_revision() {
        let cache = KeyCache::default();
        cache.insert("a", 5, &record("h"));
        assert_eq!(cache.get("a", 5).unwrap().holder, "h");
        assert!(cache.get("a", 4).is_none());
        assert!(cache.get("a", 6).is_none());
        cache.insert("a", 6, &record("g"));
        assert!(cache.get("a", 5).is_none(), "a newer write replaces it");
        cache.remove("a");
        assert!(cache.get("a", 6).is_none());
    }

    /// A line is what was set last, until forgotten.
    #[test]
    fn lines_keep_the_last_write() {
        let lines = Lines::default();
        assert_eq!(lines.get("a"), None);
        lines.set(
            "a",
            Line {
                last: 4,
                free: false,
            },
        );
        lines.set(
            "a",
            Line {
                last: 5,
                free: true,
            },
        );
        assert_eq!(
            lines.get("a"),
            Some(Line {
                last: 5,
                free: true
            })
        );
        lines.forget("a");
        assert_eq!(lines.get("a"), None);
    }

    /// A hint exists only between this replica's Acquire and its release,
    /// and is gone once forgotten.
    #[test]
    fn free_hints_follow_acquire_then_release() {
        let hints = FreeHints::default();
        hints.released("a", 9);
        assert_eq!(
            hints.released_at("a"),
            None,
            "released without an acquire seen"
        );
        hints.acquired("a");
        assert_eq!(hints.released_at("a"), None, "held, not free");
        hints.released("a", 9);
        assert_eq!(hints.released_at("a"), Some(9));
        hints.forget("a");
        assert_eq!(hints.released_at("a"), None);
    }
}
