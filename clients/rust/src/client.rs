//! [`Client`]: a connection to Tenure with the lease helpers.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use crate::error::{Error, Reason};
use crate::proto::lease_service_client::LeaseServiceClient;
use crate::proto::{AcquireRequest, EventType, GetLeaseRequest, Lease, WatchLeaseRequest};
use crate::session::{
    check_renew_fraction, check_timing, default_safety_margin, Session, DEFAULT_RENEW_FRACTION,
};
use crate::watch::Watch;

/// Deadline of a unary call, on top of an Acquire's wait.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Client::connect`] tries to open the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to a Tenure server.
///
/// Cheap to clone (clones share the HTTP/2 connection). Sessions keep their
/// own handle on it, so dropping the client does not end them.
#[derive(Debug, Clone)]
pub struct Client {
    stub: LeaseServiceClient<Channel>,
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
}

impl Client {
    /// Connects (plaintext HTTP/2) to `addr`: `"host:port"` or a URI such as
    /// `"http://host:port"`. For TLS or other channel settings, build a
    /// [`Channel`] yourself and use [`Client::new`].
    ///
    /// # Errors
    ///
    /// The address is malformed ([`Code::InvalidArgument`]) or the server
    /// cannot be reached within 5 s ([`Code::Unavailable`]); the reason is
    /// [`Reason::Unspecified`] or [`Reason::InvalidArgument`].
    pub async fn connect(addr: impl AsRef<str>) -> Result<Client, Error> {
        let addr = addr.as_ref();
        let uri = if addr.contains("://") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        let endpoint = Endpoint::from_shared(uri).map_err(|e| {
            Error::local(
                Code::InvalidArgument,
                Reason::InvalidArgument,
                format!("bad Tenure address {addr:?}: {e}"),
            )
        })?;
        let channel = endpoint
            .connect_timeout(CONNECT_TIMEOUT)
            .connect()
            .await
            .map_err(|e| {
                Error::local(
                    Code::Unavailable,
                    Reason::Unspecified,
                    format!("cannot connect to Tenure at {addr}: {e}"),
                )
            })?;
        Ok(Client::new(channel))
    }

    /// A client over an existing channel.
    pub fn new(channel: Channel) -> Client {
        Client {
            stub: LeaseServiceClient::new(channel),
        }
    }

    /// The generated stub, for raw calls.
    pub fn stub(&self) -> LeaseServiceClient<Channel> {
        self.stub.clone()
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
        let request = AcquireRequest {
            name: name.into(),
            holder: holder.into(),
            ttl: (!ttl.is_zero()).then(|| to_proto(ttl)),
            lease_key: options.lease_key.unwrap_or_default(),
            wait: options.wait.map(to_proto),
            metadata: options.metadata,
            ..Default::default()
        };
        let sent = Instant::now();
        let mut stub = self.stub.clone();
        let reply = unary(timeout, request, |req| stub.acquire(req)).await?;
        let lease = reply.lease.ok_or_else(|| {
            Error::local(
                Code::Internal,
                Reason::Internal,
                "Acquire reply without a lease",
            )
        })?;
        Session::start(
            self.stub.clone(),
            lease,
            reply.lease_key,
            sent,
            renew_fraction,
            options.safety_margin,
        )
        .await
    }

    /// The current holding of `name`.
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseNotFound`] when nobody holds it.
    pub async fn get(&self, name: impl Into<String>) -> Result<Lease, Error> {
        let mut stub = self.stub.clone();
        let request = GetLeaseRequest { name: name.into() };
        let reply = unary(DEFAULT_CALL_TIMEOUT, request, |req| stub.get_lease(req)).await?;
        reply.lease.ok_or_else(|| {
            Error::local(
                Code::Internal,
                Reason::Internal,
                "GetLease reply without a lease",
            )
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
    /// (`SNAPSHOT_COMPLETE` always comes); empty keeps all.
    ///
    /// # Errors
    ///
    /// The stream could not be opened (e.g. [`Reason::InvalidName`]).
    pub async fn watch_filtered(
        &self,
        name_or_prefix: impl Into<String>,
        event_types: &[EventType],
    ) -> Result<Watch, Error> {
        let request = WatchLeaseRequest {
            name: name_or_prefix.into(),
            event_types: event_types.iter().map(|t| *t as i32).collect(),
            start_revision: 0,
        };
        let mut stub = self.stub.clone();
        let stream = tokio::time::timeout(DEFAULT_CALL_TIMEOUT, stub.watch_lease(request))
            .await
            .map_err(|_| timeout_error(DEFAULT_CALL_TIMEOUT))??
            .into_inner();
        Ok(Watch::new(stream))
    }
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

fn timeout_error(timeout: Duration) -> Error {
    Error::local(
        Code::DeadlineExceeded,
        Reason::Unspecified,
        format!("no answer within {timeout:?}"),
    )
}

/// A protobuf duration.
fn to_proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs().min(i64::MAX as u64) as i64,
        nanos: d.subsec_nanos() as i32,
    }
}
