//! The bucket: opening it and writing to it, and reading it from the
//! stream leader.
//!
//! [`Store`] is a handle on one shard's KV bucket (`KV_<bucket>` stream,
//! subjects `$KV.<bucket>.>`). It creates or opens the stream (every shard
//! of it, [`Store::open_shards`]), checks that it can expire leases and
//! turns on atomic batches; it makes conditional publishes, one at a time
//! or as an atomic batch; it reads from the stream leader; and
//! [`balance_leaders`] spreads the shards' stream leaders over a cluster.
//! Following the bucket is in [`super::consumer`], telling its messages
//! apart in [`super::message`].
//!
//! Tenure does not go through the async-nats KV API for writes:
//! `kv.create` falls back to an update *without* the TTL when the key's
//! last message is a tombstone or marker, and `kv.update` drops the TTL,
//! so a lease written that way would never expire. Every write here is a
//! raw JetStream publish with `Nats-Expected-Last-Subject-Sequence` and
//! `Nats-TTL`.
//!
//! Reads that decide a reply use the non-direct message-get API, which the
//! stream leader answers, so a lagging follower can never make a live
//! holding look stale.

use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{self, context::PublishErrorKind, kv, stream};
use async_nats::HeaderMap;
use bytes::Bytes;
use tracing::Instrument;

use super::message::{
    classify, replaced, unix_ms, Message, EXPECTED_LAST_SUBJECT_SEQUENCE,
    EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT, KV_OPERATION, KV_OPERATION_DELETE, KV_OPERATION_PURGE,
};
use crate::config::BucketConfig;
use crate::error::{Error, Reason, Result};
use crate::observe::METRICS;

/// The per-message TTL header, whole seconds.
pub const NATS_TTL: &str = "Nats-TTL";
/// Atomic batch publish (ADR-50): the batch every message belongs to.
pub const NATS_BATCH_ID: &str = "Nats-Batch-Id";
/// Atomic batch publish: the message's place in its batch, 1, 2, 3...
pub const NATS_BATCH_SEQUENCE: &str = "Nats-Batch-Sequence";
/// Atomic batch publish: on the last message, commits the batch.
pub const NATS_BATCH_COMMIT: &str = "Nats-Batch-Commit";
/// [`NATS_BATCH_COMMIT`] value that stores the last message and commits.
pub const NATS_BATCH_COMMIT_FINAL: &str = "1";
/// The nats-server version that first has atomic batch publish.
pub const ATOMIC_BATCH_VERSION: &str = "2.12";
/// JetStream error: the expected last subject sequence did not match.
const ERR_WRONG_LAST_SEQUENCE: u64 = 10071;
/// JetStream error: a replicated stream's leader refused a conditional
/// write because another write of the same subject is still being
/// replicated ("wrong last sequence", without a sequence). Nothing was
/// stored: a lost race, like [`ERR_WRONG_LAST_SEQUENCE`]. Found by the
/// 3-node cluster test, in ~13% of two replicas racing for one name.
const ERR_WRONG_LAST_SEQUENCE_IN_PROCESS: u64 = 10164;
/// JetStream error: the stream could not store the message; with
/// "maximum bytes exceeded", the bucket is at its max_bytes.
const ERR_STORE_FAILED: u64 = 10077;
/// JetStream error: atomic batch publish is not enabled on the stream.
const ERR_BATCH_DISABLED: u64 = 10174;
/// JetStream error code: the stream (or server) has too many atomic batches
/// open (by default 50 per stream, 1,000 per server); a later batch fits.
const ERR_BATCH_INFLIGHT: u64 = 10210;
/// How long a batch refused for too many open batches is retried before
/// the write fails (retryable) to the caller.
const BATCH_INFLIGHT_PATIENCE: Duration = Duration::from_secs(2);
/// Most atomic batches this process has open on the stream at once, below
/// JetStream's per-stream limit of 50: a burst of batches queues here for a
/// turn instead of being refused by the server and retried (other replicas'
/// batches can still fill the stream's limit: that is what the retry is for).
const BATCHES_IN_FLIGHT: usize = 40;

/// The bucket of shard `i` of `bucket`: shard 0 is `bucket` itself.
pub fn shard_bucket(bucket: &str, i: u32) -> String {
    match i {
        0 => bucket.to_string(),
        i => format!("{bucket}-shard{i}"),
    }
}

/// The key layout of the lease layer this version writes: a lease's record
/// beside its queue at `_tenure.q.<name>.lease.holder`, not at the lease name
/// itself as versions before it kept it (design section 2). Kept in the
/// stream's description; a bucket without it that holds messages was
/// written by an older version and is refused.
const KEY_LAYOUT: &str = "key layout 2";

/// The description of a bucket's stream made as shard `index` of `count`:
/// where the shard count and the key layout are kept.
fn shard_description(index: u32, count: u32) -> String {
    format!("Tenure leases: shard {index} of {count}; {KEY_LAYOUT}")
}

/// Whether a stream's description names this version's key layout.
fn in_key_layout(description: &Option<String>) -> bool {
    description
        .as_deref()
        .is_some_and(|d| d.split("; ").any(|part| part == KEY_LAYOUT))
}

