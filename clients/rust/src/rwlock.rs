//! [`RwLock`]: a read-write lock, one exclusive holder or many shared
//! holders of a name, each a [`Session`] with its own slot and fencing token.
//!
//! As for a [`Semaphore`](crate::Semaphore), the server enforces the lock
//! (conditional writes in NATS), not this client: a holder is an ordinary
//! session of a slot above 0 ([`Session::slot`]), renewed, fenced, watched
//! and released like a lease, and its [`mode`](Session::mode) says how it
//! holds the name. The client's one watch tells a holder's slot apart from
//! the others', so other holders coming and going never end a session.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use tonic::Code;

use crate::client::{AcquireOptions, Client, LeaseInfo};
use crate::error::{Error, Reason};
use crate::proto::{Lease, LockMode};
use crate::session::Session;

impl Client {
    /// The read-write lock `name`: one exclusive holder
    /// ([`RwLock::write`]) or any number of shared holders
    /// ([`RwLock::read`]) at a time; see [`RwLock`]. Nothing is sent until
    /// an acquire is awaited.
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(self, name)
    }
}

/// A read-write lock: the name `name`, held either by one exclusive holder
/// ([`write`](Self::write)) or by up to the server's `--max-shared-holders`
/// (default 64) shared holders at once ([`read`](Self::read)).
///
/// Each holder is a [`Session`] like a lease's, with its own
/// [`slot`](Session::slot), lease key and fencing token (tokens increase
/// across all holders of the name, shared and exclusive, in grant order),
/// renewed in the background, with the same safe deadline, loss signal and
/// release; [`Session::mode`] says how it holds the name, and an exclusive
/// holder can turn shared without letting go with [`Session::downgrade`].
///
/// Waiters of both modes queue in one first-come-first-served queue (across
/// replicas): a shared acquire arriving after a queued exclusive one waits
/// behind it, so a stream of readers never starves a writer.
///
/// ```no_run
/// use std::time::Duration;
/// use tenure_client::Client;
///
/// # async fn f(client: Client) -> Result<(), tenure_client::Error> {
/// let lock = client.rwlock("config.routes");
/// // A writer: alone on the name.
/// let writer = lock
///     .write("deployer-1")
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(60))
///     .await?;
/// publish(writer.fencing_token()).await;
/// // Keep reading what was just written, letting other readers in.
/// writer.downgrade().await?;
/// read(writer.fencing_token()).await;
/// writer.release().await?;
///
/// // A reader: alongside other readers.
/// let reader = lock.read("reader-7").ttl(Duration::from_secs(10)).await?;
/// tokio::select! {
///     _ = reader.lost().cancelled() => eprintln!("lost the read lock: stop"),
///     _ = read(reader.fencing_token()) => {}
/// }
/// reader.release().await?;
/// # Ok(()) }
/// # async fn publish(_token: u64) {}
/// # async fn read(_token: u64) {}
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    /// The connection the holders are acquired through.
    client: Client,
    /// The lock's name.
    name: String,
}

