//! The slot view: every semaphore's slots and definition as the shared
//! watcher sees them in the bucket's messages, so that the head of a
//! semaphore's queue takes a free slot with one conditional write instead
//! of reading the slot and the definition from the stream leader first
//! (see [`crate::lease::semaphore`] for the slots themselves).
//!
//! The view can *vouch* for a free slot: give its revision, to write the
//! holding over, with the definition in force. It does so only for a slot
//! and a definition whose last messages it applied at or before a moment
//! at which the watcher had read everything the stream held (its consumer
//! delivered a message with nothing pending behind it: the queue view's
//! `complete`). What the view shows for those two keys is then exactly the
//! stream at that revision, K: the definition says the limit asked for,
//! and the slot, within it, is free at revision r. A write of the slot
//! conditional on r stores only if nothing was written to the slot since
//! K; and every change of the limit after K (a new definition, or the
//! sweep's removal) writes a tombstone over every free slot of the limit
//! it replaces, this one included, in its batch. So the write stores only
//! if the limit of K is still in force, exactly as a write after reading
//! the slot and then the definition from the leader (design section 19).
//! A slot with no message (revision 0) is never vouched for: a write over
//! "no message" could land after a removal's tombstones aged out, which
//! only a read younger than half the marker TTL rules out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Which slot the head of a semaphore's queue should try, as the view sees
/// the semaphore's slots ([`SlotView::free_slot`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotHint {
    /// The view is not live: read every slot.
    Unknown,
    /// The caller (holder and key hash) holds this slot already.
    Mine(u32),
    /// A free slot under the limit asked for, with its revision, as the
    /// stream held them at one moment: write the holding over it, with no
    /// read (a stale one fails the write).
    Vouched {
        /// The slot.
        slot: u32,
        /// Its last revision.
        revision: u64,
    },
    /// These slots hold no record (maybe none); read one before writing.
    Free(Vec<u32>),
}

/// The semaphores as the watcher has seen them, for those with a live
/// definition or a held slot (bounded by the bucket's semaphore keys, as
/// the watcher's mirror is by all keys).
#[derive(Debug, Default)]
pub struct SlotView {
    /// semaphore → what the view has seen of it.
    semaphores: Mutex<HashMap<String, Seen>>,
}

/// One semaphore as the view has seen it.
#[derive(Debug, Default)]
struct Seen {
    /// The definition's revision and limit, while it is live.
    definition: Option<(u64, u32)>,
    /// Each slot whose last message the view applied while it kept the
    /// semaphore, by slot.
    slots: HashMap<u32, Slot>,
}

/// One slot's last message as the view applied it.
#[derive(Debug)]
struct Slot {
    /// Its revision.
    revision: u64,
    /// The holder and key hash of the record it holds; `None`: free (a
    /// release, an expiry marker, a revoke, a limit change's tombstone).
    holder: Option<(String, String)>,
}

impl Seen {
    /// Whether anything of the semaphore is worth keeping.
    fn kept(&self) -> bool {
        self.definition.is_some() || self.slots.values().any(|s| s.holder.is_some())
    }
}

impl SlotView {
    /// Applies the message at `revision` of semaphore `name`'s slot
    /// `slot`: `held` is its record's holder and key hash when the message
    /// is a holding.
    pub fn apply_slot(&self, name: &str, slot: u32, revision: u64, held: Option<(&str, &str)>) {
        let mut sems = self.semaphores.lock().unwrap_or_else(|e| e.into_inner());
        let holder = held.map(|(h, k)| (h.to_string(), k.to_string()));
        match sems.get_mut(name) {
            Some(seen) => {
                seen.slots.insert(slot, Slot { revision, holder });
                if !seen.kept() {
                    sems.remove(name);
                }
            }
            // A free slot of a semaphore the view does not keep is not
            // worth keeping (the semaphore may be gone).
            None if holder.is_none() => {}
            None => {
                let mut seen = Seen::default();
                seen.slots.insert(slot, Slot { revision, holder });
                sems.insert(name.to_string(), seen);
            }
        }
    }

