//! The lease protocol: acquire, renew, release and read leases with
//! compare-and-set writes on the bucket (see `shared/design/lease-protocol.md`).
//!
//! Every write names the revision it replaces, so NATS decides every race;
//! this module only decides *which* revision to name and whether the caller
//! may name it. Ownership is proven by the lease key, checked against the
//! exact record that the write replaces.
//!
//! The only memory here is [`KeyCache`]: the record last written or read at a
//! (name, revision). A message at a given revision never changes, so the
//! cache cannot be wrong; it lets a renewal through the same replica skip the
//! read. A stale entry only costs a failed CAS and a read.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::error::{Error, Reason, Result};
use crate::record::{KeyHash, Record, Released};
use crate::shutdown::Shutdown;
use crate::store::{CasError, Entry, Kind, Store};
use crate::watch::{EventKind, Filter, Hub};

/// How many times a call re-reads and retries after losing a CAS race before
/// it reports contention.
const MAX_CAS_ATTEMPTS: usize = 5;
/// How often a waiting Acquire re-checks even without a bucket event: a
/// safety net should the event stream break.
const WAIT_POLL: Duration = Duration::from_secs(1);

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
}

/// What Acquire asks for, already validated.
#[derive(Debug, Clone)]
pub struct AcquireArgs {
    /// The lease name.
    pub name: String,
    /// Who wants it.
    pub holder: String,
    /// Granted TTL, whole seconds.
    pub ttl_s: u64,
    /// The ownership secret.
    pub key: String,
    /// How long to wait for a held lease; `None`: fail at once.
    pub wait: Option<Duration>,
    /// Metadata to store.
    pub metadata: BTreeMap<String, String>,
}

/// The lease operations over one bucket. Cheap to clone.
#[derive(Clone)]
pub struct Leases {
    /// The bucket.
    store: Store,
    /// Records this replica wrote or read, by name.
    cache: Arc<KeyCache>,
    /// Wakes waiting Acquires when a name may have become free.
    hub: Hub,
    /// Ends waiting Acquires when the server shuts down.
    shutdown: Shutdown,
}

impl Leases {
    /// Lease operations over `store`; waits follow `hub` and end when
    /// `shutdown` fires.
    pub fn new(store: Store, hub: Hub, shutdown: Shutdown) -> Leases {
        Leases {
            store,
            cache: Arc::new(KeyCache::default()),
            hub,
            shutdown,
        }
    }

