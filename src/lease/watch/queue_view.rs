//! The queue view: the live tickets of every fair queue, as the shared
//! watcher sees them in the bucket's messages, so that a waiter learns
//! whether it is the head without reading the queue from the stream leader
//! (see [`crate::lease::fifo`] for the queue itself).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::lease::fifo::{Live, Queue, TicketRecord};
use crate::lease::keys;
use crate::nats::Op;

use super::slot_view::{SlotHint, SlotView, Want};

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
/// The view is trusted to say "the head" only once it has been *complete*
/// after the waiter's ticket: its consumer delivered a message at or after
/// the ticket's last write with nothing pending behind it, i.e. it had read
/// everything the stream held at that moment. Applying the waiter's ticket
/// is not enough: the bucket keeps one message per key, so when the watcher
/// lags, an earlier waiter's ticket can be rewritten (its refresh) before
/// the watcher reads its first write; the consumer then skips that write,
/// delivers the later waiter's ticket, and only after it the refresh. Any
/// such skip leaves the refresh pending behind the later ticket, so a
/// delivery with nothing pending proves that every ticket live at that
/// moment has its last message applied (design section 16). The grant that
/// follows a "Mine" is conditional on the name's line as the view last saw
/// it (record and queue): a ticket written since fails it, but one the
/// view missed before its position would not, so the view is what keeps
/// it fair. It holds only live tickets (bounded by the queues'
/// slots), and nothing while the watcher is idle.
#[derive(Debug, Default)]
pub struct QueueView {
    /// The bucket revision the view has applied, once the watcher's
    /// initial load is done (0: not live, trust nothing).
    position: AtomicU64,
    /// The highest position at which the watcher had read everything the
    /// stream held (a message delivered with nothing pending behind it);
    /// 0: not since the view last started.
    complete: AtomicU64,
    /// name → its queue, for names with a live ticket.
    tickets: Mutex<HashMap<String, Seen>>,
    /// Waiters of this replica asleep behind another ticket, by queue and
    /// place: each is woken only when the view shows its ticket first
    /// ([`QueueView::dormant`]), not by every event of its name.
    dormant: Mutex<HashMap<String, HashMap<u64, Arc<Notify>>>>,
    /// Every semaphore's slots and definition, so that the head of a
    /// semaphore's queue takes a free slot without reading every slot
    /// ([`SlotView`]).
    slots: SlotView,
    /// Notified whenever the view's position moves (or it stops), for a
    /// ticket write that lost its race and waits for the view to show
    /// the message that won ([`QueueView::queue_after`]).
    advanced: Notify,
}

/// A lease the view last saw released, with its line's last revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The revision of the release (the record's last message).
    pub at: u64,
    /// The last revision of any key of the name's line (its record and
    /// queue) the view has applied: what the head's grant names.
    pub line: u64,
}

/// What applying one message changed in the view.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// The queue that lost a live ticket (its next waiter may be the head).
    pub left: Option<String>,
    /// The queue whose preferred election candidate changed.
    pub candidates: Option<String>,
}

/// An election candidate waiting in a queue, as Observe names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Who waits (its Campaign's holder).
    pub holder: String,
    /// Its Campaign's preference (above 0).
    pub preference: u32,
}

/// The live candidate with the highest preference above 0, the earliest
/// place among equals.
fn preferred_of(live: &[Live]) -> Option<Candidate> {
    live.iter()
        .filter(|t| t.preference > 0)
        .min_by_key(|t| (std::cmp::Reverse(t.preference), t.place))
        .map(|t| Candidate {
            holder: t.holder.clone(),
            preference: t.preference,
        })
}

