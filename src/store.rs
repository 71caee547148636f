//! The KV adapter: everything Tenure asks of NATS JetStream.
//!
//! Tenure uses a KV bucket (`KV_<bucket>` stream, subjects `$KV.<bucket>.>`)
//! but does not go through the async-nats KV API for writes: `kv.create`
//! falls back to an update *without* the TTL when the key's last message is
//! a tombstone or marker, and `kv.update` drops the TTL, so a lease written
//! that way would never expire. Every write here is a raw JetStream publish
//! with `Nats-Expected-Last-Subject-Sequence` and `Nats-TTL`.
//!
//! Reads that decide a reply use the non-direct message-get API, which the
//! stream leader answers, so a lagging follower can never make a live
//! holding look stale.

use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{self, consumer, context::PublishErrorKind, kv, stream};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::StreamExt;
use tracing::Instrument;

use crate::error::{Error, Reason, Result};
use crate::record::{Record, Released};

/// Where the bucket lives and how it is made.
#[derive(Debug, Clone)]
pub struct BucketConfig {
    /// The KV bucket name (the stream is `KV_<bucket>`).
    pub bucket: String,
    /// Stream replicas: 1 on one server, 3 on a cluster.
    pub replicas: usize,
    /// How long NATS keeps an expiry marker (and Tenure a release tombstone).
    pub marker_ttl: Duration,
}

/// What the last message of a lease name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A live holding.
    Held(Record),
    /// A value that is not a Tenure record (written by something else).
    Unreadable,
    /// A release tombstone (`KV-Operation: DEL`), with its payload if ours.
    Released(Option<Released>),
    /// An expiry marker written by NATS (`Nats-Marker-Reason: MaxAge`).
    Expired,
    /// An operator purge (`KV-Operation: PURGE`, or a purge/remove marker).
    Revoked,
}

/// One message of the bucket, classified.
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

/// Why a compare-and-set write did not happen.
#[derive(Debug)]
pub enum CasError {
    /// The key's last revision was not the expected one; `current` is the
    /// revision NATS reported, when it said.
    Conflict {
        /// The key's current revision, if NATS named it.
        current: Option<u64>,
    },
    /// Any other failure, ready to return to the caller.
    Failed(Error),
}

/// A handle on the lease bucket; cheap to clone.
#[derive(Clone)]
pub struct Store {
    /// The NATS connection, for its connection state.
    client: async_nats::Client,
    /// The JetStream context that publishes.
    js: jetstream::Context,
    /// The bucket's stream, for leader reads and consumers.
    stream: stream::Stream,
    /// The bucket name.
    bucket: String,
    /// `$KV.<bucket>.`: the subject prefix of every key.
    prefix: String,
    /// The TTL given to release tombstones.
    marker_ttl: Duration,
}

impl Store {
    /// Creates the bucket if it does not exist, or verifies the one that does,
    /// then reads the stream info back and refuses a server that did not
    /// really enable per-message TTL.
    pub async fn open(client: async_nats::Client, cfg: &BucketConfig) -> Result<Store> {
        let js = jetstream::new(client.clone());
        let stream_name = format!("KV_{}", cfg.bucket);
        let stream = match js.get_stream(&stream_name).await {
            Ok(stream) => stream,
            Err(err) if is_stream_not_found(&err) => {
                js.create_key_value(kv::Config {
                    bucket: cfg.bucket.clone(),
                    description: "Tenure leases".into(),
                    history: 1,
                    storage: stream::StorageType::File,
                    num_replicas: cfg.replicas,
                    limit_markers: Some(cfg.marker_ttl),
                    ..Default::default()
                })
                .await
                .map_err(|e| {
                    Error::new(
                        Reason::Internal,
                        format!(
                            "cannot create KV bucket {:?}: {e}; per-lease TTL needs nats-server 2.11 or newer",
                            cfg.bucket
                        ),
                    )
                })?;
                js.get_stream(&stream_name)
                    .await
                    .map_err(|e| Error::nats("reading the new bucket back", e))?
            }
            Err(err) => return Err(Error::nats("looking up the bucket", err)),
        };
        let store = Store {
            client,
            js,
            stream,
            bucket: cfg.bucket.clone(),
            prefix: format!("$KV.{}.", cfg.bucket),
            marker_ttl: cfg.marker_ttl,
        };
        store.verify().await?;
        Ok(store)
    }

