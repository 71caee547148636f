//! What the bucket holds, in the lease layer's terms: the record stored
//! under each lease name, the payloads of a release and of a revoke, a
//! holding (a record at a revision), and what the last message of a name
//! means ([`Kind`]).
//!
//! Records are JSON rather than protobuf so that `nats kv get <bucket> _tenure.q.<name>.lease.holder`
//! shows an operator who holds what, with no decoder. Clients never read
//! records directly (the gRPC API is their contract), so readability wins.
//! Unknown fields are ignored, so later versions can add fields.

use std::collections::BTreeMap;

use crate::nats::{Message, Op};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// One holding as written to the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Who holds the lease.
    pub holder: String,
    /// The fencing token; 0 in the acquiring write, meaning "this revision".
    pub token: u64,
    /// Hex SHA-256 of the lease key; the key itself is never stored.
    pub key_sha256: String,
    /// The granted TTL in whole seconds.
    pub ttl_s: u64,
    /// When the holding was acquired, Unix milliseconds (server clock).
    pub acquired_ms: u64,
    /// When this write was made, Unix milliseconds (server clock).
    pub renewed_ms: u64,
    /// Small client metadata given at Acquire.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The lock delay of the holding, whole seconds: after it expires or is
    /// revoked, nobody may take the name for this long. Omitted when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_delay_s: u64,
    /// The names of the group this holding was acquired with (AcquireGroup),
    /// in request order and this name included; empty (and omitted) for a
    /// holding acquired alone. Every member's record lists the same names,
    /// so a reader of any member finds the others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group: Vec<String>,
    /// The revision the holding's acquiring write replaced (0: the name had
    /// no message), kept across renewals: a watcher that first sees the
    /// holding at a renewal learns from it whether the name changed in
    /// between without its seeing. Absent in records of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<u64>,
    /// The holding this one was handed over from by a Transfer (its holder
    /// and token), which ended at this holding's acquiring write: a
    /// watcher reports that end as the giver's RELEASED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transferred_from: Option<Released>,
    /// How a read-write lock's holding holds the name; `None` (omitted)
    /// for a plain lease or a semaphore slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

/// How a holding of a read-write lock holds its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The only holder: nobody else holds the name meanwhile.
    Exclusive,
    /// One of any number of shared holders, while nobody holds it
    /// exclusively.
    Shared,
}

/// Whether a number field is 0 (and so left out of the JSON).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Record {
    /// The fencing token of this holding, given the revision it was read at.
    pub fn token_at(&self, revision: u64) -> u64 {
        if self.token == 0 {
            revision
        } else {
            self.token
        }
    }

    /// The record of a new holding of `holder`, whose lease key hashes to
    /// `key`, written at `now_ms` over the name's message at revision `over`
    /// (0: none): token 0 ("the revision of this write"), no group (a
    /// group's grant sets its members). The one place a holding starts.
    pub fn grant(
        holder: &str,
        key: &KeyHash,
        ttl_s: u64,
        metadata: &BTreeMap<String, String>,
        lock_delay_s: u64,
        now_ms: u64,
        over: u64,
    ) -> Record {
        Record {
            holder: holder.to_string(),
            token: 0,
            key_sha256: key.to_hex(),
            ttl_s,
            acquired_ms: now_ms,
            renewed_ms: now_ms,
            metadata: metadata.clone(),
            lock_delay_s,
            group: Vec::new(),
            over: Some(over),
            transferred_from: None,
            mode: None,
        }
    }

    /// This record as a read-write lock's holding in `mode`.
    pub fn in_mode(self, mode: Mode) -> Record {
        Record {
            mode: Some(mode),
            ..self
        }
    }

    /// This record (read at `revision`) renewed at `now_ms`: the same
    /// holding and token, with the TTL `ttl_s` (`None`: the one it has).
    pub fn renewal(&self, revision: u64, ttl_s: Option<u64>, now_ms: u64) -> Record {
        Record {
            token: self.token_at(revision),
            ttl_s: ttl_s.unwrap_or(self.ttl_s),
            renewed_ms: now_ms,
            ..self.clone()
        }
    }

    /// Whether `key` is the lease key of this holding (constant time).
    pub fn key_matches(&self, key: &KeyHash) -> bool {
        match hex::decode(&self.key_sha256) {
            Ok(stored) if stored.len() == 32 => stored.ct_eq(&key.0).into(),
            _ => false,
        }
    }

    /// The JSON bytes stored in the bucket.
    pub fn encode(&self) -> bytes::Bytes {
        serde_json::to_vec(self)
            .expect("a record always serialises")
            .into()
    }

    /// Parses stored bytes; `None` when they are not a Tenure record.
    pub fn decode(bytes: &[u8]) -> Option<Record> {
        serde_json::from_slice(bytes).ok()
    }
}