impl RwLock {
    /// The read-write lock `name` (also [`Client::rwlock`]). Nothing is
    /// sent until an acquire is awaited.
    pub fn new(client: &Client, name: impl Into<String>) -> RwLock {
        RwLock {
            client: client.clone(),
            name: name.into(),
        }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An exclusive acquire for `holder`: set its TTL and options on the
    /// returned [`RwLockAcquire`] and await it. It gets the lock when nobody
    /// else holds it, shared or exclusive, and nobody is queued before it.
    pub fn write(&self, holder: impl Into<String>) -> RwLockAcquire {
        self.acquire(holder.into(), LockMode::Exclusive)
    }

    /// A shared acquire for `holder`: set its TTL and options on the
    /// returned [`RwLockAcquire`] and await it. It gets the lock alongside
    /// other shared holders when nobody holds it exclusively and nobody is
    /// queued before it (a queued exclusive acquire goes first).
    pub fn read(&self, holder: impl Into<String>) -> RwLockAcquire {
        self.acquire(holder.into(), LockMode::Shared)
    }

    /// An acquire of `mode` for `holder`.
    fn acquire(&self, holder: String, mode: LockMode) -> RwLockAcquire {
        RwLockAcquire {
            client: self.client.clone(),
            name: self.name.clone(),
            holder,
            mode,
            ttl: Duration::ZERO,
            options: AcquireOptions::default(),
        }
    }

    /// `GetLease`'s answer for the name: its holders, and how many acquires
    /// are queued ([`LeaseInfo::waiting`]).
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseNotFound`] when nobody holds it.
    pub async fn inspect(&self) -> Result<LeaseInfo, Error> {
        self.client.inspect(self.name.clone()).await
    }

    /// The live holders, by slot (empty when nobody holds the lock); each
    /// [`Lease::mode`] says how it holds the name.
    ///
    /// # Errors
    ///
    /// As [`Client::inspect`], but no holder is not an error.
    pub async fn holders(&self) -> Result<Vec<Lease>, Error> {
        match self.inspect().await {
            Ok(info) => Ok(info.holders),
            Err(err) if err.reason() == Reason::LeaseNotFound => Ok(Vec::new()),
            Err(err) => Err(err),
        }
    }
}

/// One acquire of a [`RwLock`], exclusive ([`RwLock::write`]) or shared
/// ([`RwLock::read`]): set the TTL and the options, then `.await` it (or
/// call [`acquire`](Self::acquire)) for the [`Session`].
///
/// The options are those of [`AcquireOptions`] (the builder methods here
/// set them one by one, [`options`](Self::options) all at once), but for
/// [`AcquireOptions::lock_delay`] and [`AcquireOptions::preference`]: a
/// read-write lock has neither (refused with
/// [`Reason::InvalidArgument`]).
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn f(client: tenure_client::Client) -> Result<(), tenure_client::Error> {
/// let reader = client
///     .rwlock("config.routes")
///     .read("reader-7")
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(30))
///     .metadata("host", "reader-7.example")
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an acquire does nothing until it is awaited"]
pub struct RwLockAcquire {
    /// The connection.
    client: Client,
    /// The lock's name.
    name: String,
    /// Who acquires.
    holder: String,
    /// Exclusive or shared.
    mode: LockMode,
    /// The requested TTL; zero for the server's default.
    ttl: Duration,
    /// The acquire's options.
    options: AcquireOptions,
}

impl RwLockAcquire {
    /// The requested time to live, as for [`Client::acquire`]: rounded up
    /// by the server to whole seconds and to its minimum; not set (or
    /// [`Duration::ZERO`]) asks for the server's default.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long the server may keep the acquire queued until it can be
    /// granted ([`AcquireOptions::wait`]); without it, an acquire that
    /// cannot be granted at once fails with [`Reason::LeaseHeld`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = Some(wait);
        self
    }

    /// The ownership secret ([`AcquireOptions::lease_key`]); reusing it
    /// makes a retried acquire return the same holding.
    pub fn lease_key(mut self, key: impl Into<String>) -> Self {
        self.options.lease_key = Some(key.into());
        self
    }

    /// Adds one entry to the metadata stored with the holding and shown to
    /// watchers ([`AcquireOptions::metadata`]).
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.metadata.insert(key.into(), value.into());
        self
    }

    /// Renew after `ttl × fraction` ([`AcquireOptions::renew_fraction`]).
    pub fn renew_fraction(mut self, fraction: f64) -> Self {
        self.options.renew_fraction = Some(fraction);
        self
    }

    /// Taken off the granted TTL for the safe deadline
    /// ([`AcquireOptions::safety_margin`]).
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.options.safety_margin = Some(margin);
        self
    }

    /// The deadline of the Acquire call ([`AcquireOptions::timeout`];
    /// default: the wait + 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = Some(timeout);
        self
    }

    /// Replaces all the options at once.
    pub fn options(mut self, options: AcquireOptions) -> Self {
        self.options = options;
        self
    }

    /// The mode asked for: [`LockMode::Exclusive`] or [`LockMode::Shared`].
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// Sends the acquire (queued with [`wait`](Self::wait)) and starts
    /// renewing the holding in the background: the [`Session`] has its own
    /// [`slot`](Session::slot), fencing token, safe deadline and loss
    /// signal, exactly like a lease's, and [`Session::mode`] is the mode
    /// asked for. Awaiting the builder does the same.
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseHeld`] when it cannot be granted at once (held in a
    /// mode that excludes it, or, metadata `state` `QUEUED`, others are
    /// queued before it) and there is no wait, or the wait ran out;
    /// [`Reason::TooManySharedHolders`] (retryable) for a shared acquire
    /// without a wait that finds the server's `--max-shared-holders` shared
    /// holders; [`Reason::ModeMismatch`] when the name is in use as a
    /// semaphore, or `holder` with the same lease key holds it in the other
    /// mode (there is no upgrade: release, then acquire exclusively);
    /// [`Reason::InvalidArgument`] for a lock delay or a preference; the
    /// errors of [`Client::acquire`] (`ATOMIC_BATCH_UNSUPPORTED` where the
    /// server's NATS lacks atomic batches).
    pub async fn acquire(self) -> Result<Session, Error> {
        if self.options.lock_delay.is_some() || self.options.preference != 0 {
            return Err(Error::local(
                Code::InvalidArgument,
                Reason::InvalidArgument,
                format!(
                    "read-write lock {:?}: a lock delay or a preference is not for a read-write lock",
                    self.name
                ),
            )
            .context(self.client.target(), "Acquire"));
        }
        self.client
            .acquire_slot(self.name, self.holder, self.ttl, 0, self.mode, self.options)
            .await
    }
}

impl IntoFuture for RwLockAcquire {
    type Output = Result<Session, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Session, Error>> + Send>>;

    /// [`RwLockAcquire::acquire`].
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.acquire())
    }
}