    /// Reads the stream info and checks that the bucket can expire leases:
    /// older servers accept `allow_msg_ttl` and silently ignore it.
    pub async fn verify(&self) -> Result<()> {
        let mut stream = self.stream.clone();
        let info = stream
            .info()
            .await
            .map_err(|e| Error::nats("reading the bucket's stream info", e))?;
        let config = &info.config;
        if !config.allow_message_ttl || config.subject_delete_marker_ttl.is_none() {
            return Err(Error::new(
                Reason::Internal,
                format!(
                    "bucket {:?} (stream {}) does not have per-message TTL and delete markers enabled \
                     (allow_msg_ttl={}, subject_delete_marker_ttl={:?}); leases would never expire. \
                     Use nats-server 2.11 or newer and a new bucket name, or enable both on the stream",
                    self.bucket, config.name, config.allow_message_ttl, config.subject_delete_marker_ttl
                ),
            ));
        }
        if config.max_messages_per_subject != 1 {
            tracing::warn!(
                bucket = %self.bucket,
                history = config.max_messages_per_subject,
                "bucket keeps more than one revision per lease; Tenure only needs 1"
            );
        }
        Ok(())
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Whether the NATS connection is up right now.
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == State::Connected
    }

    /// Fails fast with `NATS_UNAVAILABLE` while the connection is down, rather
    /// than letting a call wait for a reply timeout.
    fn ensure_connected(&self) -> Result<()> {
        if self.is_connected() {
            Ok(())
        } else {
            Err(Error::new(
                Reason::NatsUnavailable,
                "NATS is not connected; Tenure is reconnecting, retry shortly",
            ))
        }
    }

    /// The bucket's last revision (stream sequence), from the stream leader.
    pub async fn last_revision(&self) -> Result<u64> {
        self.ensure_connected()?;
        let info = self
            .stream
            .get_info()
            .await
            .map_err(|e| Error::nats("reading the bucket's position", e))?;
        Ok(info.state.last_sequence)
    }

    /// The last message of a lease name, read from the stream leader;
    /// `None` when the name has no message at all.
    pub async fn last(&self, name: &str) -> Result<Option<Entry>> {
        self.ensure_connected()?;
        let subject = format!("{}{}", self.prefix, name);
        let read = self.stream.get_last_raw_message_by_subject(&subject);
        match read
            .instrument(
                tracing::debug_span!("nats.get_last", otel.kind = "client", subject = %subject),
            )
            .await
        {
            Ok(msg) => Ok(Some(Entry {
                name: name.to_string(),
                revision: msg.sequence,
                time_ms: unix_ms(msg.time),
                kind: classify(Some(&msg.headers), &msg.payload),
            })),
            Err(err) => match err.kind() {
                stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
                _ => Err(Error::nats("reading the lease", err)),
            },
        }
    }

    /// Writes a holding if the name's last revision is `expected` (0: none).
    /// Returns the new revision.
    pub async fn put(
        &self,
        name: &str,
        record: &Record,
        expected: u64,
        ttl: Duration,
    ) -> Result<u64, CasError> {
        let msg = jetstream::message::PublishMessage::build()
            .payload(record.encode())
            .expected_last_subject_sequence(expected)
            .ttl(ttl);
        self.publish(name, msg).await
    }

    /// Writes a release tombstone if the name's last revision is `expected`.
    /// Returns the tombstone's revision.
    pub async fn tombstone(
        &self,
        name: &str,
        released: &Released,
        expected: u64,
    ) -> Result<u64, CasError> {
        self.end(name, "DEL", released.encode(), expected).await
    }

    /// Writes an operator revoke if the name's last revision is `expected`:
    /// a `KV-Operation: PURGE` message (what `nats kv purge` writes, so
    /// watchers classify it as REVOKED) whose payload says who revoked and
    /// why. Like a tombstone it carries the marker TTL. Returns its revision.
    pub async fn purge(
        &self,
        name: &str,
        payload: bytes::Bytes,
        expected: u64,
    ) -> Result<u64, CasError> {
        self.end(name, "PURGE", payload, expected).await
    }

    /// Writes a message that ends a holding (`KV-Operation: operation`) if
    /// the name's last revision is `expected`. It has a TTL too, or the
    /// bucket would keep one per name forever.
    async fn end(
        &self,
        name: &str,
        operation: &'static str,
        payload: bytes::Bytes,
        expected: u64,
    ) -> Result<u64, CasError> {
        let msg = jetstream::message::PublishMessage::build()
            .payload(payload)
            .header("KV-Operation", operation)
            .expected_last_subject_sequence(expected)
            .ttl(self.marker_ttl);
        self.publish(name, msg).await
    }

    /// Sends one conditional publish and waits for its acknowledgement.
    async fn publish(
        &self,
        name: &str,
        msg: jetstream::message::PublishMessage,
    ) -> Result<u64, CasError> {
        self.ensure_connected().map_err(CasError::Failed)?;
        let subject = format!("{}{}", self.prefix, name);
        let span = tracing::debug_span!("nats.publish", otel.kind = "client", subject = %subject);
        let ack = async {
            match self.js.send_publish(subject, msg).await {
                Ok(ack) => ack.await,
                Err(err) => Err(err),
            }
        }
        .instrument(span)
        .await;
        match ack {
            Ok(ack) => Ok(ack.sequence),
            Err(err) => match err.kind() {
                PublishErrorKind::WrongLastSequence => {
                    // Counted here, the one place every lost race passes.
                    crate::metrics::cas_conflict();
                    Err(CasError::Conflict {
                        current: wrong_last_sequence(&err.to_string()),
                    })
                }
                _ => Err(CasError::Failed(Error::nats("the write", err))),
            },
        }
    }