    /// The shared bucket watcher.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// The underlying bucket.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Takes a lease, waiting for it to become free if `args.wait` says so.
    pub async fn acquire(&self, args: &AcquireArgs) -> Result<Holding> {
        let Some(wait) = args.wait else {
            return self.try_acquire(args).await;
        };
        let deadline = Instant::now() + wait;
        // Follow the key before the first try, so a release between the try
        // and the subscription cannot be missed.
        let ends = vec![EventKind::Released, EventKind::Expired, EventKind::Revoked];
        let mut follow = self
            .hub
            .follow(Filter::Name(args.name.clone()), ends)
            .await
            .ok();
        let mut shutdown = self.shutdown.clone();
        loop {
            let held = match self.try_acquire(args).await {
                Err(err) if err.reason == Reason::LeaseHeld => err,
                other => return other,
            };
            // Sleep until the lease may be free (a release, expiry or revoke
            // of this name), the poll tick, or the deadline.
            let freed = async {
                match follow.as_mut() {
                    Some(f) => f.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.recv() => {
                    return Err(Error::new(Reason::ShuttingDown, "the server is shutting down; Acquire again on another replica"));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    let message = format!("{} (gave up after waiting {wait:?})", held.message);
                    return Err(Error { message, ..held }.with("waited_ms", wait.as_millis()));
                }
                _ = tokio::time::sleep(WAIT_POLL) => {}
                event = freed => {
                    if event.is_err() {
                        follow = None;
                    }
                }
            }
        }
    }

    /// One attempt to take a lease: read the last message, then CAS over it.
    async fn try_acquire(&self, args: &AcquireArgs) -> Result<Holding> {
        let hash = KeyHash::of(&args.key);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let last = self.store.last(&args.name).await?;
            let expected = match &last {
                None => 0,
                Some(entry) => match &entry.kind {
                    Kind::Held(rec) if rec.holder == args.holder && rec.key_matches(&hash) => {
                        // A retry of an Acquire whose reply was lost: renew the
                        // holding it took, so the caller's deadline (counted
                        // from this request) is true.
                        match self
                            .write_renewal(&args.name, entry.revision, rec, Some(args.ttl_s))
                            .await
                        {
                            Err(CasError::Conflict { .. }) => continue,
                            other => return other.map_err(cas_failed),
                        }
                    }
                    Kind::Held(rec) => return Err(held(&args.name, rec, entry.revision)),
                    Kind::Unreadable => return Err(unreadable(&args.name, self.store.bucket())),
                    Kind::Released(_) | Kind::Expired | Kind::Revoked => entry.revision,
                },
            };
            let now = now_ms();
            let record = Record {
                holder: args.holder.clone(),
                token: 0,
                key_sha256: hash.to_hex(),
                ttl_s: args.ttl_s,
                acquired_ms: now,
                renewed_ms: now,
                metadata: args.metadata.clone(),
            };
            match self
                .store
                .put(
                    &args.name,
                    &record,
                    expected,
                    Duration::from_secs(args.ttl_s),
                )
                .await
            {
                Ok(revision) => {
                    tracing::debug!(name = %args.name, holder = %args.holder, token = revision, "acquired");
                    self.cache.insert(&args.name, revision, &record);
                    return Ok(Holding {
                        name: args.name.clone(),
                        revision,
                        token: revision,
                        record,
                    });
                }
                Err(CasError::Conflict { .. }) => continue,
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(contended(&args.name))
    }

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
                match self.write_renewal(name, expected, &rec, ttl_s).await {
                    Err(CasError::Conflict { .. }) => {}
                    other => return other.map_err(cas_failed),
                }
            }
        }
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (revision, rec) = self.verify_holding(name, expected, &hash).await?;
            match self.write_renewal(name, revision, &rec, ttl_s).await {
                Err(CasError::Conflict { .. }) => continue,
                other => return other.map_err(cas_failed),
            }
        }
        Err(contended(name))
    }

    /// Ends a holding; returns the revision of the release.
    pub async fn release(&self, name: &str, expected: u64, key: &str) -> Result<u64> {
        let hash = KeyHash::of(key);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (revision, rec) = match self.cache.get(name, expected) {
                Some(rec) if rec.key_matches(&hash) => (expected, rec),
                _ => self.verify_holding(name, expected, &hash).await?,
            };
            let released = Released {
                holder: rec.holder.clone(),
                token: rec.token_at(revision),
            };
            match self.store.tombstone(name, &released, revision).await {
                Ok(revision) => {
                    tracing::debug!(name, holder = %rec.holder, token = released.token, "released");
                    self.cache.remove(name);
                    return Ok(revision);
                }
                Err(CasError::Conflict { .. }) => {
                    // Whatever we knew is stale: verify against the leader.
                    self.cache.remove(name);
                    continue;
                }
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(contended(name))
    }

    /// The current holding of a name.
    pub async fn get(&self, name: &str) -> Result<Holding> {
        match self.store.last(name).await? {
            Some(Entry {
                revision,
                kind: Kind::Held(record),
                ..
            }) => {
                self.cache.insert(name, revision, &record);
                Ok(Holding {
                    name: name.to_string(),
                    revision,
                    token: record.token_at(revision),
                    record,
                })
            }
            Some(Entry {
                kind: Kind::Unreadable,
                ..
            }) => Err(unreadable(name, self.store.bucket())),
            other => Err(Error::new(
                Reason::LeaseNotFound,
                format!(
                    "lease {name:?} is not held ({}); Acquire it to take it",
                    state_of(other.as_ref())
                ),
            )
            .with("state", state_of(other.as_ref()))),
        }
    }

    /// Reads the current record of `name` from the leader and checks that it
    /// is the caller's holding: the key matches and `expected` lies between
    /// the holding's token and its current revision (every revision in that
    /// range was written by this holding).
    async fn verify_holding(
        &self,
        name: &str,
        expected: u64,
        hash: &KeyHash,
    ) -> Result<(u64, Arc<Record>)> {
        let last = self.store.last(name).await?;
        let (revision, rec) = match last {
            Some(entry) => match &entry.kind {
                Kind::Held(rec) => (entry.revision, Arc::new(rec.clone())),
                Kind::Unreadable => return Err(unreadable(name, self.store.bucket())),
                _ => {
                    let state = state_of(Some(&entry));
                    return Err(not_held(
                        name,
                        format!("it was {state} at revision {}", entry.revision),
                    )
                    .with("state", state));
                }
            },
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
        if expected < token || expected > revision {
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
    async fn write_renewal(
        &self,
        name: &str,
        revision: u64,
        rec: &Record,
        ttl_s: Option<u64>,
    ) -> Result<Holding, CasError> {
        let token = rec.token_at(revision);
        let record = Record {
            token,
            ttl_s: ttl_s.unwrap_or(rec.ttl_s),
            renewed_ms: now_ms(),
            ..rec.clone()
        };
        let new_revision = self
            .store
            .put(name, &record, revision, Duration::from_secs(record.ttl_s))
            .await?;
        self.cache.insert(name, new_revision, &record);
        Ok(Holding {
            name: name.to_string(),
            revision: new_revision,
            token,
            record,
        })
    }
}

/// The last record this replica wrote or read per name, with its revision.
#[derive(Default)]
pub struct KeyCache {
    /// name → (revision, record at that revision).
    entries: Mutex<HashMap<String, (u64, Arc<Record>)>>,
}

impl KeyCache {
    /// Most names remembered; the map is cleared when it grows past this.
    const CAPACITY: usize = 100_000;

    /// The record of `name` at exactly `revision`, if remembered.
    fn get(&self, name: &str, revision: u64) -> Option<Arc<Record>> {
        let entries = self.entries.lock().expect("cache lock");
        match entries.get(name) {
            Some((rev, rec)) if *rev == revision => Some(rec.clone()),
            _ => None,
        }
    }

    /// Remembers the record of `name` at `revision`.
    fn insert(&self, name: &str, revision: u64, record: &Record) {
        let mut entries = self.entries.lock().expect("cache lock");
        if entries.len() >= Self::CAPACITY && !entries.contains_key(name) {
            entries.clear();
        }
        entries.insert(name.to_string(), (revision, Arc::new(record.clone())));
    }

    /// Forgets `name`.
    fn remove(&self, name: &str) {
        self.entries.lock().expect("cache lock").remove(name);
    }
}

/// Turns a CAS failure that is not a conflict into the caller's error.
fn cas_failed(err: CasError) -> Error {
    match err {
        CasError::Failed(err) => err,
        CasError::Conflict { .. } => Error::new(Reason::Internal, "unexpected write conflict"),
    }
}

/// `LEASE_HELD` naming the current holder.
fn held(name: &str, rec: &Record, revision: u64) -> Error {
    let token = rec.token_at(revision);
    Error::new(
        Reason::LeaseHeld,
        format!(
            "lease {name:?} is held by {:?} (token {token}); retry after it is released or expires, or Acquire with a wait",
            rec.holder
        ),
    )
    .with("holder", &rec.holder)
    .with("fencing_token", token)
    .with("ttl_seconds", rec.ttl_s)
}

/// `LEASE_NOT_HELD` with why.
fn not_held(name: &str, why: String) -> Error {
    Error::new(
        Reason::LeaseNotHeld,
        format!("you do not hold lease {name:?}: {why}; stop acting as holder and Acquire again"),
    )
}

/// `LEASE_HELD` after repeated lost races.
fn contended(name: &str) -> Error {
    Error::new(
        Reason::LeaseHeld,
        format!("lease {name:?} is changing hands too fast to settle; retry with backoff"),
    )
}

/// `RECORD_UNREADABLE` for a foreign value under a lease name.
pub(crate) fn unreadable(name: &str, bucket: &str) -> Error {
    Error::new(
        Reason::RecordUnreadable,
        format!(
            "key {name:?} in bucket {bucket:?} holds a value that is not a Tenure lease; remove it with `nats kv del {bucket} {name}`"
        ),
    )
}

/// The UPPER_SNAKE state of a name's last message, for messages and metadata.
fn state_of(entry: Option<&Entry>) -> &'static str {
    match entry.map(|e| &e.kind) {
        None => "ABSENT",
        Some(Kind::Held(_)) => "HELD",
        Some(Kind::Unreadable) => "UNREADABLE",
        Some(Kind::Released(_)) => "RELEASED",
        Some(Kind::Expired) => "EXPIRED",
        Some(Kind::Revoked) => "REVOKED",
    }
}

/// Wall-clock Unix milliseconds, for the record's informational times.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
