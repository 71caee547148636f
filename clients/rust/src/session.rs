//! [`Session`]: one held lease, kept alive by a background renewal task.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::client::Stub;
use crate::error::{Error, Reason};
use crate::follow::{Followed, Follower};
use crate::keepalive::KeepAlive;
use crate::proto::{KeepAliveEntry, Lease, ReleaseRequest};
use crate::renewal::{cause_of, Renewable, Schedule};

/// The default fraction of the granted TTL after which a session renews.
pub const DEFAULT_RENEW_FRACTION: f64 = 1.0 / 3.0;

/// The longest default safety margin (see [`default_safety_margin`]).
const MAX_DEFAULT_MARGIN: Duration = Duration::from_secs(1);

/// Deadline of a Release call.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The safety margin used when [`AcquireOptions::safety_margin`] is not set:
/// a tenth of the granted TTL, at most one second.
///
/// [`AcquireOptions::safety_margin`]: crate::AcquireOptions::safety_margin
pub fn default_safety_margin(ttl: Duration) -> Duration {
    (ttl / 10).min(MAX_DEFAULT_MARGIN)
}

/// Why a [`Session`] stopped holding its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossCause {
    /// [`Session::release`] was called, or the session was dropped.
    Released,
    /// The lease ended behind the session's back and may have passed to
    /// another holder: the client's watch saw it `REVOKED`, `EXPIRED`,
    /// `RELEASED` or taken by another holding, or a renewal was refused with
    /// `LEASE_NOT_HELD` or `LEASE_NOT_FOUND`.
    NotHeld,
    /// A renewal failed with an error that retrying cannot fix (other than
    /// the above), e.g. `INVALID_*` or `RECORD_UNREADABLE`.
    RenewFailed,
    /// No renewal got through before the safe deadline (server or network
    /// away, NATS unavailable, renewals paused).
    Deadline,
}

/// How and when a [`Session`] was lost; see [`Session::loss`].
#[derive(Debug, Clone)]
pub struct Loss {
    /// Why.
    pub cause: LossCause,
    /// The error behind it, if any: the refusal for
    /// [`LossCause::NotHeld`]/[`LossCause::RenewFailed`], the last failed
    /// renewal's error for [`LossCause::Deadline`].
    pub error: Option<Error>,
    /// When the loss was signalled (local monotonic clock).
    pub at: Instant,
}

/// One held lease, renewed in the background until released or lost.
///
/// Get one from [`Client::acquire`](crate::Client::acquire). While
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
    inner: Arc<Inner>,
}

/// The state shared by a [`Session`], its renewal task and the client's
/// [`Follower`].
pub(crate) struct Inner {
    /// The lease name.
    name: String,
    /// The holder, as acquired.
    holder: String,
    /// The ownership secret.
    lease_key: String,
    /// The holding's fencing token.
    fencing_token: u64,
    /// The semaphore slot (1..limit); 0 for a plain lease.
    slot: u32,
    /// The client's stub.
    stub: Stub,
    /// The client's renewal path (the KeepAlive stream, or unary Renew).
    keepalive: Arc<KeepAlive>,
    /// The server, for errors.
    target: Arc<str>,
    /// Renew after `ttl × renew_fraction`.
    renew_fraction: f64,
    /// The safety margin the caller chose, if any.
    margin_given: Option<Duration>,
    state: Mutex<State>,
    /// Cancelled once the lease is lost or released.
    lost: CancellationToken,
    /// Cancelled to stop the renewal task.
    stop: CancellationToken,
    /// True while renewals are paused.
    paused: watch::Sender<bool>,
    /// Held by whoever sends a Renew or Release, so that they go out one at
    /// a time, each with the revision of the reply before it.
    calls: tokio::sync::Mutex<()>,
}

