//! Fair (first-come-first-served) waiting: the queue of waiter tickets of a
//! name, kept in the bucket so that every replica serving it sees one queue
//! and no replica holds queue state of its own.
//!
//! A waiting Acquire writes a ticket in one of the name's queue slots,
//! `_tenure.q.<name>.<slot>` (slot `0..max_waiters`; the `_tenure` level is
//! not a lease name, so tickets never collide with leases and never show as
//! leases). Its place is the revision of its first write: the ticket stores
//! it (0 in that first write: "this revision", like a lease's token), so the
//! refreshes that keep the ticket alive (conditional rewrites with a TTL)
//! keep its place. The head is the live ticket with the lowest place. Only
//! the head writes the lease, in one atomic batch that also deletes its
//! ticket; an Acquire without a wait writes only when no ticket is live, and
//! its write is conditional on the queue's last revision (through the guard
//! key `_tenure.q.<name>.plain`, written in the same batch), so it never
//! jumps a waiter that queued meanwhile. `model/fifo.pml` checks this design.
//!
//! Each replica's shared watcher keeps a [`QueueView`] of the live tickets,
//! from the same bucket messages it mirrors leases from: it lets a waiter
//! know it is not the head without a read (so a release wakes one writer,
//! not a herd of readers) and find a free slot without a scan. The view
//! picks who tries; the conditional writes decide.
//!
//! Slots bound the queue structurally (at most `max_waiters` tickets, and a
//! scan of the queue reads at most that many keys plus the guard), and a
//! new ticket reuses a slot whose last ticket is gone, so the tombstones of
//! granted or departed waiters do not pile up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use serde::{Deserialize, Serialize};

use super::rules::RESERVED;
use crate::error::Result;
use crate::nats::{Op, Store, Write, WriteOp};

/// The TTL of a ticket: a waiter that stops refreshing (its replica died)
/// leaves the queue at most this long after its last refresh.
pub const TICKET_TTL: Duration = Duration::from_secs(5);
/// How often a waiter rewrites its ticket: twice per TTL and then some, so
/// one slow or lost refresh does not drop a live waiter.
pub const TICKET_REFRESH: Duration = Duration::from_secs(2);
/// The last level of the guard key (never a slot number).
const GUARD: &str = "plain";

/// The key of queue slot `slot` of lease `name`.
pub fn slot_key(name: &str, slot: usize) -> String {
    format!("{RESERVED}.q.{name}.{slot}")
}

/// The KV wildcard that matches every key of the queue of `name` (slots and
/// guard): one level below `_tenure.q.<name>`, never a deeper name's queue.
pub fn queue_filter(name: &str) -> String {
    format!("{RESERVED}.q.{name}.*")
}

/// The value of a ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketRecord {
    /// The waiter's place: the revision of the ticket's first write (0 in
    /// that write itself).
    pub place: u64,
    /// Who waits (informational, for `nats kv get`).
    pub holder: String,
}

impl TicketRecord {
    /// The JSON bytes of the ticket.
    pub fn encode(&self) -> Bytes {
        serde_json::to_vec(self)
            .expect("a ticket always serialises")
            .into()
    }
}

/// One live ticket as the queue shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    /// Its slot.
    pub slot: usize,
    /// Its last revision.
    pub revision: u64,
    /// Its place.
    pub place: u64,
}

/// The queue of one name, read from the stream leader.
#[derive(Debug, Default)]
pub struct Queue {
    /// The live tickets.
    pub live: Vec<Live>,
    /// The last revision of each slot that has a message, by slot.
    pub slots: Vec<(usize, u64)>,
    /// The last revision of any key of the queue (0: none): what a write
    /// conditional on "no change to the queue" names.
    pub last: u64,
}

