//! [`Lifecycle`]: the life of a held lease [`Session`](crate::Session) or
//! [`GroupSession`](crate::GroupSession), written once for both: the safe
//! deadline and the renew schedule, the renewal loop (renew every
//! `ttl × renew_fraction`, retry retryable failures with backoff, give up at
//! the safe deadline), loss (once, with its [`Loss`]), pausing, the release
//! and the release of a session dropped while it still held.
//!
//! What differs between the two kinds of session is a [`Holding`]: what is
//! held (one [`Lease`], or the members' leases) and how a renewal and a
//! release are sent.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::error::{Error, Reason};
use crate::follow::{Followed, Follower, Seen};
use crate::proto::Lease;
use crate::stub::DEFAULT_CALL_TIMEOUT;

/// The default fraction of the granted TTL after which a session renews.
pub const DEFAULT_RENEW_FRACTION: f64 = 1.0 / 3.0;

/// The longest default safety margin (see [`default_safety_margin`]).
const MAX_DEFAULT_MARGIN: Duration = Duration::from_secs(1);

/// Deadline of a Release (or ReleaseGroup) call.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// First pause before retrying a renewal that failed with a retryable error;
/// it doubles up to the renew interval and never runs past the safe deadline.
const FIRST_RETRY: Duration = Duration::from_millis(50);

/// The safety margin used when [`AcquireOptions::safety_margin`] is not set:
/// a tenth of the granted TTL, at most one second.
///
/// [`AcquireOptions::safety_margin`]: crate::AcquireOptions::safety_margin
pub fn default_safety_margin(ttl: Duration) -> Duration {
    (ttl / 10).min(MAX_DEFAULT_MARGIN)
}

/// Why a [`Session`](crate::Session) stopped holding its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossCause {
    /// [`Session::release`](crate::Session::release) was called, or the
    /// session was dropped.
    Released,
    /// [`Session::transfer`](crate::Session::transfer) (or an election's
    /// hand-over) gave the holding to a waiter: like `Released`, the
    /// holder's own choice, not a loss.
    Transferred,
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
    /// The client's watch said it missed changes of the lease (a `MISSED`
    /// event: its server's watcher fell behind the bucket) and named this
    /// holding's fencing token (and slot) as one that ended among them: how
    /// it ended (revoked, expired, taken over) is unknown. A `MISSED` naming
    /// another token, or none, does not end the session. The error (reason
    /// `LEASE_NOT_HELD`, RPC `WatchLease`) says which changes were missed.
    Missed,
}

/// How and when a [`Session`](crate::Session) was lost; see
/// [`Session::loss`](crate::Session::loss).
#[derive(Debug, Clone)]
pub struct Loss {
    /// Why.
    pub cause: LossCause,
    /// The error behind it, if any: the refusal for
    /// [`LossCause::NotHeld`]/[`LossCause::RenewFailed`] (for a loss the
    /// watch saw, and for [`LossCause::Missed`], an error of RPC
    /// `WatchLease` saying what it saw), the last failed renewal's error for
    /// [`LossCause::Deadline`].
    pub error: Option<Error>,
    /// When the loss was signalled (local monotonic clock).
    pub at: Instant,
}

/// What differs between a lease session and a group session: what is held,
/// and how a renewal and a release are sent.
pub(crate) trait Holding: Send + Sync + 'static {
    /// The holding as the server last returned it: one [`Lease`], or the
    /// members' leases.
    type Held: Clone + Send + Sync + 'static;
    /// What a release reports.
    type Released: Send + 'static;
    /// The RPC a renewal is, for errors.
    const RENEW_RPC: &'static str;
    /// The RPC a release is, for errors.
    const RELEASE_RPC: &'static str;
    /// Whether a release is still sent after the holding was found not held
    /// (a group: the members still held are freed at once).
    const RELEASE_AFTER_NOT_HELD: bool;

    /// The granted TTL of `held`.
    fn ttl(held: &Self::Held) -> Duration;
    /// Whether a renewal reply moves the session on from `current`
    /// (replies can cross: a lease session takes only a newer revision).
    fn moves_on(current: &Self::Held, reply: &Self::Held) -> bool;
    /// Sends one renewal of `held` (its revisions), cut off at `deadline`,
    /// and checks that the reply is the same holding (same fencing tokens).
    fn renew(
        &self,
        held: Self::Held,
        deadline: Instant,
    ) -> impl Future<Output = Result<Self::Held, Error>> + Send;
    /// Sends the release of `held` with the deadline `timeout`.
    fn release(
        &self,
        held: Self::Held,
        timeout: Duration,
    ) -> impl Future<Output = Result<Self::Released, Error>> + Send;
    /// What a release reports when there was nothing to release.
    fn nothing_released(&self) -> Self::Released;
    /// The error message of a manual renewal after the loss `cause`.
    fn no_longer_held(&self, cause: LossCause) -> String;
    /// Its holdings for the client's watch: (name, slot, fencing token).
    fn members(&self) -> Vec<(&str, u32, u64)>;
    /// Whether `fencing_token`, one of its members' tokens as the watch
    /// read it, has since been superseded by a change of the holding in
    /// place (a lease session's downgrade): a loss judged by it is not
    /// believed but checked with a renewal. Read under the state lock.
    fn superseded(&self, _fencing_token: u64) -> bool {
        false
    }
}

