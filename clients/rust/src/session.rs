//! [`Session`]: one held lease, kept alive by a background renewal task.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::error::{Error, Reason};
use crate::follow::Follower;
use crate::keepalive::KeepAlive;
use crate::lifecycle::{ttl_of, Holding, Lifecycle, Loss, LossCause};
use crate::proto::{
    DowngradeRequest, KeepAliveEntry, Lease, LockMode, ReleaseRequest, TransferRequest,
};
use crate::stub::Stub;
use crate::stub::DEFAULT_CALL_TIMEOUT;

/// One held lease, renewed in the background until released or lost.
///
/// Get one from [`Client::acquire`](crate::Client::acquire) (or
/// [`Semaphore::acquire`](crate::Semaphore::acquire), or an acquire of a
/// [`RwLock`](crate::RwLock)). While
/// [`is_held`](Session::is_held) is true the caller may act as holder,
/// passing [`fencing_token`](Session::fencing_token) with every write to a
/// downstream store. When the lease is lost, [`lost`](Session::lost) is
/// cancelled: at once when a renewal is refused (`LEASE_NOT_HELD`), and no
/// later than [`safe_deadline`](Session::safe_deadline) when renewals cannot
/// get through. `is_held` reads the clock itself, so it turns false at the
/// safe deadline even if the renewal task could not run.
///
/// The background task renews after `ttl × renew_fraction` (default 1/3)
/// with the last revision and the lease key; each success moves the safe
/// deadline to *that renewal's send time* + granted TTL − safety margin.
/// Retryable failures are retried with backoff (50 ms, doubling up to the
/// renew interval), each call cut off at the safe deadline.
///
/// Dropping a session that still holds its lease cancels `lost`, stops the
/// renewals and spawns a release on the current Tokio runtime (if there is
/// one; otherwise the lease ends at its TTL). Call
/// [`release`](Session::release) to release it and see the outcome.
pub struct Session {
    inner: Arc<Lifecycle<LeaseHolding>>,
}

/// What a [`Session`] holds: one lease (or semaphore slot, or read-write
/// lock holding), renewed over the client's `KeepAlive` stream and released
/// with `Release`.
pub(crate) struct LeaseHolding {
    /// The lease name.
    name: String,
    /// The holder, as acquired.
    holder: String,
    /// The ownership secret.
    lease_key: String,
    /// The grant's fencing token.
    fencing_token: u64,
    /// The semaphore slot (1..limit) or read-write lock slot; 0 for a plain
    /// lease.
    slot: u32,
    /// The read-write lock mode granted; unspecified for a plain lease or a
    /// semaphore slot.
    mode: LockMode,
    /// The grant's fence proof (empty when the server signs none).
    fence_proof: Vec<u8>,
    /// Set once, by a successful [`Session::downgrade`] (under the
    /// lifecycle's state lock, while the loss watch is held back): the
    /// shared holding's fencing token and proof, which supersede the
    /// grant's. There is at most one downgrade: only an exclusive holding
    /// has one, and it leaves the holding shared.
    downgraded: OnceLock<Downgraded>,
    /// The client's stub.
    stub: Stub,
    /// The client's renewal path (the KeepAlive stream, or unary Renew).
    keepalive: Arc<KeepAlive>,
}

/// What a downgrade changed of a [`LeaseHolding`].
struct Downgraded {
    /// The shared holding's fencing token (greater than the exclusive one).
    fencing_token: u64,
    /// The downgrade reply's fence proof (empty when it had none).
    fence_proof: Vec<u8>,
}

impl LeaseHolding {
    /// The current fencing token: the grant's, or the downgrade's.
    fn fencing_token(&self) -> u64 {
        self.downgraded
            .get()
            .map_or(self.fencing_token, |d| d.fencing_token)
    }

    /// The current fence proof: the grant's, or the downgrade reply's.
    fn fence_proof(&self) -> &[u8] {
        self.downgraded
            .get()
            .map_or(&self.fence_proof, |d| &d.fence_proof)
    }

    /// The current read-write lock mode.
    fn mode(&self) -> LockMode {
        if self.downgraded.get().is_some() {
            LockMode::Shared
        } else {
            self.mode
        }
    }