/// The mutable part of [`Inner`].
struct State {
    /// The last holding the server returned.
    lease: Lease,
    /// Its revision: the next Renew/Release presents it.
    revision: u64,
    /// The granted TTL.
    ttl: Duration,
    /// Taken off the TTL for the safe deadline.
    safety_margin: Duration,
    /// Send time of the last successful Acquire/Renew + TTL − margin.
    safe_deadline: Instant,
    /// When the next renewal is due.
    next_renew_at: Instant,
    /// Set once, when the lease is lost or released.
    loss: Option<Loss>,
    /// The last failed renewal's error, cleared by a success.
    last_error: Option<Error>,
    /// The server confirmed the end of the holding (Release answered).
    released: bool,
}

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
        let ttl = ttl_of(&lease);
        let safety_margin = margin_given.unwrap_or_else(|| default_safety_margin(ttl));
        let session = Session {
            inner: Arc::new(Inner {
                name: lease.name.clone(),
                holder: lease.holder.clone(),
                lease_key,
                fencing_token: lease.fencing_token,
                slot: lease.slot,
                stub,
                keepalive,
                target,
                renew_fraction,
                margin_given,
                state: Mutex::new(State {
                    revision: lease.revision,
                    ttl,
                    safety_margin,
                    safe_deadline: sent + ttl.saturating_sub(safety_margin),
                    next_renew_at: sent + ttl.mul_f64(renew_fraction),
                    lease,
                    loss: None,
                    last_error: None,
                    released: false,
                }),
                lost: CancellationToken::new(),
                stop: CancellationToken::new(),
                paused: watch::Sender::new(false),
                calls: tokio::sync::Mutex::new(()),
            }),
        };
        // A TTL left to the server's default is only known now. (On error
        // the session is dropped, which releases the lease.)
        check_timing(ttl, renew_fraction, safety_margin)?;
        if Instant::now() >= session.inner.state().next_renew_at {
            // After a long wait the server's TTL started when it finally
            // wrote, but the safe deadline counts from `sent`: renew once so
            // that it counts from a recent send time.
            // (The safe deadline may have passed already: no cut-off there.)
            let _calls = session.inner.calls.lock().await;
            let deadline = Instant::now() + crate::DEFAULT_CALL_TIMEOUT;
            if let Err(err) = session.inner.renew_locked(deadline).await {
                if !err.is_retryable() {
                    session.inner.lose(cause_of(&err), Some(err.clone()));
                    return Err(err.context(&session.inner.target, "Renew"));
                }
                if !session.is_held() {
                    return Err(err.context(&session.inner.target, "Renew"));
                }
                session.inner.state().last_error = Some(err);
            }
        }
        tokio::spawn(crate::renewal::run(session.inner.clone()));
        // From now on the client's one watch notices a revoke, an expiry or
        // another holder at once.
        follower.follow(session.inner.clone());
        Ok(session)
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Who holds it, as given to acquire.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// The holding's fencing token: constant across renewals, strictly
    /// greater for the next holder. Pass it with every downstream write.
    pub fn fencing_token(&self) -> u64 {
        self.inner.fencing_token
    }

    /// The semaphore slot this session holds (1 to the limit; see
    /// [`Semaphore`](crate::Semaphore)); 0 for a plain lease.
    pub fn slot(&self) -> u32 {
        self.inner.slot
    }

    /// The revision from the last Acquire or Renew reply: the one the next
    /// Renew or Release presents.
    pub fn revision(&self) -> u64 {
        self.inner.state().revision
    }

    /// The ownership secret (the caller's own, or minted by the server).
    pub fn lease_key(&self) -> &str {
        &self.inner.lease_key
    }

    /// The granted time to live (whole seconds).
    pub fn ttl(&self) -> Duration {
        self.inner.state().ttl
    }

    /// The local monotonic time from which the session no longer believes
    /// it holds the lease: send time of the last successful Acquire/Renew +
    /// granted TTL − safety margin.
    pub fn safe_deadline(&self) -> Instant {
        self.inner.state().safe_deadline
    }

    /// What is taken off the TTL for the safe deadline.
    pub fn safety_margin(&self) -> Duration {
        self.inner.state().safety_margin
    }

    /// Renewals are sent every `ttl × renew_fraction`.
    pub fn renew_fraction(&self) -> f64 {
        self.inner.renew_fraction
    }

    /// The last holding the server returned.
    pub fn lease(&self) -> Lease {
        self.inner.state().lease.clone()
    }

    /// Whether the caller may still act as holder: the lease was neither
    /// lost nor released, and the safe deadline has not passed.
    pub fn is_held(&self) -> bool {
        let state = self.inner.state();
        state.loss.is_none() && Instant::now() < state.safe_deadline
    }

    /// Time left until the safe deadline (zero once lost or past it).
    pub fn remaining(&self) -> Duration {
        let state = self.inner.state();
        if state.loss.is_some() {
            return Duration::ZERO;
        }
        state
            .safe_deadline
            .saturating_duration_since(Instant::now())
    }

    /// Cancelled once the session no longer holds the lease (lost or
    /// released); never un-cancelled. Await `session.lost().cancelled()`, or
    /// clone it into the work done under the lease.
    pub fn lost(&self) -> &CancellationToken {
        &self.inner.lost
    }

    /// How and when the lease was lost; `None` while it is held.
    pub fn loss(&self) -> Option<Loss> {
        self.inner.state().loss.clone()
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
        let _calls = self.inner.calls.lock().await;
        if let Some(loss) = self.loss() {
            return Err(Error::local(
                Code::FailedPrecondition,
                Reason::LeaseNotHeld,
                format!(
                    "the session no longer holds lease {:?} ({:?})",
                    self.inner.name, loss.cause
                ),
            ));
        }
        let result = self.inner.renew_locked(self.safe_deadline()).await;
        if let Err(err) = &result {
            if !err.is_retryable() {
                self.inner.lose(cause_of(err), Some(err.clone()));
            }
        }
        result
    }

    /// Takes the reply of another call that renewed this holding (an
    /// election's Proclaim), sent at `sent`.
    pub(crate) fn renewed_by(&self, lease: &Lease, sent: Instant) {
        if lease.fencing_token == self.inner.fencing_token {
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

    /// Stops sending renewals, as a stalled process would (for tests and
    /// drills). The safe deadline still applies: the session is lost with
    /// [`LossCause::Deadline`] when it passes.
    pub fn pause_renewals(&self) {
        self.inner.paused.send_replace(true);
    }

    /// Undoes [`pause_renewals`](Session::pause_renewals); a renewal that
    /// is due is sent at once.
    pub fn resume_renewals(&self) {
        self.inner.paused.send_replace(false);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let inner = &self.inner;
        inner.stop.cancel();
        {
            let state = inner.state();
            let not_held = matches!(&state.loss, Some(loss) if loss.cause == LossCause::NotHeld);
            if state.released || not_held {
                return;
            }
        }
        inner.lose(LossCause::Released, None);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let inner = inner.clone();
            runtime.spawn(async move {
                let _ = inner.release().await;
            });
        }
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state();
        f.debug_struct("Session")
            .field("name", &self.inner.name)
            .field("holder", &self.inner.holder)
            .field("fencing_token", &self.inner.fencing_token)
            .field("slot", &self.inner.slot)
            .field("revision", &state.revision)
            .field("ttl", &state.ttl)
            .field("safe_deadline", &state.safe_deadline)
            .field("loss", &state.loss.as_ref().map(|l| l.cause))
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the session was lost or released.
    pub(crate) fn is_over(&self) -> bool {
        self.state().loss.is_some()
    }

    /// The client's watch saw the holding end (`what`): the session is
    /// lost ([`LossCause::NotHeld`]) and stops renewing.
    pub(crate) fn lose_observed(&self, what: String) {
        let err = Error::local(Code::FailedPrecondition, Reason::LeaseNotHeld, what)
            .context(&self.target, "WatchLease");
        self.lose(LossCause::NotHeld, Some(err));
        self.stop.cancel();
    }

    /// Marks the session lost (once) and cancels `lost`.
    fn lose(&self, cause: LossCause, error: Option<Error>) {
        {
            let mut state = self.state();
            if state.loss.is_some() {
                return;
            }
            state.loss = Some(Loss {
                cause,
                error,
                at: Instant::now(),
            });
        }
        self.lost.cancel();
    }

    /// Sends one Renew with the last revision, cut off at `deadline`, and
    /// takes its reply. The caller holds `calls`.
    async fn renew_locked(&self, deadline: Instant) -> Result<Lease, Error> {
        self.renew_call(deadline)
            .await
            .map_err(|e| e.context(&self.target, "Renew"))
    }

    /// [`Inner::renew_locked`] without the error context.
    async fn renew_call(&self, deadline: Instant) -> Result<Lease, Error> {
        let entry = KeepAliveEntry {
            id: 0,
            name: self.name.clone(),
            expected_revision: self.state().revision,
            lease_key: self.lease_key.clone(),
            ttl: None,
            slot: self.slot,
        };
        let sent = Instant::now();
        let lease = tokio::time::timeout_at(deadline, self.keepalive.renew(entry, deadline))
            .await
            .map_err(|_| {
                Error::local(
                    Code::DeadlineExceeded,
                    Reason::Unspecified,
                    "no answer to the renewal before the safe deadline",
                )
            })??;
        if lease.fencing_token != self.fencing_token {
            // The server promises a constant token; never trust a reply
            // that says otherwise.
            return Err(Error::local(
                Code::FailedPrecondition,
                Reason::LeaseNotHeld,
                format!(
                    "renewal returned fencing token {}, expected {}",
                    lease.fencing_token, self.fencing_token
                ),
            ));
        }
        self.renewed(&lease, sent);
        Ok(lease)
    }

    /// Takes a reply that renewed this holding, for a request sent at
    /// `sent`: only a newer revision moves the session on.
    fn renewed(&self, lease: &Lease, sent: Instant) {
        let mut state = self.state();
        if lease.revision > state.revision {
            state.revision = lease.revision;
            state.ttl = ttl_of(lease);
            state.safety_margin = self
                .margin_given
                .unwrap_or_else(|| default_safety_margin(state.ttl));
            if state.loss.is_none() {
                state.safe_deadline = sent + state.ttl.saturating_sub(state.safety_margin);
                state.next_renew_at = sent + state.ttl.mul_f64(self.renew_fraction);
            }
            state.lease = lease.clone();
        }
        state.last_error = None;
    }

    /// See [`Session::release`].
    async fn release(&self) -> Result<bool, Error> {
        self.stop.cancel();
        self.lose(LossCause::Released, None);
        // Wait for a renewal in flight: its reply carries the revision.
        let _calls = self.calls.lock().await;
        let revision = {
            let state = self.state();
            let not_held = matches!(&state.loss, Some(loss) if loss.cause == LossCause::NotHeld);
            if state.released || not_held {
                return Ok(false);
            }
            state.revision
        };
        let mut request = tonic::Request::new(ReleaseRequest {
            name: self.name.clone(),
            expected_revision: revision,
            lease_key: self.lease_key.clone(),
            slot: self.slot,
        });
        request.set_timeout(RELEASE_TIMEOUT);
        let mut stub = self.stub.clone();
        let result = match tokio::time::timeout(RELEASE_TIMEOUT, stub.release(request)).await {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(status)) => {
                let err = Error::from(status);
                match err.reason() {
                    Reason::LeaseNotHeld | Reason::LeaseNotFound => Ok(false),
                    _ => Err(err),
                }
            }
            Err(_) => Err(Error::local(
                Code::DeadlineExceeded,
                Reason::Unspecified,
                format!("no answer to Release within {RELEASE_TIMEOUT:?}"),
            )),
        };
        if result.is_ok() {
            self.state().released = true;
        }
        result.map_err(|e| e.context(&self.target, "Release"))
    }
}

