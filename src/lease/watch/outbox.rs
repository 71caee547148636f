//! The event queue of one watch: what the shared watcher has delivered and
//! the client has not read yet, bounded in events and in bytes, per watch
//! and across the replica.
//!
//! A watch whose client reads too slowly is ended with WATCH_LAGGED the
//! moment it goes over its bounds, and its queued events are freed at once
//! (not when the client finally reads). When the replica's total would go
//! over its bound, the hub ends the watch that holds the most. Events are
//! shared (`Arc`) between the queues of all watches that receive them; the
//! byte count charges each queue the whole event, so the bound is
//! conservative.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::error::{Error, Reason, Result};
use crate::lease::event::Event;

/// The bounds of the watch queues of one replica.
#[derive(Debug)]
pub struct WatchBudget {
    /// Most events one watch may have queued.
    pub per_watch_events: usize,
    /// Most bytes one watch may have queued.
    pub per_watch_bytes: usize,
    /// Most bytes all watches of the replica may have queued together.
    pub total_bytes: usize,
    /// Bytes queued now, across the replica.
    queued: AtomicUsize,
}

impl WatchBudget {
    /// A budget with these bounds.
    pub fn new(per_watch_events: usize, per_watch_bytes: usize, total_bytes: usize) -> WatchBudget {
        WatchBudget {
            per_watch_events,
            per_watch_bytes,
            total_bytes,
            queued: AtomicUsize::new(0),
        }
    }

    /// Bytes queued now, across the replica.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

/// Why an event was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The watch has ended (lagged before, or its client is gone).
    Ended,
    /// The watch went over its own bounds: it has now ended.
    Lagged,
    /// The replica's total would go over its bound.
    ReplicaFull,
}

/// One watch's queue, shared by the hub (which pushes) and the stream
/// (which pops).
pub struct Outbox {
    /// The events and why the watch ended, if it did.
    state: Mutex<Buffered>,
    /// Wakes the reader.
    ready: Notify,
    /// The replica's bounds.
    budget: Arc<WatchBudget>,
    /// What the watch holds while it lives (its slot in the watch-stream
    /// limits), released the moment it ends, even if the client never
    /// reads the end.
    guard: Mutex<Option<Box<dyn Send>>>,
}

/// What a queue holds.
#[derive(Debug, Default)]
struct Buffered {
    /// Queued events with their weights.
    events: VecDeque<(Arc<Event>, usize)>,
    /// The sum of the weights.
    bytes: usize,
    /// Why the watch ended; set once.
    ended: Option<Error>,
}

impl Outbox {
    /// An empty queue under `budget`.
    pub fn new(budget: Arc<WatchBudget>) -> Arc<Outbox> {
        Arc::new(Outbox {
            state: Mutex::new(Buffered::default()),
            ready: Notify::new(),
            budget,
            guard: Mutex::new(None),
        })
    }

    /// Keeps `guard` until the watch ends.
    pub fn hold(&self, guard: Box<dyn Send>) {
        let ended = self.state.lock().expect("queue lock").ended.is_some();
        if !ended {
            *self.guard.lock().expect("guard lock") = Some(guard);
        }
    }

    /// Queues `event`, or says why not.
    pub fn push(&self, event: Arc<Event>) -> std::result::Result<(), Refused> {
        let weight = event.weight();
        let mut state = self.state.lock().expect("queue lock");
        if state.ended.is_some() {
            return Err(Refused::Ended);
        }
        if state.events.len() >= self.budget.per_watch_events
            || state.bytes + weight > self.budget.per_watch_bytes
        {
            let (events, bytes) = (state.events.len(), state.bytes);
            self.end_locked(
                &mut state,
                Error::new(
                    Reason::WatchLagged,
                    format!(
                        "watch fell behind by {events} events ({bytes} bytes; limits {} events, {} bytes); \
                         read faster or narrow the watch, then watch again",
                        self.budget.per_watch_events, self.budget.per_watch_bytes
                    ),
                ),
            );
            return Err(Refused::Lagged);
        }
        let before = self.budget.queued.fetch_add(weight, Ordering::Relaxed);
        if before + weight > self.budget.total_bytes {
            self.budget.queued.fetch_sub(weight, Ordering::Relaxed);
            return Err(Refused::ReplicaFull);
        }
        state.events.push_back((event, weight));
        state.bytes += weight;
        drop(state);
        self.ready.notify_one();
        Ok(())
    }

