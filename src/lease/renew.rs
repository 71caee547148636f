//! Keeping a lease: Renew, and the ownership check every call of a holder
//! makes.
//!
//! A holder proves ownership with its lease key, checked in constant time
//! against the hash in the exact record the write replaces, and names a
//! revision of its holding (a stale one is fine: a retry after a lost
//! reply). A renewal keeps the holding's token and is conditional on the
//! record it read, so a renewal racing an end or another renewal loses
//! cleanly. Records this replica wrote or read come from the key cache and
//! cost no read.

use std::sync::Arc;

use super::record::{Entry, Holding, KeyHash, Kind, Record};
use super::refusals::{cas_failed, contended, group_member, not_held, unreadable};
use super::rules;
use super::{now_ms, Leases, MAX_CAS_ATTEMPTS};
use crate::error::Result;
use crate::nats::CasError;

impl Leases {
    /// Extends a holding. `expected` may be stale (a retry after a lost
    /// reply) as long as it belongs to the current holding.
    pub async fn renew(
        &self,
        name: &str,
        expected: u64,
        key: &str,
        ttl_s: Option<u64>,
    ) -> Result<Holding> {
        let hash = KeyHash::of(key);
        if let Some(rec) = self.cache.get(name, expected) {
            if rec.key_matches(&hash) {
                if !rec.group.is_empty() {
                    return Err(group_member(name, &rec.group, "Renew"));
                }
                match self.write_renewal(name, expected, &rec, ttl_s).await {
                    Err(CasError::Conflict) => {}
                    other => return other.map_err(cas_failed),
                }
            }
        }
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (revision, rec) = self.verify_holding(name, expected, &hash).await?;
            if !rec.group.is_empty() {
                return Err(group_member(name, &rec.group, "Renew"));
            }
            match self.write_renewal(name, revision, &rec, ttl_s).await {
                Err(CasError::Conflict) => continue,
                other => return other.map_err(cas_failed),
            }
        }
        Err(contended(name))
    }

    /// Reads the current record of `name` from the leader and checks that it
    /// is the caller's holding: the key matches and `expected` belongs to
    /// the holding ([`rules::belongs_to_holding`]).
    pub(super) async fn verify_holding(
        &self,
        name: &str,
        expected: u64,
        hash: &KeyHash,
    ) -> Result<(u64, Arc<Record>)> {
        let last = self.read_lease(name).await?;
        let (revision, rec) = match last {
            Some(Entry {
                revision,
                kind: Kind::Held(rec),
                ..
            }) => (revision, Arc::new(rec)),
            Some(Entry {
                kind: Kind::Unreadable,
                ..
            }) => return Err(unreadable(name, self.store.bucket())),
            Some(entry) => {
                let state = entry.kind.state();
                return Err(not_held(
                    name,
                    format!("it was {state} at revision {}", entry.revision),
                )
                .with("state", state));
            }
            None => {
                return Err(not_held(name, "nobody holds it".to_string()).with("state", "ABSENT"))
            }
        };
        self.cache.insert(name, revision, &rec);
        let token = rec.token_at(revision);
        if !rec.key_matches(hash) {
            return Err(not_held(
                name,
                format!("it is held under another lease key (token {token})"),
            )
            .with("state", "HELD"));
        }
        if !rules::belongs_to_holding(expected, token, revision) {
            return Err(not_held(
                name,
                format!(
                    "revision {expected} is not part of the current holding (token {token}, revision {revision})"
                ),
            )
            .with("state", "HELD"));
        }
        Ok((revision, rec))
    }

    /// Writes a renewal of `rec` (the record of `name` at `revision`) with
    /// the same token, conditional on that revision.
    pub(super) async fn write_renewal(
        &self,
        name: &str,
        revision: u64,
        rec: &Record,
        ttl_s: Option<u64>,
    ) -> Result<Holding, CasError> {
        let record = rec.renewal(revision, ttl_s, now_ms());
        let ttl = self.nats_ttl(record.ttl_s);
        let new_revision = self
            .store
            .put(
                &super::keys::record_of(name),
                record.encode(),
                revision,
                ttl,
            )
            .await?;
        self.cache.insert(name, new_revision, &record);
        Ok(Holding::at(name, new_revision, record))
    }
}