    /// Applies the message at `revision` of semaphore `name`'s definition:
    /// `limit` when it defines one, `None` for a tombstone (the sweep's
    /// removal) or a value that is no definition.
    pub fn apply_definition(&self, name: &str, revision: u64, limit: Option<u32>) {
        let mut sems = self.semaphores.lock().unwrap_or_else(|e| e.into_inner());
        let seen = sems.entry(name.to_string()).or_default();
        seen.definition = limit.map(|l| (revision, l));
        if !seen.kept() {
            sems.remove(name);
        }
    }

    /// Which of slots 1 to `open` of semaphore `name` the head of its
    /// queue should take: the caller's own (a retried Acquire, `holder`
    /// with key hash `key`), else a free one the view vouches for under
    /// `limit` (when `vouch`; see the module doc: every revision involved
    /// at most `complete`, the last moment at which the watcher had read
    /// everything), else those holding no record. A head is the head once
    /// the view was complete after its ticket's last write, so the view
    /// has applied every grant made before that, its own included.
    pub fn free_slot(&self, name: &str, want: Want<'_>, complete: &AtomicU64) -> SlotHint {
        let sems = self.semaphores.lock().unwrap_or_else(|e| e.into_inner());
        // Read while nothing can be applied (the watcher applies a
        // message before it marks a moment complete, and a fresh start
        // resets the moment before it forgets the slots): every slot
        // message at or before it is in `sems`.
        let complete = complete.load(Ordering::Acquire);
        let Some(seen) = sems.get(name) else {
            return SlotHint::Free((1..=want.open).collect());
        };
        let mine = seen.slots.iter().find(|(slot, s)| {
            **slot <= want.open
                && s.holder
                    .as_ref()
                    .is_some_and(|(h, k)| h == want.holder && k == want.key)
        });
        if let Some((&slot, _)) = mine {
            return SlotHint::Mine(slot);
        }
        let free: Vec<u32> = (1..=want.open)
            .filter(|s| seen.slots.get(s).is_none_or(|s| s.holder.is_none()))
            .collect();
        let vouched: Vec<(u32, u64)> = match seen.definition {
            Some((revision, limit))
                if want.vouch && limit == want.limit && revision <= complete =>
            {
                free.iter()
                    .filter(|s| **s <= limit)
                    .filter_map(|s| seen.slots.get(s).map(|seen| (*s, seen.revision)))
                    .filter(|(_, revision)| *revision > 0 && *revision <= complete)
                    .collect()
            }
            _ => Vec::new(),
        };
        match vouched.as_slice() {
            [] => SlotHint::Free(free),
            // A random one, so that heads on two replicas rarely pick the
            // same.
            v => {
                let (slot, revision) = v[rand::random_range(0..v.len())];
                SlotHint::Vouched { slot, revision }
            }
        }
    }

    /// Forgets everything (the watcher stops or starts a fresh load).
    pub fn clear(&self) {
        self.semaphores
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// What the head of a semaphore's queue asks the view for
/// ([`SlotView::free_slot`]).
#[derive(Debug, Clone, Copy)]
pub struct Want<'a> {
    /// The slots it may take: 1 to this.
    pub open: u32,
    /// The limit it asks for.
    pub limit: u32,
    /// Its holder.
    pub holder: &'a str,
    /// Its lease key's hash (hex).
    pub key: &'a str,
    /// Whether a vouched slot may be named.
    pub vouch: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(open: u32, holder: &'static str, key: &'static str) -> Want<'static> {
        Want {
            open,
            limit: open,
            holder,
            key,
            vouch: true,
        }
    }

