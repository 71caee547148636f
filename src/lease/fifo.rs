//! Fair (first-come-first-served) waiting: the queue of waiter tickets of a
//! name, kept in the bucket so that every replica serving it sees one queue
//! and no replica holds queue state of its own.
//!
//! A waiting Acquire writes a ticket in one of the name's queue slots,
//! `_tenure.q.<name>.ticket.<slot>` (slot `0..max_waiters`; the `_tenure`
//! level is not a lease name, so tickets never collide with leases and never
//! show as leases). Its place is the revision of its first write: the ticket
//! stores it (0 in that first write: "this revision", like a lease's token),
//! so the refreshes that keep the ticket alive (conditional rewrites with a
//! TTL) keep its place. The head is the live ticket with the lowest place.
//! Only the head writes the lease: one write conditional on the name's line
//! (the record at `_tenure.q.<name>.lease.holder` and the queue, under the
//! one wildcard `_tenure.q.<name>.*.*`; with its fence in one atomic batch
//! when a lock delay is involved), then the delete of its ticket; the
//! waiters behind it still see its ticket until then, and the lease is held
//! meanwhile. An Acquire without a wait reads the line from the stream
//! leader (or, over this replica's own last write of it, nothing) and
//! writes conditional on it, so a ticket written since fails it.
//!
//! A new ticket is conditional on the last revision of the queue alone
//! (`_tenure.q.<name>.ticket.*`: a record's write never fails it), and so
//! is a group's guard: its batch carries the guard key
//! `_tenure.q.<name>.ticket.plain` under that condition. On a replicated
//! stream the leader holds back a condition while another one on the same
//! subject string is in flight, so a group's batch and a new ticket never
//! pass each other unseen, nor two grants of one name (design sections 16
//! and 21). Since any ticket
//! fails every other write over the same queue revision, waiters of one
//! name write their tickets one at a time on a replica ([`Lanes`]).
//! `model/fifo.pml` checks this design.

//! Each replica's shared watcher keeps a queue view of the live tickets
//! (`watch/queue_view.rs`), from the same bucket messages it mirrors leases
//! from: it lets a waiter know it is not the head without a read (so a
//! release wakes one writer, not a herd of readers), tells the head it is
//! the head once the view has been complete since its ticket was written,
//! and finds a free slot without a scan.
//!
//! Slots bound the queue structurally (at most `max_waiters` tickets, and a
//! scan of the queue reads at most that many keys plus the guard), and a
//! new ticket reuses a slot whose last ticket is gone, so the tombstones of
//! granted or departed waiters do not pile up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::keys::{self, QueueKey};
use crate::error::Result;
use crate::nats::{Message, Op, Store, Write, WriteOp};

/// The TTL of a ticket: a waiter that stops refreshing (its replica died)
/// leaves the queue at most this long after its last refresh.
pub const TICKET_TTL: Duration = Duration::from_secs(5);
/// How often a waiter rewrites its ticket: twice per TTL and then some, so
/// one slow or lost refresh does not drop a live waiter.
pub const TICKET_REFRESH: Duration = Duration::from_secs(2);
/// The value of a ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketRecord {
    /// The waiter's place: the revision of the ticket's first write (0 in
    /// that write itself).
    pub place: u64,
    /// Who waits (informational, for `nats kv get`).
    pub holder: String,
    /// What the waiter would be granted: what a Transfer to it writes as
    /// its holding. Absent in tickets of older versions (and of groups),
    /// which no Transfer picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<TicketGrant>,
    /// An election candidate's preference (`CampaignRequest.preference`):
    /// a leader of lower preference hands over to the waiting candidate of
    /// the highest. Absent (0) in every other ticket.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preference: u32,
}

/// Whether `n` is 0 (a field left out of a ticket's JSON).
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The holding a waiter asked for, kept in its ticket so that a holder
/// can hand the lease to it (Transfer) without knowing its lease key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketGrant {
    /// Hex SHA-256 of the waiter's lease key (never the key).
    pub key_sha256: String,
    /// The TTL it asked for, whole seconds.
    pub ttl_s: u64,
    /// Its metadata.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub metadata: std::collections::BTreeMap<String, String>,
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
    /// Who waits, as its ticket says.
    pub holder: String,
    /// What it asked for, when its ticket says.
    pub grant: Option<TicketGrant>,
    /// Its preference as an election candidate (0: none).
    pub preference: u32,
}