/// One queue as the view has seen it.
#[derive(Debug, Default)]
struct Seen {
    /// The live tickets.
    live: Vec<Live>,
    /// The revision of the last message of any key of the queue (slots
    /// and guard) since the view began keeping it (at a ticket, the newest
    /// of the queue's messages then): what a new ticket's write names.
    last: u64,
    /// The same for the name's line: the queue and the lease record
    /// beside it ([`keys::line_filter`]): what the head's grant names.
    line: u64,
    /// The revision of the lease's last message when the view saw it
    /// released (and nothing written to the lease since); `None` otherwise.
    released_at: Option<u64>,
}

impl QueueView {
    /// Applies the message at `revision` to key `key` if it is a queue
    /// slot: a live ticket when it is a ticket's write, the slot emptied
    /// otherwise (a grant, a departure, an expiry marker). Says which
    /// queue lost a live ticket and whose preferred candidate changed.
    pub fn apply(&self, key: &str, revision: u64, op: &Op) -> Applied {
        let (name, slot) = match keys::parse_queue(key) {
            Some(keys::QueueKey::Slot(name, slot)) => (name, slot),
            Some(keys::QueueKey::Guard(name)) => {
                // A group's guard changes the queue's last revision.
                let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(seen) = tickets.get_mut(name) {
                    seen.last = seen.last.max(revision);
                    seen.line = seen.line.max(revision);
                }
                return Applied::default();
            }
            None => return Applied::default(),
        };
        let ticket = match op {
            Op::Put(payload) => serde_json::from_slice::<TicketRecord>(payload).ok(),
            _ => None,
        };
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let seen = tickets.entry(name.to_string()).or_default();
        seen.last = seen.last.max(revision);
        seen.line = seen.line.max(revision);
        // Only a candidate's ticket (preference above 0) can change who is
        // preferred; every other ticket skips the comparison.
        let was_candidate = seen.live.iter().any(|t| t.slot == slot && t.preference > 0);
        let is_candidate = ticket.as_ref().is_some_and(|t| t.preference > 0);
        let preferred_before = (was_candidate || is_candidate)
            .then(|| preferred_of(&seen.live))
            .flatten();
        let before = seen.live.len();
        seen.live.retain(|t| t.slot != slot);
        let removed = seen.live.len() < before;
        let live = ticket.is_some();
        if let Some(t) = ticket {
            seen.live.push(Live {
                slot,
                revision,
                place: if t.place == 0 { revision } else { t.place },
                // The view keeps who waits only for candidates (Observe
                // names the preferred one); other waiters need places only.
                holder: if t.preference > 0 {
                    t.holder
                } else {
                    String::new()
                },
                grant: None,
                preference: t.preference,
            });
        }
        let candidates =
            (was_candidate || is_candidate) && preferred_of(&seen.live) != preferred_before;
        let head = seen.live.iter().map(|t| t.place).min();
        if seen.live.is_empty() {
            tickets.remove(name);
        }
        drop(tickets);
        let left = removed && !live;
        if left {
            self.wake_head(name, head);
        }
        Applied {
            left: left.then(|| name.to_string()),
            candidates: candidates.then(|| name.to_string()),
        }
    }

    /// The waiting election candidate of `name` with the highest
    /// preference above 0 (the earliest of equals), as the view shows it;
    /// `None` when none waits or the view is not live.
    pub fn preferred(&self, name: &str) -> Option<Candidate> {
        if self.position.load(Ordering::Acquire) == 0 {
            return None;
        }
        let tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        preferred_of(&tickets.get(name)?.live)
    }

    /// Wakes this replica's waiter whose ticket is now first in `queue`
    /// (`head`: its place), if it sleeps dormant.
    fn wake_head(&self, queue: &str, head: Option<u64>) {
        let Some(head) = head else { return };
        let dormant = self.dormant.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(notify) = dormant.get(queue).and_then(|q| q.get(&head)) {
            notify.notify_one();
        }
    }