    /// The head is told which slots hold no record, or its own slot (a
    /// retried Acquire).
    #[test]
    fn the_view_knows_the_free_slots_of_a_semaphore() {
        let view = SlotView::default();
        let unvouched = |view: &SlotView, w: Want<'_>| view.free_slot("s", w, &AtomicU64::new(0));
        assert_eq!(
            unvouched(&view, want(3, "a", "k")),
            SlotHint::Free(vec![1, 2, 3])
        );
        view.apply_slot("s", 2, 10, Some(("b", "kb")));
        view.apply_slot("s", 3, 11, Some(("a", "k")));
        assert_eq!(unvouched(&view, want(3, "a", "k")), SlotHint::Mine(3));
        assert_eq!(
            unvouched(&view, want(3, "a", "other")),
            SlotHint::Free(vec![1])
        );
        assert_eq!(
            unvouched(&view, want(2, "a", "k")),
            SlotHint::Free(vec![1]),
            "3 is past the limit"
        );
        view.apply_slot("s", 3, 12, None);
        view.apply_slot("s", 1, 13, Some(("c", "kc")));
        assert_eq!(unvouched(&view, want(3, "a", "k")), SlotHint::Free(vec![3]));
        view.apply_slot("s", 3, 14, Some(("d", "kd")));
        assert_eq!(unvouched(&view, want(3, "a", "k")), SlotHint::Free(vec![]));
        view.clear();
        assert_eq!(
            unvouched(&view, want(3, "a", "k")),
            SlotHint::Free(vec![1, 2, 3]),
            "forgotten"
        );
    }

    /// A free slot is vouched for only with the definition of the limit
    /// asked for, a revision above 0, and both at most the last complete
    /// moment; a semaphore with neither a definition nor a holder is not
    /// kept.
    #[test]
    fn a_free_slot_is_vouched_for_only_as_the_stream_held_it_at_a_complete_moment() {
        let view = SlotView::default();
        view.apply_definition("s", 10, Some(2));
        view.apply_slot("s", 1, 11, Some(("a", "ka")));
        view.apply_slot("s", 2, 12, Some(("b", "kb")));
        view.apply_slot("s", 2, 13, None);
        let vouched = SlotHint::Vouched {
            slot: 2,
            revision: 13,
        };
        assert_eq!(
            view.free_slot("s", want(2, "c", "kc"), &AtomicU64::new(13)),
            vouched
        );
        assert_eq!(
            view.free_slot("s", want(2, "c", "kc"), &AtomicU64::new(12)),
            SlotHint::Free(vec![2]),
            "the slot's release is after the complete moment"
        );
        let other_limit = Want {
            limit: 3,
            open: 3,
            ..want(2, "c", "kc")
        };
        assert_eq!(
            view.free_slot("s", other_limit, &AtomicU64::new(13)),
            SlotHint::Free(vec![2, 3]),
            "another limit"
        );
        let no_vouch = Want {
            vouch: false,
            ..want(2, "c", "kc")
        };
        assert_eq!(
            view.free_slot("s", no_vouch, &AtomicU64::new(13)),
            SlotHint::Free(vec![2])
        );
        // A new definition after the complete moment: not vouched.
        view.apply_definition("s", 14, Some(2));
        assert_eq!(
            view.free_slot("s", want(2, "c", "kc"), &AtomicU64::new(13)),
            SlotHint::Free(vec![2])
        );
        assert_eq!(
            view.free_slot("s", want(2, "c", "kc"), &AtomicU64::new(14)),
            vouched
        );
        // The sweep's removal: tombstones over the definition and the
        // slots; nothing is kept once nothing is held.
        view.apply_slot("s", 1, 15, None);
        view.apply_definition("s", 16, None);
        assert!(view.semaphores.lock().unwrap().is_empty());
        view.apply_slot("s", 2, 17, None);
        assert!(view.semaphores.lock().unwrap().is_empty(), "not kept");
        // A slot the view has no message of is never vouched for.
        view.apply_definition("s", 18, Some(2));
        view.apply_slot("s", 1, 19, Some(("a", "ka")));
        assert_eq!(
            view.free_slot("s", want(2, "c", "kc"), &AtomicU64::new(19)),
            SlotHint::Free(vec![2])
        );
    }
}
