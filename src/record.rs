//! The value stored under each lease name, and the payload of a release.
//!
//! Records are JSON rather than protobuf so that `nats kv get <bucket> <name>`
//! shows an operator who holds what, with no decoder. Clients never read
//! records directly (the gRPC API is their contract), so readability wins.
//! Unknown fields are ignored, so later versions can add fields.

use std::collections::BTreeMap;

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
        };
        let back = Record::decode(&rec.encode()).unwrap();
        assert_eq!(back, rec);
        assert!(back.key_matches(&key));
        assert!(!back.key_matches(&KeyHash::of("another-secret-lease-key")));
        assert_eq!(back.token_at(42), 42);
        assert_eq!(Record { token: 7, ..back }.token_at(42), 7);
        assert!(Record::decode(b"not json").is_none());
    }
}