impl Renewable for Inner {
    fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    fn stop(&self) -> &CancellationToken {
        &self.stop
    }

    fn paused(&self) -> &watch::Sender<bool> {
        &self.paused
    }

    fn calls(&self) -> &tokio::sync::Mutex<()> {
        &self.calls
    }

    fn schedule(&self) -> Option<Schedule> {
        let state = self.state();
        state.loss.is_none().then(|| Schedule {
            safe_deadline: state.safe_deadline,
            next_renew_at: state.next_renew_at,
            interval: state.ttl.mul_f64(self.renew_fraction),
        })
    }

    fn failed(&self, err: Error, at: Instant) {
        let mut state = self.state();
        state.last_error = Some(err);
        state.next_renew_at = at;
    }

    fn take_last_error(&self) -> Option<Error> {
        self.state().last_error.take()
    }

    fn lose(&self, cause: LossCause, error: Option<Error>) {
        Inner::lose(self, cause, error);
    }

    async fn renew_once(&self, deadline: Instant) -> Result<(), Error> {
        self.renew_locked(deadline).await.map(|_| ())
    }
}

impl Followed for Inner {
    fn members(&self) -> Vec<(&str, u32, u64)> {
        vec![(&self.name, self.slot, self.fencing_token)]
    }

    fn is_over(&self) -> bool {
        Inner::is_over(self)
    }