impl Queue {
    /// Reads the queue of `name`. Every key under the queue's wildcard that
    /// is not a slot or the guard (written by something else) is ignored.
    ///
    /// The scan reads one message at a time in revision order, so a slot
    /// rewritten during it (a refresh, a grant) can show twice: its later
    /// message wins. Each slot is thus seen as it was at some moment of the
    /// scan, and a ticket ahead of the reader's (written before it) is seen
    /// live unless it was gone by then.
    pub async fn read(store: &Store, name: &str, max_waiters: usize) -> Result<Queue> {
        // Slots past max_waiters may exist (another replica with a higher
        // limit): read them too, up to a hard cap.
        let cap = max_waiters.saturating_mul(2).saturating_add(8);
        let (messages, _) = store.scan(&queue_filter(name), cap).await?;
        let prefix = format!("{RESERVED}.q.{name}.");
        let mut queue = Queue::default();
        for msg in messages {
            queue.last = queue.last.max(msg.revision);
            let Some(level) = msg.name.strip_prefix(&prefix) else {
                continue;
            };
            if level == GUARD {
                continue;
            }
            let Ok(slot) = level.parse::<usize>() else {
                continue;
            };
            queue.slots.retain(|(s, _)| *s != slot);
            queue.live.retain(|t| t.slot != slot);
            queue.slots.push((slot, msg.revision));
            if let Op::Put(payload) = &msg.op {
                if let Ok(ticket) = serde_json::from_slice::<TicketRecord>(payload) {
                    let place = if ticket.place == 0 {
                        msg.revision
                    } else {
                        ticket.place
                    };
                    queue.live.push(Live {
                        slot,
                        revision: msg.revision,
                        place,
                    });
                }
            }
        }
        Ok(queue)
    }

    /// How many waiters are queued.
    pub fn waiting(&self) -> usize {
        self.live.len()
    }

    /// How many live tickets are ahead of the one with `place`.
    pub fn ahead_of(&self, place: u64) -> usize {
        self.live.iter().filter(|t| t.place < place).count()
    }

    /// Whether the ticket in `slot` is live at exactly `revision`.
    pub fn holds(&self, slot: usize, revision: u64) -> bool {
        self.live
            .iter()
            .any(|t| t.slot == slot && t.revision == revision)
    }

    /// The slots below `max_waiters` with no live ticket, in order from
    /// `start` (so that concurrent waiters spread over the free slots), each
    /// with the revision a write into it must name.
    pub fn free_slots(&self, max_waiters: usize, start: usize) -> Vec<(usize, u64)> {
        (0..max_waiters)
            .map(|i| (start + i) % max_waiters)
            .filter(|slot| !self.live.iter().any(|t| t.slot == *slot))
            .map(|slot| {
                let expected = self
                    .slots
                    .iter()
                    .find(|(s, _)| *s == slot)
                    .map_or(0, |(_, r)| *r);
                (slot, expected)
            })
            .collect()
    }

    /// The guard write of a group's member (an AcquireGroup is one atomic
    /// batch anyway): a tombstone on the guard key, conditional on the
    /// queue's last revision, so the batch that carries it fails if any
    /// ticket was written or removed since this queue was read.
    pub fn guard(&self, name: &str) -> Write {
        Write {
            name: format!("{RESERVED}.q.{name}.{GUARD}"),
            op: WriteOp::Delete,
            payload: Bytes::new(),
            expected: Some(self.last),
            expected_of: Some(queue_filter(name)),
            ttl: Duration::ZERO,
        }
    }
}

/// Whether a queued waiter may take the lease now, as the shared watcher's
/// view of the queue says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Its ticket is the head: no live ticket has an earlier place.
    Mine,
    /// A live ticket with an earlier place is ahead of it.
    NotMine,
    /// The view cannot tell (it has not applied the waiter's ticket yet,
    /// or does not hold it): read the queue from the stream leader.
    Unknown,
}

/// The live tickets of every queue, kept by the shared watcher from the
/// bucket's messages, so that a waiter learns whether it is the head
/// without reading the queue from the stream leader: when a lease frees,
/// only the head tries to take it and every other waiter stays asleep.
///
/// The view is as good as a queue read made at its position: a ticket
/// ahead of a waiter's was written before the waiter's (its place is
/// lower), so once the view has applied the waiter's ticket it has applied
/// every ticket ahead of it, and each one it still shows live was live at
/// that position. Whatever it says, a grant is a batch conditional on the
/// waiter's own ticket and on the lease's last revision. It holds only
/// live tickets (bounded by the queues' slots), and nothing while the
/// watcher is idle.
#[derive(Debug, Default)]
pub struct QueueView {
    /// The bucket revision the view has applied, once the watcher's
    /// initial load is done (0: not live, trust nothing).
    position: AtomicU64,
    /// name → its queue, for names with a live ticket.
    tickets: Mutex<HashMap<String, Seen>>,
}