/// The payload of a release tombstone: who released which holding, so that
/// watchers can report it even when they never saw the holding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The holder that released.
    pub holder: String,
    /// The fencing token of the holding that ended.
    pub token: u64,
}

impl Released {
    /// The JSON bytes of the tombstone.
    pub fn encode(&self) -> bytes::Bytes {
        serde_json::to_vec(self)
            .expect("a release always serialises")
            .into()
    }

    /// Parses a tombstone payload; `None` when absent or foreign.
    pub fn decode(bytes: &[u8]) -> Option<Released> {
        serde_json::from_slice(bytes).ok()
    }
}

/// The payload of a revoke (a purge message): who revoked which holding
/// and why, for `nats kv` readers and the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    /// The holder whose holding ended.
    pub holder: String,
    /// Its fencing token.
    pub token: u64,
    /// Who revoked it (the caller's identity).
    pub revoked_by: String,
    /// Why.
    pub reason: String,
    /// The lock delay of the holding that ended, whole seconds (0:
    /// omitted): the name stays refused that long after this revoke.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_delay_s: u64,
}

impl Revoked {
    /// The JSON bytes of the purge message.
    pub fn encode(&self) -> bytes::Bytes {
        serde_json::to_vec(self)
            .expect("a revoke always serialises")
            .into()
    }

    /// Parses a purge payload; `None` when absent or foreign (`nats kv purge`).
    pub fn decode(bytes: &[u8]) -> Option<Revoked> {
        serde_json::from_slice(bytes).ok()
    }
}

/// The value of a name's fence key (`_tenure.delay.<name>`): the lock delay
/// of the name's latest holding, kept apart from the record because an
/// expiry marker carries no payload and the record is gone once it expired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The lock delay, whole seconds.
    pub lock_delay_s: u64,
}

impl Fence {
    /// The JSON bytes of the fence.
    pub fn encode(&self) -> bytes::Bytes {
        serde_json::to_vec(self)
            .expect("a fence always serialises")
            .into()
    }

    /// Parses a fence; `None` when foreign.
    pub fn decode(bytes: &[u8]) -> Option<Fence> {
        serde_json::from_slice(bytes).ok()
    }
}

/// One holding: a lease record at a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The lease name.
    pub name: String,
    /// The revision of the latest write of this holding.
    pub revision: u64,
    /// The fencing token: the revision that acquired the holding.
    pub token: u64,
    /// The stored record (holder, TTL, times, metadata).
    pub record: Record,
    /// The semaphore slot of the holding (1 to the limit); 0 for a plain
    /// lease.
    pub slot: u32,
}

impl Holding {
    /// The holding `record` stands for when read at `revision`.
    pub fn at(name: &str, revision: u64, record: Record) -> Holding {
        Holding {
            name: name.to_string(),
            revision,
            token: record.token_at(revision),
            record,
            slot: 0,
        }
    }

    /// The same holding, shown as slot `slot` of semaphore `name` (it was
    /// read or written under the slot's key).
    pub fn in_slot(self, name: &str, slot: u32) -> Holding {
        Holding {
            name: name.to_string(),
            slot,
            ..self
        }
    }
}

/// What the last message of a lease name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A live holding.
    Held(Record),
    /// A value that is not a Tenure record (written by something else).
    Unreadable,
    /// A release tombstone, with its payload if ours.
    Released(Option<Released>),
    /// An expiry marker written by NATS.
    Expired,
    /// An operator purge (a revoke, or `nats kv purge`), with the lock
    /// delay of the holding it ended (whole seconds, 0: none).
    Revoked(u64),
}

impl Kind {
    /// The UPPER_SNAKE state name, for messages and error metadata.
    pub fn state(&self) -> &'static str {
        match self {
            Kind::Held(_) => "HELD",
            Kind::Unreadable => "UNREADABLE",
            Kind::Released(_) => "RELEASED",
            Kind::Expired => "EXPIRED",
            Kind::Revoked(_) => "REVOKED",
        }
    }
}

/// One message of the bucket, read as a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The lease name (the KV key).
    pub name: String,
    /// The stream sequence of the message: the KV revision.
    pub revision: u64,
    /// When the message was stored, Unix milliseconds (server clock).
    pub time_ms: u64,
    /// What it says.
    pub kind: Kind,
}