    fn lose_observed(&self, what: String) {
        Inner::lose_observed(self, what);
    }
}

/// The granted TTL of a holding.
pub(crate) fn ttl_of(lease: &Lease) -> Duration {
    lease
        .ttl
        .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32))
        .unwrap_or_default()
}

/// Checks that renewals come before the safe deadline:
/// `0 < renew_fraction < 1` and `safety_margin < ttl × (1 − renew_fraction)`.
pub(crate) fn check_timing(
    ttl: Duration,
    renew_fraction: f64,
    safety_margin: Duration,
) -> Result<(), Error> {
    check_renew_fraction(renew_fraction)?;
    if safety_margin >= ttl.mul_f64(1.0 - renew_fraction) {
        return Err(Error::local(
            Code::InvalidArgument,
            Reason::InvalidArgument,
            format!(
                "renewals must come before the safe deadline: safety_margin {safety_margin:?} \
                 must be below ttl {ttl:?} × (1 − renew_fraction {renew_fraction})"
            ),
        ));
    }
    Ok(())
}

/// Checks `0 < renew_fraction < 1`.
pub(crate) fn check_renew_fraction(renew_fraction: f64) -> Result<(), Error> {
    if renew_fraction > 0.0 && renew_fraction < 1.0 {
        return Ok(());
    }
    Err(Error::local(
        Code::InvalidArgument,
        Reason::InvalidArgument,
        format!("renew_fraction must be between 0 and 1, not {renew_fraction}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn public_types_can_cross_tasks() {
        assert_send_sync::<Session>();
        assert_send_sync::<crate::Client>();
        assert_send_sync::<crate::Error>();
        assert_send_sync::<crate::FencingGuard>();
        fn assert_send<T: Send>() {}
        assert_send::<crate::Watch>();
    }

    #[test]
    fn default_margin_is_a_tenth_of_the_ttl_up_to_a_second() {
        assert_eq!(
            default_safety_margin(Duration::from_secs(2)),
            Duration::from_millis(200)
        );
        assert_eq!(
            default_safety_margin(Duration::from_secs(60)),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn timing_must_leave_room_to_renew_before_the_deadline() {
        let ttl = Duration::from_secs(3);
        assert!(check_timing(ttl, DEFAULT_RENEW_FRACTION, default_safety_margin(ttl)).is_ok());
        for fraction in [0.0, 1.0, -0.5, 1.5, f64::NAN] {
            let err = check_timing(ttl, fraction, Duration::ZERO).unwrap_err();
            assert_eq!(err.reason(), Reason::InvalidArgument);
        }
        // Renewing at 90% of 3 s leaves 300 ms: a 500 ms margin would put
        // the deadline before the renewal.
        assert!(check_timing(ttl, 0.9, Duration::from_millis(500)).is_err());
    }
}
