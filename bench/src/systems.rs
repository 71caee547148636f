//! The systems under test, behind one set of lease operations so that every
//! workload runs the same steps against each:
//!
//! - **raw**: async-nats publishes doing what Tenure does on the bucket, and
//!   nothing more: acquire = leader read of the key's last message + publish
//!   with `Nats-Expected-Last-Subject-Sequence` and `Nats-TTL`; renew = the
//!   same publish over the last revision; release = a `KV-Operation: DEL`
//!   tombstone with the expected revision and a TTL. Payloads are Tenure's
//!   own record encoding, so message sizes match. No key hashing, no gRPC:
//!   the floor Tenure cannot beat.
//! - **tenure**: the gRPC API, the way clients call it, over a small pool of
//!   HTTP/2 connections.
//! - **etcd**: its v3lock `Lock`/`Unlock` with a lease attached, and
//!   `LeaseGrant`/`LeaseKeepAlive` for renewals, through `etcd-client`.
//!
//! A [`Session`] is what a client keeps across holdings: for etcd the lease
//! its locks are attached to (the `concurrency.Session` pattern); for raw
//! the ordered consumer a waiting client follows its key with, kept across
//! its waits like a long-lived client would (one consumer per wait would
//! hit JetStream's consumer limit under fast handoffs); nothing for Tenure,
//! whose TTL lives on each holding.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, consumer, context::PublishErrorKind, kv, stream};
use async_nats::HeaderMap;
use futures::StreamExt;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{AcquireRequest, ReleaseRequest, RenewRequest};
use tenure::{KeyHash, Record, Released};
use tonic::transport::Channel;

use crate::procs::R;

/// Which system a figure belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Direct async-nats calls.
    Raw,
    /// Tenure over gRPC.
    Tenure,
    /// etcd with its default fsync per commit.
    Etcd,
    /// etcd with `--unsafe-no-fsync`.
    EtcdNoFsync,
}

impl Kind {
    /// Short name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Raw => "raw",
            Kind::Tenure => "tenure",
            Kind::Etcd => "etcd",
            Kind::EtcdNoFsync => "etcd-nofsync",
        }
    }
}

/// A system under test.
pub enum Sys {
    /// Direct async-nats calls on the `raw` bucket.
    Raw(Raw),
    /// Tenure over gRPC; `bg` writes background leases into its bucket.
    Tenure(Tenure, Raw),
    /// etcd.
    #[cfg(feature = "etcd")]
    Etcd(crate::etcd::Etcd),
}

/// A raw client's ordered consumer on one key: (key, its messages).
pub type Follower = Option<(String, consumer::push::Ordered)>;

/// What a client keeps across holdings (etcd: its lease; raw: its follower).
#[derive(Clone)]
pub struct Session {
    /// raw: the consumer this client waits with, created on first wait.
    pub follower: Arc<tokio::sync::Mutex<Follower>>,
    /// etcd lease id; 0 for the NATS systems.
    pub lease: i64,
    /// When the lease was granted (reply received).
    pub granted_at: Instant,
    /// The TTL the server granted, seconds.
    pub ttl_s: u64,
}

/// One holding of a lease name.
pub struct Held {
    /// The lease name.
    pub name: String,
    /// The revision the next renew/release must name.
    pub rev: u64,
    /// The fencing token (etcd: the revision the lock was granted at).
    pub token: u64,
    /// Tenure's lease key.
    pub key: String,
    /// etcd: the lock's key, for Unlock.
    pub lock_key: Vec<u8>,
    /// When the holding runs out if never renewed, on this process's clock:
    /// the reply to the write that set the TTL + the granted TTL.
    pub deadline: Instant,
    /// etcd: the keep-alive stream of the session lease, opened on first renew.
    #[cfg(feature = "etcd")]
    pub keeper: Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)>,
    /// etcd: the session lease.
    pub lease: i64,
    /// Tenure: the semaphore slot of this holding (0 for a plain lease).
    pub slot: u32,
}

impl Session {
    /// A session with nothing server-side (raw, Tenure): just the TTL.
    pub fn plain(ttl_s: u64) -> Session {
        Session {
            follower: Default::default(),
            lease: 0,
            granted_at: Instant::now(),
            ttl_s,
        }
    }
}

