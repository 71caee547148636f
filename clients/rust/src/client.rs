//! [`Client`]: a connection to Tenure with the lease helpers, the admin
//! helpers ([`Client::list`], [`Client::revoke`]) and the credentials of
//! every call.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::Code;

use crate::config::ClientConfig;
use crate::error::{Error, Reason};
use crate::follow::Follower;
use crate::group::GroupSession;
use crate::keepalive::KeepAlive;
use crate::lifecycle::{
    check_renew_fraction, check_timing, default_safety_margin, DEFAULT_RENEW_FRACTION,
};
use crate::proto::election_service_client::ElectionServiceClient;
use crate::proto::lease_service_client::LeaseServiceClient;
use crate::proto::{
    AcquireGroupRequest, AcquireRequest, EventType, GetFenceKeysRequest, GetLeaseRequest, Lease,
    ListLeasesRequest, LockMode, RevokeLeaseRequest, WatchLeaseRequest,
};
use crate::session::Session;
use crate::stub::{open_watch, timeout_error, ElectionStub, Stub, DEFAULT_CALL_TIMEOUT};
use crate::watch::Watch;

/// A connection to a Tenure server.
///
/// Cheap to clone (clones share the HTTP/2 connection and the one watch that
/// follows the sessions' leases). Sessions keep their own handle on it, so
/// dropping the client does not end them.
#[derive(Debug, Clone)]
pub struct Client {
    /// The stub every call goes through.
    stub: Stub,
    /// The election service over the same channel and credentials.
    elections: ElectionStub,
    /// `host:port`, as errors name it.
    target: Arc<str>,
    /// The one `WatchLease` stream that notices the loss of any of this
    /// connection's sessions at once.
    follower: Arc<Follower>,
    /// The one `KeepAlive` stream that carries the renewals of all this
    /// connection's lease and semaphore sessions.
    keepalive: Arc<KeepAlive>,
}

/// What [`Client::inspect`] returns: `GetLease`'s whole answer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LeaseInfo {
    /// The current holding; for a semaphore or a read-write lock, the
    /// holder with the lowest fencing token.
    pub lease: Lease,
    /// How many Acquires with a wait are queued for the name (granted in
    /// arrival order; 0 on a server without fair waiting).
    pub waiting: u32,
    /// The live holders of a semaphore or a read-write lock, by slot;
    /// empty for a plain lease.
    pub holders: Vec<Lease>,
    /// The semaphore's limit in force; 0 for a plain lease.
    pub limit: u32,
    /// How many more holders the semaphore admits now; 0 for a plain lease.
    pub free_slots: u32,
}

/// Options of [`Client::acquire`]; `AcquireOptions::default()` for none.
///
/// ```
/// use std::time::Duration;
/// use tenure_client::AcquireOptions;
///
/// let options = AcquireOptions::default()
///     .wait(Duration::from_secs(30))
///     .metadata("host", "worker-1.example")
///     .renew_fraction(0.25);
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct AcquireOptions {
    /// How long the server may wait for a held lease to become free; `None`
    /// fails at once with `LEASE_HELD`.
    pub wait: Option<Duration>,
    /// The ownership secret (16 to 256 printable ASCII characters); `None`
    /// lets the server mint one. Reusing a key makes a retried acquire
    /// return the same holding (same fencing token), renewed.
    pub lease_key: Option<String>,
    /// Small key/value map stored with the lease and shown to watchers.
    pub metadata: HashMap<String, String>,
    /// Renew after `ttl × renew_fraction`; default
    /// [`DEFAULT_RENEW_FRACTION`] (1/3). Must be in (0, 1).
    pub renew_fraction: Option<f64>,
    /// Taken off the granted TTL for the safe deadline; default
    /// [`default_safety_margin`] (TTL/10, at most 1 s). Must leave room to
    /// renew: `safety_margin < ttl × (1 − renew_fraction)`.
    pub safety_margin: Option<Duration>,
    /// Deadline of the Acquire call; default `wait` + 10 s.
    pub timeout: Option<Duration>,
    /// After this holding *expires or is revoked* (never after a release),
    /// nobody may acquire the name for this long (rounded up to whole
    /// seconds, at most the server's `--max-lock-delay`); `None` for none.
    /// Protects downstream systems that cannot check fencing tokens. Not
    /// combinable with a [`Semaphore`](crate::Semaphore) (the server refuses).
    pub lock_delay: Option<Duration>,
    /// An election candidate's preference; 0 (the default) asks for
    /// nothing. While this acquire waits (with [`AcquireOptions::wait`]),
    /// the server keeps it with its place in the queue, and the election's
    /// Observe stream names the waiting candidate with the highest
    /// preference (the earliest of equals) as the preferred one
    /// ([`LeaderChange::preferred`](crate::LeaderChange::preferred)), to
    /// whom a leader of lower preference hands over
    /// ([`Election::with_preference`](crate::Election::with_preference)
    /// campaigns with it and does so). Does nothing for an acquire that
    /// does not wait. Not combinable with a [`Semaphore`](crate::Semaphore)
    /// (the server refuses with `INVALID_ARGUMENT`) nor with
    /// [`Client::acquire_group`] (refused locally).
    pub preference: u32,
}

