//! The history stream: every message of the lease bucket, kept for
//! `--history-retention` after it was written, so that "who held NAME at
//! time T" has an answer after the bucket (one message per key) moved on.
//!
//! NATS keeps it, not Tenure: a stream `TENURE_HISTORY_<bucket>` with
//! age-based retention and no per-subject limit that **mirrors** the
//! bucket's KV stream, or, for a sharded bucket, **sources** every shard's.
//! The copying is done by the server, so changes are recorded while no
//! Tenure process runs, and `nats stream view` reads it. A copied message
//! keeps its subject (`$KV.<shard bucket>.<key>`), its payload and its
//! headers (`KV-Operation`, `Nats-Marker-Reason`, ...). Its revision in the
//! bucket (what fencing tokens are made of) is, in a mirror, its own
//! sequence (a mirror keeps the origin's), and in a sourced stream the
//! second word of the `Nats-Stream-Source` header the copy gains.
//!
//! A mirror is the default because it costs NATS less per write: on raw
//! NATS, conditional renewals at c=64 took 9.8-10.2 µs of server CPU each
//! mirrored against 11.4-11.5 sourced and 6.3-6.6 with no copy
//! (`tenure-bench --raw-history`; docs/design.md section 9, "Lease
//! history").
//!
//! A stream made by an older Tenure (sourced over one stream) is kept as it
//! is: NATS cannot turn a sourced stream into a mirror, and deleting it
//! would lose its history. Either way the history stream neither expires
//! copied messages by their `Nats-TTL` (it does not allow message TTLs) nor
//! applies their rollups.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::{Stream, StreamExt};

use super::consumer::DeleteOnDrop;
use super::message::{classify, unix_ms, Message};
use crate::error::{Error, Reason, Result};

/// The header a sourced message carries: `<stream> <sequence> ...`.
const STREAM_SOURCE: &str = "Nats-Stream-Source";
/// Messages fetched per pull.
const READ_BATCH: i64 = 256;

/// The history stream's name for `bucket`.
pub fn stream_name(bucket: &str) -> String {
    format!("TENURE_HISTORY_{bucket}")
}

/// A handle on the history stream; cheap to clone.
#[derive(Clone)]
pub struct History {
    /// The stream.
    stream: stream::Stream,
    /// How long messages are kept.
    retention: Duration,
}

impl History {
    /// Creates the history stream over the KV streams `sources` (one per
    /// shard: a mirror of one, sourced from several) if it does not exist,
    /// or brings an existing one's retention and sources to these.
    /// `replicas` as the bucket's.
    pub async fn open(
        client: async_nats::Client,
        bucket: &str,
        sources: &[String],
        retention: Duration,
        replicas: usize,
    ) -> Result<History> {
        let js = jetstream::new(client);
        let name = stream_name(bucket);
        let origin = |name: &String| stream::Source {
            name: name.clone(),
            ..Default::default()
        };
        let mut config = stream::Config {
            name: name.clone(),
            description: Some(format!(
                "Tenure's history of bucket {bucket:?}: every lease write, kept {}s",
                retention.as_secs()
            )),
            max_age: retention,
            storage: stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        };
        match sources {
            [one] => config.mirror = Some(origin(one)),
            many => config.sources = Some(many.iter().map(origin).collect()),
        }
        let stream = match js.get_stream(&name).await {
            Ok(mut stream) => {
                let info = stream
                    .info()
                    .await
                    .map_err(|e| Error::nats("reading the history stream", e))?;
                let have = &info.config;
                let mut want = sources.to_vec();
                want.sort();
                let update = match (&have.mirror, &config.mirror) {
                    // A mirror of the one stream: only its retention moves.
                    (Some(mirror), Some(wanted)) if mirror.name == wanted.name => {
                        have.max_age != retention
                    }
                    (Some(mirror), _) => {
                        return Err(Error::new(
                            Reason::Internal,
                            format!(
                                "the history stream {name} mirrors {:?}, but bucket {bucket:?} \
                                 is kept in {} streams ({}); NATS cannot change what a stream \
                                 mirrors: remove it (`nats stream rm {name}`; its history is \
                                 lost) or start with --history-retention 0",
                                mirror.name,
                                want.len(),
                                want.join(", ")
                            ),
                        ))
                    }
                    // Sourced (several shards, or made by an older Tenure
                    // over one stream, kept: it cannot become a mirror).
                    (None, _) => {
                        let mut sourced: Vec<String> = have
                            .sources
                            .iter()
                            .flatten()
                            .map(|s| s.name.clone())
                            .collect();
                        sourced.sort();
                        config.mirror = None;
                        config.sources = Some(want.iter().map(origin).collect());
                        have.max_age != retention || sourced != want
                    }
                };
                if update {
                    js.update_stream(&config)
                        .await
                        .map_err(|e| Error::nats("updating the history stream", e))?;
                }
                stream
            }
            Err(_) => js
                .create_stream(config)
                .await
                .map_err(|e| Error::nats("creating the history stream", e))?,
        };
        Ok(History { stream, retention })
    }