/// One queue as the view has seen it.
#[derive(Debug, Default)]
struct Seen {
    /// The live tickets.
    live: Vec<Live>,
    /// slot → the revision of its last message the view saw (a ticket, a
    /// tombstone, a marker), for slots seen since the queue last had a live
    /// ticket: where a new ticket can go without a scan.
    slots: HashMap<usize, u64>,
    /// The revision of the lease's last message when the view saw it
    /// released (and nothing written to the lease since); `None` otherwise.
    released_at: Option<u64>,
}

impl QueueView {
    /// Applies the message at `revision` to key `key` if it is a queue
    /// slot: `place` is the ticket's place when it is a live ticket, `None`
    /// when the slot is emptied (a grant, a departure, an expiry marker).
    /// Returns the lease name whose queue lost a live ticket, if any.
    pub fn apply(&self, key: &str, revision: u64, op: &Op) -> Option<String> {
        let (name, slot) = parse_slot_key(key)?;
        let place = match op {
            Op::Put(payload) => serde_json::from_slice::<TicketRecord>(payload)
                .ok()
                .map(|t| if t.place == 0 { revision } else { t.place }),
            _ => None,
        };
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let seen = tickets.entry(name.to_string()).or_default();
        seen.slots.insert(slot, revision);
        let before = seen.live.len();
        seen.live.retain(|t| t.slot != slot);
        let removed = seen.live.len() < before;
        if let Some(place) = place {
            seen.live.push(Live {
                slot,
                revision,
                place,
            });
        } else if seen.live.is_empty() {
            tickets.remove(name);
        }
        (removed && place.is_none()).then(|| name.to_string())
    }

    /// Applies the lease message at `revision` of `name`: whether it is a
    /// release (the head may write over it without reading it). Kept only
    /// for names with a live ticket.
    pub fn apply_lease(&self, name: &str, revision: u64, released: bool) {
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(seen) = tickets.get_mut(name) {
            seen.released_at = released.then_some(revision);
        }
    }

    /// The revision of `name`'s release, if that is the last lease message
    /// the view saw (and it is live).
    pub fn released_at(&self, name: &str) -> Option<u64> {
        if self.position.load(Ordering::Acquire) == 0 {
            return None;
        }
        let tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        tickets.get(name)?.released_at
    }

    /// How many live tickets the view shows for `name` (0 also when it is
    /// not live).
    pub fn waiting(&self, name: &str) -> usize {
        if self.position.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        tickets.get(name).map_or(0, |q| q.live.len())
    }

    /// Slots below `max_waiters` of `name`'s queue that the view saw emptied
    /// and not taken since, from `start` on, each with the revision a ticket
    /// written into it must name (a stale one fails that write).
    pub fn free_slots(&self, name: &str, max_waiters: usize, start: usize) -> Vec<(usize, u64)> {
        if self.position.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let Some(seen) = tickets.get(name) else {
            return Vec::new();
        };
        let mut free: Vec<(usize, u64)> = seen
            .slots
            .iter()
            .filter(|(slot, _)| **slot < max_waiters && !seen.live.iter().any(|t| t.slot == **slot))
            .map(|(slot, revision)| (*slot, *revision))
            .collect();
        free.sort_by_key(|(slot, _)| (slot + max_waiters - start % max_waiters) % max_waiters);
        free
    }

    /// Marks the view as applied up to `position` (0: not live).
    pub fn set_position(&self, position: u64) {
        self.position.store(position, Ordering::Release);
    }