impl AcquireOptions {
    /// Sets [`AcquireOptions::wait`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Sets [`AcquireOptions::lease_key`].
    pub fn lease_key(mut self, key: impl Into<String>) -> Self {
        self.lease_key = Some(key.into());
        self
    }

    /// Adds one entry to [`AcquireOptions::metadata`].
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Sets [`AcquireOptions::renew_fraction`].
    pub fn renew_fraction(mut self, fraction: f64) -> Self {
        self.renew_fraction = Some(fraction);
        self
    }

    /// Sets [`AcquireOptions::safety_margin`].
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// Sets [`AcquireOptions::timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets [`AcquireOptions::lock_delay`].
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// Sets [`AcquireOptions::preference`].
    pub fn preference(mut self, preference: u32) -> Self {
        self.preference = preference;
        self
    }
}

impl Client {
    /// Connects (plaintext HTTP/2, no credentials) to `addr`: `"host:port"`
    /// or a URI such as `"http://host:port"` (`"https://…"` uses TLS with no
    /// CA: use [`Client::connect_with`] for TLS, mTLS and tokens).
    ///
    /// # Errors
    ///
    /// The address is malformed ([`Code::InvalidArgument`]) or the server
    /// cannot be reached within 5 s ([`Code::Unavailable`]); the reason is
    /// [`Reason::Unspecified`] or [`Reason::InvalidArgument`].
    pub async fn connect(addr: impl AsRef<str>) -> Result<Client, Error> {
        Client::connect_with(ClientConfig::new(addr.as_ref())).await
    }