    /// Registers a waiter of `queue` with the ticket of `place` that sleeps
    /// behind another ticket: the returned notification fires when the
    /// view shows its ticket first (a ticket ahead left), or when the view
    /// starts over (it must then read). Dropping the guard unregisters.
    pub fn dormant(self: &Arc<Self>, queue: &str, place: u64) -> Dormant {
        let notify = Arc::new(Notify::new());
        self.dormant
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(queue.to_string())
            .or_default()
            .insert(place, notify.clone());
        Dormant {
            view: self.clone(),
            queue: queue.to_string(),
            place,
            notify,
        }
    }

    /// Applies the lease message at `revision` of `name`: whether it is a
    /// release (the head may write over it without reading it), and, the
    /// record being on the name's line ([`keys::line_filter`]), the line's
    /// last revision that the head's grant names (not the queue's: a
    /// record write fails no ticket). Kept only for names with a live
    /// ticket.
    pub fn apply_lease(&self, name: &str, revision: u64, released: bool) {
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(seen) = tickets.get_mut(name) {
            seen.released_at = released.then_some(revision);
            seen.line = seen.line.max(revision);
        }
    }

    /// The revision of `name`'s release, if that is the last lease message
    /// the view saw (and it is live), with the last revision under the
    /// name's line (record and queue) as the view has it: read together,
    /// so the head's grant names a line the release is the record of.
    pub fn released_at(&self, name: &str) -> Option<Released> {
        self.line_past(name, None).flatten()
    }

    /// Whether the view keeps `name`'s queue with its line's last revision
    /// above `after` (`None`: not, or the view is not live), and if so the
    /// release it shows ([`QueueView::released_at`]).
    fn line_past(&self, name: &str, after: Option<u64>) -> Option<Option<Released>> {
        if self.position.load(Ordering::Acquire) == 0 {
            return None;
        }
        let tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let seen = tickets
            .get(name)
            .filter(|seen| after.is_none_or(|after| seen.line > after))?;
        Some(seen.released_at.map(|at| Released {
            at,
            line: seen.line,
        }))
    }

    /// [`QueueView::released_at`] once the view has applied a message of
    /// `name`'s line after revision `after`, waiting for the watcher up to
    /// `patience`; `None` when it has not by then, when the lease is no
    /// longer released as the view saw last, or the view is not live.
    pub async fn released_after(
        &self,
        name: &str,
        after: u64,
        patience: std::time::Duration,
    ) -> Option<Released> {
        self.when(patience, || self.line_past(name, Some(after)))
            .await
            .flatten()
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

    /// `name`'s queue as the view has it: its live tickets (places only, no
    /// holders) and its last revision, which a new ticket's write names (a
    /// stale one fails it). `None` when the view does not keep the queue
    /// (it has no live ticket, or the view is not live): read it.
    pub fn queue(&self, name: &str) -> Option<Queue> {
        self.queue_past(name, None)
    }

    /// [`QueueView::queue`], only when its last revision is above `after`
    /// (copied only then).
    fn queue_past(&self, name: &str, after: Option<u64>) -> Option<Queue> {
        if self.position.load(Ordering::Acquire) == 0 {
            return None;
        }
        let tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let seen = tickets
            .get(name)
            .filter(|seen| after.is_none_or(|after| seen.last > after))?;
        Some(Queue {
            live: seen.live.clone(),
            last: seen.last,
            line: seen.line,
            lease: None,
        })
    }

    /// Marks the view as applied up to `position` (0: not live); with
    /// `complete`, the message at `position` was delivered with nothing
    /// pending behind it.
    pub fn set_position(&self, position: u64, complete: bool) {
        if complete {
            self.complete.fetch_max(position, Ordering::AcqRel);
        }
        self.position.store(position, Ordering::Release);
        self.advanced.notify_waiters();
    }

    /// `name`'s queue ([`QueueView::queue`]) once the view has applied a
    /// message of it after revision `after`, waiting for the watcher up to
    /// `patience`; `None` when the view has not by then, or is not live
    /// (read the queue instead).
    pub async fn queue_after(
        &self,
        name: &str,
        after: u64,
        patience: std::time::Duration,
    ) -> Option<Queue> {
        self.when(patience, || self.queue_past(name, Some(after)))
            .await
    }

    /// What `shown` returns once it returns something, asked again each
    /// time the view moves, up to `patience`; `None` when it has not by
    /// then, or the view is not live.
    async fn when<T>(
        &self,
        patience: std::time::Duration,
        shown: impl Fn() -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            // Registered before the view is asked: a move in between is
            // not missed.
            let advanced = self.advanced.notified();
            tokio::pin!(advanced);
            advanced.as_mut().enable();
            if let Some(shown) = shown() {
                return Some(shown);
            }
            if self.position.load(Ordering::Acquire) == 0 {
                return None;
            }
            tokio::time::timeout_at(deadline, advanced).await.ok()?;
        }
    }

