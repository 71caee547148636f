//! The consumers: following the bucket and replaying it.
//!
//! A watch reads the bucket through an ordered consumer, which NATS
//! delivers in revision order and async-nats recreates after a gap or a
//! reconnect, resuming where it was. A live watch ([`Store::follow`]) has
//! its messages pushed; a resumed watch's replay ([`Store::replay`]) pulls
//! them a batch at a time, so a reader that stops reading holds no more
//! than one batch. Everything else - creating the consumer, deleting it
//! when the reader drops it, turning each delivery into a [`Message`] with
//! its pending count - is the same for both and lives here once, apart
//! from the bucket's writes and leader reads. The one leader read here is
//! the consumer's own check ([`LeaderRead`]): what the stream leader holds
//! under its filters, for a reader that must not take a lagging replica's
//! "nothing pending" for "nothing left".

use std::fmt::Display;
use std::future::Future;

use async_nats::jetstream::{self, consumer, stream};
use futures::{Stream, StreamExt};

use super::bucket::Store;
use super::message::{classify, replaced, unix_ms, Message};
use crate::error::{Error, Reason, Result};

/// Where a [`Store::follow`] begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// With the last message of every matching key, then new ones.
    Snapshot,
    /// With the first message after this revision still in the stream
    /// (with history 1, the last message of each key changed since).
    After(u64),
}

impl Start {
    /// The consumer's deliver policy that begins here.
    fn deliver_policy(self) -> consumer::DeliverPolicy {
        match self {
            Start::Snapshot => consumer::DeliverPolicy::LastPerSubject,
            Start::After(revision) => consumer::DeliverPolicy::ByStartSequence {
                start_sequence: revision + 1,
            },
        }
    }
}

/// The messages of an ordered consumer, each with the number of messages
/// still pending after it (0 marks the end of a snapshot).
pub struct Follow {
    /// Messages pending when the consumer was created (0: empty snapshot).
    pub initially_pending: u64,
    /// The messages with their pending counts.
    pub messages: futures::stream::BoxStream<'static, Result<(Message, u64)>>,
    /// The stream leader's answer to what the consumer's pending counts
    /// stand for (`None` in unit tests: the counts are the truth).
    pub leader: Option<LeaderRead>,
}

/// What the stream leader holds after a revision under a consumer's
/// filters. An ordered consumer of a replicated bucket is an R1 consumer
/// that may sit on a replica still catching up (a leader just partitioned
/// off and back, say): it counts nothing pending while the leader has
/// more, so a reader that must not end early (a resumed watch's replay)
/// asks the leader before it takes "nothing pending" for "nothing left".
#[derive(Clone)]
pub struct LeaderRead {
    /// The bucket's stream.
    stream: stream::Stream,
    /// The consumer's filter subjects.
    subjects: Vec<String>,
}

impl LeaderRead {
    /// The revision of the first message after `after` matching the
    /// consumer's filters that the stream leader holds, if any (one
    /// leader read per filter).
    pub async fn first_after(&self, after: u64) -> Result<Option<u64>> {
        let mut first = None;
        for subject in &self.subjects {
            let read = self
                .stream
                .raw_message_builder()
                .sequence(after + 1)
                .next_by_subject(subject.clone())
                .send()
                .await;
            match read {
                Ok(msg) => first = Some(first.map_or(msg.sequence, |f: u64| f.min(msg.sequence))),
                Err(err) if err.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {}
                Err(err) => return Err(Error::nats("reading the bucket's next change", err)),
            }
        }
        Ok(first)
    }
}

/// How the ordered consumer of [`Store::read`] gets its messages to the reader:
/// the one difference between [`Store::follow`] and [`Store::replay`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// NATS pushes them as they come: a live watch ([`Store::follow`]).
    Push,
    /// The reader pulls at most [`REPLAY_BATCH`] at a time: a resumed
    /// watch's replay ([`Store::replay`]).
    Pull,
}

impl Delivery {
    /// The consumer's description, as `nats consumer ls` shows it.
    fn description(self) -> &'static str {
        match self {
            Delivery::Push => "tenure watch",
            Delivery::Pull => "tenure watch resume",
        }
    }

    /// What a failure to create or start the consumer failed at.
    fn starting(self) -> &'static str {
        match self {
            Delivery::Push => "starting a watch",
            Delivery::Pull => "starting a watch replay",
        }
    }

    /// What a failure of a delivered message failed at.
    fn reading(self) -> &'static str {
        match self {
            Delivery::Push => "following the bucket",
            Delivery::Pull => "replaying the bucket",
        }
    }
}

impl Store {
    /// Follows the bucket with an ordered consumer. `filter` is a key or a
    /// KV wildcard (`jobs.>`, `>`); `from` says where to begin. The consumer
    /// is recreated by async-nats after reconnects, resuming where it was;
    /// when it fails for good, the caller follows again [`Start::After`] the
    /// last revision it saw.
    pub async fn follow(&self, filter: &str, from: Start) -> Result<Follow> {
        self.read(&[filter], from, Delivery::Push).await
    }

    /// Reads the bucket's messages after revision `after` matching any of
    /// `filters` (keys or KV wildcards) with an ordered *pull* consumer that fetches
    /// at most [`REPLAY_BATCH`] messages at a time, so a reader that stops
    /// reading holds no more than one batch. It stays open for new
    /// messages; drop it when done (NATS removes the consumer).
    pub async fn replay(&self, filters: &[&str], after: u64) -> Result<Follow> {
        self.read(filters, Start::After(after), Delivery::Pull)
            .await
    }