    /// Bytes queued now.
    pub fn bytes(&self) -> usize {
        self.state.lock().expect("queue lock").bytes
    }

    /// Ends the watch with `err`: queued events are freed now, and the
    /// reader gets `err` next.
    pub fn end(&self, err: Error) {
        let mut state = self.state.lock().expect("queue lock");
        self.end_locked(&mut state, err);
    }

    /// [`Outbox::end`] with the lock held.
    fn end_locked(&self, state: &mut Buffered, err: Error) {
        if state.ended.is_none() {
            state.ended = Some(err);
        }
        self.budget.queued.fetch_sub(state.bytes, Ordering::Relaxed);
        state.events = VecDeque::new();
        state.bytes = 0;
        self.guard.lock().expect("guard lock").take();
        self.ready.notify_one();
    }

    /// The next event, waiting for one; `Err` once the watch has ended and
    /// its queue is empty.
    pub async fn pop(&self) -> Result<Arc<Event>> {
        loop {
            {
                let mut state = self.state.lock().expect("queue lock");
                if let Some((event, weight)) = state.events.pop_front() {
                    state.bytes -= weight;
                    self.budget.queued.fetch_sub(weight, Ordering::Relaxed);
                    return Ok(event);
                }
                if let Some(err) = &state.ended {
                    return Err(err.clone());
                }
            }
            // One reader: a notification sent while it was not waiting is
            // kept as a permit, so none is lost.
            self.ready.notified().await;
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let bytes = self.state.get_mut().map_or(0, |s| s.bytes);
        self.budget.queued.fetch_sub(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::event::EventKind;

    fn event(name: &str) -> Arc<Event> {
        Arc::new(Event {
            kind: EventKind::Released,
            name: name.into(),
            revision: 1,
            holder: "h".into(),
            token: 1,
            holding: None,
            time_ms: 0,
            slot: 0,
            missed_after: 0,
        })
    }

    /// Over its byte bound a watch ends at once: its events are freed, the
    /// replica's count drops, and the reader is told WATCH_LAGGED.
    #[tokio::test]
    async fn a_lagging_watch_is_freed_at_once() {
        let one = event("a").weight();
        let budget = Arc::new(WatchBudget::new(100, one * 3, one * 100));
        let q = Outbox::new(budget.clone());
        for _ in 0..3 {
            q.push(event("a")).unwrap();
        }
        assert_eq!(budget.queued(), one * 3);
        assert_eq!(q.push(event("a")), Err(Refused::Lagged));
        assert_eq!(budget.queued(), 0, "freed before the client reads");
        assert_eq!(q.pop().await.unwrap_err().reason, Reason::WatchLagged);
        assert_eq!(q.push(event("a")), Err(Refused::Ended));
    }

    /// The replica's bound is shared: a second watch is refused when the
    /// first holds it all, and room comes back as the first is read.
    #[tokio::test]
    async fn the_replica_bound_is_shared() {
        let one = event("a").weight();
        let budget = Arc::new(WatchBudget::new(100, one * 10, one * 2));
        let (a, b) = (Outbox::new(budget.clone()), Outbox::new(budget.clone()));
        a.push(event("a")).unwrap();
        a.push(event("a")).unwrap();
        assert_eq!(b.push(event("b")), Err(Refused::ReplicaFull));
        a.pop().await.unwrap();
        b.push(event("b")).unwrap();
        drop(a);
        assert_eq!(budget.queued(), one, "a dropped queue gives its bytes back");
    }
}