    /// Connects as `config` says: TLS with a CA, mTLS with a client
    /// certificate, a bearer token (static or asked for anew before every
    /// call), extra metadata on every call.
    ///
    /// # Errors
    ///
    /// The address or TLS settings are bad ([`Code::InvalidArgument`]) or
    /// the server cannot be reached (or the TLS handshake fails) within
    /// `config.connect_timeout` ([`Code::Unavailable`]).
    pub async fn connect_with(config: ClientConfig) -> Result<Client, Error> {
        let target = config.display_target();
        let channel = config.endpoint()?.connect().await.map_err(|e| {
            let mut cause = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                cause = format!("{cause}: {s}");
                source = s.source();
            }
            Error::local(Code::Unavailable, Reason::Unspecified, cause).context(&target, "connect")
        })?;
        Ok(Client::from_channel(channel, &config))
    }

    /// A client over an existing channel, without credentials.
    pub fn new(channel: Channel) -> Client {
        Client::from_channel(channel, &ClientConfig::new(""))
    }

    /// A client over an existing channel, sending `config`'s token and
    /// metadata with every call (its target only names the server in
    /// errors; its TLS settings are not used: the channel has its own).
    pub fn from_channel(channel: Channel, config: &ClientConfig) -> Client {
        let elections =
            ElectionServiceClient::with_interceptor(channel.clone(), config.credentials());
        let stub = LeaseServiceClient::with_interceptor(channel, config.credentials());
        let target: Arc<str> = config.display_target().into();
        Client {
            follower: Follower::new(stub.clone(), target.clone()),
            keepalive: KeepAlive::new(stub.clone()),
            stub,
            elections,
            target,
        }
    }

    /// The generated stub (with this client's credentials), for raw calls.
    pub fn stub(&self) -> Stub {
        self.stub.clone()
    }

    /// The election stub (with this client's credentials).
    pub(crate) fn election_stub(&self) -> ElectionStub {
        self.elections.clone()
    }

    /// The server, `host:port`.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Takes the lease `name` for `holder` and starts renewing it in the
    /// background; see [`Session`].
    ///
    /// `ttl` is the requested time to live: the server rounds it up to whole
    /// seconds and to its minimum; [`Duration::ZERO`] asks for the server's
    /// default. The safe deadline counts from when this request is sent.
    /// When the Acquire took longer than a renew interval (a long `wait`),
    /// the session is renewed once before it is returned.
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseHeld`] when another holder has it (the metadata names
    /// the holder), `INVALID_*` for bad arguments, [`Reason::InvalidArgument`]
    /// for options refused locally, [`Reason::Unspecified`] with
    /// [`Code::Unavailable`] or [`Code::DeadlineExceeded`] when the server
    /// could not be reached or did not answer.
    pub async fn acquire(
        &self,
        name: impl Into<String>,
        holder: impl Into<String>,
        ttl: Duration,
        options: AcquireOptions,
    ) -> Result<Session, Error> {
        self.acquire_slot(
            name.into(),
            holder.into(),
            ttl,
            0,
            LockMode::Unspecified,
            options,
        )
        .await
    }

    /// [`Client::acquire`] of a plain lease (`limit` 0, `mode`
    /// unspecified), of a slot of the semaphore `name` (`limit` N > 0; see
    /// [`Semaphore`](crate::Semaphore)) or of a holding of the read-write
    /// lock `name` (`mode` exclusive or shared; see
    /// [`RwLock`](crate::RwLock)).
    pub(crate) async fn acquire_slot(
        &self,
        name: String,
        holder: String,
        ttl: Duration,
        limit: u32,
        mode: LockMode,
        options: AcquireOptions,
    ) -> Result<Session, Error> {
        let (renew_fraction, timeout) = checked(ttl, &options)?;
        let request = AcquireRequest {
            name,
            holder,
            ttl: (!ttl.is_zero()).then(|| to_proto(ttl)),
            lease_key: options.lease_key.unwrap_or_default(),
            wait: options.wait.map(to_proto),
            metadata: options.metadata,
            lock_delay: options.lock_delay.map(to_proto),
            limit,
            preference: options.preference,
            mode: mode as i32,
        };
        let stub = self.stub.clone();
        let (reply, sent) = queued(
            options.wait,
            timeout,
            request,
            |r, wait| r.wait = Some(to_proto(wait)),
            |req| {
                let mut stub = stub.clone();
                async move { stub.acquire(req).await }
            },
        )
        .await
        .map_err(|e| e.context(&self.target, "Acquire"))?;
        let lease = reply.lease.ok_or_else(|| {
            Error::local(
                Code::Internal,
                Reason::Internal,
                "Acquire reply without a lease",
            )
            .context(&self.target, "Acquire")
        })?;
        Session::start(
            self.stub.clone(),
            self.keepalive.clone(),
            self.target.clone(),
            self.follower.clone(),
            lease,
            reply.lease_key,
            sent,
            renew_fraction,
            options.safety_margin,
        )
        .await
    }

    /// Takes every lease of `names` (2 to the server's `--max-group-size`,
    /// default 16, distinct plain lease names) for `holder`, all or none,
    /// with one `AcquireGroup`, and renews them together in the background;
    /// see [`GroupSession`]. With [`AcquireOptions::wait`] it waits until
    /// every name is free at once (never holding some while waiting for
    /// others, so groups cannot deadlock). The options apply to every
    /// member (`lock_delay` included), but for
    /// [`AcquireOptions::preference`], which is refused.
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseHeld`] when a member is held (metadata `name`), the
    /// errors of [`Client::acquire`] ([`Reason::InvalidArgument`] for a
    /// `preference`), `FAILED_PRECONDITION` from a server
    /// whose NATS lacks atomic batches, `UNIMPLEMENTED` from a server
    /// without groups.
    pub async fn acquire_group(
        &self,
        names: &[&str],
        holder: impl Into<String>,
        ttl: Duration,
        options: AcquireOptions,
    ) -> Result<GroupSession, Error> {
        let (renew_fraction, timeout) = checked(ttl, &options)?;
        if options.preference != 0 {
            return Err(Error::local(
                Code::InvalidArgument,
                Reason::InvalidArgument,
                "a preference is for an election candidate's acquire, not a group",
            )
            .context(&self.target, "AcquireGroup"));
        }
        let request = AcquireGroupRequest {
            names: names.iter().map(|n| n.to_string()).collect(),
            holder: holder.into(),
            ttl: (!ttl.is_zero()).then(|| to_proto(ttl)),
            lease_key: options.lease_key.unwrap_or_default(),
            wait: options.wait.map(to_proto),
            metadata: options.metadata,
            lock_delay: options.lock_delay.map(to_proto),
        };
        let stub = self.stub.clone();
        let (reply, sent) = queued(
            options.wait,
            timeout,
            request,
            |r, wait| r.wait = Some(to_proto(wait)),
            |req| {
                let mut stub = stub.clone();
                async move { stub.acquire_group(req).await }
            },
        )
        .await
        .map_err(|e| e.context(&self.target, "AcquireGroup"))?;
        if reply.leases.len() != names.len() {
            return Err(Error::local(
                Code::Internal,
                Reason::Internal,
                format!(
                    "AcquireGroup reply with {} leases for {} names",
                    reply.leases.len(),
                    names.len()
                ),
            )
            .context(&self.target, "AcquireGroup"));
        }
        GroupSession::start(
            self.stub.clone(),
            self.target.clone(),
            self.follower.clone(),
            reply.leases,
            reply.lease_key,
            sent,
            renew_fraction,
            options.safety_margin,
        )
        .await
    }

    /// The current state of `name`: its holding, how many Acquires wait
    /// for it (fair FIFO queue, all replicas), and for a semaphore every
    /// holder, the limit and the free slots.
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseNotFound`] when nobody holds it.
    pub async fn inspect(&self, name: impl Into<String>) -> Result<LeaseInfo, Error> {
        let mut stub = self.stub.clone();
        let request = GetLeaseRequest { name: name.into() };
        let reply = unary(DEFAULT_CALL_TIMEOUT, request, |req| stub.get_lease(req))
            .await
            .map_err(|e| e.context(&self.target, "GetLease"))?;
        let lease = reply.lease.ok_or_else(|| {
            Error::local(
                Code::Internal,
                Reason::Internal,
                "GetLease reply without a lease",
            )
            .context(&self.target, "GetLease")
        })?;
        Ok(LeaseInfo {
            lease,
            waiting: reply.waiting,
            holders: reply.holders,
            limit: reply.limit,
            free_slots: reply.free_slots,
        })
    }

    /// The current holding of `name`.
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseNotFound`] when nobody holds it.
    pub async fn get(&self, name: impl Into<String>) -> Result<Lease, Error> {
        Ok(self.inspect(name).await?.lease)
    }

    /// Every live holding whose name starts with `prefix` (plain string
    /// prefix, e.g. `"jobs."`; `""` for all), sorted by name, following the
    /// pages. Needs the `admin` grant when auth is on.
    ///
    /// # Errors
    ///
    /// [`Reason::PermissionDenied`] without the grant, or a transport error.
    pub async fn list(&self, prefix: impl Into<String>) -> Result<Vec<Lease>, Error> {
        let prefix = prefix.into();
        let mut leases = Vec::new();
        let mut page_token = String::new();
        loop {
            let (page, next) = self.list_page(&prefix, 0, &page_token).await?;
            leases.extend(page);
            if next.is_empty() {
                return Ok(leases);
            }
            page_token = next;
        }
    }

    /// One page of [`Client::list`]: up to `page_size` holdings (0: the
    /// server's default of 100) after `page_token` (empty: from the
    /// start), and the token of the next page (empty after the last).
    ///
    /// # Errors
    ///
    /// As [`Client::list`].
    pub async fn list_page(
        &self,
        prefix: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<Lease>, String), Error> {
        let mut stub = self.stub.clone();
        let request = ListLeasesRequest {
            prefix: prefix.to_string(),
            page_size,
            page_token: page_token.to_string(),
        };
        let reply = unary(DEFAULT_CALL_TIMEOUT, request, |req| stub.list_leases(req))
            .await
            .map_err(|e| e.context(&self.target, "ListLeases"))?;
        Ok((reply.leases, reply.next_page_token))
    }

    /// The keyset a downstream store pins to verify fence proofs (one
    /// base64url Ed25519 public key per line; docs/fencing.md), from
    /// GetFenceKeys; empty when the server signs no proofs. A store should
    /// pin what it read, not fetch it on every write.
    ///
    /// # Errors
    ///
    /// [`Reason::PermissionDenied`] for an identity with no grant, or a
    /// transport error.
    pub async fn fence_keyset(&self) -> Result<String, Error> {
        let mut stub = self.stub.clone();
        let reply = unary(DEFAULT_CALL_TIMEOUT, GetFenceKeysRequest {}, |req| {
            stub.get_fence_keys(req)
        })
        .await
        .map_err(|e| e.context(&self.target, "GetFenceKeys"))?;
        Ok(reply.keyset)
    }

    /// Ends the holding of `name` (an operator's action: the holder's
    /// session sees it as lost at once), saying why (`reason`, 1 to 256
    /// printable bytes, for the audit log). With `fencing_token` only that
    /// holding is revoked. Returns the revoked holding. Needs the `admin`
    /// grant when auth is on.
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseNotFound`] when nobody holds it (or another holding
    /// than `fencing_token` does), [`Reason::PermissionDenied`] without the
    /// grant, [`Reason::InvalidArgument`] for a bad `reason`.
    pub async fn revoke(
        &self,
        name: impl Into<String>,
        reason: impl Into<String>,
        fencing_token: Option<u64>,
    ) -> Result<Lease, Error> {
        self.revoke_slot(name, 0, reason, fencing_token).await
    }

    /// [`Client::revoke`] of the holder of slot `slot` of the semaphore
    /// `name` (0: the plain lease `name`).
    ///
    /// # Errors
    ///
    /// As [`Client::revoke`].
    pub async fn revoke_slot(
        &self,
        name: impl Into<String>,
        slot: u32,
        reason: impl Into<String>,
        fencing_token: Option<u64>,
    ) -> Result<Lease, Error> {
        let mut stub = self.stub.clone();
        let request = RevokeLeaseRequest {
            name: name.into(),
            reason: reason.into(),
            fencing_token: fencing_token.unwrap_or(0),
            slot,
        };
        let reply = unary(DEFAULT_CALL_TIMEOUT, request, |req| stub.revoke_lease(req))
            .await
            .map_err(|e| e.context(&self.target, "RevokeLease"))?;
        reply.revoked.ok_or_else(|| {
            Error::local(
                Code::Internal,
                Reason::Internal,
                "RevokeLease reply without the revoked lease",
            )
            .context(&self.target, "RevokeLease")
        })
    }

    /// Watches one lease name, or a subtree (`"jobs.>"`; `">"` for all).
    ///
    /// The [`Watch`] stream yields a [`EventType::Current`] event per lease
    /// held now, one [`EventType::SnapshotComplete`], then every change
    /// ([`EventType::Acquired`], [`EventType::Renewed`],
    /// [`EventType::Released`], [`EventType::Expired`],
    /// [`EventType::Revoked`]). Dropping it cancels the stream.
    ///
    /// # Errors
    ///
    /// The stream could not be opened (e.g. [`Reason::InvalidName`]).
    pub async fn watch(&self, name_or_prefix: impl Into<String>) -> Result<Watch, Error> {
        self.watch_filtered(name_or_prefix, &[]).await
    }

    /// Like [`Client::watch`], keeping only events of the given types
    /// (`SNAPSHOT_COMPLETE` and `MISSED` always come); empty keeps all.
    ///
    /// # Errors
    ///
    /// The stream could not be opened (e.g. [`Reason::InvalidName`]).
    pub async fn watch_filtered(
        &self,
        name_or_prefix: impl Into<String>,
        event_types: &[EventType],
    ) -> Result<Watch, Error> {
        self.watch_from(name_or_prefix, event_types, 0).await
    }

    /// Like [`Client::watch_filtered`], resuming after `start_revision`
    /// (e.g. a [`Watch::last_revision`] saved earlier): the server replays
    /// the changes after it (no snapshot), then `SNAPSHOT_COMPLETE`, then
    /// live changes; 0 is a fresh watch.
    ///
    /// # Errors
    ///
    /// The stream could not be opened (e.g. [`Reason::InvalidName`], or
    /// [`Reason::WatchHistoryCompacted`]: the server can no longer resume
    /// from there; watch afresh with 0).
    pub async fn watch_from(
        &self,
        name_or_prefix: impl Into<String>,
        event_types: &[EventType],
        start_revision: u64,
    ) -> Result<Watch, Error> {
        let request = WatchLeaseRequest {
            name: name_or_prefix.into(),
            event_types: event_types.iter().map(|t| *t as i32).collect(),
            start_revision,
            shard_revisions: Vec::new(),
        };
        let stream = open_watch(&self.stub, request.clone())
            .await
            .map_err(|e| e.context(&self.target, "WatchLease"))?;
        Ok(Watch::spawn(
            self.stub.clone(),
            self.target.clone(),
            request,
            stream,
        ))
    }
}

/// First pause before an Acquire refused with `TOO_MANY_WAITERS` is sent
/// again; it doubles up to [`MAX_QUEUE_RETRY`].
const FIRST_QUEUE_RETRY: Duration = Duration::from_millis(100);
/// Longest pause between such retries.
const MAX_QUEUE_RETRY: Duration = Duration::from_secs(2);

/// Sends an Acquire (or AcquireGroup) with a wait, and sends it again,
/// with the wait that is left, while the name's queue is full
/// (`TOO_MANY_WAITERS`, retryable) and the wait has not run out. Returns the
/// reply and the send time of the call that got it (the safe deadline
/// counts from there). Without a wait, or once it has run out, the error is
/// returned.
async fn queued<Req, Resp, Fut>(
    wait: Option<Duration>,
    timeout: Duration,
    mut request: Req,
    set_wait: impl Fn(&mut Req, Duration),
    call: impl Fn(tonic::Request<Req>) -> Fut,
) -> Result<(Resp, Instant), Error>
where
    Req: Clone,
    Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
{
    let start = Instant::now();
    let mut pause = FIRST_QUEUE_RETRY;
    loop {
        let sent = Instant::now();
        let left = timeout.saturating_sub(sent - start);
        match unary(left, request.clone(), &call).await {
            Ok(reply) => return Ok((reply, sent)),
            Err(err) if err.reason() == Reason::TooManyWaiters => {
                let Some(wait) = wait else {
                    return Err(err);
                };
                let wait_left = wait.saturating_sub(start.elapsed());
                if wait_left <= pause {
                    return Err(err);
                }
                tokio::time::sleep(pause).await;
                set_wait(&mut request, wait_left - pause);
                pause = (pause * 2).min(MAX_QUEUE_RETRY);
            }
            Err(err) => return Err(err),
        }
    }
}

/// Checks the session options against `ttl`; returns the renew fraction and
/// the Acquire call's deadline.
fn checked(ttl: Duration, options: &AcquireOptions) -> Result<(f64, Duration), Error> {
    let renew_fraction = options.renew_fraction.unwrap_or(DEFAULT_RENEW_FRACTION);
    check_renew_fraction(renew_fraction)?;
    if !ttl.is_zero() {
        // The granted TTL is at least `ttl`, so this holds for it too
        // (with `ttl` zero, the session checks the granted TTL).
        let margin = options
            .safety_margin
            .unwrap_or_else(|| default_safety_margin(ttl));
        check_timing(ttl, renew_fraction, margin)?;
    }
    let timeout = options
        .timeout
        .unwrap_or_else(|| options.wait.unwrap_or_default() + DEFAULT_CALL_TIMEOUT);
    Ok((renew_fraction, timeout))
}

/// Makes a unary call with a deadline (sent to the server as `grpc-timeout`
/// and enforced here).
async fn unary<Req, Resp, F, Fut>(timeout: Duration, message: Req, call: F) -> Result<Resp, Error>
where
    F: FnOnce(tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
{
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    match tokio::time::timeout(timeout, call(request)).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(Error::from(status)),
        Err(_) => Err(timeout_error(timeout)),
    }
}

/// A protobuf duration.
fn to_proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs().min(i64::MAX as u64) as i64,
        nanos: d.subsec_nanos() as i32,
    }
}
