//! Handing a lease over: the holder gives its holding to a waiter, in one
//! atomic batch, with no moment in which the name is free.
//!
//! A waiting Acquire's ticket says what it would be granted (its lease
//! key's hash, TTL and metadata: [`fifo::TicketGrant`]). A Transfer
//! verifies the giver's holding as a Release does, reads the queue from
//! the leader, picks the named waiter (or the head), and writes the
//! waiter's holding **over the giver's record** (conditional on its
//! revision) together with the delete of the waiter's ticket (conditional
//! on its revision), in one batch. So the giver's lease key stops working at
//! the very write that starts the recipient's holding, whose token (that
//! write's revision) is greater than the giver's; nobody can take the name
//! in between, as it is never free. The waiting Acquire finds the holding
//! is its own when it next looks (its ticket is gone: design section 16)
//! and returns it.

use super::fifo::{Live, Queue};
use super::record::{KeyHash, Record, Released};
use super::refusals::{contended, group_member};
use super::{now_ms, Holding, Leases, MAX_CAS_ATTEMPTS};
use crate::error::{Error, Reason, Result};
use crate::nats::{CasError, Write};

impl Leases {
    /// Hands the holding of `name` at `expected` (lease key `key`) to the
    /// waiter whose holder is `to`, or to the head of the queue; returns
    /// the recipient's holding.
    pub async fn transfer(
        &self,
        name: &str,
        expected: u64,
        key: &str,
        to: Option<&str>,
    ) -> Result<Holding> {
        self.store.require_atomic()?;
        let hash = KeyHash::of(key);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (revision, giver) = self.verify_holding(name, expected, &hash).await?;
            if !giver.group.is_empty() {
                return Err(group_member(name, &giver.group, "Transfer"));
            }
            if giver.lock_delay_s > 0 {
                return Err(Error::new(
                    Reason::InvalidArgument,
                    format!(
                        "lease {name:?} has a lock delay: a transfer does not move its fence; release it instead"
                    ),
                ));
            }
            let queue = Queue::read(&self.store, name, self.max_waiters).await?;
            let ticket = recipient(&queue, to).ok_or_else(|| no_waiter(name, to, &queue))?;
            let Some(grant) = ticket.grant.clone() else {
                return Err(no_waiter(name, to, &queue));
            };
            let now = now_ms();
            let record = Record {
                holder: ticket.holder.clone(),
                token: 0,
                key_sha256: grant.key_sha256,
                ttl_s: grant.ttl_s,
                acquired_ms: now,
                renewed_ms: now,
                metadata: grant.metadata,
                lock_delay_s: 0,
                group: Vec::new(),
                over: Some(revision),
                transferred_from: Some(Released {
                    holder: giver.holder.clone(),
                    token: giver.token_at(revision),
                }),
                mode: None,
            };
            let writes = [
                Write::delete(
                    super::keys::queue_slot(name, ticket.slot),
                    bytes::Bytes::new(),
                    Some(ticket.revision),
                ),
                Write::put(
                    super::keys::lease(name),
                    record.encode(),
                    revision,
                    self.nats_ttl(record.ttl_s),
                ),
            ];
            match self.store.batch(&writes).await {
                Ok(at) => {
                    self.cache.remove(name);
                    self.free.forget(name);
                    tracing::info!(
                        name,
                        from = %giver.holder,
                        to = %record.holder,
                        token = at,
                        "lease transferred"
                    );
                    return Ok(Holding::at(name, at, record));
                }
                Err(CasError::Conflict) => {
                    self.cache.remove(name);
                }
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(contended(name))
    }
}

/// The waiter a transfer goes to: the earliest live ticket of holder `to`,
/// or the head of the queue.
fn recipient<'a>(queue: &'a Queue, to: Option<&str>) -> Option<&'a Live> {
    queue
        .live
        .iter()
        .filter(|t| t.grant.is_some() && to.is_none_or(|to| t.holder == to))
        .min_by_key(|t| t.place)
}

/// FAILED_PRECONDITION / NO_WAITER: nobody (or not `to`) waits.
fn no_waiter(name: &str, to: Option<&str>, queue: &Queue) -> Error {
    let message = match to {
        Some(to) => format!(
            "no waiting Acquire of holder {to:?} for lease {name:?} ({} waiting); the recipient must be waiting (Acquire with a wait) when the holder transfers",
            queue.waiting()
        ),
        None => format!(
            "nobody waits for lease {name:?}; release it instead, or transfer once a waiter queues (Acquire with a wait)"
        ),
    };
    Error::new(Reason::NoWaiter, message).with("waiting", queue.waiting())
}