/// The shard count in a stream's description ([`shard_description`]); 1
/// for any other description (a bucket made before shards existed).
fn parse_shard_description(description: &Option<String>) -> u32 {
    description
        .as_deref()
        .and_then(|d| d.strip_prefix("Tenure leases: shard "))
        .and_then(|d| d.split_once(" of "))
        .and_then(|(_, count)| count.split(';').next()?.parse().ok())
        .filter(|count| *count >= 1)
        .unwrap_or(1)
}

/// Why a compare-and-set write did not happen.
#[derive(Debug)]
pub enum CasError {
    /// The key's last revision was not the expected one (JetStream error
    /// 10071, "wrong last sequence"): another write got there first.
    Conflict,
    /// Any other failure, ready to return to the caller.
    Failed(Error),
}

/// What one write of an atomic batch does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOp {
    /// A value, expiring after the write's TTL.
    Put,
    /// A delete tombstone (`KV-Operation: DEL`) with the marker TTL.
    Delete,
    /// A purge (`KV-Operation: PURGE`) with the marker TTL.
    Purge,
}

/// One conditional write of an atomic batch.
#[derive(Debug, Clone)]
pub struct Write {
    /// The KV key.
    pub name: String,
    /// What it writes.
    pub op: WriteOp,
    /// The payload.
    pub payload: Bytes,
    /// The revision the key's last message must have (0: no message);
    /// `None`: unconditional (the batch's other writes decide).
    pub expected: Option<u64>,
    /// The key or KV wildcard (`a.*`) whose last revision `expected` checks,
    /// when not this write's own key.
    pub expected_of: Option<String>,
    /// The TTL of a [`WriteOp::Put`] (zero: none, kept until overwritten);
    /// ends get the marker TTL.
    pub ttl: Duration,
}

impl Write {
    /// A put of `payload` to `name` (expiring after `ttl`; zero: never),
    /// conditional on the key's last revision being `expected`.
    pub fn put(name: impl Into<String>, payload: Bytes, expected: u64, ttl: Duration) -> Write {
        Write {
            name: name.into(),
            op: WriteOp::Put,
            payload,
            expected: Some(expected),
            expected_of: None,
            ttl,
        }
    }

    /// A tombstone with `payload` on `name`, conditional on the key's last
    /// revision being `expected` (`None`: the batch's other writes decide).
    pub fn delete(name: impl Into<String>, payload: Bytes, expected: Option<u64>) -> Write {
        Write {
            name: name.into(),
            op: WriteOp::Delete,
            payload,
            expected,
            expected_of: None,
            ttl: Duration::ZERO,
        }
    }
}

/// A handle on the lease bucket; cheap to clone.
#[derive(Clone)]
pub struct Store {
    /// The NATS connection, for its connection state.
    pub(super) client: async_nats::Client,
    /// The JetStream context that publishes.
    pub(super) js: jetstream::Context,
    /// The bucket's stream, for leader reads and consumers.
    pub(super) stream: stream::Stream,
    /// The bucket name.
    pub(super) bucket: String,
    /// `$KV.<bucket>.`: the subject prefix of every key.
    pub(super) prefix: String,
    /// The TTL given to release tombstones.
    marker_ttl: Duration,
    /// Whether the stream has atomic batch publish (`allow_atomic`).
    atomic: bool,
    /// Turns to have a batch open ([`BATCHES_IN_FLIGHT`]), shared by clones.
    batches: Arc<tokio::sync::Semaphore>,
}

impl Store {
    /// Opens every shard of the bucket: shard 0 is the bucket itself, shard
    /// `i` the bucket `<bucket>-shard<i>` ([`shard_bucket`]). The count is
    /// the one shard 0's stream was made with (in its description, set
    /// when the stream is created, so two replicas racing to create it with
    /// different counts cannot both win); a bucket made before shards
    /// existed is one shard. A `cfg.shards` the bucket disagrees with is an
    /// error: moving names between shards would break their fencing tokens.
    pub async fn open_shards(client: async_nats::Client, cfg: &BucketConfig) -> Result<Vec<Store>> {
        let asked = cfg.shards.max(1);
        // One patience for the whole bucket, however many shards it has.
        let deadline = tokio::time::Instant::now() + OPEN_PATIENCE;
        let (first, count) =
            Store::open_when_ready(client.clone(), cfg, 0, asked, deadline).await?;
        if cfg.shards != 0 && cfg.shards != count {
            return Err(Error::new(
                Reason::Internal,
                format!(
                    "--shards {} disagrees with bucket {:?}, made with {count} shard(s): a name's \
                     shard is fixed; use --shards {count} (or 0), or a new bucket",
                    cfg.shards, cfg.bucket
                ),
            ));
        }
        let mut shards = vec![first];
        for i in 1..count {
            let shard = BucketConfig {
                bucket: shard_bucket(&cfg.bucket, i),
                ..cfg.clone()
            };
            let (store, made_with) =
                Store::open_when_ready(client.clone(), &shard, i, count, deadline).await?;
            if made_with != count {
                return Err(Error::new(
                    Reason::Internal,
                    format!(
                        "bucket {:?} was made as a shard of a {made_with}-shard bucket, but {:?} \
                         has {count}: remove the stale shard bucket or use a new bucket name",
                        shard.bucket, cfg.bucket
                    ),
                ));
            }
            shards.push(store);
        }
        Ok(shards)
    }