impl Held {
    /// A holding with the fields every system sets.
    fn new(name: &str, rev: u64, token: u64, deadline: Instant) -> Held {
        Held {
            name: name.to_string(),
            rev,
            token,
            key: String::new(),
            lock_key: Vec::new(),
            deadline,
            #[cfg(feature = "etcd")]
            keeper: None,
            lease: 0,
            slot: 0,
        }
    }
}

/// How long a waiting acquire may wait.
pub const WAIT: Duration = Duration::from_secs(60);

impl Sys {
    /// Which system this is.
    pub fn kind(&self) -> Kind {
        match self {
            Sys::Raw(_) => Kind::Raw,
            Sys::Tenure(..) => Kind::Tenure,
            #[cfg(feature = "etcd")]
            Sys::Etcd(e) => e.kind,
        }
    }

    /// Starts a client session whose holdings last `ttl_s` (etcd: grants
    /// the lease locks are attached to).
    pub async fn session(&self, ttl_s: u64) -> R<Session> {
        match self {
            #[cfg(feature = "etcd")]
            Sys::Etcd(e) => e.session(ttl_s).await,
            _ => Ok(Session::plain(ttl_s)),
        }
    }

    /// Ends a session (etcd: revokes its lease).
    pub async fn end_session(&self, s: Session) -> R<()> {
        match self {
            #[cfg(feature = "etcd")]
            Sys::Etcd(e) => e.end_session(s).await,
            _ => {
                let _ = s;
                Ok(())
            }
        }
    }

    /// Follows the tickets of Tenure's queue of `name` ([`Raw::follow_tickets`]);
    /// `None` for the other systems (they have no tickets).
    pub async fn follow_tickets(&self, name: &str) -> R<Option<TicketLog>> {
        match self {
            Sys::Tenure(_, raw) => raw.follow_tickets(name).await.map(Some),
            _ => Ok(None),
        }
    }

    /// Takes `name` for `session`. Without `wait` a held name is an error;
    /// with it, blocks until the name is free (up to [`WAIT`]).
    pub async fn acquire(&self, name: &str, session: &Session, wait: bool) -> R<Held> {
        match self {
            Sys::Raw(r) => r.acquire(name, session, wait).await,
            Sys::Tenure(t, _) => t.acquire(name, session.ttl_s, wait, 0).await,
            #[cfg(feature = "etcd")]
            Sys::Etcd(e) => e.acquire(name, session).await,
        }
    }

    /// Takes one of the `limit` slots of semaphore `name`, waiting for a
    /// free one (up to [`WAIT`]). Only Tenure has server-side semaphores:
    /// the other systems return `None` (the semaphore workload gives each
    /// of their clients one of `limit` lock names instead).
    pub async fn acquire_slot(&self, name: &str, session: &Session, limit: u32) -> Option<R<Held>> {
        match self {
            Sys::Tenure(t, _) => Some(t.acquire(name, session.ttl_s, true, limit).await),
            _ => None,
        }
    }

    /// Extends a holding (etcd: one keep-alive round trip of its lease).
    pub async fn renew(&self, h: &mut Held, session: &Session) -> R<()> {
        match self {
            Sys::Raw(r) => r.renew(h, session.ttl_s).await,
            Sys::Tenure(t, _) => t.renew(h).await,
            #[cfg(feature = "etcd")]
            Sys::Etcd(e) => e.renew(h).await,
        }
    }

    /// Ends a holding.
    pub async fn release(&self, h: &Held) -> R<()> {
        match self {
            Sys::Raw(r) => r.release(h).await,
            Sys::Tenure(t, _) => t.release(h).await,
            #[cfg(feature = "etcd")]
            Sys::Etcd(e) => e.release(h).await,
        }
    }

    /// Creates `n` leases that nobody renews, all due to expire by
    /// `expire_at` (whole-second TTLs, at least 1 s, so they fall due in the
    /// second before it), as fast as the system takes them: NATS pipelined
    /// publishes straight into the bucket; etcd a granted lease with a key
    /// attached, 128 at a time. Written in chunks of 500, each chunk's TTL
    /// computed when it is written.
    pub async fn background_leases(&self, prefix: &str, n: usize, expire_at: Instant) -> R<()> {
        for (chunk, start) in (0..n).step_by(500).enumerate() {
            let count = 500.min(n - start);
            let ttl_s = expire_at
                .saturating_duration_since(Instant::now())
                .as_secs()
                .max(1);
            let prefix = format!("{prefix}.c{chunk}");
            match self {
                Sys::Raw(r) | Sys::Tenure(_, r) => r.background(&prefix, count, ttl_s).await?,
                #[cfg(feature = "etcd")]
                Sys::Etcd(e) => e.background(&prefix, count, ttl_s).await?,
            }
        }
        Ok(())
    }
}