    /// Sends the Downgrade of the exclusive holding `lease` (its revision),
    /// retrying retryable failures with backoff until the call's deadline
    /// or `until` (the safe deadline), whichever comes first: a Downgrade
    /// is idempotent (a retry presenting the exclusive revision of one the
    /// server applied returns that shared holding), so a reply lost on the
    /// way does not leave the session presenting a superseded revision.
    /// Returns the shared holding, checked: same slot, a greater token.
    async fn downgrade(&self, lease: Lease, until: Instant) -> Result<Lease, Error> {
        if self.mode() != LockMode::Exclusive {
            return Err(Error::local(
                Code::FailedPrecondition,
                Reason::ModeMismatch,
                format!(
                    "lease {:?} slot {} is held {}: only an exclusive read-write lock holding is downgraded",
                    self.name,
                    self.slot,
                    self.mode().as_str_name()
                ),
            ));
        }
        let message = DowngradeRequest {
            name: self.name.clone(),
            expected_revision: lease.revision,
            lease_key: self.lease_key.clone(),
            slot: self.slot,
        };
        let start = Instant::now();
        let deadline = until.min(start + DEFAULT_CALL_TIMEOUT);
        let mut pause = FIRST_DOWNGRADE_RETRY;
        let reply = loop {
            let mut request = tonic::Request::new(message.clone());
            request.set_timeout(deadline.saturating_duration_since(Instant::now()));
            let mut stub = self.stub.clone();
            match tokio::time::timeout_at(deadline, stub.downgrade(request)).await {
                Ok(Ok(reply)) => break reply.into_inner(),
                Ok(Err(status)) => {
                    let err = Error::from(status);
                    if !err.is_retryable() || Instant::now() + pause >= deadline {
                        return Err(err);
                    }
                }
                Err(_) => return Err(crate::stub::timeout_error(deadline - start)),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_DOWNGRADE_RETRY);
        };
        let shared = reply.lease.ok_or_else(|| {
            Error::local(
                Code::Internal,
                Reason::Internal,
                "Downgrade replied without a lease",
            )
        })?;
        // The server promises the same slot and a greater token; never
        // trust a reply that says otherwise.
        let token = self.fencing_token();
        if shared.slot != self.slot || shared.fencing_token <= token {
            return Err(Error::local(
                Code::Internal,
                Reason::Internal,
                format!(
                    "Downgrade replied slot {} fencing token {}, expected slot {} and a token above {token}",
                    shared.slot, shared.fencing_token, self.slot
                ),
            ));
        }
        Ok(shared)
    }
}

/// First pause before a Downgrade that failed with a retryable error is
/// sent again; it doubles up to [`MAX_DOWNGRADE_RETRY`].
const FIRST_DOWNGRADE_RETRY: Duration = Duration::from_millis(50);
/// Longest pause between Downgrade retries.
const MAX_DOWNGRADE_RETRY: Duration = Duration::from_secs(1);