    /// Creates the bucket as shard `index` of `count` if it does not exist,
    /// or verifies the one that does, then reads the stream info back and
    /// refuses a server that did not really enable per-message TTL. Returns
    /// the store and the shard count the stream was made with.
    async fn open(
        client: async_nats::Client,
        cfg: &BucketConfig,
        index: u32,
        count: u32,
    ) -> Result<(Store, u32)> {
        let js = jetstream::new(client.clone());
        let stream_name = format!("KV_{}", cfg.bucket);
        let stream = match js.get_stream(&stream_name).await {
            Ok(stream) => stream,
            Err(err) if is_stream_not_found(&err) => {
                let created = js
                    .create_key_value(kv::Config {
                        bucket: cfg.bucket.clone(),
                        description: shard_description(index, count),
                        history: 1,
                        storage: stream::StorageType::File,
                        num_replicas: cfg.replicas,
                        limit_markers: Some(cfg.marker_ttl),
                        max_bytes: match cfg.max_bytes {
                            0 => -1,
                            n => i64::try_from(n).unwrap_or(i64::MAX),
                        },
                        ..Default::default()
                    })
                    .await;
                // Another replica may have created it first, with another
                // shard count: the description read below says which.
                match (created, js.get_stream(&stream_name).await) {
                    (_, Ok(stream)) => stream,
                    (Err(e), Err(_)) if is_transient_create(&e) => {
                        return Err(Error::nats(&format!("creating the bucket with {} replica(s)", cfg.replicas), e))
                    }
                    (Err(e), Err(_)) => {
                        return Err(Error::new(
                            Reason::Internal,
                            format!(
                                "cannot create KV bucket {:?}: {e}; per-lease TTL needs nats-server 2.11 or newer",
                                cfg.bucket
                            ),
                        ))
                    }
                    (Ok(_), Err(e)) => return Err(Error::nats("reading the new bucket back", e)),
                }
            }
            Err(err) => return Err(Error::nats("looking up the bucket", err)),
        };
        let made_with = parse_shard_description(&stream.cached_info().config.description);
        mark_key_layout(&js, &stream, &cfg.bucket, index, made_with).await?;
        let atomic = enable_atomic(&js, &stream).await?;
        let store = Store {
            client,
            js,
            stream,
            bucket: cfg.bucket.clone(),
            prefix: format!("$KV.{}.", cfg.bucket),
            marker_ttl: cfg.marker_ttl,
            atomic,
            batches: Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT)),
        };
        store.verify().await?;
        Ok((store, made_with))
    }

    /// [`Store::open`], retried until `deadline` while JetStream comes up
    /// (a local nats-server that has just started, a cluster electing its
    /// leaders or still placing a new replicated stream).
    async fn open_when_ready(
        client: async_nats::Client,
        cfg: &BucketConfig,
        index: u32,
        count: u32,
        deadline: tokio::time::Instant,
    ) -> Result<(Store, u32)> {
        let mut pause = Duration::from_millis(100);
        loop {
            match Store::open(client.clone(), cfg, index, count).await {
                Err(err)
                    if err.reason == Reason::NatsUnavailable
                        && tokio::time::Instant::now() + pause < deadline =>
                {
                    tracing::info!(bucket = %cfg.bucket, %err, "bucket not ready yet; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
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

    /// Whether the bucket takes atomic batch writes ([`Store::batch`]).
    pub fn atomic(&self) -> bool {
        self.atomic
    }

    /// `Ok` when the bucket takes atomic batch writes; otherwise the error
    /// that says which nats-server version a request needing them requires.
    pub fn require_atomic(&self) -> Result<()> {
        if self.atomic {
            Ok(())
        } else {
            Err(no_atomic_batches(&self.bucket))
        }
    }

    /// A new unique token (a NUID: 22 characters from [0-9A-Za-z]), usable
    /// as one level of a key.
    pub fn unique_id(&self) -> String {
        let inbox = self.client.new_inbox();
        inbox.rsplit('.').next().unwrap_or(&inbox).to_string()
    }

    /// The last message of every key matching `filter` (a KV wildcard such
    /// as `a.b.*`), in revision order, read from the stream leader one
    /// message at a time. With history 1 every key has one message, so this
    /// is the current state of each. Reads at most `max` messages; returns
    /// whether it read them all.
    pub async fn scan(&self, filter: &str, max: usize) -> Result<(Vec<Message>, bool)> {
        self.ensure_connected()?;
        let subject = format!("{}{}", self.prefix, filter);
        let mut out = Vec::new();
        let mut from = 1;
        while out.len() < max {
            let read = self
                .stream
                .raw_message_builder()
                .sequence(from)
                .next_by_subject(subject.clone())
                .send()
                .instrument(
                    tracing::debug_span!("nats.get_next", otel.kind = "client", subject = %subject),
                )
                .await;
            let msg = match read {
                Ok(msg) => msg,
                Err(err) => match err.kind() {
                    stream::RawMessageErrorKind::NoMessageFound => return Ok((out, true)),
                    _ => return Err(Error::nats("reading a queue", err)),
                },
            };
            from = msg.sequence + 1;
            let name = msg
                .subject
                .strip_prefix(self.prefix.as_str())
                .unwrap_or(msg.subject.as_str())
                .to_string();
            out.push(Message {
                name,
                revision: msg.sequence,
                time_ms: unix_ms(msg.time),
                replaced: replaced(Some(&msg.headers), msg.subject.as_str()),
                op: classify(Some(&msg.headers), msg.payload),
            });
        }
        Ok((out, false))
    }

    /// The NATS subject of `key` (a key or a KV wildcard) in this bucket,
    /// as the history stream records it.
    pub fn subject(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The name of the bucket's stream (what the history stream sources).
    pub fn stream_name(&self) -> String {
        format!("KV_{}", self.bucket)
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The TTL given to release tombstones and revoke purges.
    pub fn marker_ttl(&self) -> Duration {
        self.marker_ttl
    }

    /// Whether the NATS connection is up right now.
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == State::Connected
    }

    /// Fails fast with `NATS_UNAVAILABLE` while the connection is down, rather
    /// than letting a call wait for a reply timeout.
    pub(super) fn ensure_connected(&self) -> Result<()> {
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

    /// The bucket's last revision, the stream leader's clock and the
    /// marker TTL NATS really applies, in one stream-info request: what a
    /// watch resume needs to prove that no change it must replay has aged
    /// out (see `docs/design.md`, "Resuming a watch").
    pub async fn position(&self) -> Result<Position> {
        self.ensure_connected()?;
        let subject = format!("STREAM.INFO.{}", self.stream.cached_info().config.name);
        let reply: jetstream::response::Response<RawStreamInfo> = self
            .js
            .request(subject, &serde_json::json!({}))
            .await
            .map_err(|e| Error::nats("reading the bucket's position", e))?;
        let info = match reply {
            jetstream::response::Response::Ok(info) => info,
            jetstream::response::Response::Err { error } => {
                return Err(Error::nats("reading the bucket's position", error))
            }
        };
        // NATS TTLs are whole seconds (a fraction is dropped): the shorter
        // of the stream's marker TTL and the one Tenure gives tombstones.
        let stream_ttl = info
            .config
            .subject_delete_marker_ttl
            .map_or(0, |ns| ns / 1_000_000_000);
        let marker_ttl = Duration::from_secs(stream_ttl.min(self.marker_ttl.as_secs()));
        Ok(Position {
            last_revision: info.state.last_seq,
            now_ms: info
                .ts
                .map(|t| u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)),
            marker_ttl,
        })
    }

    /// When the message at `revision` was stored (Unix milliseconds), read
    /// from the stream leader; `None` when it is no longer in the bucket.
    pub async fn time_at(&self, revision: u64) -> Result<Option<u64>> {
        self.ensure_connected()?;
        match self.stream.get_raw_message(revision).await {
            Ok(msg) => Ok(Some(unix_ms(msg.time))),
            Err(err) => match err.kind() {
                stream::RawMessageErrorKind::NoMessageFound => Ok(None),
                _ => Err(Error::nats("reading a message's time", err)),
            },
        }
    }

    /// The last message of a lease name, read from the stream leader;
    /// `None` when the name has no message at all.
    pub async fn last(&self, name: &str) -> Result<Option<Message>> {
        self.ensure_connected()?;
        let subject = format!("{}{}", self.prefix, name);
        let read = self.stream.get_last_raw_message_by_subject(&subject);
        match read
            .instrument(
                tracing::debug_span!("nats.get_last", otel.kind = "client", subject = %subject),
            )
            .await
        {
            Ok(msg) => Ok(Some(Message {
                name: name.to_string(),
                revision: msg.sequence,
                time_ms: unix_ms(msg.time),
                replaced: replaced(Some(&msg.headers), &subject),
                op: classify(Some(&msg.headers), msg.payload),
            })),
            Err(err) => match err.kind() {
                stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
                _ => Err(Error::nats("reading the lease", err)),
            },
        }
    }

    /// Writes `payload` under `name` if its last revision is `expected` (0:
    /// no message), to expire after `ttl`. Returns the new revision.
    pub async fn put(
        &self,
        name: &str,
        payload: Bytes,
        expected: u64,
        ttl: Duration,
    ) -> Result<u64, CasError> {
        let msg = jetstream::message::PublishMessage::build()
            .payload(payload)
            .expected_last_subject_sequence(expected)
            .ttl(ttl);
        self.publish(name, msg).await
    }

    /// Writes `payload` to `name` (expiring after `ttl`) if the last
    /// revision of any key matching `of` (a KV wildcard that covers `name`)
    /// is `expected`: a put that fails if anything under `of` changed. On a
    /// replicated stream the leader also refuses it while another write
    /// conditional on the same `of` is in flight (it holds conditions back
    /// by their subject string), which an exact key's condition would not
    /// see. Returns its revision.
    pub async fn put_under(
        &self,
        name: &str,
        payload: Bytes,
        expected: u64,
        of: &str,
        ttl: Duration,
    ) -> Result<u64, CasError> {
        let msg = jetstream::message::PublishMessage::build()
            .payload(payload)
            .expected_last_subject_sequence(expected)
            .header(
                EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT,
                format!("{}{of}", self.prefix).as_str(),
            )
            .ttl(ttl);
        self.publish_counted(name, msg, &METRICS.queue_conflicts)
            .await
    }

    /// Writes a delete tombstone (`KV-Operation: DEL`) carrying `payload` if
    /// the name's last revision is `expected`. Returns its revision.
    pub async fn delete(&self, name: &str, payload: Bytes, expected: u64) -> Result<u64, CasError> {
        self.end(name, KV_OPERATION_DELETE, payload, expected).await
    }

    /// Writes a delete tombstone carrying `payload` to `name` if the last
    /// revision of any key matching `of` (a KV wildcard that covers
    /// `name`) is `expected`: [`Store::delete`] that fails if anything
    /// under `of` changed ([`Store::put_under`]). Returns its revision.
    pub async fn delete_under(
        &self,
        name: &str,
        payload: Bytes,
        expected: u64,
        of: &str,
    ) -> Result<u64, CasError> {
        let msg = jetstream::message::PublishMessage::build()
            .payload(payload)
            .header(KV_OPERATION, KV_OPERATION_DELETE)
            .expected_last_subject_sequence(expected)
            .header(
                EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT,
                format!("{}{of}", self.prefix).as_str(),
            )
            .ttl(self.marker_ttl);
        self.publish_counted(name, msg, &METRICS.queue_conflicts)
            .await
    }

    /// Writes a purge (`KV-Operation: PURGE`, what `nats kv purge` writes)
    /// carrying `payload` if the name's last revision is `expected`.
    /// Returns its revision.
    pub async fn purge(&self, name: &str, payload: Bytes, expected: u64) -> Result<u64, CasError> {
        self.end(name, KV_OPERATION_PURGE, payload, expected).await
    }

    /// Writes a message that ends a value (`KV-Operation: operation`) if the
    /// name's last revision is `expected`. It gets the marker TTL, or the
    /// bucket would keep one per name forever.
    async fn end(
        &self,
        name: &str,
        operation: &'static str,
        payload: Bytes,
        expected: u64,
    ) -> Result<u64, CasError> {
        let msg = jetstream::message::PublishMessage::build()
            .payload(payload)
            .header(KV_OPERATION, operation)
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
        self.publish_counted(name, msg, &METRICS.cas_conflicts)
            .await
    }

    /// [`Store::publish`], counting a lost race in `conflicts`.
    async fn publish_counted(
        &self,
        name: &str,
        msg: jetstream::message::PublishMessage,
        conflicts: &prometheus::IntCounter,
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
                    conflicts.inc();
                    Err(CasError::Conflict)
                }
                _ if jetstream_code(&err) == Some(ERR_WRONG_LAST_SEQUENCE_IN_PROCESS) => {
                    conflicts.inc();
                    Err(CasError::Conflict)
                }
                _ if jetstream_code(&err) == Some(ERR_STORE_FAILED)
                    && err.to_string().contains("maximum bytes") =>
                {
                    Err(CasError::Failed(bucket_full(&self.bucket)))
                }
                _ => Err(CasError::Failed(Error::nats("the write", err))),
            },
        }
    }

    /// Writes `writes` as one JetStream atomic batch (ADR-50): every write
    /// is conditional on its key's last revision (checked against the
    /// stream as it was before the batch), and either all are stored, at
    /// consecutive revisions, or none is. Returns the revision of the last
    /// write; write `i` of `n` is at `last - (n - 1 - i)`. A stale expected
    /// revision on any write is a [`CasError::Conflict`] (no write landed).
    ///
    /// A batch the stream refuses because too many batches are open at once
    /// (JetStream's per-stream limit, 50 by default: every Acquire of a free
    /// name is a batch under fair waiting) is sent again after a short,
    /// growing pause, for up to [`BATCH_INFLIGHT_PATIENCE`]: nothing of it
    /// was stored, and open batches close within a round trip.
    pub async fn batch(&self, writes: &[Write]) -> Result<u64, CasError> {
        // Never closed, so a turn always comes.
        let _turn = self.batches.acquire().await;
        let give_up = tokio::time::Instant::now() + BATCH_INFLIGHT_PATIENCE;
        let mut pause = Duration::from_millis(1);
        loop {
            match self.batch_once(writes).await {
                Err(BatchError::Inflight(err)) => {
                    if tokio::time::Instant::now() + pause > give_up {
                        return Err(CasError::Failed(err));
                    }
                    let jitter = rand::random_range(0..=pause.as_micros() as u64);
                    tokio::time::sleep(pause + Duration::from_micros(jitter)).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(BatchError::Cas(err)) => return Err(err),
                Ok(revision) => return Ok(revision),
            }
        }
    }

    /// One attempt of [`Store::batch`].
    async fn batch_once(&self, writes: &[Write]) -> Result<u64, BatchError> {
        self.ensure_connected().map_err(CasError::Failed)?;
        if !self.atomic {
            return Err(CasError::Failed(no_atomic_batches(&self.bucket)).into());
        }
        let Some(last) = writes.len().checked_sub(1) else {
            return Err(CasError::Failed(Error::new(Reason::Internal, "an empty batch")).into());
        };
        // An id unique to this batch.
        let id = self.unique_id();
        let span = tracing::debug_span!("nats.batch", otel.kind = "client", count = writes.len());
        async {
            for (i, w) in writes.iter().enumerate() {
                let mut headers = HeaderMap::new();
                headers.insert(NATS_BATCH_ID, id.as_str());
                headers.insert(NATS_BATCH_SEQUENCE, (i + 1).to_string().as_str());
                if let Some(expected) = w.expected {
                    headers.insert(
                        EXPECTED_LAST_SUBJECT_SEQUENCE,
                        expected.to_string().as_str(),
                    );
                    if let Some(of) = &w.expected_of {
                        headers.insert(
                            EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT,
                            format!("{}{of}", self.prefix).as_str(),
                        );
                    }
                }
                let ttl = match w.op {
                    WriteOp::Put => w.ttl,
                    WriteOp::Delete => {
                        headers.insert(KV_OPERATION, KV_OPERATION_DELETE);
                        self.marker_ttl
                    }
                    WriteOp::Purge => {
                        headers.insert(KV_OPERATION, KV_OPERATION_PURGE);
                        self.marker_ttl
                    }
                };
                // A zero TTL on a value: kept until overwritten (no header).
                if !ttl.is_zero() {
                    headers.insert(NATS_TTL, ttl.as_secs().to_string().as_str());
                }
                if i == last {
                    headers.insert(NATS_BATCH_COMMIT, NATS_BATCH_COMMIT_FINAL);
                }
                let subject = format!("{}{}", self.prefix, w.name);
                // The first message is a request, so a stream that refuses
                // batches says so before the rest is sent; the last gets the
                // acknowledgement of the whole batch.
                if i == 0 || i == last {
                    let reply = self
                        .client
                        .request_with_headers(subject, headers, w.payload.clone())
                        .await
                        .map_err(|e| CasError::Failed(Error::nats("the batch write", e)))?;
                    let sequence = batch_reply(&reply.payload, &self.bucket)?;
                    if i == last {
                        return sequence.ok_or_else(|| {
                            CasError::Failed(Error::nats("the batch write", "no acknowledgement"))
                                .into()
                        });
                    }
                } else {
                    self.client
                        .publish_with_headers(subject, headers, w.payload.clone())
                        .await
                        .map_err(|e| CasError::Failed(Error::nats("the batch write", e)))?;
                }
            }
            unreachable!("the last write returns")
        }
        .instrument(span)
        .await
    }
}

/// The bucket's position and clock (see [`Store::position`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The bucket's last revision (stream sequence).
    pub last_revision: u64,
    /// The stream leader's clock when it answered, Unix milliseconds
    /// (`None` from a server that does not report it).
    pub now_ms: Option<u64>,
    /// The shortest time a marker or tombstone stays in the bucket: the
    /// smaller of the stream's delete-marker TTL and Tenure's marker TTL,
    /// in whole seconds (zero when the stream has none).
    pub marker_ttl: Duration,
}

/// The parts of a raw stream-info reply [`Store::position`] reads; parsed
/// here because async-nats drops the leader's timestamp (`ts`).
#[derive(serde::Deserialize)]
struct RawStreamInfo {
    /// The stream's configuration.
    config: RawStreamConfig,
    /// The stream's state.
    state: RawStreamState,
    /// The leader's clock when it answered.
    #[serde(default, with = "time::serde::rfc3339::option")]
    ts: Option<time::OffsetDateTime>,
}

/// The configuration fields [`RawStreamInfo`] needs.
#[derive(serde::Deserialize)]
struct RawStreamConfig {
    /// How long NATS keeps its delete markers, nanoseconds.
    #[serde(default)]
    subject_delete_marker_ttl: Option<u64>,
}

/// The state fields [`RawStreamInfo`] needs.
#[derive(serde::Deserialize)]
struct RawStreamState {
    /// The last stream sequence.
    last_seq: u64,
}

/// Turns on atomic batch publish on the bucket's stream if it is off;
/// returns whether the stream has it. A server older than 2.12 does not
/// know the setting (it is dropped or refused): the bucket still serves
/// plain leases, and only the features that need batches are refused.
/// A request that got no answer (a new replicated stream still electing
/// its leader) is an error to retry, not a "no": taking it for one would
/// turn fair queues and groups off for the replica's whole life.
/// Checks that the bucket is in this version's key layout
/// ([`KEY_LAYOUT`]): a bucket that does not say so is marked when it is
/// empty (made by `nats kv add`, or by an older version and emptied since),
/// and refused when it holds messages, which an older version wrote with
/// each lease record at the lease's name, where this version never reads.
async fn mark_key_layout(
    js: &jetstream::Context,
    stream: &stream::Stream,
    bucket: &str,
    index: u32,
    count: u32,
) -> Result<()> {
    let mut stream = stream.clone();
    let info = stream
        .info()
        .await
        .map_err(|e| Error::nats("reading the bucket's stream info", e))?;
    if in_key_layout(&info.config.description) {
        return Ok(());
    }
    let messages = info.state.messages;
    if messages > 0 {
        return Err(Error::new(
            Reason::Internal,
            format!(
                "bucket {bucket:?} holds {messages} message(s) written by an older Tenure, which kept each \
                 lease record at the lease's name; this version keeps it at _tenure.q.<name>.lease.holder and \
                 does not read the old keys. Start this version on a new bucket (--bucket), or stop the \
                 old servers, let their leases end and the bucket empty (ended records age out within \
                 --marker-ttl), then start again"
            ),
        ));
    }
    let config = stream::Config {
        description: Some(shard_description(index, count)),
        ..info.config.clone()
    };
    match js.update_stream(config).await {
        Ok(_) => {
            tracing::info!(stream = %info.config.name, KEY_LAYOUT, "marked the empty bucket's key layout");
            Ok(())
        }
        Err(err) if cluster_not_ready(&err) => {
            Err(Error::nats("marking the bucket's key layout", err))
        }
        Err(err) => {
            tracing::warn!(stream = %info.config.name, %err, "cannot mark the empty bucket's key layout in its stream description; a server started on it once it holds leases will refuse it: let Tenure's NATS user update the stream, or let Tenure create the bucket");
            Ok(())
        }
    }
}

async fn enable_atomic(js: &jetstream::Context, stream: &stream::Stream) -> Result<bool> {
    let mut stream = stream.clone();
    let info = stream
        .info()
        .await
        .map_err(|e| Error::nats("reading the bucket's stream info", e))?;
    if info.config.allow_atomic_publish {
        return Ok(true);
    }
    let config = stream::Config {
        allow_atomic_publish: true,
        ..info.config.clone()
    };
    match js.update_stream(config).await {
        Ok(updated) if updated.config.allow_atomic_publish => {
            tracing::info!(stream = %info.config.name, "enabled atomic batch publish on the bucket's stream");
            Ok(true)
        }
        Ok(_) => {
            tracing::warn!(stream = %info.config.name, "nats-server ignored allow_atomic: lock-delay, fair queues and lease groups need nats-server {ATOMIC_BATCH_VERSION} or newer");
            Ok(false)
        }
        // Only a cluster's passing answers are retried here: a NATS user
        // denied stream updates gets no reply at all, so a timeout means
        // "no batches", as the warning below says.
        Err(err) if cluster_not_ready(&err) => {
            Err(Error::nats("enabling atomic batch publish", err))
        }
        Err(err) => {
            tracing::warn!(stream = %info.config.name, %err, "cannot enable atomic batch publish: lock-delay, fair queues and lease groups need nats-server {ATOMIC_BATCH_VERSION} or newer");
            Ok(false)
        }
    }
}

/// How long `tenure serve` waits at start for the bucket (every shard of
/// it) to be usable before it gives up with the last error.
const OPEN_PATIENCE: Duration = Duration::from_secs(20);

/// JetStream error codes that a cluster still forming, electing or placing
/// a stream answers for a while, then stops answering.
const TRANSIENT_CODES: [jetstream::ErrorCode; 7] = [
    jetstream::ErrorCode::INSUFFICIENT_RESOURCES,
    jetstream::ErrorCode::CLUSTER_NOT_AVAILABLE,
    jetstream::ErrorCode::CLUSTER_NO_PEERS,
    jetstream::ErrorCode::CLUSTER_INCOMPLETE,
    jetstream::ErrorCode::CLUSTER_NOT_ACTIVE,
    jetstream::ErrorCode::CLUSTER_NOT_LEADER,
    jetstream::ErrorCode::CLUSTER_NOT_ASSIGNED,
];

/// Whether a stream create or update was refused with one of the
/// [`TRANSIENT_CODES`] of a cluster that is not ready yet.
fn cluster_not_ready(err: &jetstream::context::CreateStreamError) -> bool {
    matches!(
        err.kind(),
        jetstream::context::CreateStreamErrorKind::JetStream(e)
            if TRANSIENT_CODES.contains(&e.error_code())
    )
}

/// Whether creating the bucket failed for a reason that passes (no answer
/// in time, nobody answering, a cluster not ready): worth retrying at start
/// rather than reporting as a misconfiguration.
fn is_transient_create(err: &jetstream::context::CreateKeyValueError) -> bool {
    use jetstream::context::CreateStreamErrorKind as Kind;
    use std::error::Error as _;
    if err.kind() == jetstream::context::CreateKeyValueErrorKind::TimedOut {
        return true;
    }
    err.source()
        .and_then(|s| s.downcast_ref::<jetstream::context::CreateStreamError>())
        .is_some_and(|e| {
            matches!(e.kind(), Kind::TimedOut | Kind::JetStreamUnavailable) || cluster_not_ready(e)
        })
}

/// The refusal of a feature that needs atomic batches on a stream without
/// them: a precondition of the deployment, not a failure of Tenure, so
/// [`Reason::AtomicBatchUnsupported`] (FAILED_PRECONDITION) naming the
/// nats-server version, the bucket and its stream.
fn no_atomic_batches(bucket: &str) -> Error {
    let stream = format!("KV_{bucket}");
    Error::new(
        Reason::AtomicBatchUnsupported,
        format!(
            "bucket {bucket:?} cannot take atomic batch writes, which this request needs; \
             run nats-server {ATOMIC_BATCH_VERSION} or newer and let Tenure enable allow_atomic on stream {stream}"
        ),
    )
    .with("required_nats_server", ATOMIC_BATCH_VERSION)
    .with("bucket", bucket)
    .with("stream", stream)
}

/// `BUCKET_FULL`: the bucket's stream is at its max_bytes, so a write of a
/// new key was refused (writes that replace a key's message still fit).
fn bucket_full(bucket: &str) -> Error {
    Error::new(
        Reason::BucketFull,
        format!(
            "bucket {bucket:?} is full (its max_bytes, --bucket-max-bytes when Tenure created it): no new lease, ticket or semaphore fits until holdings end or markers age out; an operator can raise it with `nats stream edit KV_{bucket} --max-bytes ...`"
        ),
    )
    .with("bucket", bucket)
}

/// Reads a reply to a batch message: empty (accepted, not the last), a
/// PubAck with the last sequence, or a JetStream error.
fn batch_reply(payload: &[u8], bucket: &str) -> Result<Option<u64>, BatchError> {
    if payload.is_empty() {
        return Ok(None);
    }
    let reply: serde_json::Value = serde_json::from_slice(payload).map_err(|e| {
        CasError::Failed(Error::new(
            Reason::Internal,
            format!("bad JetStream batch reply: {e}"),
        ))
    })?;
    if let Some(error) = reply.get("error") {
        let code = error.get("err_code").and_then(|c| c.as_u64()).unwrap_or(0);
        let description = error
            .get("description")
            .and_then(|d| d.as_str())
            .unwrap_or("unknown error");
        let failed = || {
            Error::nats(
                "the batch write",
                format!("{description} (JetStream error {code})"),
            )
        };
        return Err(match code {
            ERR_WRONG_LAST_SEQUENCE | ERR_WRONG_LAST_SEQUENCE_IN_PROCESS => {
                METRICS.cas_conflicts.inc();
                BatchError::Cas(CasError::Conflict)
            }
            ERR_BATCH_DISABLED => BatchError::Cas(CasError::Failed(no_atomic_batches(bucket))),
            ERR_STORE_FAILED if description.contains("maximum bytes") => {
                BatchError::Cas(CasError::Failed(bucket_full(bucket)))
            }
            ERR_BATCH_INFLIGHT => BatchError::Inflight(failed()),
            _ => BatchError::Cas(CasError::Failed(failed())),
        });
    }
    Ok(reply.get("seq").and_then(|s| s.as_u64()))
}

/// The JetStream error code a publish was refused with, if it was (async-nats
/// names only some codes; the others come as the error's source).
fn jetstream_code(err: &jetstream::context::PublishError) -> Option<u64> {
    std::error::Error::source(err)
        .and_then(|s| s.downcast_ref::<jetstream::Error>())
        .map(|e| e.error_code().0)
}

/// Why one attempt of an atomic batch failed.
enum BatchError {
    /// A conflict or a failure, as [`Store::batch`] returns it.
    Cas(CasError),
    /// The stream had too many batches open: nothing was stored; try again.
    Inflight(Error),
}

impl From<CasError> for BatchError {
    fn from(err: CasError) -> BatchError {
        BatchError::Cas(err)
    }
}

/// Whether a get-stream failure means "no such stream".
fn is_stream_not_found(err: &jetstream::context::GetStreamError) -> bool {
    matches!(
        err.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(e)
            if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that refuses a batch (JetStream error 10174, what a stream
    /// without allow_atomic answers) becomes the precondition failure that
    /// names the nats-server version, the bucket and its stream, sent as
    /// FAILED_PRECONDITION; a batch is never reported as an internal error.
    #[test]
    fn batch_refused_by_the_stream_is_a_precondition_failure() {
        let reply = br#"{"error":{"code":400,"err_code":10174,"description":"atomic publish is disabled"}}"#;
        let Err(BatchError::Cas(CasError::Failed(err))) = batch_reply(reply, "locks") else {
            panic!("a disabled batch must fail the write");
        };
        assert_eq!(err.reason, Reason::AtomicBatchUnsupported);
        let meta: std::collections::HashMap<_, _> = err.metadata.iter().cloned().collect();
        assert_eq!(meta["required_nats_server"], ATOMIC_BATCH_VERSION);
        assert_eq!(meta["bucket"], "locks");
        assert_eq!(meta["stream"], "KV_locks");
        assert!(!err.message.contains('\n'), "{}", err.message);
        assert!(err.message.contains("2.12 or newer"), "{}", err.message);
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    }
}
