//! Ending a holding: Release by its holder, Revoke by an operator.
//!
//! Both are one conditional write over exactly the revision of the holding
//! they end: a tombstone (release) or a purge that carries who revoked it
//! and why (revoke), which watchers report as RELEASED and REVOKED. A
//! holding with a lock delay ends in one batch with its fence. Expiry needs
//! no write of ours: NATS removes the record when its TTL passes and
//! writes the marker that watchers report as EXPIRED.

use std::sync::Arc;
use std::time::Duration;

use super::cache::Line;
use super::keys;
use super::record::{Entry, Holding, KeyHash, Kind, Record, Released, Revoked};
use super::refusals::{contended, group_member, not_revocable, unreadable};
use super::{Leases, MAX_CAS_ATTEMPTS};
use crate::error::Result;
use crate::nats::{CasError, Write, WriteOp};
use crate::observe::METRICS;

/// How a holding is ended: by its holder, or by an operator.
pub(super) enum Ending<'a> {
    /// The holder releases: the key must match and `expected` must be a
    /// revision of the holding.
    Release {
        /// The revision the holder presents.
        expected: u64,
        /// The presented key's hash.
        hash: KeyHash,
    },
    /// An operator revokes: the current holding (only the one with `token`,
    /// when not 0), whoever holds it.
    Revoke {
        /// The token the operator targets, or 0 for any.
        token: u64,
        /// Why.
        why: &'a str,
        /// Who.
        by: &'a str,
    },
}

impl Leases {
    /// Ends a holding at its holder's request; returns the release's
    /// revision.
    pub async fn release(&self, name: &str, expected: u64, key: &str) -> Result<u64> {
        let ending = Ending::Release {
            expected,
            hash: KeyHash::of(key),
        };
        let (revision, _) = self.end(name, ending).await?;
        Ok(revision)
    }

    /// Revokes the current holding of `name` (only the one with `token`,
    /// when not 0): a `KV-Operation: PURGE` write over it, which watchers
    /// report as REVOKED and which makes the holder's next Renew or Release
    /// fail with LEASE_NOT_HELD. Returns the revoke's revision and the
    /// holding that ended.
    pub async fn revoke(
        &self,
        name: &str,
        token: u64,
        why: &str,
        by: &str,
    ) -> Result<(u64, Holding)> {
        self.end(name, Ending::Revoke { token, why, by }).await
    }

    /// The one conditional-write loop that ends holdings: find the holding
    /// the ending applies to, write the tombstone or purge over exactly its
    /// revision, and start again on a lost race.
    pub(super) async fn end(&self, name: &str, ending: Ending<'_>) -> Result<(u64, Holding)> {
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (revision, rec) = match &ending {
                Ending::Release { expected, hash } => match self.cache.get(name, *expected) {
                    Some(rec) if rec.key_matches(hash) => (*expected, rec),
                    _ => self.verify_holding(name, *expected, hash).await?,
                },
                Ending::Revoke { token, .. } => self.revocable(name, *token).await?,
            };
            if matches!(ending, Ending::Release { .. }) && !rec.group.is_empty() {
                return Err(group_member(name, &rec.group, "Release"));
            }
            let token = rec.token_at(revision);
            let holder = rec.holder.clone();
            let (op, payload) = match &ending {
                Ending::Release { .. } => (WriteOp::Delete, Released { holder, token }.encode()),
                Ending::Revoke { why, by, .. } => (
                    WriteOp::Purge,
                    Revoked {
                        holder,
                        token,
                        revoked_by: by.to_string(),
                        reason: why.to_string(),
                        lock_delay_s: rec.lock_delay_s,
                    }
                    .encode(),
                ),
            };
            // A release of this replica's grant, written on the line with
            // nobody queued and the line unchanged since: one write
            // conditional on the line, so the next plain Acquire needs no
            // read either (design section 16, "One write"). A line that
            // changed (a waiter queued) fails it, and the release is
            // written as any other (so it is not tried while this
            // replica's watcher shows a waiter).
            let on_line = matches!(ending, Ending::Release { .. })
                && rec.lock_delay_s == 0
                && !self.hub.queued(name)
                && self.lines.get(name)
                    == Some(Line {
                        last: revision,
                        free: false,
                    });
            let mut freed_line = false;
            let written = if on_line {
                match self
                    .store
                    .delete_under(
                        &keys::lease(name),
                        payload.clone(),
                        revision,
                        &keys::line_filter(name),
                    )
                    .await
                {
                    Err(CasError::Conflict) => {
                        self.lines.forget(name);
                        self.store
                            .delete(&keys::record_of(name), payload, revision)
                            .await
                    }
                    other => {
                        freed_line = other.is_ok();
                        other
                    }
                }
            } else if rec.lock_delay_s > 0 {
                // A holding with a lock delay has a fence: it goes in the same
                // batch, so that neither a release (no delay) nor a revoke
                // (its delay is in the purge) leaves one behind for the
                // marker that replaces this message when it ages out.
                let fence = Write::delete(keys::fence(name), bytes::Bytes::new(), None);
                let end = Write {
                    name: keys::record_of(name),
                    op,
                    payload,
                    expected: Some(revision),
                    expected_of: None,
                    ttl: Duration::ZERO,
                };
                self.store.batch(&[fence, end]).await
            } else if op == WriteOp::Delete {
                self.store
                    .delete(&keys::record_of(name), payload, revision)
                    .await
            } else {
                self.store
                    .purge(&keys::record_of(name), payload, revision)
                    .await
            };
            match written {
                Ok(at) => {
                    self.cache.remove(name);
                    match freed_line {
                        true => {
                            METRICS.line_writes.inc();
                            self.lines.set(
                                name,
                                Line {
                                    last: at,
                                    free: true,
                                },
                            );
                        }
                        false => self.lines.forget(name),
                    }
                    match &ending {
                        Ending::Release { .. } => {
                            self.free.released(name, at);
                            METRICS.released.inc();
                            tracing::debug!(name, holder = %rec.holder, token, "released");
                        }
                        Ending::Revoke { why, by, .. } => {
                            self.free.forget(name);
                            METRICS.revoked.inc();
                            tracing::warn!(name, holder = %rec.holder, token, revoked_by = by, reason = why, revision = at, "lease revoked");
                        }
                    }
                    return Ok((at, Holding::at(name, revision, (*rec).clone())));
                }
                Err(CasError::Conflict) => {
                    // Whatever we knew is stale: read the leader again.
                    self.cache.remove(name);
                }
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(contended(name))
    }

    /// Reads the current holding of `name` from the leader for a revoke:
    /// any holder's, or only the one with `token` when not 0.
    pub(super) async fn revocable(&self, name: &str, token: u64) -> Result<(u64, Arc<Record>)> {
        let last = self.read_lease(name).await?;
        let (revision, record) = match last {
            Some(Entry {
                revision,
                kind: Kind::Held(record),
                ..
            }) => (revision, record),
            Some(Entry {
                kind: Kind::Unreadable,
                ..
            }) => return Err(unreadable(name, self.store.bucket())),
            _ => return Err(not_revocable(name, "it is not held")),
        };
        let current = record.token_at(revision);
        if token != 0 && token != current {
            return Err(not_revocable(
                name,
                &format!("its current holding has token {current}, not {token}"),
            )
            .with("fencing_token", current));
        }
        Ok((revision, Arc::new(record)))
    }
}