    /// Applies the message at `revision` of semaphore `name`'s slot `slot`:
    /// `held` is its record's holder and key hash when the message is a
    /// holding ([`SlotView::apply_slot`]).
    pub fn apply_slot(&self, name: &str, slot: u32, revision: u64, held: Option<(&str, &str)>) {
        self.slots.apply_slot(name, slot, revision, held);
    }

    /// Applies the message at `revision` of semaphore `name`'s definition
    /// ([`SlotView::apply_definition`]).
    pub fn apply_definition(&self, name: &str, revision: u64, limit: Option<u32>) {
        self.slots.apply_definition(name, revision, limit);
    }

    /// Which slot the head of semaphore `name`'s queue should take
    /// ([`SlotView::free_slot`]); `Unknown` until the view is live.
    pub fn free_slot(&self, name: &str, want: Want<'_>) -> SlotHint {
        if self.position.load(Ordering::Acquire) == 0 {
            return SlotHint::Unknown;
        }
        self.slots.free_slot(name, want, &self.complete)
    }

    /// Forgets everything (the watcher stops or starts a fresh load), and
    /// wakes every dormant waiter: what kept it asleep is gone.
    pub fn clear(&self) {
        self.position.store(0, Ordering::Release);
        self.complete.store(0, Ordering::Release);
        self.tickets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.slots.clear();
        let dormant = self.dormant.lock().unwrap_or_else(|e| e.into_inner());
        for notify in dormant.values().flat_map(|q| q.values()) {
            notify.notify_one();
        }
        self.advanced.notify_waiters();
    }

    /// Whose turn it is for the waiter of `name` whose ticket has `place`
    /// and was last written at `revision`.
    ///
    /// A live ticket with a lower place means not yet, however far the view
    /// has got: that ticket was live when the view applied it, and whatever
    /// ends it (a grant, then an end of that holding; a departure, a turn)
    /// is applied later and wakes the waiter again. "Mine" needs the view to
    /// have been complete at or after the waiter's last ticket write (see
    /// [`QueueView`]): then every ticket ahead of it that is still live
    /// shows.
    pub fn turn(&self, name: &str, place: u64, revision: u64) -> Turn {
        // The positions first: the tickets read after them are at least as
        // new as they say.
        let position = self.position.load(Ordering::Acquire);
        let complete = self.complete.load(Ordering::Acquire);
        if position == 0 {
            return Turn::Unknown;
        }
        let tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let Some(seen) = tickets.get(name) else {
            return Turn::Unknown;
        };
        let mine = seen.live.iter().any(|t| t.place == place);
        if !mine && position >= revision {
            // The view applied the waiter's ticket and it is gone: a
            // Transfer granted it the lease (its ticket is deleted with
            // the grant), or it expired. Only a read can say which.
            return Turn::Unknown;
        }
        if seen.live.iter().any(|t| t.place < place) {
            return Turn::NotMine;
        }
        if complete < revision || !seen.live.iter().any(|t| t.place == place) {
            return Turn::Unknown;
        }
        Turn::Mine
    }
}