/// The state of a held session shared by its handle
/// ([`Session`](crate::Session) or [`GroupSession`](crate::GroupSession)),
/// its renewal task and the client's [`Follower`].
pub(crate) struct Lifecycle<H: Holding> {
    /// What is held, and how it is renewed and released.
    pub(crate) holding: H,
    /// The server, for errors.
    target: Arc<str>,
    /// Renew after `ttl × renew_fraction`.
    renew_fraction: f64,
    /// The safety margin the caller chose, if any.
    margin_given: Option<Duration>,
    /// The mutable part.
    state: Mutex<State<H::Held>>,
    /// Cancelled once the holding is lost or released.
    lost: CancellationToken,
    /// Cancelled to stop the renewal task.
    stop: CancellationToken,
    /// True while renewals are paused.
    paused: watch::Sender<bool>,
    /// Held by whoever sends a renewal or a release, so that they go out one
    /// at a time, each with the revisions of the reply before it.
    calls: tokio::sync::Mutex<()>,
    /// Wakes the renewal task to look at its schedule again (a renewal was
    /// made due at once).
    wake: Notify,
}

/// The mutable part of a [`Lifecycle`].
struct State<T> {
    /// The last holding the server returned: the next renewal or release
    /// presents its revisions.
    held: T,
    /// The granted TTL.
    ttl: Duration,
    /// Taken off the TTL for the safe deadline.
    safety_margin: Duration,
    /// Send time of the last successful acquire/renewal + TTL − margin.
    safe_deadline: Instant,
    /// When the next renewal is due.
    next_renew_at: Instant,
    /// Set once, when the holding is lost or released.
    loss: Option<Loss>,
    /// The last failed renewal's error, cleared by a success.
    last_error: Option<Error>,
    /// The server answered a release (or a hand-over).
    released: bool,
    /// A hand-over (or a change in place) is in flight: a loss the watch
    /// sees waits for its reply.
    handing: bool,
    /// A loss the watch saw while a hand-over (or a change) was in flight.
    held_back: Option<(Seen, String)>,
}

/// When a session must renew and when it stops believing it holds.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    /// The safe deadline.
    safe_deadline: Instant,
    /// When the next renewal is due.
    next_renew_at: Instant,
    /// The renew interval (`ttl × renew_fraction`), the longest backoff.
    interval: Duration,
}

impl<H: Holding> Lifecycle<H> {
    /// The lifecycle of `held`, acquired by a request sent at `sent`; not
    /// started yet (see [`Lifecycle::start`]).
    pub(crate) fn new(
        holding: H,
        target: Arc<str>,
        held: H::Held,
        sent: Instant,
        renew_fraction: f64,
        margin_given: Option<Duration>,
    ) -> Arc<Self> {
        let ttl = H::ttl(&held);
        let safety_margin = margin_given.unwrap_or_else(|| default_safety_margin(ttl));
        Arc::new(Lifecycle {
            holding,
            target,
            renew_fraction,
            margin_given,
            state: Mutex::new(State {
                held,
                ttl,
                safety_margin,
                safe_deadline: sent + ttl.saturating_sub(safety_margin),
                next_renew_at: sent + ttl.mul_f64(renew_fraction),
                loss: None,
                last_error: None,
                released: false,
                handing: false,
                held_back: None,
            }),
            lost: CancellationToken::new(),
            stop: CancellationToken::new(),
            paused: watch::Sender::new(false),
            calls: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
        })
    }