    /// Forgets everything (the watcher stops or starts a fresh load).
    pub fn clear(&self) {
        self.position.store(0, Ordering::Release);
        self.tickets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Whether `name`'s queue has a live ticket.
    pub fn has_waiters(&self, name: &str) -> bool {
        self.tickets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .is_some_and(|q| !q.live.is_empty())
    }

    /// Whose turn it is for the waiter of `name` whose ticket has `place`
    /// and was last written at `revision`.
    ///
    /// A live ticket with a lower place means not yet, however far the view
    /// has got: that ticket was live when the view applied it, and whatever
    /// ends it (a grant, then an end of that holding; a departure, a turn)
    /// is applied later and wakes the waiter again. "Mine" needs the view to
    /// have applied the waiter's own ticket, and so every ticket ahead of it.
    pub fn turn(&self, name: &str, place: u64, revision: u64) -> Turn {
        // The position first: the tickets read after it are at least as
        // new as it says.
        let position = self.position.load(Ordering::Acquire);
        if position == 0 {
            return Turn::Unknown;
        }
        let tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let Some(seen) = tickets.get(name) else {
            return Turn::Unknown;
        };
        if seen.live.iter().any(|t| t.place < place) {
            return Turn::NotMine;
        }
        if position < revision || !seen.live.iter().any(|t| t.place == place) {
            return Turn::Unknown;
        }
        Turn::Mine
    }
}

/// The lease name and slot of a queue slot key (`None` for the guard and
/// every other key).
fn parse_slot_key(key: &str) -> Option<(&str, usize)> {
    let rest = key.strip_prefix(RESERVED)?.strip_prefix(".q.")?;
    let (name, slot) = rest.rsplit_once('.')?;
    Some((name, slot.parse().ok()?))
}

/// One queue read, awaited by every waiter that shares it.
type SharedRead = Shared<BoxFuture<'static, Result<Arc<Queue>>>>;

/// The queue reads of waiters that are queueing, in flight on this replica,
/// by name: waiters of one name that queue at the same time share one read
/// instead of each scanning the queue. A shared read may have begun just
/// before the caller asked, which is safe here: every ticket write names
/// the revision of the slot it takes, so a slot taken meanwhile fails the
/// write, and a refusal (every slot live) is retryable. The head check never
/// uses it (it needs a read made after its own ticket).
#[derive(Default)]
pub struct SharedReads {
    /// The read in flight for each name.
    inflight: Mutex<HashMap<String, SharedRead>>,
}

impl SharedReads {
    /// The queue of `name`: the read in flight, or a new one.
    pub async fn read(&self, store: &Store, name: &str, max_waiters: usize) -> Result<Arc<Queue>> {
        let read = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            inflight
                .entry(name.to_string())
                .or_insert_with(|| {
                    let (store, name) = (store.clone(), name.to_string());
                    async move { Queue::read(&store, &name, max_waiters).await.map(Arc::new) }
                        .boxed()
                        .shared()
                })
                .clone()
        };
        let queue = read.clone().await;
        // The first caller back retires the read, so later callers start a
        // new one (at most one entry per name with a read in flight).
        let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if inflight.get(name).is_some_and(|r| r.ptr_eq(&read)) {
            inflight.remove(name);
        }
        queue
    }
}

/// A waiter's ticket while it waits. Dropping it (the call was cancelled:
/// the client went away or its deadline passed) removes the ticket in the
/// background, so the next waiter need not wait for the TTL.
pub struct Ticket {
    /// The bucket.
    pub store: Store,
    /// The ticket's key.
    pub key: String,
    /// Its slot.
    pub slot: usize,
    /// Its last revision.
    pub revision: u64,
    /// The waiter's place.
    pub place: u64,
    /// Whether the ticket is still in the bucket as far as we know (a grant
    /// deleted it otherwise).
    pub armed: bool,
}

impl Ticket {
    /// The write that removes the ticket in the grant's batch.
    pub fn grant_write(&self) -> Write {
        Write {
            name: self.key.clone(),
            op: WriteOp::Delete,
            payload: Bytes::new(),
            expected: Some(self.revision),
            expected_of: None,
            ttl: Duration::ZERO,
        }
    }

    /// Leaves the queue now (best effort: a ticket that stays expires).
    pub async fn leave(mut self) {
        self.armed = false;
        let _ = self
            .store
            .delete(&self.key, Bytes::new(), self.revision)
            .await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, key, revision) = (self.store.clone(), self.key.clone(), self.revision);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = store.delete(&key, Bytes::new(), revision).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(live: &[(usize, u64, u64)], slots: &[(usize, u64)]) -> Queue {
        Queue {
            live: live
                .iter()
                .map(|&(slot, revision, place)| Live {
                    slot,
                    revision,
                    place,
                })
                .collect(),
            slots: slots.to_vec(),
            last: 0,
        }
    }

    /// The place, not the last revision, orders the queue: a refreshed
    /// ticket keeps its place ahead of later arrivals.
    #[test]
    fn orders_by_place() {
        let q = queue(&[(0, 9, 3), (1, 5, 5)], &[(0, 9), (1, 5)]);
        assert_eq!(q.ahead_of(3), 0);
        assert_eq!(q.ahead_of(5), 1);
        assert!(q.holds(0, 9));
        assert!(!q.holds(0, 3));
    }