/// The queue of one name, read from the stream leader.
#[derive(Debug, Default, Clone)]
pub struct Queue {
    /// The live tickets.
    pub live: Vec<Live>,
    /// The last revision of any key of the queue (0: none;
    /// [`keys::queue_filter`]): what a ticket's write, conditional on "no
    /// change to the queue", names.
    pub last: u64,
    /// The last revision of any key of the name's line: the queue and the
    /// lease record beside it (0: none; [`keys::line_filter`]): what a
    /// write that takes the free lease names. Exact only for a queue read
    /// from the leader (or the view); a lane's queue may be behind it.
    pub line: u64,
    /// The last message of the lease record, read in the same scan
    /// (`None`: none, or not read: a queue from the view).
    pub lease: Option<Message>,
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
        let (messages, _) = store.scan(&keys::line_filter(name), cap).await?;
        let mut queue = Queue::default();
        for msg in messages {
            queue.line = queue.line.max(msg.revision);
            if keys::parse_lease(&msg.name) == Some(name) {
                // Read in revision order: a later message of it wins.
                queue.lease = Some(msg);
                continue;
            }
            // The guard is no slot; anything else under the line's
            // wildcard (written by something else) is not the queue's.
            let (of, slot) = match keys::parse_queue(&msg.name) {
                Some(QueueKey::Slot(of, slot)) => (of, Some(slot)),
                Some(QueueKey::Guard(of)) => (of, None),
                None => continue,
            };
            if of != name {
                continue;
            }
            queue.last = queue.last.max(msg.revision);
            let Some(slot) = slot else { continue };
            queue.live.retain(|t| t.slot != slot);
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
                        holder: ticket.holder,
                        grant: ticket.grant,
                        preference: ticket.preference,
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

    /// The queue once a new ticket was written into `slot` at `revision`
    /// over this one (its condition named [`Queue::last`]; the record may
    /// have been written before it, so the line is then a lower bound).
    pub fn with_ticket(mut self, slot: usize, revision: u64) -> Queue {
        self.live.push(Live {
            slot,
            revision,
            place: revision,
            holder: String::new(),
            grant: None,
            preference: 0,
        });
        self.last = revision;
        self.line = self.line.max(revision);
        self
    }

    /// Whether the ticket in `slot` is live at exactly `revision`.
    pub fn holds(&self, slot: usize, revision: u64) -> bool {
        self.live
            .iter()
            .any(|t| t.slot == slot && t.revision == revision)
    }

    /// The slots below `max_waiters` with no live ticket, in order from
    /// `start` (so that concurrent waiters spread over the free slots). A
    /// ticket written into one names the queue's last revision
    /// ([`Queue::last`]), so a slot taken since this read fails the write.
    pub fn free_slots(&self, max_waiters: usize, start: usize) -> Vec<usize> {
        (0..max_waiters)
            .map(|i| (start + i) % max_waiters)
            .filter(|slot| !self.live.iter().any(|t| t.slot == *slot))
            .collect()
    }

    /// The guard write of a group's member (an AcquireGroup is one atomic
    /// batch anyway): a tombstone on the guard key, conditional on the
    /// queue's last revision, so the batch that carries it fails if any
    /// ticket was written or removed since this queue was read. Named on
    /// the queue's wildcard as a ticket's write is, so that on a
    /// replicated stream the leader holds back either while the other is
    /// in flight (design section 21).
    pub fn guard(&self, name: &str) -> Write {
        Write {
            name: keys::queue_guard(name),
            op: WriteOp::Delete,
            payload: Bytes::new(),
            expected: Some(self.last),
            expected_of: Some(keys::queue_filter(name)),
            ttl: Duration::ZERO,
        }
    }
}

/// One lane per name with a ticket being written on this replica: waiters
/// of one name write their tickets one at a time. Every ticket write names
/// the whole queue's last revision, so of waiters writing at once only one
/// could win; in a lane each tries once it has the queue to itself (on this
/// replica), and the lane keeps the queue as the last ticket written in it
/// left it (exact at that revision: the write's condition said nothing came
/// between), so a burst of waiters writes one ticket after the other without
/// a read in between.
/// A lane keeps what its last user left for the next (`T`: the queue as
/// the last ticket left it); with `T = ()` it is only a turn per name (the
/// definers of one semaphore, `semaphore::slot_attempt`).
pub struct Lanes<T = Queue> {
    /// The lane of each name that has a waiter in or before it.
    lanes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<T>>>>>,
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Lanes {
            lanes: Mutex::default(),
        }
    }
}