    /// Checks the timing of the granted TTL, renews once if the acquire
    /// took longer than a renew interval (a long wait), starts the renewal
    /// task and has `follower` follow the holding. On error the caller
    /// drops its handle, which releases.
    pub(crate) async fn start(self: &Arc<Self>, follower: &Arc<Follower>) -> Result<(), Error> {
        let (ttl, safety_margin, next_renew_at) = {
            let state = self.state();
            (state.ttl, state.safety_margin, state.next_renew_at)
        };
        // A TTL left to the server's default is only known now.
        check_timing(ttl, self.renew_fraction, safety_margin)?;
        if Instant::now() >= next_renew_at {
            // After a long wait the server's TTL started when it finally
            // wrote, but the safe deadline counts from the send time: renew
            // once so that it counts from a recent send time.
            // (The safe deadline may have passed already: no cut-off there.)
            let _calls = self.calls.lock().await;
            let deadline = Instant::now() + DEFAULT_CALL_TIMEOUT;
            if let Err(err) = self.renew_locked(deadline).await {
                if !err.is_retryable() || !self.is_held() {
                    self.lose(cause_of(&err), Some(err.clone()));
                    return Err(err);
                }
                self.state().last_error = Some(err);
            }
        }
        tokio::spawn(run(self.clone()));
        // From now on the client's one watch notices a revoke, an expiry or
        // another holder at once.
        follower.follow(self.clone());
        Ok(())
    }

    fn state(&self) -> MutexGuard<'_, State<H::Held>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last holding the server returned.
    pub(crate) fn held(&self) -> H::Held {
        self.state().held.clone()
    }

    /// Reads the last holding the server returned.
    pub(crate) fn read_held<R>(&self, read: impl FnOnce(&H::Held) -> R) -> R {
        read(&self.state().held)
    }

    /// The granted TTL.
    pub(crate) fn ttl(&self) -> Duration {
        self.state().ttl
    }

    /// The safe deadline.
    pub(crate) fn safe_deadline(&self) -> Instant {
        self.state().safe_deadline
    }

    /// What is taken off the TTL for the safe deadline.
    pub(crate) fn safety_margin(&self) -> Duration {
        self.state().safety_margin
    }

    /// Renewals are sent every `ttl × renew_fraction`.
    pub(crate) fn renew_fraction(&self) -> f64 {
        self.renew_fraction
    }

    /// Neither lost nor released, and the safe deadline has not passed.
    pub(crate) fn is_held(&self) -> bool {
        let state = self.state();
        state.loss.is_none() && Instant::now() < state.safe_deadline
    }

    /// Time left until the safe deadline (zero once lost or past it).
    pub(crate) fn remaining(&self) -> Duration {
        let state = self.state();
        if state.loss.is_some() {
            return Duration::ZERO;
        }
        state
            .safe_deadline
            .saturating_duration_since(Instant::now())
    }

    /// Cancelled once lost or released.
    pub(crate) fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// How and when the holding was lost; `None` while it is held.
    pub(crate) fn loss(&self) -> Option<Loss> {
        self.state().loss.clone()
    }

    /// The loss cause, for `Debug`.
    pub(crate) fn loss_cause(&self) -> Option<LossCause> {
        self.state().loss.as_ref().map(|l| l.cause)
    }

