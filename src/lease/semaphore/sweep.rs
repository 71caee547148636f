//! Removes the definitions of semaphores nobody uses any more.
//!
//! A semaphore's definition (`_tenure.sem.<name>.limit`) has no TTL: it says
//! which limit is in force for as long as a slot may be held, so without a
//! sweep a churn of short-lived semaphores would leave one key per name in
//! the bucket forever. A semaphore is *unused* when its definition and
//! every slot of its limit have had no write for the marker TTL and no slot
//! holds a record; the sweep then removes it.
//!
//! The removal is one atomic batch, shaped like a limit change to "no
//! limit": a tombstone over every slot of the limit, each conditional on
//! the revision the sweep read (0: no message), and a tombstone over the
//! definition, conditional on its revision. An Acquire that read the
//! definition and a free slot before the sweep writes that slot over the
//! revision it read, so only one of the two can store: the Acquire fails
//! on its slot, or the batch does. Every condition names its own key,
//! which the leader of a replicated stream holds back while a write of that
//! key is in flight (a wildcard condition it would not; design section 16).
//! After the removal the definition holds a tombstone, which an Acquire
//! treats as a definition to write over (its revision, with tombstones over
//! the other free slots it read), as after any limit change; the tombstones
//! age out after the marker TTL, and the semaphore then leaves nothing in
//! the bucket. A stalled attempt that read a slot before the removal and
//! writes once its tombstone aged out (the slot back to "no message") is
//! the ABA every slot write already guards against: an attempt older than
//! half the marker TTL reads again before it writes (`model/sem.pml`,
//! controls `SWEEP_DEF_ONLY` and `AGE_ANY_TIME`).
//!
//! A read-write lock (`rwlock.rs`) is removed the same way, but its
//! definition's tombstone, first in the batch, is conditional on the lock's
//! wildcard (the last revision the sweep read of any of its keys) rather
//! than on the definition alone: the lock's Acquires write conditional on
//! that wildcard, and the leader of a replicated stream holds a condition
//! back only while another with the same subject string is in flight, so a
//! slot tombstone's own-key condition would not see an Acquire of that slot
//! proposed but not yet applied.
//!
//! Every replica sweeps each of its shards every [`sweep_every`]; replicas
//! that race to remove the same semaphore conflict on the definition and
//! one wins. A sweep reads at most [`SCAN_MAX`] semaphore keys from the
//! stream leader, one message at a time.

use std::collections::BTreeMap;
use std::time::Duration;

use super::super::keys::{self, semaphore_slot as slot_key};
use super::super::{now_ms, Leases};
use super::Definition;
use crate::error::Result;
use crate::nats::{CasError, Message, Op, Write};
use crate::observe::METRICS;

/// Most semaphore keys one sweep reads (a bucket with more is swept in
/// part; the rest waits for the next sweep after those removed).
pub(in crate::lease) const SCAN_MAX: usize = 100_000;

/// How often a replica sweeps: a quarter of the marker TTL, between 1 s
/// and 5 minutes.
pub fn sweep_every(marker_ttl: Duration) -> Duration {
    (marker_ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(300))
}

/// One semaphore as the sweep read it.
#[derive(Default)]
struct Seen {
    /// The definition's revision and limit (`None`: no live definition).
    definition: Option<(u64, u32)>,
    /// Whether the definition is a read-write lock's.
    rw: bool,
    /// The largest revision of any of its keys.
    last: u64,
    /// Each slot's last revision, by slot.
    slots: BTreeMap<u32, u64>,
    /// Whether a slot holds a record.
    held: bool,
    /// The newest write of any of its keys, Unix ms (server clock).
    newest_ms: u64,
}