    /// How long messages are kept.
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// The time of the oldest message kept (Unix ms), if any.
    pub async fn oldest_ms(&self) -> Result<Option<u64>> {
        let mut stream = self.stream.clone();
        let info = stream
            .info()
            .await
            .map_err(|e| Error::nats("reading the history stream", e))?;
        if info.state.messages == 0 {
            return Ok(None);
        }
        Ok(Some(unix_ms(info.state.first_timestamp)))
    }

    /// Reads the recorded messages of the subjects `filters` (full
    /// subjects or wildcards) written at or after `since_ms` (Unix ms), in
    /// order, as far as the stream's end when the read started; each as
    /// the bucket message it records (revision: its sequence in its
    /// shard's stream; name: its key).
    pub async fn read(
        &self,
        filters: Vec<String>,
        since_ms: u64,
    ) -> Result<impl Stream<Item = Result<Message>> + Send + 'static> {
        let start_time =
            time::OffsetDateTime::from_unix_timestamp_nanos(since_ms as i128 * 1_000_000)
                .map_err(|e| Error::nats("reading history", e))?;
        let deliver_policy = consumer::DeliverPolicy::ByStartTime { start_time };
        let config = consumer::pull::OrderedConfig {
            description: Some("tenure history".into()),
            filter_subjects: filters,
            deliver_policy,
            replay_policy: consumer::ReplayPolicy::Instant,
            max_batch: READ_BATCH,
            ..Default::default()
        };
        let consumer = self
            .stream
            .create_consumer(config)
            .await
            .map_err(|e| Error::nats("reading history", e))?;
        let pending = consumer.cached_info().num_pending;
        // Deleted when the reader drops the messages: a read leaves no
        // consumer behind.
        let delete = DeleteOnDrop {
            stream: self.stream.clone(),
            consumer: consumer.cached_info().name.clone(),
        };
        let messages = consumer
            .messages()
            .await
            .map_err(|e| Error::nats("reading history", e))?;
        // The consumer keeps going as new messages come; the read ends at
        // what was pending when it began.
        let reading = messages
            .map(move |msg| {
                let _owned = &delete;
                let msg = msg.map_err(|e| Error::nats("reading history", e))?;
                recorded(&msg)
            })
            .take(usize::try_from(pending).unwrap_or(usize::MAX));
        Ok(reading)
    }
}

/// A history message as the bucket message it records.
fn recorded(msg: &jetstream::Message) -> Result<Message> {
    let info = msg
        .info()
        .map_err(|e| Error::nats("reading history", format!("bad JetStream reply: {e}")))?;
    // Sourced: the header names the revision; mirrored: the sequence is it.
    let revision = match msg.headers.as_ref().and_then(|h| h.get(STREAM_SOURCE)) {
        Some(source) => source
            .as_str()
            .split_whitespace()
            .nth(1)
            .and_then(|seq| seq.parse().ok())
            .unwrap_or(0),
        None => info.stream_sequence,
    };
    // `$KV.<bucket>.<key>`: the key is what follows the second dot.
    let name = msg
        .subject
        .splitn(3, '.')
        .nth(2)
        .unwrap_or(msg.subject.as_str())
        .to_string();
    Ok(Message {
        name,
        revision,
        time_ms: unix_ms(info.published),
        op: classify(msg.headers.as_ref(), msg.payload.clone()),
        replaced: None,
    })
}