    /// Stops or resumes sending renewals.
    pub(crate) fn pause_renewals(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    /// Renews now, besides the background renewals; a refusal also marks
    /// the holding lost. Already lost or released: [`Reason::LeaseNotHeld`]
    /// without a call.
    pub(crate) async fn renew(&self) -> Result<H::Held, Error> {
        let _calls = self.calls.lock().await;
        if let Some(loss) = self.loss() {
            return Err(Error::local(
                Code::FailedPrecondition,
                Reason::LeaseNotHeld,
                self.holding.no_longer_held(loss.cause),
            ));
        }
        let result = self.renew_locked(self.safe_deadline()).await;
        if let Err(err) = &result {
            if !err.is_retryable() {
                self.lose(cause_of(err), Some(err.clone()));
            }
        }
        result
    }

    /// Sends one renewal with the last revisions, cut off at `deadline`,
    /// and takes its reply. The caller holds `calls`.
    async fn renew_locked(&self, deadline: Instant) -> Result<H::Held, Error> {
        let held = self.held();
        let sent = Instant::now();
        let reply =
            match tokio::time::timeout_at(deadline, self.holding.renew(held, deadline)).await {
                Ok(reply) => reply,
                Err(_) => Err(Error::local(
                    Code::DeadlineExceeded,
                    Reason::Unspecified,
                    "no answer to the renewal before the safe deadline",
                )),
            }
            .map_err(|e| e.context(&self.target, H::RENEW_RPC))?;
        self.renewed(&reply, sent);
        Ok(reply)
    }

    /// Takes a reply that renewed this holding, for a request sent at
    /// `sent`: it moves the safe deadline and the next renewal on.
    pub(crate) fn renewed(&self, reply: &H::Held, sent: Instant) {
        let mut state = self.state();
        if H::moves_on(&state.held, reply) {
            state.ttl = H::ttl(reply);
            state.safety_margin = self
                .margin_given
                .unwrap_or_else(|| default_safety_margin(state.ttl));
            if state.loss.is_none() {
                state.safe_deadline = sent + state.ttl.saturating_sub(state.safety_margin);
                state.next_renew_at = sent + state.ttl.mul_f64(self.renew_fraction);
            }
            state.held = reply.clone();
        }
        state.last_error = None;
    }

    /// Marks the holding lost (once) and cancels `lost`.
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

    /// The watch saw the holding end (`what`, seen as `seen`): it is lost.
    fn lose_seen(&self, seen: Seen, what: String) {
        let err = Error::local(Code::FailedPrecondition, Reason::LeaseNotHeld, what)
            .context(&self.target, "WatchLease");
        let cause = match seen {
            Seen::Ended => LossCause::NotHeld,
            Seen::Missed => LossCause::Missed,
        };
        self.lose(cause, Some(err));
        self.stop.cancel();
    }

    /// Hands the holding over with `send` (a Transfer, or a Resign to a
    /// successor) given the last holding, one call at a time with the
    /// renewals (a renewal in flight lands first). On success the holding
    /// ends as after a release, with cause [`LossCause::Transferred`]; on
    /// failure it is unchanged, unless the server says it ended
    /// (`LEASE_NOT_HELD`, `LEASE_NOT_FOUND`) or the watch saw it end
    /// meanwhile. Not held: [`Reason::LeaseNotHeld`] without a call.
    pub(crate) async fn hand_over<T, F, Fut>(&self, rpc: &str, send: F) -> Result<T, Error>
    where
        F: FnOnce(H::Held) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let _calls = self.calls.lock().await;
        let (result, held_back) = self.holding_back(rpc, send, |_, _| {}).await?;
        match &result {
            Ok(_) => {
                self.stop.cancel();
                self.lose(LossCause::Transferred, None);
                self.state().released = true;
            }
            Err(err) => self.failed_holding_back(err, held_back),
        }
        result
    }

    /// Changes the holding in place with `send` (a lease session's
    /// Downgrade) given the last holding, one call at a time with the
    /// renewals (a renewal in flight lands first, and none crosses it). On
    /// success, `apply` takes the reply and the reply becomes the holding
    /// that the next renewal or release presents, both under the state lock
    /// and before the watch's losses stop being held back, so the client's
    /// watch never judges the new holding by what it superseded (see
    /// [`Holding::superseded`]); the safe deadline does not move. A loss
    /// the watch saw during the call, judged by the old holding (most
    /// likely the change's own write), is checked with a renewal at once.
    /// On failure the holding is unchanged, as after a failed hand-over.
    /// Not held: [`Reason::LeaseNotHeld`] without a call.
    pub(crate) async fn change<F, Fut>(
        &self,
        rpc: &str,
        send: F,
        apply: impl FnOnce(&H, &H::Held),
    ) -> Result<H::Held, Error>
    where
        F: FnOnce(H::Held) -> Fut,
        Fut: Future<Output = Result<H::Held, Error>>,
    {
        let _calls = self.calls.lock().await;
        let (result, held_back) = self
            .holding_back(rpc, send, |state, reply| {
                apply(&self.holding, reply);
                state.held = reply.clone();
            })
            .await?;
        match &result {
            Ok(_) => {
                if held_back.is_some() {
                    self.renew_now();
                }
            }
            Err(err) => self.failed_holding_back(err, held_back),
        }
        result
    }