impl From<Message> for Entry {
    fn from(msg: Message) -> Entry {
        let kind = match msg.op {
            Op::Put(payload) => Record::decode(&payload).map_or(Kind::Unreadable, Kind::Held),
            Op::Delete(payload) => Kind::Released(Released::decode(&payload)),
            Op::Purge(payload) => {
                Kind::Revoked(Revoked::decode(&payload).map_or(0, |r| r.lock_delay_s))
            }
            Op::Expired => Kind::Expired,
        };
        Entry {
            name: msg.name,
            revision: msg.revision,
            time_ms: msg.time_ms,
            kind,
        }
    }
}

/// The SHA-256 of a lease key.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyHash(pub [u8; 32]);

impl KeyHash {
    /// Hashes a lease key.
    pub fn of(key: &str) -> KeyHash {
        KeyHash(Sha256::digest(key.as_bytes()).into())
    }

    /// The hex form stored in records.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl std::fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHash(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record survives encode/decode, and only its own key matches.
    #[test]
    fn round_trip_and_key_check() {
        let key = KeyHash::of("a-very-secret-lease-key");
        let rec = Record {
            holder: "worker-1".into(),
            token: 0,
            key_sha256: key.to_hex(),
            ttl_s: 10,
            acquired_ms: 1,
            renewed_ms: 2,
            metadata: BTreeMap::from([("k".into(), "v".into())]),
            lock_delay_s: 0,
            group: vec!["n".into(), "m".into()],
            over: Some(7),
            transferred_from: None,
            mode: Some(Mode::Shared),
        };
        let back = Record::decode(&rec.encode()).unwrap();
        assert_eq!(back, rec);
        assert!(back.key_matches(&key));
        assert!(!back.key_matches(&KeyHash::of("another-secret-lease-key")));
        assert_eq!(back.token_at(42), 42);
        assert_eq!(Record { token: 7, ..back }.token_at(42), 7);
        assert!(Record::decode(b"not json").is_none());
    }

    /// A bucket message reads as the lease state it stands for; a value
    /// that is not a record is unreadable, never a holding.
    #[test]
    fn messages_read_as_lease_states() {
        let msg = |op| Message {
            name: "n".into(),
            revision: 3,
            time_ms: 0,
            op,
            replaced: None,
        };
        let released = Released {
            holder: "h".into(),
            token: 2,
        };
        assert_eq!(
            Entry::from(msg(Op::Delete(released.encode()))).kind,
            Kind::Released(Some(released))
        );
        assert_eq!(
            Entry::from(msg(Op::Delete(bytes::Bytes::new()))).kind,
            Kind::Released(None)
        );
        assert_eq!(Entry::from(msg(Op::Expired)).kind, Kind::Expired);
        assert_eq!(
            Entry::from(msg(Op::Purge(bytes::Bytes::new()))).kind,
            Kind::Revoked(0)
        );
        assert_eq!(
            Entry::from(msg(Op::Put(bytes::Bytes::from_static(b"{}")))).kind,
            Kind::Unreadable
        );
    }
}

/// Records and entries for the lease layer's unit tests.
#[cfg(test)]
pub mod fixtures {
    use super::{Entry, KeyHash, Kind, Record};

    /// A record of `holder` under lease key `key` with stored token `token`
    /// (0: the acquiring write).
    pub fn record(holder: &str, key: &str, token: u64) -> Record {
        Record {
            holder: holder.into(),
            token,
            key_sha256: KeyHash::of(key).to_hex(),
            ttl_s: 5,
            acquired_ms: 0,
            renewed_ms: 0,
            metadata: Default::default(),
            lock_delay_s: 0,
            group: Vec::new(),
            over: None,
            transferred_from: None,
            mode: None,
        }
    }

    /// A live holding of `holder` with stored token `token`.
    pub fn held(holder: &str, token: u64) -> Kind {
        Kind::Held(record(holder, "fixture-lease-key", token))
    }

    /// A live holding of `holder` with stored token `token` whose acquiring
    /// write replaced revision `over`.
    pub fn held_over(holder: &str, token: u64, over: u64) -> Kind {
        Kind::Held(Record {
            over: Some(over),
            ..record(holder, "fixture-lease-key", token)
        })
    }

    /// A message of `name` at `revision` that says `kind`.
    pub fn entry(name: &str, revision: u64, kind: Kind) -> Entry {
        Entry {
            name: name.into(),
            revision,
            time_ms: 0,
            kind,
        }
    }
}