    /// Follows the bucket with an ordered consumer. `filter` is a key or a
    /// KV wildcard (`jobs.>`, `>`). With `snapshot`, the last message of every
    /// matching key comes first; otherwise only new messages. The consumer is
    /// recreated by async-nats after reconnects, resuming where it was.
    pub async fn follow(&self, filter: &str, snapshot: bool) -> Result<Follow> {
        self.ensure_connected()?;
        let deliver_policy = if snapshot {
            consumer::DeliverPolicy::LastPerSubject
        } else {
            consumer::DeliverPolicy::New
        };
        let consumer = self
            .stream
            .create_consumer(consumer::push::OrderedConfig {
                deliver_subject: self.client.new_inbox(),
                description: Some("tenure watch".into()),
                filter_subject: format!("{}{}", self.prefix, filter),
                replay_policy: consumer::ReplayPolicy::Instant,
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|e| Error::nats("starting a watch", e))?;
        let initially_pending = consumer.cached_info().num_pending;
        let messages = consumer
            .messages()
            .await
            .map_err(|e| Error::nats("starting a watch", e))?;
        let prefix = self.prefix.clone();
        let stream = messages.map(move |msg| {
            let msg = msg.map_err(|e| Error::nats("following the bucket", e))?;
            let info = msg
                .info()
                .map_err(|e| Error::new(Reason::Internal, format!("bad JetStream reply: {e}")))?;
            let name = msg
                .subject
                .strip_prefix(prefix.as_str())
                .unwrap_or(msg.subject.as_str())
                .to_string();
            let entry = Entry {
                name,
                revision: info.stream_sequence,
                time_ms: unix_ms(info.published),
                kind: classify(msg.headers.as_ref(), &msg.payload),
            };
            Ok((entry, info.pending))
        });
        Ok(Follow {
            initially_pending,
            messages: stream.boxed(),
        })
    }
}

/// The messages of an ordered consumer, classified, each with the number of
/// messages still pending after it (0 marks the end of a snapshot).
pub struct Follow {
    /// Messages pending when the consumer was created (0: empty snapshot).
    pub initially_pending: u64,
    /// The classified messages with their pending counts.
    pub messages: futures::stream::BoxStream<'static, Result<(Entry, u64)>>,
}

/// Decides what a bucket message means from its headers and payload.
pub fn classify(headers: Option<&HeaderMap>, payload: &Bytes) -> Kind {
    if let Some(headers) = headers {
        if let Some(op) = headers.get("KV-Operation") {
            return match op.as_str() {
                "DEL" => Kind::Released(Released::decode(payload)),
                _ => Kind::Revoked,
            };
        }
        if let Some(reason) = headers.get("Nats-Marker-Reason") {
            return match reason.as_str() {
                "MaxAge" => Kind::Expired,
                _ => Kind::Revoked,
            };
        }
    }
    match Record::decode(payload) {
        Some(record) => Kind::Held(record),
        None => Kind::Unreadable,
    }
}

/// Parses the current revision out of "wrong last sequence: N".
fn wrong_last_sequence(text: &str) -> Option<u64> {
    let rest = &text[text.rfind("wrong last sequence: ")? + "wrong last sequence: ".len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Whether a get-stream failure means "no such stream".
fn is_stream_not_found(err: &jetstream::context::GetStreamError) -> bool {
    matches!(
        err.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(e)
            if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

/// Unix milliseconds of a NATS timestamp (0 before the epoch).
fn unix_ms(t: async_nats::datetime::DateTime) -> u64 {
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The revision NATS names in a CAS conflict is read back.
    #[test]
    fn parses_wrong_last_sequence() {
        assert_eq!(
            wrong_last_sequence(
                "wrong last sequence: jetstream error: wrong last sequence: 42 (code 400)"
            ),
            Some(42)
        );
        assert_eq!(wrong_last_sequence("timed out"), None);
    }

    /// Headers decide the kind before the payload does.
    #[test]
    fn classifies_headers() {
        let mut h = HeaderMap::new();
        h.insert("Nats-Marker-Reason", "MaxAge");
        assert_eq!(classify(Some(&h), &Bytes::new()), Kind::Expired);
        let mut h = HeaderMap::new();
        h.insert("KV-Operation", "PURGE");
        assert_eq!(classify(Some(&h), &Bytes::new()), Kind::Revoked);
        let mut h = HeaderMap::new();
        h.insert("KV-Operation", "DEL");
        assert_eq!(classify(Some(&h), &Bytes::new()), Kind::Released(None));
        assert_eq!(classify(None, &Bytes::from_static(b"x")), Kind::Unreadable);
    }
}
