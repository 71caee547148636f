//! Message kinds: what a message of the bucket is, told apart by its
//! headers.
//!
//! A KV bucket's stream holds more than values: `nats kv del` writes a
//! tombstone, `nats kv purge` a purge, and NATS itself writes a marker
//! when a TTL removes a key's last message. They differ only in their
//! headers, and every reader (a leader read, a scan, a watch, a replay)
//! must tell them apart the same way, so the headers and the one function
//! that reads them live here, apart from the bucket that writes them and
//! the consumers that deliver them. The adapter knows NATS's headers and
//! markers, not Tenure's records: the lease layer gets each message as an
//! [`Op`] with its raw payload.

use async_nats::HeaderMap;
use bytes::Bytes;

/// The KV header that marks a delete or purge message.
pub const KV_OPERATION: &str = "KV-Operation";
/// [`KV_OPERATION`] of a delete tombstone (`nats kv del`).
pub const KV_OPERATION_DELETE: &str = "DEL";
/// [`KV_OPERATION`] of a purge (`nats kv purge`).
pub const KV_OPERATION_PURGE: &str = "PURGE";
/// The header NATS puts on the markers it writes itself.
pub const NATS_MARKER_REASON: &str = "Nats-Marker-Reason";
/// [`NATS_MARKER_REASON`] of a marker written when a TTL or MaxAge removed
/// the subject's last message.
pub const MARKER_REASON_MAX_AGE: &str = "MaxAge";

/// The header of a conditional publish: the last sequence of the subject
/// (or of [`EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT`], when set) the write was
/// made over. JetStream stores it with the message, so a reader learns
/// which revision each conditional write replaced.
pub const EXPECTED_LAST_SUBJECT_SEQUENCE: &str = "Nats-Expected-Last-Subject-Sequence";
/// The header that moves [`EXPECTED_LAST_SUBJECT_SEQUENCE`]'s condition to
/// another subject (or a wildcard).
pub const EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: &str =
    "Nats-Expected-Last-Subject-Sequence-Subject";

/// The revision of `subject`'s message that a message of `subject`
/// replaced, from its stored [`EXPECTED_LAST_SUBJECT_SEQUENCE`] header (0:
/// the subject had no message). `None` for what no conditional publish on
/// its own subject wrote: NATS's own markers, unconditional writes, `nats
/// kv` commands, and writes conditional on another subject.
pub fn replaced(headers: Option<&HeaderMap>, subject: &str) -> Option<u64> {
    let headers = headers?;
    if let Some(of) = headers.get(EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT) {
        if of.as_str() != subject {
            return None;
        }
    }
    headers
        .get(EXPECTED_LAST_SUBJECT_SEQUENCE)?
        .as_str()
        .parse()
        .ok()
}

/// What a message of the bucket is, by its headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A value (a plain publish), with its payload.
    Put(Bytes),
    /// A delete tombstone (`KV-Operation: DEL`), with its payload.
    Delete(Bytes),
    /// A purge (`KV-Operation: PURGE`, or a purge/remove marker), with its
    /// payload (empty for a marker).
    Purge(Bytes),
    /// A marker NATS wrote when a TTL removed the last message
    /// (`Nats-Marker-Reason: MaxAge`).
    Expired,
}

/// One message of the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The KV key (the lease name).
    pub name: String,
    /// The stream sequence of the message: the KV revision.
    pub revision: u64,
    /// When the message was stored, Unix milliseconds (server clock).
    pub time_ms: u64,
    /// What it is.
    pub op: Op,
    /// The revision of the subject's message this one replaced, when a
    /// conditional write made it (see [`replaced`]).
    pub replaced: Option<u64>,
}

/// Decides what a bucket message is from its headers.
pub fn classify(headers: Option<&HeaderMap>, payload: Bytes) -> Op {
    if let Some(headers) = headers {
        if let Some(op) = headers.get(KV_OPERATION) {
            return match op.as_str() {
                KV_OPERATION_DELETE => Op::Delete(payload),
                _ => Op::Purge(payload),
            };
        }
        if let Some(reason) = headers.get(NATS_MARKER_REASON) {
            return match reason.as_str() {
                MARKER_REASON_MAX_AGE => Op::Expired,
                _ => Op::Purge(Bytes::new()),
            };
        }
    }
    Op::Put(payload)
}

/// Unix milliseconds of a NATS timestamp (0 before the epoch).
pub fn unix_ms(t: async_nats::datetime::DateTime) -> u64 {
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Headers decide what a message is; without them it is a value.
    #[test]
    fn classifies_headers() {
        let mut h = HeaderMap::new();
        h.insert(NATS_MARKER_REASON, MARKER_REASON_MAX_AGE);
        assert_eq!(classify(Some(&h), Bytes::new()), Op::Expired);
        let mut h = HeaderMap::new();
        h.insert(NATS_MARKER_REASON, "Purge");
        assert_eq!(classify(Some(&h), Bytes::new()), Op::Purge(Bytes::new()));
        let mut h = HeaderMap::new();
        h.insert(KV_OPERATION, KV_OPERATION_PURGE);
        assert_eq!(classify(Some(&h), Bytes::new()), Op::Purge(Bytes::new()));
        let mut h = HeaderMap::new();
        h.insert(KV_OPERATION, KV_OPERATION_DELETE);
        assert_eq!(
            classify(Some(&h), Bytes::from_static(b"p")),
            Op::Delete(Bytes::from_static(b"p"))
        );
        assert_eq!(
            classify(None, Bytes::from_static(b"x")),
            Op::Put(Bytes::from_static(b"x"))
        );
    }
}