/// Current Unix milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How NATS copies a bucket's writes into a history stream
/// (`--raw-history`).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum HistoryCopy {
    /// A mirror of the bucket's stream (what Tenure makes).
    Mirror,
    /// A stream that sources the bucket's stream (what Tenure made before,
    /// and makes for a sharded bucket).
    Source,
}

/// Direct async-nats access to one KV bucket.
#[derive(Clone)]
pub struct Raw {
    /// For inboxes.
    client: async_nats::Client,
    /// Publishes.
    js: jetstream::Context,
    /// Leader reads and consumers.
    stream: stream::Stream,
    /// `$KV.<bucket>.`
    prefix: String,
    /// A key hash to store, so records are the size of Tenure's.
    key_hex: String,
    /// Whether the bucket is Tenure's (one this harness did not create):
    /// a lease's record then lives at Tenure's record key,
    /// `_tenure.q.<name>.lease.holder` (design section 2), not at the name.
    tenure: bool,
}

/// What the last message of a key says.
enum State {
    /// A live holding.
    Live,
    /// Released, expired or purged.
    Gone,
}

/// Reads a key message's state from its headers, like Tenure's classifier.
fn state_of(headers: Option<&HeaderMap>) -> State {
    match headers {
        Some(h) if h.get("KV-Operation").is_some() || h.get("Nats-Marker-Reason").is_some() => {
            State::Gone
        }
        _ => State::Live,
    }
}

/// The tickets written into one Tenure queue while it was followed: each
/// waiter's lease key hash (hex) with the places of its tickets.
pub struct TicketLog {
    /// Collects the tickets until stopped.
    task: tokio::task::JoinHandle<()>,
    /// key hash -> the places of its tickets.
    places: Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<u64>>>>,
    /// The stream sequence of the last queue message delivered.
    delivered: tokio::sync::watch::Receiver<u64>,
}