    /// Sends `send` (a hand-over or a change of the holding) given the last
    /// holding, holding back the losses the watch sees until its reply; on
    /// success `on_ok` takes the reply under the state lock, before they
    /// stop being held back. Returns the call's result and the loss held
    /// back, if any; not held: [`Reason::LeaseNotHeld`] without a call. The
    /// caller holds `calls`.
    async fn holding_back<T, F, Fut>(
        &self,
        rpc: &str,
        send: F,
        on_ok: impl FnOnce(&mut State<H::Held>, &T),
    ) -> Result<(Result<T, Error>, Option<(Seen, String)>), Error>
    where
        F: FnOnce(H::Held) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        if !self.is_held() {
            let cause = self.loss_cause().unwrap_or(LossCause::Deadline);
            return Err(Error::local(
                Code::FailedPrecondition,
                Reason::LeaseNotHeld,
                self.holding.no_longer_held(cause),
            ));
        }
        let held = {
            let mut state = self.state();
            state.handing = true;
            state.held.clone()
        };
        let result = match tokio::time::timeout(DEFAULT_CALL_TIMEOUT, send(held)).await {
            Ok(result) => result,
            Err(_) => Err(crate::stub::timeout_error(DEFAULT_CALL_TIMEOUT)),
        }
        .map_err(|e| e.context(&self.target, rpc));
        let held_back = {
            let mut state = self.state();
            if let Ok(reply) = &result {
                on_ok(&mut state, reply);
            }
            state.handing = false;
            state.held_back.take()
        };
        Ok((result, held_back))
    }

    /// After a failed hand-over or change: the holding is unchanged, unless
    /// the server says it ended (`LEASE_NOT_HELD`, `LEASE_NOT_FOUND`) or
    /// the watch saw it end meanwhile (`held_back`).
    fn failed_holding_back(&self, err: &Error, held_back: Option<(Seen, String)>) {
        if let Some((seen, what)) = held_back {
            self.lose_seen(seen, what);
        } else if matches!(err.reason(), Reason::LeaseNotHeld | Reason::LeaseNotFound) {
            self.stop.cancel();
            self.lose(LossCause::NotHeld, Some(err.clone()));
        }
    }

    /// Makes a renewal due at once (to check with the server a loss the
    /// watch judged by a superseded holding) and wakes the renewal task.
    fn renew_now(&self) {
        {
            let mut state = self.state();
            if state.loss.is_some() {
                return;
            }
            state.next_renew_at = Instant::now();
        }
        self.wake.notify_one();
    }

    /// Whether a release has nothing to do: released already, or (unless
    /// [`Holding::RELEASE_AFTER_NOT_HELD`]) found not held.
    fn nothing_to_release(&self) -> bool {
        let state = self.state();
        let not_held = matches!(
            &state.loss,
            Some(loss) if matches!(loss.cause, LossCause::NotHeld | LossCause::Missed)
        );
        state.released || (not_held && !H::RELEASE_AFTER_NOT_HELD)
    }

    /// Stops renewing, marks the holding lost ([`LossCause::Released`])
    /// *before* the call is sent, and releases it.
    pub(crate) async fn release(&self) -> Result<H::Released, Error> {
        self.stop.cancel();
        self.lose(LossCause::Released, None);
        // Wait for a renewal in flight: its reply carries the revisions.
        let _calls = self.calls.lock().await;
        if self.nothing_to_release() {
            return Ok(self.holding.nothing_released());
        }
        let held = self.held();
        let result = match tokio::time::timeout(
            RELEASE_TIMEOUT,
            self.holding.release(held, RELEASE_TIMEOUT),
        )
        .await
        {
            Ok(Ok(released)) => Ok(released),
            Ok(Err(err)) => match err.reason() {
                Reason::LeaseNotHeld | Reason::LeaseNotFound => Ok(self.holding.nothing_released()),
                _ => Err(err),
            },
            Err(_) => Err(Error::local(
                Code::DeadlineExceeded,
                Reason::Unspecified,
                format!("no answer to {} within {RELEASE_TIMEOUT:?}", H::RELEASE_RPC),
            )),
        };
        if result.is_ok() {
            self.state().released = true;
        }
        result.map_err(|e| e.context(&self.target, H::RELEASE_RPC))
    }

    /// The handle was dropped: stops the renewals and, if there is still
    /// something to release, marks the holding lost and spawns a release on
    /// the current Tokio runtime (if there is one; otherwise the holding
    /// ends at its TTL).
    pub(crate) fn dropped(self: &Arc<Self>) {
        self.stop.cancel();
        if self.nothing_to_release() {
            return;
        }
        self.lose(LossCause::Released, None);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let life = self.clone();
            runtime.spawn(async move {
                let _ = life.release().await;
            });
        }
    }

    /// The schedule; `None` once lost or released.
    fn schedule(&self) -> Option<Schedule> {
        let state = self.state();
        state.loss.is_none().then(|| Schedule {
            safe_deadline: state.safe_deadline,
            next_renew_at: state.next_renew_at,
            interval: state.ttl.mul_f64(self.renew_fraction),
        })
    }

    /// Records a retryable failure: the next try is at `at`.
    fn failed(&self, err: Error, at: Instant) {
        let mut state = self.state();
        state.last_error = Some(err);
        state.next_renew_at = at;
    }
}