    /// The one body of [`Store::follow`] and [`Store::replay`]: reads the
    /// messages matching any of `filters` (keys or KV wildcards) from
    /// `from` on with an ordered consumer delivered as `delivery` says.
    async fn read(&self, filters: &[&str], from: Start, delivery: Delivery) -> Result<Follow> {
        self.ensure_connected()?;
        let description = Some(delivery.description().to_string());
        let mut subjects: Vec<String> = filters
            .iter()
            .map(|f| format!("{}{f}", self.prefix))
            .collect();
        // One filter goes in `filter_subject` (every server knows it),
        // several in `filter_subjects`.
        let leader = LeaderRead {
            stream: self.stream.clone(),
            subjects: subjects.clone(),
        };
        let (filter_subject, filter_subjects) = match subjects.len() {
            1 => (subjects.remove(0), Vec::new()),
            _ => (String::new(), subjects),
        };
        let replay_policy = consumer::ReplayPolicy::Instant;
        let deliver_policy = from.deliver_policy();
        // A push and a pull consumer have their own config and message
        // types: only the config is built apart.
        match delivery {
            Delivery::Push => {
                let config = consumer::push::OrderedConfig {
                    deliver_subject: self.client.new_inbox(),
                    description,
                    filter_subject,
                    filter_subjects,
                    replay_policy,
                    deliver_policy,
                    ..Default::default()
                };
                self.start_consumer(config, |c| c.messages(), delivery, leader)
                    .await
            }
            Delivery::Pull => {
                let config = consumer::pull::OrderedConfig {
                    description,
                    filter_subject,
                    filter_subjects,
                    replay_policy,
                    deliver_policy,
                    max_batch: REPLAY_BATCH,
                    ..Default::default()
                };
                self.start_consumer(config, |c| c.messages(), delivery, leader)
                    .await
            }
        }
    }

    /// Creates the consumer `config` describes, starts its `messages` and
    /// hands them on as [`Message`]s with their pending counts; the
    /// consumer is deleted when the reader drops them.
    async fn start_consumer<C, M, S, E, F>(
        &self,
        config: C,
        messages: impl FnOnce(consumer::Consumer<C>) -> M,
        delivery: Delivery,
        leader: LeaderRead,
    ) -> Result<Follow>
    where
        C: consumer::IntoConsumerConfig + consumer::FromConsumer,
        M: Future<Output = std::result::Result<S, F>>,
        S: Stream<Item = std::result::Result<jetstream::Message, E>> + Send + 'static,
        E: Display,
        F: Display,
    {
        let consumer = self
            .stream
            .create_consumer(config)
            .await
            .map_err(|e| Error::nats(delivery.starting(), e))?;
        let initially_pending = consumer.cached_info().num_pending;
        // Deleted when the follower drops it, not 30 s later (the ordered
        // consumer's inactivity threshold): an idling watcher leaves
        // nothing on the stream. (One async-nats recreated after a failure
        // has another name and still ages out by that threshold.)
        let delete = DeleteOnDrop {
            stream: self.stream.clone(),
            consumer: consumer.cached_info().name.clone(),
        };
        let messages = messages(consumer)
            .await
            .map_err(|e| Error::nats(delivery.starting(), e))?;
        let prefix = self.prefix.clone();
        let reading = delivery.reading();
        let stream = messages.map(move |msg| {
            let _owned = &delete;
            let msg = msg.map_err(|e| Error::nats(reading, e))?;
            read_message(&prefix, &msg)
        });
        Ok(Follow {
            initially_pending,
            messages: stream.boxed(),
            leader: Some(leader),
        })
    }
}

/// Deletes a consumer when dropped, rather than leaving it to the server's
/// inactivity timeout (30 s): a burst of resumed watches after a restart
/// should not leave as many idle consumers behind.
pub(super) struct DeleteOnDrop {
    /// The stream the consumer reads.
    pub(super) stream: stream::Stream,
    /// The consumer's name.
    pub(super) consumer: String,
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (stream, consumer) = (self.stream.clone(), std::mem::take(&mut self.consumer));
            runtime.spawn(async move {
                if let Err(err) = stream.delete_consumer(&consumer).await {
                    tracing::debug!(%err, consumer, "consumer not deleted; NATS removes it when idle");
                }
            });
        }
    }
}

/// Messages a replay fetches per pull: what one resumed watch can hold
/// while its client does not read (records are at most a few KiB).
pub const REPLAY_BATCH: i64 = 64;

/// A consumer's message as a [`Message`] with the count still pending.
fn read_message(prefix: &str, msg: &jetstream::Message) -> Result<(Message, u64)> {
    let info = msg
        .info()
        .map_err(|e| Error::new(Reason::Internal, format!("bad JetStream reply: {e}")))?;
    let name = msg
        .subject
        .strip_prefix(prefix)
        .unwrap_or(msg.subject.as_str())
        .to_string();
    let message = Message {
        name,
        revision: info.stream_sequence,
        time_ms: unix_ms(info.published),
        op: classify(msg.headers.as_ref(), msg.payload.clone()),
        replaced: replaced(msg.headers.as_ref(), msg.subject.as_str()),
    };
    Ok((message, info.pending))
}