impl TicketLog {
    /// Stops following once every queue message up to stream sequence
    /// `through` has been delivered (or 5 s passed); returns what was seen.
    pub async fn stop_after(mut self, through: u64) -> std::collections::HashMap<String, Vec<u64>> {
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            self.delivered.wait_for(|&seq| seq >= through),
        )
        .await;
        self.task.abort();
        std::mem::take(&mut *self.places.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Raw {
    /// Follows the tickets of Tenure's queue of lease `name` (the keys
    /// `_tenure.q.<name>.ticket.*` of this bucket) from now on: every ticket write
    /// (a waiter's first, and its refreshes, which keep its place), by the
    /// hash of the lease key it would be granted with.
    pub async fn follow_tickets(&self, name: &str) -> R<TicketLog> {
        let consumer = self
            .stream
            .create_consumer(consumer::push::OrderedConfig {
                deliver_subject: self.client.new_inbox(),
                filter_subject: format!("{}_tenure.q.{name}.ticket.*", self.prefix),
                deliver_policy: consumer::DeliverPolicy::New,
                ..Default::default()
            })
            .await
            .map_err(|e| format!("follow the queue of {name}: {e}"))?;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| format!("follow the queue of {name}: {e}"))?;
        let places: Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<u64>>>> =
            Arc::default();
        let seen = places.clone();
        let (delivered_tx, delivered) = tokio::sync::watch::channel(0);
        let task = tokio::spawn(async move {
            while let Some(Ok(msg)) = messages.next().await {
                let Ok(info) = msg.info() else { continue };
                let revision = info.stream_sequence;
                delivered_tx.send_replace(revision);
                // A ticket is JSON with a place (0: this write) and what it
                // would be granted; deletes and markers are not.
                let Ok(ticket) = serde_json::from_slice::<serde_json::Value>(&msg.payload) else {
                    continue;
                };
                let (Some(place), Some(key)) = (
                    ticket["place"].as_u64(),
                    ticket["grant"]["key_sha256"].as_str(),
                ) else {
                    continue;
                };
                let place = if place == 0 { revision } else { place };
                seen.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(key.to_string())
                    .or_default()
                    .push(place);
            }
        });
        Ok(TicketLog {
            task,
            places,
            delivered,
        })
    }

    /// Opens `bucket`, creating it the way Tenure does (history 1, file
    /// storage, per-message TTL with 15 min markers) when `create`.
    pub async fn open(url: &str, bucket: &str, create: bool) -> R<Raw> {
        let client = async_nats::connect(url)
            .await
            .map_err(|e| format!("NATS {url}: {e}"))?;
        Raw::open_on(client, bucket, create, 1, None).await
    }

    /// [`Raw::open`] over an existing connection (several buckets can share
    /// one, as Tenure's shards share its one connection), creating the
    /// bucket with `replicas` when `create`, on the servers tagged `tag`
    /// when given.
    pub async fn open_on(
        client: async_nats::Client,
        bucket: &str,
        create: bool,
        replicas: usize,
        tag: Option<&str>,
    ) -> R<Raw> {
        let js = jetstream::new(client.clone());
        if create {
            js.create_key_value(kv::Config {
                bucket: bucket.to_string(),
                history: 1,
                storage: stream::StorageType::File,
                limit_markers: Some(Duration::from_secs(15 * 60)),
                num_replicas: replicas,
                placement: tag.map(|t| stream::Placement {
                    tags: vec![t.to_string()],
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .map_err(|e| format!("creating bucket {bucket}: {e}"))?;
        }
        let stream = js
            .get_stream(format!("KV_{bucket}"))
            .await
            .map_err(|e| format!("bucket {bucket}: {e}"))?;
        Ok(Raw {
            client,
            js,
            stream,
            prefix: format!("$KV.{bucket}."),
            key_hex: KeyHash::of("bench-lease-key-0123456789").to_hex(),
            tenure: !create,
        })
    }

    /// Makes NATS copy every write of the bucket into a history stream,
    /// as Tenure's `TENURE_HISTORY_<bucket>` (file storage, kept 7 days,
    /// no per-subject limit): a mirror of the bucket's stream, or a stream
    /// sourcing it. Tenure's history is a mirror (a sharded bucket's is
    /// sourced); this prices either copy in raw NATS's own rows.
    pub async fn copy_into_history(&self, copy: HistoryCopy) -> R<()> {
        let origin = stream::Source {
            name: self.stream_name(),
            ..Default::default()
        };
        let mut config = stream::Config {
            name: format!("{}_HISTORY", self.stream_name()),
            max_age: Duration::from_secs(7 * 24 * 3600),
            storage: stream::StorageType::File,
            ..Default::default()
        };
        match copy {
            HistoryCopy::Mirror => config.mirror = Some(origin),
            HistoryCopy::Source => config.sources = Some(vec![origin]),
        }
        self.js
            .create_stream(config)
            .await
            .map_err(|e| format!("creating the raw bucket's history stream: {e}"))?;
        Ok(())
    }

    /// The bucket's stream name (`KV_<bucket>`).
    pub fn stream_name(&self) -> String {
        format!(
            "KV_{}",
            self.prefix.trim_start_matches("$KV.").trim_end_matches('.')
        )
    }

    /// One conditional publish; `Ok(None)` on a lost CAS race.
    async fn publish(
        &self,
        subject: String,
        msg: jetstream::message::PublishMessage,
    ) -> R<Option<u64>> {
        let ack = match self.js.send_publish(subject, msg).await {
            Ok(ack) => ack.await,
            Err(e) => Err(e),
        };
        match ack {
            Ok(ack) => Ok(Some(ack.sequence)),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(None),
            Err(e) => Err(format!("publish: {e}")),
        }
    }

    /// A record like Tenure's.
    fn record(&self, token: u64, ttl_s: u64) -> Record {
        let now = now_ms();
        Record {
            holder: "bench".into(),
            token,
            key_sha256: self.key_hex.clone(),
            ttl_s,
            acquired_ms: now,
            renewed_ms: now,
            metadata: Default::default(),
            lock_delay_s: 0,
            group: Vec::new(),
            over: None,
            transferred_from: None,
            mode: None,
        }
    }

    /// One try: read the last message, CAS over it. `Ok(None)`: held or lost.
    async fn try_acquire(&self, name: &str, ttl_s: u64) -> R<Option<Held>> {
        let subject = format!("{}{}", self.prefix, name);
        let expected = match self.stream.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => match state_of(Some(&m.headers)) {
                State::Live => return Ok(None),
                State::Gone => m.sequence,
            },
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => 0,
            Err(e) => return Err(format!("read {name}: {e}")),
        };
        let msg = jetstream::message::PublishMessage::build()
            .payload(self.record(0, ttl_s).encode())
            .expected_last_subject_sequence(expected)
            .ttl(Duration::from_secs(ttl_s));
        Ok(self
            .publish(subject, msg)
            .await?
            .map(|rev| Held::new(name, rev, rev, Instant::now() + Duration::from_secs(ttl_s))))
    }

    /// Takes `name`; with `wait`, follows the key with an ordered consumer
    /// (as Tenure does; kept in the session for the next wait) and retries
    /// when it is released or expires.
    async fn acquire(&self, name: &str, session: &Session, wait: bool) -> R<Held> {
        let ttl_s = session.ttl_s;
        if !wait {
            return self
                .try_acquire(name, ttl_s)
                .await?
                .ok_or_else(|| format!("{name} is held"));
        }
        let mut follower = session.follower.lock().await;
        if follower.as_ref().is_none_or(|(key, _)| key != name) {
            let consumer = self
                .stream
                .create_consumer(consumer::push::OrderedConfig {
                    deliver_subject: self.client.new_inbox(),
                    filter_subject: format!("{}{}", self.prefix, name),
                    deliver_policy: consumer::DeliverPolicy::New,
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("follow {name}: {e}"))?;
            let messages = consumer
                .messages()
                .await
                .map_err(|e| format!("follow {name}: {e}"))?;
            *follower = Some((name.to_string(), messages));
        }
        let (_, messages) = follower.as_mut().expect("set above");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(h) = self.try_acquire(name, ttl_s).await? {
                return Ok(h);
            }
            // Wait for a message that frees the key (an old one queued from
            // an earlier wait only costs one more try).
            loop {
                let next = tokio::time::timeout_at(deadline, messages.next())
                    .await
                    .map_err(|_| format!("{name}: still held after {WAIT:?}"))?;
                match next {
                    Some(Ok(m)) => {
                        if let State::Gone = state_of(m.headers.as_ref()) {
                            break;
                        }
                    }
                    Some(Err(e)) => return Err(format!("follow {name}: {e}")),
                    None => return Err(format!("follow {name}: consumer ended")),
                }
            }
        }
    }

    /// Rewrites the holding over its last revision with a fresh TTL.
    async fn renew(&self, h: &mut Held, ttl_s: u64) -> R<()> {
        let msg = jetstream::message::PublishMessage::build()
            .payload(self.record(h.token, ttl_s).encode())
            .expected_last_subject_sequence(h.rev)
            .ttl(Duration::from_secs(ttl_s));
        match self
            .publish(format!("{}{}", self.prefix, h.name), msg)
            .await?
        {
            Some(rev) => {
                h.rev = rev;
                h.deadline = Instant::now() + Duration::from_secs(ttl_s);
                Ok(())
            }
            None => Err(format!("renew {}: lost the CAS", h.name)),
        }
    }

    /// Writes the release tombstone over the holding's last revision.
    async fn release(&self, h: &Held) -> R<()> {
        let released = Released {
            holder: "bench".into(),
            token: h.token,
        };
        let msg = jetstream::message::PublishMessage::build()
            .payload(released.encode())
            .header("KV-Operation", "DEL")
            .expected_last_subject_sequence(h.rev)
            .ttl(Duration::from_secs(15 * 60));
        match self
            .publish(format!("{}{}", self.prefix, h.name), msg)
            .await?
        {
            Some(_) => Ok(()),
            None => Err(format!("release {}: lost the CAS", h.name)),
        }
    }

    /// `n` fresh leases `<prefix>.<i>` (at Tenure's record key in Tenure's
    /// bucket), pipelined 1,000 acks in flight
    /// (under the 5,000 that would stall the publisher).
    pub async fn background(&self, prefix: &str, n: usize, ttl_s: u64) -> R<()> {
        let results: Vec<R<Option<u64>>> = futures::stream::iter(0..n)
            .map(|i| {
                let msg = jetstream::message::PublishMessage::build()
                    .payload(self.record(0, ttl_s).encode())
                    .expected_last_subject_sequence(0)
                    .ttl(Duration::from_secs(ttl_s));
                let key = match self.tenure {
                    true => format!("_tenure.q.{prefix}.{i}.lease.holder"),
                    false => format!("{prefix}.{i}"),
                };
                self.publish(format!("{}{key}", self.prefix), msg)
            })
            .buffer_unordered(1000)
            .collect()
            .await;
        let failed = results.iter().filter(|r| !matches!(r, Ok(Some(_)))).count();
        if failed > 0 {
            return Err(format!("{failed} of {n} background leases failed"));
        }
        Ok(())
    }
}

/// A Tenure client over a pool of HTTP/2 connections.
pub struct Tenure {
    /// One channel per connection, used round-robin.
    channels: Vec<Channel>,
    /// The next channel to use.
    next: AtomicUsize,
}

/// A protobuf duration of whole seconds.
fn pd(s: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: s as i64,
        nanos: 0,
    }
}

impl Tenure {
    /// Opens `conns` connections to Tenure at `addr` (`host:port`).
    pub async fn connect(addr: &str, conns: usize) -> R<Tenure> {
        let mut channels = Vec::new();
        for _ in 0..conns.max(1) {
            let ch = Channel::from_shared(format!("http://{addr}"))
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| format!("connect to tenure at {addr}: {e}"))?;
            channels.push(ch);
        }
        Ok(Tenure {
            channels,
            next: AtomicUsize::new(0),
        })
    }

    /// Waits until Tenure answers (it creates its bucket at start): a
    /// GetLease of an unused name until NOT_FOUND, up to 30 s.
    pub async fn ready(&self) -> R<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let probe = self
                .client()
                .get_lease(tenure::proto::GetLeaseRequest {
                    name: "bench.probe".into(),
                })
                .await;
            match probe {
                Err(s) if s.code() == tonic::Code::NotFound => return Ok(()),
                Ok(_) => return Ok(()),
                Err(s) if Instant::now() > deadline => {
                    return Err(format!("tenure is not ready: {}", s.message()))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// A client on the next connection.
    pub fn client(&self) -> LeaseServiceClient<Channel> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.channels.len();
        LeaseServiceClient::new(self.channels[i].clone())
    }

    /// Acquire, optionally waiting; `limit` > 0 takes a slot of a semaphore
    /// with that limit.
    async fn acquire(&self, name: &str, ttl_s: u64, wait: bool, limit: u32) -> R<Held> {
        let resp = self
            .client()
            .acquire(AcquireRequest {
                name: name.to_string(),
                holder: "bench".into(),
                ttl: Some(pd(ttl_s)),
                wait: wait.then(|| pd(WAIT.as_secs())),
                limit,
                ..Default::default()
            })
            .await
            .map_err(|s| format!("Acquire {name}: {:?} {}", s.code(), s.message()))?
            .into_inner();
        let now = Instant::now();
        let lease = resp.lease.ok_or("Acquire: no lease in reply")?;
        let granted = lease.ttl.map_or(ttl_s, |d| d.seconds as u64);
        let mut h = Held::new(
            name,
            lease.revision,
            lease.fencing_token,
            now + Duration::from_secs(granted),
        );
        h.key = resp.lease_key;
        h.slot = lease.slot;
        Ok(h)
    }

    /// Renew with the last revision.
    async fn renew(&self, h: &mut Held) -> R<()> {
        let lease = self
            .client()
            .renew(RenewRequest {
                name: h.name.clone(),
                expected_revision: h.rev,
                lease_key: h.key.clone(),
                ttl: None,
                slot: h.slot,
            })
            .await
            .map_err(|s| format!("Renew {}: {:?} {}", h.name, s.code(), s.message()))?
            .into_inner()
            .lease
            .ok_or("Renew: no lease in reply")?;
        h.rev = lease.revision;
        Ok(())
    }

    /// Release with the last revision.
    async fn release(&self, h: &Held) -> R<()> {
        self.client()
            .release(ReleaseRequest {
                name: h.name.clone(),
                expected_revision: h.rev,
                lease_key: h.key.clone(),
                slot: h.slot,
            })
            .await
            .map_err(|s| format!("Release {}: {:?} {}", h.name, s.code(), s.message()))?;
        Ok(())
    }
}