impl Leases {
    /// Sweeps forever, every [`sweep_every`], until shutdown (at once
    /// when the bucket has no atomic batches: nothing to remove then, as
    /// definitions need batches).
    pub async fn sweep_semaphores(self) {
        if !self.store.atomic() {
            return;
        }
        let idle = self.store.marker_ttl();
        let mut tick = tokio::time::interval(sweep_every(idle));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if !self.store.is_connected() {
                continue;
            }
            if let Err(err) = self.remove_unused_semaphores(idle).await {
                tracing::debug!(%err, bucket = %self.store.bucket(), "semaphore sweep stopped early");
            }
        }
    }

    /// Removes every semaphore unused for `idle`: no slot held and no write
    /// of its keys for that long. Returns how many it removed.
    pub async fn remove_unused_semaphores(&self, idle: Duration) -> Result<usize> {
        let (messages, _all) = self
            .store
            .scan(&keys::semaphores_filter(), SCAN_MAX)
            .await?;
        // The leader's clock, so that ages compare with the messages' times.
        let now = match self.store.position().await?.now_ms {
            Some(ms) => ms,
            None => now_ms(),
        };
        let mut removed = 0;
        for (name, seen) in gather(&messages) {
            let Some((revision, limit)) = seen.definition else {
                continue;
            };
            let quiet = now.saturating_sub(seen.newest_ms) >= idle.as_millis() as u64;
            if seen.held || !quiet {
                continue;
            }
            let mut writes: Vec<Write> = (1..=limit)
                .map(|slot| {
                    let read = seen.slots.get(&slot).copied().unwrap_or(0);
                    Write::delete(slot_key(name, slot), bytes::Bytes::new(), Some(read))
                })
                .collect();
            let definition = match seen.rw {
                // A read-write lock's Acquires write conditional on the
                // lock's wildcard, which the leader of a replicated stream
                // holds back only against writes with the same condition
                // (design section 23): the removal names it too, first in
                // its batch, over the last revision it read of the lock.
                true => Write {
                    expected: Some(seen.last),
                    expected_of: Some(keys::semaphore_filter(name)),
                    ..Write::delete(keys::semaphore_definition(name), bytes::Bytes::new(), None)
                },
                false => Write::delete(
                    keys::semaphore_definition(name),
                    bytes::Bytes::new(),
                    Some(revision),
                ),
            };
            match seen.rw {
                true => writes.insert(0, definition),
                false => writes.push(definition),
            }
            match self.store.batch(&writes).await {
                Ok(_) => {
                    removed += 1;
                    METRICS.semaphores_removed.inc();
                    tracing::debug!(name, limit, "unused semaphore removed");
                }
                // Used, or removed by another replica, since the read.
                Err(CasError::Conflict) => {}
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Ok(removed)
    }
}

/// The semaphores among `messages` (the last message of each semaphore
/// key), by name.
fn gather(messages: &[Message]) -> BTreeMap<&str, Seen> {
    let mut out: BTreeMap<&str, Seen> = BTreeMap::new();
    for m in messages {
        if let Some(name) = keys::parse_semaphore_definition(&m.name) {
            let seen = out.entry(name).or_default();
            seen.newest_ms = seen.newest_ms.max(m.time_ms);
            seen.last = seen.last.max(m.revision);
            if let Op::Put(payload) = &m.op {
                if let Ok(d) = serde_json::from_slice::<Definition>(payload) {
                    seen.definition = Some((m.revision, d.limit));
                    seen.rw = d.rw;
                }
            }
        } else if let Some((name, slot)) = keys::parse_semaphore_slot(&m.name) {
            let seen = out.entry(name).or_default();
            seen.newest_ms = seen.newest_ms.max(m.time_ms);
            seen.last = seen.last.max(m.revision);
            seen.slots.insert(slot, m.revision);
            // A record is a holding until it is released or expires (NATS
            // then writes a marker over it).
            seen.held |= matches!(m.op, Op::Put(_));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(name: &str, revision: u64, time_ms: u64, op: Op) -> Message {
        Message {
            name: name.into(),
            revision,
            time_ms,
            op,
            replaced: None,
        }
    }

    fn def(limit: u32) -> Op {
        Op::Put(
            serde_json::to_vec(&Definition { limit, rw: false })
                .unwrap()
                .into(),
        )
    }

    #[test]
    fn semaphores_are_gathered_by_name() {
        let messages = [
            msg("_tenure.sem.a.limit", 1, 100, def(2)),
            msg("_tenure.sem.a.1", 2, 200, Op::Delete(Default::default())),
            msg("_tenure.sem.a.b.1", 3, 300, Op::Put(Default::default())),
            msg("_tenure.sem.a.b.limit", 4, 50, def(3)),
            msg("_tenure.sem.c.limit", 5, 60, Op::Delete(Default::default())),
        ];
        let seen = gather(&messages);
        let a = &seen["a"];
        assert_eq!(a.definition, Some((1, 2)));
        assert_eq!(a.slots.get(&1), Some(&2));
        assert!(!a.held);
        assert_eq!(a.newest_ms, 200);
        let ab = &seen["a.b"];
        assert_eq!(ab.definition, Some((4, 3)));
        assert!(ab.held);
        assert_eq!(ab.newest_ms, 300);
        // A removed definition is no definition.
        assert_eq!(seen["c"].definition, None);
        // The last revision of each name's keys, and a lock's flag.
        assert_eq!((a.last, ab.last), (2, 4));
        let lock = [msg(
            "_tenure.sem.l.limit",
            7,
            1,
            Op::Put(
                serde_json::to_vec(&Definition { limit: 4, rw: true })
                    .unwrap()
                    .into(),
            ),
        )];
        let lock = gather(&lock);
        assert!(lock["l"].rw && !a.rw);
    }

    #[test]
    fn sweeps_come_often_enough_and_not_too_often() {
        assert_eq!(
            sweep_every(Duration::from_secs(900)),
            Duration::from_secs(225)
        );
        assert_eq!(sweep_every(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(
            sweep_every(Duration::from_secs(86_400)),
            Duration::from_secs(300)
        );
    }
}