impl Session {
    /// Builds the session of a successful Acquire sent at `sent`, renews
    /// once if the Acquire took longer than a renew interval (a long wait),
    /// and starts the renewal task.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        stub: Stub,
        keepalive: Arc<KeepAlive>,
        target: Arc<str>,
        follower: Arc<Follower>,
        lease: Lease,
        lease_key: String,
        sent: Instant,
        renew_fraction: f64,
        margin_given: Option<Duration>,
    ) -> Result<Session, Error> {
        let holding = LeaseHolding {
            name: lease.name.clone(),
            holder: lease.holder.clone(),
            lease_key,
            fencing_token: lease.fencing_token,
            slot: lease.slot,
            mode: lease.mode(),
            fence_proof: lease.fence_proof.clone(),
            downgraded: OnceLock::new(),
            stub,
            keepalive,
        };
        let session = Session {
            inner: Lifecycle::new(holding, target, lease, sent, renew_fraction, margin_given),
        };
        // On error the session is dropped, which releases the lease.
        session.inner.start(&follower).await?;
        Ok(session)
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.inner.holding.name
    }

    /// Who holds it, as given to acquire.
    pub fn holder(&self) -> &str {
        &self.inner.holding.holder
    }

    /// The holding's fencing token: constant across renewals, strictly
    /// greater for the next holder. Pass it with every downstream write.
    /// A [`downgrade`](Session::downgrade) replaces it with the shared
    /// holding's (greater) token.
    pub fn fencing_token(&self) -> u64 {
        self.inner.holding.fencing_token()
    }

    /// The grant's fence proof: a signed statement of (name, fencing token,
    /// holder, ...) a downstream store verifies offline before comparing
    /// tokens (docs/fencing.md). Empty when the server has no
    /// `--fence-signing-key`. Renewals do not change it; a
    /// [`downgrade`](Session::downgrade) replaces it with the proof of its
    /// reply (empty when the reply carries none).
    pub fn fence_proof(&self) -> &[u8] {
        self.inner.holding.fence_proof()
    }

    /// The HTTP headers a fenced store's middleware reads:
    /// `Tenure-Fence` (the proof's text form, base64url without padding;
    /// left out when there is no proof) and `Tenure-Fencing-Token`.
    pub fn fence_headers(&self) -> Vec<(&'static str, String)> {
        crate::fencing::headers(self.fence_proof(), self.fencing_token())
    }

    /// The semaphore slot this session holds (1 to the limit; see
    /// [`Semaphore`](crate::Semaphore)), or its read-write lock holding's
    /// slot (above 0; see [`RwLock`](crate::RwLock)); 0 for a plain lease.
    pub fn slot(&self) -> u32 {
        self.inner.holding.slot
    }

    /// How this session holds a read-write lock ([`RwLock`](crate::RwLock)):
    /// [`LockMode::Exclusive`] or [`LockMode::Shared`] (also after a
    /// [`downgrade`](Session::downgrade)); [`LockMode::Unspecified`] for a
    /// plain lease or a semaphore slot.
    pub fn mode(&self) -> LockMode {
        self.inner.holding.mode()
    }

    /// The revision from the last Acquire or Renew reply: the one the next
    /// Renew or Release presents.
    pub fn revision(&self) -> u64 {
        self.inner.read_held(|lease| lease.revision)
    }

    /// The ownership secret (the caller's own, or minted by the server).
    pub fn lease_key(&self) -> &str {
        &self.inner.holding.lease_key
    }

    /// The granted time to live (whole seconds).
    pub fn ttl(&self) -> Duration {
        self.inner.ttl()
    }

    /// The local monotonic time from which the session no longer believes
    /// it holds the lease: send time of the last successful Acquire/Renew +
    /// granted TTL − safety margin.
    pub fn safe_deadline(&self) -> Instant {
        self.inner.safe_deadline()
    }

    /// What is taken off the TTL for the safe deadline.
    pub fn safety_margin(&self) -> Duration {
        self.inner.safety_margin()
    }

    /// Renewals are sent every `ttl × renew_fraction`.
    pub fn renew_fraction(&self) -> f64 {
        self.inner.renew_fraction()
    }

    /// The last holding the server returned.
    pub fn lease(&self) -> Lease {
        self.inner.held()
    }

    /// Whether the caller may still act as holder: the lease was neither
    /// lost nor released, and the safe deadline has not passed.
    pub fn is_held(&self) -> bool {
        self.inner.is_held()
    }

    /// Time left until the safe deadline (zero once lost or past it).
    pub fn remaining(&self) -> Duration {
        self.inner.remaining()
    }

    /// Cancelled once the session no longer holds the lease (lost or
    /// released); never un-cancelled. Await `session.lost().cancelled()`, or
    /// clone it into the work done under the lease.
    pub fn lost(&self) -> &CancellationToken {
        self.inner.lost()
    }

    /// How and when the lease was lost; `None` while it is held.
    pub fn loss(&self) -> Option<Loss> {
        self.inner.loss()
    }

    /// Renews now, besides the background renewals (e.g. before a long
    /// step), and returns the renewed holding. On success the safe deadline
    /// moves forward from this call's send time.
    ///
    /// # Errors
    ///
    /// The renewal failed. A refusal (`LEASE_NOT_HELD`, …) also marks the
    /// session lost. When the session was already lost or released, an
    /// error with reason [`Reason::LeaseNotHeld`] is returned without a call.
    pub async fn renew(&self) -> Result<Lease, Error> {
        self.inner.renew().await
    }

    /// Takes the reply of another call that renewed this holding (an
    /// election's Proclaim), sent at `sent`.
    pub(crate) fn renewed_by(&self, lease: &Lease, sent: Instant) {
        if lease.fencing_token == self.inner.holding.fencing_token() {
            self.inner.renewed(lease, sent);
        }
    }

    /// Stops renewing and releases the lease with the current revision, so
    /// the next holder can take it at once.
    ///
    /// [`lost`](Session::lost) is cancelled (cause
    /// [`LossCause::Released`]) *before* the call is sent, so the holder
    /// stops acting first. Returns true when this call ended the holding;
    /// false when there was nothing to release (already released, or lost
    /// to `LEASE_NOT_HELD`). Calling it again is harmless; after a failed
    /// call it tries again.
    ///
    /// # Errors
    ///
    /// The server could not be reached or refused for another reason; the
    /// lease then ends at its TTL by itself.
    pub async fn release(&self) -> Result<bool, Error> {
        self.inner.release().await
    }

    /// Hands the holding to a waiting acquire of another holder, with no
    /// moment in which the lease is free (`LeaseService.Transfer`): to the
    /// earliest waiting acquire of holder `to`, or, with `None`, to the head
    /// of the queue. Returns the recipient's holding, whose fencing token is
    /// greater than this session's.
    ///
    /// On success the session ends exactly as after a successful
    /// [`release`](Session::release): renewals stop, `is_held` is false,
    /// [`lost`](Session::lost) is cancelled with cause
    /// [`LossCause::Transferred`] (not a loss), and a later `release`
    /// returns `Ok(false)`. The lease key stops working at the transfer's
    /// write, so stop acting as holder before calling it.
    ///
    /// # Errors
    ///
    /// [`Reason::NoWaiter`] when nobody (or not `to`) waits: the session is
    /// unchanged and still held (release it, or transfer once the recipient
    /// waits). [`Reason::LeaseNotHeld`] when the holding has ended (the
    /// session is then lost), also without a call when the session is not
    /// held. [`Reason::InvalidArgument`] for a semaphore slot or a
    /// read-write lock holding (only a plain lease is handed over). Any
    /// other failure leaves the session as it was.
    pub async fn transfer(&self, to: Option<&str>) -> Result<Lease, Error> {
        let holding = &self.inner.holding;
        if holding.slot != 0 {
            return Err(Error::local(
                Code::InvalidArgument,
                Reason::InvalidArgument,
                format!(
                    "lease {:?} slot {} is a semaphore slot or a read-write lock holding: only a plain lease can be handed over",
                    holding.name, holding.slot
                ),
            ));
        }
        let to = to.unwrap_or_default().to_string();
        self.inner
            .hand_over("Transfer", |lease| async move {
                let mut request = tonic::Request::new(TransferRequest {
                    name: holding.name.clone(),
                    expected_revision: lease.revision,
                    lease_key: holding.lease_key.clone(),
                    to_holder: to,
                });
                request.set_timeout(DEFAULT_CALL_TIMEOUT);
                let mut stub = holding.stub.clone();
                let reply = stub.transfer(request).await?.into_inner();
                reply.lease.ok_or_else(|| {
                    Error::local(
                        Code::Internal,
                        Reason::Unspecified,
                        "Transfer replied without a lease",
                    )
                })
            })
            .await
    }

    /// Turns this exclusive read-write lock holding
    /// ([`RwLock::write`](crate::RwLock::write)) into a shared one without
    /// letting go (`LeaseService.Downgrade`): the session holds the name
    /// throughout, from now on as a shared holder, and waiting shared
    /// acquires may join it. Returns the shared holding.
    ///
    /// The session goes on in place: same name, slot and lease key, and
    /// from the reply on [`mode`](Session::mode) is [`LockMode::Shared`],
    /// [`fencing_token`](Session::fencing_token) the new, greater token (a
    /// store that fences by token now refuses writes made with the
    /// exclusive one), and [`revision`](Session::revision) the reply's, which
    /// the background renewals present from then on. The safe deadline
    /// does not move (the next renewal moves it, as usual). The call goes
    /// out one at a time with the renewals, so none crosses it. A loss the
    /// client's watch reported meanwhile against the exclusive holding
    /// (most likely the downgrade's own write) is checked with a renewal at
    /// once rather than believed.
    ///
    /// # Errors
    ///
    /// [`Reason::ModeMismatch`] when the session is not an exclusive
    /// read-write lock holding (a shared one, one already downgraded, a
    /// plain lease or a semaphore slot), without a call;
    /// [`Reason::LeaseNotHeld`] when the holding has ended (the session is
    /// then lost), also without a call when the session is not held. A
    /// retryable failure is retried (a Downgrade is idempotent) until 10 s
    /// have passed or the safe deadline comes; any other failure leaves the
    /// session as it was. After an error without an answer (the server
    /// away), the server may have applied the last try: then calling
    /// `downgrade` again returns the shared holding, while the next renewal
    /// would find the exclusive revision superseded and end the session
    /// (`LEASE_NOT_HELD`).
    pub async fn downgrade(&self) -> Result<Lease, Error> {
        let inner = &self.inner;
        inner
            .change(
                "Downgrade",
                // Renewals wait while it is sent: retry no later than the
                // safe deadline.
                |lease| inner.holding.downgrade(lease, inner.safe_deadline()),
                |holding, shared| {
                    // Only an exclusive holding gets here, once.
                    let _ = holding.downgraded.set(Downgraded {
                        fencing_token: shared.fencing_token,
                        fence_proof: shared.fence_proof.clone(),
                    });
                },
            )
            .await
    }

    /// Hands the holding over with `send` (an election's Resign to a
    /// successor); see [`transfer`](Session::transfer).
    pub(crate) async fn hand_over<T, F, Fut>(&self, rpc: &str, send: F) -> Result<T, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        self.inner.hand_over(rpc, send).await
    }

    /// Stops sending renewals, as a stalled process would (for tests and
    /// drills). The safe deadline still applies: the session is lost with
    /// [`LossCause::Deadline`] when it passes.
    pub fn pause_renewals(&self) {
        self.inner.pause_renewals(true);
    }

    /// Undoes [`pause_renewals`](Session::pause_renewals); a renewal that
    /// is due is sent at once.
    pub fn resume_renewals(&self) {
        self.inner.pause_renewals(false);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.inner.dropped();
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let holding = &self.inner.holding;
        f.debug_struct("Session")
            .field("name", &holding.name)
            .field("holder", &holding.holder)
            .field("fencing_token", &holding.fencing_token())
            .field("slot", &holding.slot)
            .field("mode", &holding.mode())
            .field("revision", &self.revision())
            .field("ttl", &self.ttl())
            .field("safe_deadline", &self.safe_deadline())
            .field("loss", &self.inner.loss_cause())
            .finish_non_exhaustive()
    }
}