impl<H: Holding> Followed for Lifecycle<H> {
    fn members(&self) -> Vec<(&str, u32, u64)> {
        self.holding.members()
    }

    fn is_over(&self) -> bool {
        self.state().loss.is_some()
    }

    fn lose_observed(&self, seen: Seen, what: String, judged: u64) {
        {
            let mut state = self.state();
            if state.handing {
                // Most likely the hand-over's own RELEASED (or the change's
                // own write): its reply decides.
                if state.loss.is_none() && state.held_back.is_none() {
                    state.held_back = Some((seen, what));
                }
                return;
            }
            if self.holding.superseded(judged) {
                // Judged by a holding a change has superseded since (the
                // watch read the token before the change's reply came):
                // ask the server instead.
                drop(state);
                self.renew_now();
                return;
            }
        }
        self.lose_seen(seen, what);
    }
}

/// The renewal task of one session: renew every `ttl × renew_fraction`,
/// retry retryable failures with backoff, give up at the safe deadline.
///
/// A session whose safe deadline passes without a successful renewal is
/// lost ([`LossCause::Deadline`]), and a final refusal loses it at once.
async fn run<H: Holding>(session: Arc<Lifecycle<H>>) {
    let mut paused = session.paused.subscribe();
    let mut retry = FIRST_RETRY;
    loop {
        let Some(schedule) = session.schedule() else {
            return;
        };
        let is_paused = *paused.borrow_and_update();
        tokio::select! {
            biased;
            _ = session.stop.cancelled() => return,
            _ = session.lost.cancelled() => return,
            _ = tokio::time::sleep_until(schedule.safe_deadline) => {
                // A manual renewal may have moved the deadline meanwhile.
                match session.schedule() {
                    Some(now) if Instant::now() >= now.safe_deadline => {
                        let last_error = session.state().last_error.take();
                        session.lose(LossCause::Deadline, last_error);
                        return;
                    }
                    _ => continue,
                }
            }
            _ = paused.changed() => continue,
            _ = session.wake.notified() => continue,
            _ = tokio::time::sleep_until(schedule.next_renew_at), if !is_paused => {}
        }
        let _calls = tokio::select! {
            biased;
            _ = session.stop.cancelled() => return,
            calls = session.calls.lock() => calls,
        };
        let Some(schedule) = session.schedule() else {
            return;
        };
        let now = Instant::now();
        if session.stop.is_cancelled()
            || *paused.borrow()
            || now < schedule.next_renew_at
            || now >= schedule.safe_deadline
        {
            continue; // stopped, paused or renewed meanwhile, or too late: see above
        }
        match session.renew_locked(schedule.safe_deadline).await {
            Ok(_) => retry = FIRST_RETRY,
            Err(err) if err.is_retryable() => {
                session.failed(err, Instant::now() + retry);
                retry = (retry * 2).min(schedule.interval.max(FIRST_RETRY));
            }
            Err(err) => {
                session.lose(cause_of(&err), Some(err));
                return;
            }
        }
    }
}

/// The loss cause of a renewal refused with a final error.
fn cause_of(err: &Error) -> LossCause {
    match err.reason() {
        Reason::LeaseNotHeld | Reason::LeaseNotFound => LossCause::NotHeld,
        _ => LossCause::RenewFailed,
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