impl<T> Lanes<T> {
    /// Waits for `name`'s lane; the lane (and the queue it keeps) is the
    /// caller's until the returned guard drops.
    pub async fn enter(&self, name: &str) -> Lane<'_, T> {
        let lane = {
            let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
            lanes.entry(name.to_string()).or_default().clone()
        };
        let guard = lane.clone().lock_owned().await;
        Lane {
            lanes: self,
            name: name.to_string(),
            lane,
            guard: Some(guard),
        }
    }
}

/// A waiter's turn in its name's lane ([`Lanes::enter`]).
pub struct Lane<'a, T = Queue> {
    /// Where the lane is kept.
    lanes: &'a Lanes<T>,
    /// The name.
    name: String,
    /// The lane.
    lane: Arc<tokio::sync::Mutex<Option<T>>>,
    /// The turn, with what the lane's last user left (the queue as its
    /// ticket left it); taken on drop.
    guard: Option<tokio::sync::OwnedMutexGuard<Option<T>>>,
}

impl<T> Lane<'_, T> {
    /// What the lane's last user left (the queue as the lane's last ticket
    /// write left it), if anything (taken: put back a newer one with
    /// [`Lane::keep`]).
    pub fn take(&mut self) -> Option<T> {
        self.guard.as_mut().and_then(|g| g.take())
    }

    /// Keeps `queue` for the next user of the lane.
    pub fn keep(&mut self, queue: T) {
        if let Some(g) = self.guard.as_mut() {
            **g = Some(queue);
        }
    }
}

impl<T> Drop for Lane<'_, T> {
    fn drop(&mut self) {
        self.guard.take();
        // Forget the lane (and its queue) when nobody else holds or waits
        // for it (every other holder took its clone under this lock).
        let mut lanes = self.lanes.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::strong_count(&self.lane) == 2 {
            lanes.remove(&self.name);
        }
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
        Write::delete(self.key.clone(), Bytes::new(), Some(self.revision))
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

    fn queue(live: &[(usize, u64, u64)], last: u64) -> Queue {
        Queue {
            live: live
                .iter()
                .map(|&(slot, revision, place)| Live {
                    slot,
                    revision,
                    place,
                    holder: String::new(),
                    grant: None,
                    preference: 0,
                })
                .collect(),
            last,
            line: last,
            lease: None,
        }
    }

    /// The place, not the last revision, orders the queue: a refreshed
    /// ticket keeps its place ahead of later arrivals.
    #[test]
    fn orders_by_place() {
        let q = queue(&[(0, 9, 3), (1, 5, 5)], 9);
        assert_eq!(q.ahead_of(3), 0);
        assert_eq!(q.ahead_of(5), 1);
        assert!(q.holds(0, 9));
        assert!(!q.holds(0, 3));
    }

    /// Free slots are the slots with no live ticket, from `start`; a full
    /// queue has none.
    #[test]
    fn finds_free_slots() {
        let q = queue(&[(0, 9, 3)], 9);
        assert_eq!(q.free_slots(3, 0), vec![1, 2]);
        assert_eq!(q.free_slots(3, 2), vec![2, 1]);
        assert!(q.free_slots(1, 0).is_empty());
    }

    /// A lane is one waiter's at a time, hands the queue its last ticket
    /// left to the next waiter in it, and is forgotten (queue and all) once
    /// nobody holds or waits for it.
    #[tokio::test]
    async fn lanes_take_turns_and_are_forgotten() {
        let lanes = Arc::new(Lanes::<Queue>::default());
        let mut first = lanes.enter("n").await;
        assert!(first.take().is_none());
        let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
        let next = {
            let lanes = lanes.clone();
            tokio::spawn(async move {
                let mut lane = lanes.enter("n").await;
                let _ = entered_tx.send(());
                lane.take().map(|q| (q.last, q.free_slots(3, 0)))
            })
        };
        let other = lanes.enter("m").await;
        // The next waiter waits for the lane (the map, the holder's lane
        // and turn, the waiter's lane and pending turn).
        while lanes.lanes.lock().unwrap().get("n").map(Arc::strong_count) != Some(5) {
            tokio::task::yield_now().await;
        }
        assert!(entered_rx.is_empty(), "the lane is taken");
        first.keep(queue(&[], 4).with_ticket(2, 5));
        drop(first);
        assert_eq!(next.await.unwrap(), Some((5, vec![0, 1])));
        drop(other);
        assert!(lanes.lanes.lock().unwrap().is_empty());
    }
}