/// A waiter asleep behind another ticket ([`QueueView::dormant`]).
pub struct Dormant {
    /// The view it is registered with.
    view: Arc<QueueView>,
    /// Its queue.
    queue: String,
    /// Its place.
    place: u64,
    /// Fired when its ticket is first, or the view started over.
    notify: Arc<Notify>,
}

impl Dormant {
    /// Waits until the view shows the ticket first (or started over).
    pub async fn woken(&self) {
        self.notify.notified().await
    }
}

impl Drop for Dormant {
    fn drop(&mut self) {
        let mut dormant = self.view.dormant.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(q) = dormant.get_mut(&self.queue) {
            if q.get(&self.place)
                .is_some_and(|n| Arc::ptr_eq(n, &self.notify))
            {
                q.remove(&self.place);
            }
            if q.is_empty() {
                dormant.remove(&self.queue);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn ticket(place: u64) -> Op {
        candidate(place, "h", 0)
    }

    /// A ticket of `holder` campaigning with `preference`.
    fn candidate(place: u64, holder: &str, preference: u32) -> Op {
        Op::Put(
            TicketRecord {
                place,
                holder: holder.into(),
                grant: None,
                preference,
            }
            .encode(),
        )
    }

    /// The preferred candidate is the waiting one of the highest
    /// preference, the earliest of equals; only a candidate's ticket (or
    /// its leaving) reports a change, and a refresh changes nothing.
    #[test]
    fn the_view_names_the_preferred_candidate() {
        let view = QueueView::default();
        let slot = |n| keys::queue_slot("e", n);
        let changed = |a: Applied| a.candidates.is_some();
        assert!(
            !changed(view.apply(&slot(0), 10, &ticket(0))),
            "no preference"
        );
        assert!(changed(view.apply(&slot(1), 11, &candidate(0, "v2-a", 2))));
        assert!(changed(view.apply(&slot(2), 12, &candidate(0, "v3", 3))));
        assert!(
            !changed(view.apply(&slot(3), 13, &candidate(0, "v2-b", 2))),
            "v3 stays"
        );
        assert_eq!(view.preferred("e"), None, "not live yet");
        view.set_position(13, true);
        let named = |holder: &str, preference| {
            Some(Candidate {
                holder: holder.into(),
                preference,
            })
        };
        assert_eq!(view.preferred("e"), named("v3", 3));
        assert!(
            !changed(view.apply(&slot(2), 14, &candidate(12, "v3", 3))),
            "a refresh"
        );
        // v3 is granted (its ticket deleted): the earliest of the 2s.
        let applied = view.apply(&slot(2), 15, &Op::Delete(Bytes::new()));
        assert_eq!(applied.candidates.as_deref(), Some("e"));
        assert_eq!(view.preferred("e"), named("v2-a", 2));
        assert!(changed(view.apply(&slot(1), 16, &Op::Expired)));
        assert_eq!(view.preferred("e"), named("v2-b", 2));
        assert!(changed(view.apply(&slot(3), 17, &Op::Delete(Bytes::new()))));
        assert_eq!(
            view.preferred("e"),
            None,
            "only a waiter without preference"
        );
        assert!(!changed(view.apply(
            &slot(0),
            18,
            &Op::Delete(Bytes::new())
        )));
    }

    /// The view names the head once it has applied the waiter's ticket,
    /// keeps places across refreshes, and reports a departed ticket.
    #[test]
    fn the_view_knows_the_head() {
        let view = QueueView::default();
        assert!(view
            .apply(&keys::queue_slot("n", 4), 10, &ticket(0))
            .left
            .is_none());
        assert!(view
            .apply(&keys::queue_slot("n", 1), 11, &ticket(0))
            .left
            .is_none());
        assert_eq!(view.turn("n", 10, 10), Turn::Unknown, "not live yet");
        view.set_position(11, true);
        assert_eq!(view.turn("n", 10, 10), Turn::Mine);
        assert_eq!(view.turn("n", 11, 11), Turn::NotMine);
        assert_eq!(view.turn("n", 11, 12), Turn::NotMine, "10 is ahead anyway");
        assert_eq!(view.turn("n", 10, 12), Turn::Unknown, "a later write of it");
        assert_eq!(view.waiting("n"), 2);
        let free = |view: &QueueView, slots| {
            view.queue("n")
                .map(|q| (q.free_slots(slots, 0), q.last, q.waiting()))
        };
        assert_eq!(
            free(&view, 3),
            Some((vec![0, 2], 11, 2)),
            "slots 1 and 4 live; the queue's last revision"
        );
        // A refresh keeps the place; the head's departure is reported.
        assert!(view
            .apply(&keys::queue_slot("n", 4), 12, &ticket(10))
            .left
            .is_none());
        view.set_position(12, true);
        assert_eq!(view.turn("n", 11, 11), Turn::NotMine);
        assert_eq!(
            view.apply(&keys::queue_slot("n", 4), 13, &Op::Expired)
                .left
                .as_deref(),
            Some("n")
        );
        view.set_position(13, true);
        assert_eq!(view.turn("n", 11, 11), Turn::Mine);
        assert_eq!(view.waiting("n"), 1);
        assert_eq!(view.turn("n", 10, 10), Turn::Unknown, "gone");
        assert_eq!(free(&view, 5), Some((vec![0, 2, 3, 4], 13, 1)));
        assert_eq!(view.released_at("n"), None);
        view.apply_lease("n", 14, true);
        assert_eq!(
            view.released_at("n"),
            Some(Released { at: 14, line: 14 }),
            "the record is on the queue's line"
        );
        view.apply_lease("n", 15, false);
        assert_eq!(view.released_at("n"), None, "written since");
        view.apply_lease("other", 16, true);
        assert_eq!(view.released_at("other"), None, "no queue: not kept");
        assert_eq!(
            free(&view, 2),
            Some((vec![0], 13, 1)),
            "slot 1 live; the record's messages moved the line, not the queue"
        );
        assert_eq!(view.queue("n").map(|q| q.line), Some(15));
        // A guard write is not a ticket, but it moves the queue's last
        // revision; an empty queue is forgotten.
        assert!(view
            .apply("_tenure.q.n.ticket.plain", 16, &Op::Delete(Bytes::new()))
            .left
            .is_none());
        assert_eq!(free(&view, 2), Some((vec![0], 16, 1)));
        assert!(view
            .apply(&keys::queue_slot("n", 1), 17, &Op::Delete(Bytes::new()))
            .left
            .is_some());
        assert_eq!(view.waiting("n"), 0);
        view.clear();
        assert!(view
            .apply(&keys::queue_slot("n", 2), 16, &ticket(0))
            .left
            .is_none());
        assert_eq!(view.turn("n", 16, 16), Turn::Unknown, "cleared: not live");
    }

    /// A dormant waiter is woken when a ticket ahead of it leaves and its
    /// own is first, not by other changes; a wake that comes before it
    /// sleeps is kept; a fresh start wakes every dormant waiter.
    #[tokio::test]
    async fn a_dormant_waiter_wakes_when_its_ticket_is_first() {
        let view = Arc::new(QueueView::default());
        for (slot, revision) in [(0, 10), (1, 11), (2, 12)] {
            view.apply(&keys::queue_slot("n", slot), revision, &ticket(0));
        }
        view.set_position(12, true);
        let second = view.dormant("n", 11);
        let third = view.dormant("n", 12);
        let woken = |d: &Dormant| {
            let mut wait = Box::pin(d.woken());
            let waker = futures::task::noop_waker();
            wait.as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
                .is_ready()
        };
        use std::future::Future;
        // A refresh of the head is no departure.
        view.apply(&keys::queue_slot("n", 0), 13, &ticket(10));
        assert!(!woken(&second) && !woken(&third));
        // The head leaves: only the new head is woken.
        view.apply(&keys::queue_slot("n", 0), 14, &Op::Delete(Bytes::new()));
        assert!(woken(&second), "the new head");
        assert!(!woken(&third), "still behind one");
        drop(second);
        view.apply(&keys::queue_slot("n", 1), 15, &Op::Expired);
        assert!(woken(&third));
        assert!(!view.dormant.lock().unwrap().is_empty());
        drop(third);
        assert!(view.dormant.lock().unwrap().is_empty(), "unregistered");
        let again = view.dormant("n", 12);
        view.clear();
        assert!(woken(&again), "a fresh start wakes every dormant waiter");
    }

    /// A ticket write that lost its race gets the view's queue once the
    /// view has applied a message of it after the lost revision (not an
    /// older one, nor a newer message of another queue), and nothing once
    /// the view stops or its patience runs out (it reads instead).
    #[tokio::test(start_paused = true)]
    async fn a_lost_ticket_write_waits_for_the_view_to_move_past_it() {
        let view = Arc::new(QueueView::default());
        view.apply(&keys::queue_slot("n", 0), 10, &ticket(0));
        view.set_position(10, true);
        let patience = std::time::Duration::from_secs(1);
        let waiting = {
            let view = view.clone();
            tokio::spawn(async move { view.queue_after("n", 10, patience).await })
        };
        tokio::task::yield_now().await;
        view.apply(&keys::queue_slot("m", 0), 11, &ticket(0));
        view.set_position(11, true);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "another queue's message");
        view.apply(&keys::queue_slot("n", 1), 12, &ticket(0));
        view.set_position(12, true);
        let queue = waiting.await.unwrap().expect("the view moved past 10");
        assert_eq!((queue.last, queue.waiting()), (12, 2));
        // Nothing newer than 12: the patience runs out.
        assert!(view.queue_after("n", 12, patience).await.is_none());
        // The view stops (a restart of the watcher): read instead.
        let stopped = {
            let view = view.clone();
            tokio::spawn(async move { view.queue_after("n", 12, patience).await })
        };
        tokio::task::yield_now().await;
        view.clear();
        assert!(stopped.await.unwrap().is_none());
    }

    /// A lagging watcher that skipped an earlier waiter's first ticket write
    /// (rewritten by its refresh before the watcher read it) sees the later
    /// waiter's ticket first: the view must not call that one the head
    /// until it has read everything the stream held after it.
    #[test]
    fn a_skipped_earlier_ticket_keeps_the_view_from_naming_the_head() {
        let view = QueueView::default();
        // Written: slot 0 at 10 (place 10), slot 1 at 11 (place 11), then
        // slot 0's refresh at 12, which removed 10 from the stream. The
        // watcher delivers 11 with the refresh still pending behind it.
        assert!(view
            .apply(&keys::queue_slot("n", 1), 11, &ticket(0))
            .left
            .is_none());
        view.set_position(11, false);
        assert_eq!(view.turn("n", 11, 11), Turn::Unknown, "not complete");
        assert!(view
            .apply(&keys::queue_slot("n", 0), 12, &ticket(10))
            .left
            .is_none());
        view.set_position(12, true);
        assert_eq!(view.turn("n", 11, 11), Turn::NotMine, "10 is ahead");
        assert_eq!(view.turn("n", 10, 12), Turn::Mine);
        // Complete once is complete for every ticket written before.
        view.set_position(13, false);
        assert_eq!(view.turn("n", 10, 12), Turn::Mine);
        assert_eq!(view.turn("n", 10, 13), Turn::Unknown, "a newer write");
        view.clear();
        view.set_position(14, false);
        assert_eq!(view.turn("n", 10, 12), Turn::Unknown, "cleared");
    }
}
