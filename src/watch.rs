//! Turns bucket messages into lease events for `WatchLease`.
//!
//! A watch follows the bucket with an ordered consumer that first delivers the
//! last message of every matching name (the snapshot), then every new one.
//! [`Classifier`] remembers, per name, the holding it last saw, so that an
//! expiry marker (which NATS writes with no payload) can still name the
//! holder and token that expired, and so that the marker NATS writes when a
//! release tombstone itself ages out is not mistaken for an expiry.

use std::collections::HashMap;

use futures::StreamExt;
use tokio::sync::mpsc;

use crate::error::{Error, Reason, Result};
use crate::lease::Holding;
use crate::shutdown::Shutdown;
use crate::store::{Entry, Kind, Store};

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
    /// The full holding for `Current`, `Acquired` and `Renewed`.
    pub holding: Option<Holding>,
    /// When the change was stored, Unix milliseconds.
    pub time_ms: u64,
}

/// Per-stream memory that classifies messages into events.
#[derive(Default)]
pub struct Classifier {
    /// name → (holder, token) of the holding last seen, `None` when free.
    held: HashMap<String, Option<(String, u64)>>,
    /// Whether the snapshot has been completed.
    live: bool,
}

impl Classifier {
    /// Whether the snapshot is complete.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// The `SnapshotComplete` marker, once; later calls return nothing.
    pub fn complete_snapshot(&mut self) -> Option<Event> {
        if self.live {
            return None;
        }
        self.live = true;
        Some(Event {
            kind: EventKind::SnapshotComplete,
            name: String::new(),
            revision: 0,
            holder: String::new(),
            token: 0,
            holding: None,
            time_ms: 0,
        })
    }

    /// The event a message stands for, if any. Messages in the snapshot only
    /// report live holdings; a marker over a name that was not held (a
    /// tombstone or marker ageing out) reports nothing.
    pub fn classify(&mut self, entry: Entry) -> Option<Event> {
        let before = self.held.get(&entry.name).cloned().flatten();
        let (kind, holder, token, holding) = match entry.kind {
            Kind::Held(record) => {
                let token = record.token_at(entry.revision);
                self.held
                    .insert(entry.name.clone(), Some((record.holder.clone(), token)));
                let kind = if !self.live {
                    EventKind::Current
                } else if record.token == 0 {
                    EventKind::Acquired
                } else {
                    EventKind::Renewed
                };
                let holding = Holding {
                    name: entry.name.clone(),
                    revision: entry.revision,
                    token,
                    record,
                };
                (kind, holding.record.holder.clone(), token, Some(holding))
            }
            Kind::Unreadable => {
                self.held.insert(entry.name.clone(), None);
                return None;
            }
            Kind::Released(payload) => {
                self.held.insert(entry.name.clone(), None);
                let (holder, token) = match (payload, before) {
                    (Some(p), _) => (p.holder, p.token),
                    (None, Some(b)) => b,
                    (None, None) => (String::new(), 0),
                };
                (EventKind::Released, holder, token, None)
            }
            Kind::Expired => {
                self.held.insert(entry.name.clone(), None);
                let (holder, token) = before?;
                (EventKind::Expired, holder, token, None)
            }
            Kind::Revoked => {
                self.held.insert(entry.name.clone(), None);
                let (holder, token) = before?;
                (EventKind::Revoked, holder, token, None)
            }
        };
        if !self.live && kind != EventKind::Current {
            return None;
        }
        Some(Event {
            kind,
            name: entry.name,
            revision: entry.revision,
            holder,
            token,
            holding,
            time_ms: entry.time_ms,
        })
    }
}

/// Starts following `filter` and returns a channel of events, keeping only
/// `kinds` (empty: all; `SnapshotComplete` always). The task ends when the
/// receiver is dropped, and ends the stream with `SHUTTING_DOWN` on shutdown
/// or `NATS_UNAVAILABLE` if the consumer fails.
pub async fn watch(
    store: &Store,
    filter: &str,
    kinds: Vec<EventKind>,
    mut shutdown: Shutdown,
) -> Result<mpsc::Receiver<Result<Event>>> {
    let mut follow = store.follow(filter, true).await?;
    let (tx, rx) = mpsc::channel(64);
    let wanted = move |e: &Event| {
        kinds.is_empty() || e.kind == EventKind::SnapshotComplete || kinds.contains(&e.kind)
    };
    tokio::spawn(async move {
        let mut classifier = Classifier::default();
        if follow.initially_pending == 0 {
            if let Some(done) = classifier.complete_snapshot() {
                if tx.send(Ok(done)).await.is_err() {
                    return;
                }
            }
        }
        loop {
            let next = tokio::select! {
                _ = shutdown.recv() => {
                    let _ = tx.send(Err(Error::new(Reason::ShuttingDown, "the server is shutting down; watch again on another replica"))).await;
                    return;
                }
                _ = tx.closed() => return,
                next = follow.messages.next() => next,
            };
            let (entry, pending) = match next {
                Some(Ok(item)) => item,
                Some(Err(err)) => {
                    let _ = tx.send(Err(err)).await;
                    return;
                }
                None => {
                    let _ = tx
                        .send(Err(Error::new(
                            Reason::NatsUnavailable,
                            "the bucket watch ended; watch again",
                        )))
                        .await;
                    return;
                }
            };
            let mut events = Vec::with_capacity(2);
            events.extend(classifier.classify(entry));
            if pending == 0 {
                events.extend(classifier.complete_snapshot());
            }
            for event in events.into_iter().filter(&wanted) {
                if tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Record, Released};

    fn entry(name: &str, revision: u64, kind: Kind) -> Entry {
        Entry {
            name: name.into(),
            revision,
            time_ms: 0,
            kind,
        }
    }

    fn rec(holder: &str, token: u64) -> Kind {
        Kind::Held(Record {
            holder: holder.into(),
            token,
            key_sha256: String::new(),
            ttl_s: 1,
            acquired_ms: 0,
            renewed_ms: 0,
            metadata: Default::default(),
        })
    }

    /// Snapshot entries are CURRENT; tombstones in the snapshot say nothing;
    /// live messages map to ACQUIRED, RENEWED, RELEASED, EXPIRED.
    #[test]
    fn classifies_a_lifecycle() {
        let mut c = Classifier::default();
        assert_eq!(
            c.classify(entry("a", 1, rec("h", 0))).unwrap().kind,
            EventKind::Current
        );
        assert!(c.classify(entry("b", 2, Kind::Released(None))).is_none());
        assert!(c.complete_snapshot().is_some());
        assert!(c.complete_snapshot().is_none());
        let e = c.classify(entry("a", 3, rec("h", 1))).unwrap();
        assert_eq!((e.kind, e.token), (EventKind::Renewed, 1));
        let e = c.classify(entry("a", 4, Kind::Expired)).unwrap();
        assert_eq!(
            (e.kind, e.holder.as_str(), e.token),
            (EventKind::Expired, "h", 1)
        );
        let e = c.classify(entry("a", 5, rec("g", 0))).unwrap();
        assert_eq!((e.kind, e.token), (EventKind::Acquired, 5));
        let e = c
            .classify(entry(
                "a",
                6,
                Kind::Released(Some(Released {
                    holder: "g".into(),
                    token: 5,
                })),
            ))
            .unwrap();
        assert_eq!((e.kind, e.token), (EventKind::Released, 5));
        // The tombstone ageing out writes a MaxAge marker: not an expiry.
        assert!(c.classify(entry("a", 7, Kind::Expired)).is_none());
    }
}