impl Holding for LeaseHolding {
    type Held = Lease;
    type Released = bool;
    const RENEW_RPC: &'static str = "Renew";
    const RELEASE_RPC: &'static str = "Release";
    const RELEASE_AFTER_NOT_HELD: bool = false;

    fn ttl(lease: &Lease) -> Duration {
        ttl_of(lease)
    }

    fn moves_on(current: &Lease, reply: &Lease) -> bool {
        reply.revision > current.revision
    }

    async fn renew(&self, lease: Lease, deadline: Instant) -> Result<Lease, Error> {
        let entry = KeepAliveEntry {
            id: 0,
            name: self.name.clone(),
            expected_revision: lease.revision,
            lease_key: self.lease_key.clone(),
            ttl: None,
            slot: self.slot,
        };
        let lease = self.keepalive.renew(entry, deadline).await?;
        // Renewals and a downgrade go out one at a time: this is the token
        // the renewed revision belongs to.
        let token = self.fencing_token();
        if lease.fencing_token != token {
            // The server promises a constant token; never trust a reply
            // that says otherwise.
            return Err(Error::local(
                Code::FailedPrecondition,
                Reason::LeaseNotHeld,
                format!(
                    "renewal returned fencing token {}, expected {token}",
                    lease.fencing_token
                ),
            ));
        }
        Ok(lease)
    }

    async fn release(&self, lease: Lease, timeout: Duration) -> Result<bool, Error> {
        let mut request = tonic::Request::new(ReleaseRequest {
            name: self.name.clone(),
            expected_revision: lease.revision,
            lease_key: self.lease_key.clone(),
            slot: self.slot,
        });
        request.set_timeout(timeout);
        let mut stub = self.stub.clone();
        stub.release(request).await?;
        Ok(true)
    }

    fn nothing_released(&self) -> bool {
        false
    }

    fn no_longer_held(&self, cause: LossCause) -> String {
        format!(
            "the session no longer holds lease {:?} ({:?})",
            self.name, cause
        )
    }

    fn members(&self) -> Vec<(&str, u32, u64)> {
        vec![(&self.name, self.slot, self.fencing_token())]
    }

    fn superseded(&self, fencing_token: u64) -> bool {
        fencing_token != self.fencing_token()
    }
}