    /// A free slot names the revision of its last message (a gone ticket),
    /// or 0; a full queue has none.
    #[test]
    fn finds_free_slots() {
        let q = queue(&[(0, 9, 3)], &[(0, 9), (1, 7)]);
        assert_eq!(q.free_slots(3, 0), vec![(1, 7), (2, 0)]);
        assert_eq!(q.free_slots(3, 2), vec![(2, 0), (1, 7)]);
        assert!(q.free_slots(1, 0).is_empty());
    }

    /// Queue keys stay under the reserved level and one level below the
    /// name, so `a`'s wildcard never matches `a.b`'s queue.
    #[test]
    fn keys() {
        assert_eq!(slot_key("a.b", 3), "_tenure.q.a.b.3");
        assert_eq!(queue_filter("a"), "_tenure.q.a.*");
        assert_eq!(parse_slot_key("_tenure.q.a.b.3"), Some(("a.b", 3)));
        assert_eq!(parse_slot_key("_tenure.q.a.b.plain"), None);
        assert_eq!(parse_slot_key("_tenure.delay.a.3"), None);
        assert_eq!(parse_slot_key("a.3"), None);
    }

    fn ticket(place: u64) -> Op {
        Op::Put(
            TicketRecord {
                place,
                holder: "h".into(),
            }
            .encode(),
        )
    }

    /// The view names the head once it has applied the waiter's ticket,
    /// keeps places across refreshes, and reports a departed ticket.
    #[test]
    fn the_view_knows_the_head() {
        let view = QueueView::default();
        assert!(view.apply(&slot_key("n", 4), 10, &ticket(0)).is_none());
        assert!(view.apply(&slot_key("n", 1), 11, &ticket(0)).is_none());
        assert_eq!(view.turn("n", 10, 10), Turn::Unknown, "not live yet");
        view.set_position(11);
        assert_eq!(view.turn("n", 10, 10), Turn::Mine);
        assert_eq!(view.turn("n", 11, 11), Turn::NotMine);
        assert_eq!(view.turn("n", 11, 12), Turn::NotMine, "10 is ahead anyway");
        assert_eq!(view.turn("n", 10, 12), Turn::Unknown, "a later write of it");
        assert_eq!(view.waiting("n"), 2);
        assert!(
            view.free_slots("n", 64, 0).is_empty(),
            "both seen slots live"
        );
        // A refresh keeps the place; the head's departure is reported.
        assert!(view.apply(&slot_key("n", 4), 12, &ticket(10)).is_none());
        view.set_position(12);
        assert_eq!(view.turn("n", 11, 11), Turn::NotMine);
        assert_eq!(
            view.apply(&slot_key("n", 4), 13, &Op::Expired).as_deref(),
            Some("n")
        );
        view.set_position(13);
        assert_eq!(view.turn("n", 11, 11), Turn::Mine);
        assert!(view.has_waiters("n"));
        assert_eq!(view.turn("n", 10, 10), Turn::Unknown, "gone");
        assert_eq!(view.free_slots("n", 64, 0), vec![(4, 13)]);
        assert_eq!(view.released_at("n"), None);
        view.apply_lease("n", 14, true);
        assert_eq!(view.released_at("n"), Some(14));
        view.apply_lease("n", 15, false);
        assert_eq!(view.released_at("n"), None, "written since");
        view.apply_lease("other", 16, true);
        assert_eq!(view.released_at("other"), None, "no queue: not kept");
        assert!(
            view.free_slots("n", 4, 0).is_empty(),
            "slot 4 is past 4 slots"
        );
        // A guard write is not a ticket; an empty queue is forgotten.
        assert!(view
            .apply("_tenure.q.n.plain", 14, &Op::Delete(Bytes::new()))
            .is_none());
        assert!(view
            .apply(&slot_key("n", 1), 15, &Op::Delete(Bytes::new()))
            .is_some());
        assert!(!view.has_waiters("n"));
        view.clear();
        assert!(view.apply(&slot_key("n", 2), 16, &ticket(0)).is_none());
        assert_eq!(view.turn("n", 16, 16), Turn::Unknown, "cleared: not live");
    }
}
