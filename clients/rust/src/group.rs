//! [`GroupSession`]: several plain leases taken all or none with one
//! `AcquireGroup`, renewed together with `RenewGroup` and lost as a whole.
//!
//! Every member shares one lease key and one TTL and is written in one NATS
//! atomic batch, so one send time and one safe deadline hold for all of
//! them. The group is lost the moment any member is: the client's one watch
//! shows a member ended or taken, or `RenewGroup` answers `LEASE_NOT_HELD`
//! (naming a lost member). Releasing sends `ReleaseGroup`, which frees the
//! members still held and reports the others.

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
use crate::proto::{GroupMember, Lease, ReleaseGroupRequest, RenewGroupRequest};
use crate::renewal::{cause_of, Renewable, Schedule};
use crate::session::{check_timing, default_safety_margin, ttl_of, Loss, LossCause};

/// Deadline of a ReleaseGroup call.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Several plain leases held together, from
/// [`Client::acquire_group`](crate::Client::acquire_group).
///
/// Like a [`Session`](crate::Session), with one safe deadline and one loss
/// signal for the whole group: while [`is_held`](GroupSession::is_held) the
/// caller holds *every* member and passes each member's
/// [`fencing_token`](GroupSession::fencing_token) with the writes it guards;
/// [`lost`](GroupSession::lost) is cancelled as soon as any member is lost,
/// and no later than the safe deadline. Dropping it releases the group in
/// the background; [`release`](GroupSession::release) says what was freed.
pub struct GroupSession {
    inner: Arc<GroupInner>,
}

/// What [`GroupSession::release`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupRelease {
    /// The members that were held and are now released.
    pub released: Vec<String>,
    /// The members already lost (expired, revoked, taken over), or every
    /// member when the group was already released or could not be.
    pub not_held: Vec<String>,
}

/// The state shared by a [`GroupSession`], its renewal task and the
/// client's [`Follower`].
pub(crate) struct GroupInner {
    /// The member names, in request order.
    names: Vec<String>,
    /// Each member's fencing token, in the order of `names`.
    tokens: Vec<u64>,
    /// The holder, as acquired.
    holder: String,
    /// The one ownership secret of every member.
    lease_key: String,
    /// The client's stub.
    stub: Stub,
    /// The server, for errors.
    target: Arc<str>,
    /// Renew after `ttl × renew_fraction`.
    renew_fraction: f64,
    /// The safety margin the caller chose, if any.
    margin_given: Option<Duration>,
    /// The mutable part.
    state: Mutex<GroupState>,
    /// Cancelled once any member is lost, or the group is released.
    lost: CancellationToken,
    /// Cancelled to stop the renewal task.
    stop: CancellationToken,
    /// True while renewals are paused.
    paused: watch::Sender<bool>,
    /// Held by whoever sends a RenewGroup or ReleaseGroup.
    calls: tokio::sync::Mutex<()>,
}

/// The mutable part of [`GroupInner`].
struct GroupState {
    /// The last holdings the server returned, in the order of `names`.
    leases: Vec<Lease>,
    /// The granted TTL (the shortest member's; they are written together).
    ttl: Duration,
    /// Taken off the TTL for the safe deadline.
    safety_margin: Duration,
    /// Send time of the last successful AcquireGroup/RenewGroup + TTL − margin.
    safe_deadline: Instant,
    /// When the next renewal is due.
    next_renew_at: Instant,
    /// Set once, when the group is lost or released.
    loss: Option<Loss>,
    /// The last failed renewal's error, cleared by a success.
    last_error: Option<Error>,
    /// The server answered a ReleaseGroup.
    released: bool,
}

impl GroupSession {
    /// Builds the session of a successful AcquireGroup sent at `sent`,
    /// renews once after a long wait, and starts the renewal task.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        stub: Stub,
        target: Arc<str>,
        follower: Arc<Follower>,
        leases: Vec<Lease>,
        lease_key: String,
        sent: Instant,
        renew_fraction: f64,
        margin_given: Option<Duration>,
    ) -> Result<GroupSession, Error> {
        let ttl = leases.iter().map(ttl_of).min().unwrap_or_default();
        let safety_margin = margin_given.unwrap_or_else(|| default_safety_margin(ttl));
        let session = GroupSession {
            inner: Arc::new(GroupInner {
                names: leases.iter().map(|l| l.name.clone()).collect(),
                tokens: leases.iter().map(|l| l.fencing_token).collect(),
                holder: leases.first().map(|l| l.holder.clone()).unwrap_or_default(),
                lease_key,
                stub,
                target,
                renew_fraction,
                margin_given,
                state: Mutex::new(GroupState {
                    leases,
                    ttl,
                    safety_margin,
                    safe_deadline: sent + ttl.saturating_sub(safety_margin),
                    next_renew_at: sent + ttl.mul_f64(renew_fraction),
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
        check_timing(ttl, renew_fraction, safety_margin)?;
        if Instant::now() >= session.inner.state().next_renew_at {
            // After a long wait: renew once so that the safe deadline
            // counts from a recent send time (see Session::start).
            let _calls = session.inner.calls.lock().await;
            let deadline = Instant::now() + crate::DEFAULT_CALL_TIMEOUT;
            if let Err(err) = session.inner.renew_call(deadline).await {
                if !err.is_retryable() || !session.is_held() {
                    session.inner.lose(cause_of(&err), Some(err.clone()));
                    return Err(err);
                }
                session.inner.state().last_error = Some(err);
            }
        }
        tokio::spawn(crate::renewal::run(session.inner.clone()));
        follower.follow(session.inner.clone());
        Ok(session)
    }

    /// The member names, in request order.
    pub fn names(&self) -> &[String] {
        &self.inner.names
    }

    /// Who holds them, as given to acquire.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// The fencing token of member `name` (`None` if it is not a member):
    /// constant across renewals, strictly greater for its next holder.
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        let i = self.inner.names.iter().position(|n| n == name)?;
        Some(self.inner.tokens[i])
    }

    /// Every member's (name, fencing token), in request order.
    pub fn fencing_tokens(&self) -> Vec<(String, u64)> {
        self.inner
            .names
            .iter()
            .cloned()
            .zip(self.inner.tokens.iter().copied())
            .collect()
    }

    /// The one ownership secret of every member.
    pub fn lease_key(&self) -> &str {
        &self.inner.lease_key
    }

    /// The last holdings the server returned, in request order.
    pub fn leases(&self) -> Vec<Lease> {
        self.inner.state().leases.clone()
    }

    /// The granted time to live (whole seconds).
    pub fn ttl(&self) -> Duration {
        self.inner.state().ttl
    }

    /// Send time of the last successful AcquireGroup/RenewGroup + TTL −
    /// safety margin: from then on the group is not believed held.
    pub fn safe_deadline(&self) -> Instant {
        self.inner.state().safe_deadline
    }

    /// Whether the caller still holds every member: not lost or released,
    /// and the safe deadline has not passed.
    pub fn is_held(&self) -> bool {
        let state = self.inner.state();
        state.loss.is_none() && Instant::now() < state.safe_deadline
    }

    /// Cancelled once any member is lost, or the group is released.
    pub fn lost(&self) -> &CancellationToken {
        &self.inner.lost
    }

    /// How and when the group was lost; `None` while held.
    pub fn loss(&self) -> Option<Loss> {
        self.inner.state().loss.clone()
    }

    /// Renews every member now (one `RenewGroup`, all or none) and returns
    /// the renewed holdings.
    ///
    /// # Errors
    ///
    /// The renewal failed; a refusal (`LEASE_NOT_HELD` naming a lost
    /// member, …) also marks the group lost. Already lost or released:
    /// [`Reason::LeaseNotHeld`] without a call.
    pub async fn renew(&self) -> Result<Vec<Lease>, Error> {
        let _calls = self.inner.calls.lock().await;
        if let Some(loss) = self.loss() {
            return Err(Error::local(
                Code::FailedPrecondition,
                Reason::LeaseNotHeld,
                format!(
                    "the group session no longer holds {:?} ({:?})",
                    self.inner.names, loss.cause
                ),
            ));
        }
        let result = self.inner.renew_call(self.safe_deadline()).await;
        if let Err(err) = &result {
            if !err.is_retryable() {
                self.inner.lose(cause_of(err), Some(err.clone()));
            }
        }
        result
    }

    /// Stops renewing and releases the members still held with one
    /// `ReleaseGroup`; [`lost`](GroupSession::lost) is cancelled first.
    /// Members lost before are reported in [`GroupRelease::not_held`], not
    /// as an error. Calling it again reports every member not held.
    ///
    /// # Errors
    ///
    /// The server could not be reached or refused; the members then end at
    /// their TTL.
    pub async fn release(&self) -> Result<GroupRelease, Error> {
        self.inner.release().await
    }

    /// Stops sending renewals, as a stalled process would (tests, drills).
    pub fn pause_renewals(&self) {
        self.inner.paused.send_replace(true);
    }

    /// Undoes [`pause_renewals`](GroupSession::pause_renewals).
    pub fn resume_renewals(&self) {
        self.inner.paused.send_replace(false);
    }
}

impl Drop for GroupSession {
    fn drop(&mut self) {
        let inner = &self.inner;
        if inner.state().released {
            return;
        }
        inner.stop.cancel();
        inner.lose(LossCause::Released, None);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let inner = inner.clone();
            runtime.spawn(async move {
                let _ = inner.release().await;
            });
        }
    }
}

impl fmt::Debug for GroupSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state();
        f.debug_struct("GroupSession")
            .field("names", &self.inner.names)
            .field("holder", &self.inner.holder)
            .field("fencing_tokens", &self.inner.tokens)
            .field("ttl", &state.ttl)
            .field("safe_deadline", &state.safe_deadline)
            .field("loss", &state.loss.as_ref().map(|l| l.cause))
            .finish_non_exhaustive()
    }
}

impl GroupInner {
    fn state(&self) -> MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The members with their last revisions.
    fn group_members(&self) -> Vec<GroupMember> {
        self.state()
            .leases
            .iter()
            .map(|l| GroupMember {
                name: l.name.clone(),
                expected_revision: l.revision,
            })
            .collect()
    }

    /// Marks the group lost (once) and cancels `lost`.
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

    /// Sends one RenewGroup, cut off at `deadline`; the caller holds `calls`.
    async fn renew_call(&self, deadline: Instant) -> Result<Vec<Lease>, Error> {
        let mut request = tonic::Request::new(RenewGroupRequest {
            members: self.group_members(),
            lease_key: self.lease_key.clone(),
            ttl: None,
        });
        let sent = Instant::now();
        request.set_timeout(deadline.saturating_duration_since(sent));
        let mut stub = self.stub.clone();
        let result = async {
            let reply = tokio::time::timeout_at(deadline, stub.renew_group(request))
                .await
                .map_err(|_| {
                    Error::local(
                        Code::DeadlineExceeded,
                        Reason::Unspecified,
                        "no answer to the renewal before the safe deadline",
                    )
                })??
                .into_inner();
            let same = reply.leases.len() == self.names.len()
                && reply
                    .leases
                    .iter()
                    .zip(self.names.iter().zip(&self.tokens))
                    .all(|(l, (n, t))| &l.name == n && l.fencing_token == *t);
            if !same {
                // The server promises the same members and constant tokens.
                return Err(Error::local(
                    Code::FailedPrecondition,
                    Reason::LeaseNotHeld,
                    "RenewGroup returned other members or fencing tokens than the group's",
                ));
            }
            Ok(reply.leases)
        }
        .await
        .map_err(|e| e.context(&self.target, "RenewGroup"))?;
        let mut state = self.state();
        let ttl = result.iter().map(ttl_of).min().unwrap_or_default();
        state.ttl = ttl;
        state.safety_margin = self
            .margin_given
            .unwrap_or_else(|| default_safety_margin(ttl));
        if state.loss.is_none() {
            state.safe_deadline = sent + ttl.saturating_sub(state.safety_margin);
            state.next_renew_at = sent + ttl.mul_f64(self.renew_fraction);
        }
        state.leases = result.clone();
        state.last_error = None;
        Ok(result)
    }

    /// See [`GroupSession::release`].
    async fn release(&self) -> Result<GroupRelease, Error> {
        self.stop.cancel();
        self.lose(LossCause::Released, None);
        let _calls = self.calls.lock().await;
        if self.state().released {
            return Ok(GroupRelease {
                released: Vec::new(),
                not_held: self.names.clone(),
            });
        }
        // Sent even after a loss: the members still held are freed at once.
        let mut request = tonic::Request::new(ReleaseGroupRequest {
            members: self.group_members(),
            lease_key: self.lease_key.clone(),
        });
        request.set_timeout(RELEASE_TIMEOUT);
        let mut stub = self.stub.clone();
        let result = match tokio::time::timeout(RELEASE_TIMEOUT, stub.release_group(request)).await
        {
            Ok(Ok(reply)) => {
                let reply = reply.into_inner();
                Ok(GroupRelease {
                    released: reply.released,
                    not_held: reply.not_held,
                })
            }
            Ok(Err(status)) => {
                let err = Error::from(status);
                match err.reason() {
                    Reason::LeaseNotHeld | Reason::LeaseNotFound => Ok(GroupRelease {
                        released: Vec::new(),
                        not_held: self.names.clone(),
                    }),
                    _ => Err(err),
                }
            }
            Err(_) => Err(Error::local(
                Code::DeadlineExceeded,
                Reason::Unspecified,
                format!("no answer to ReleaseGroup within {RELEASE_TIMEOUT:?}"),
            )),
        };
        if result.is_ok() {
            self.state().released = true;
        }
        result.map_err(|e| e.context(&self.target, "ReleaseGroup"))
    }

    /// The watch saw a member end: the group is lost as a whole.
    fn lose_observed(&self, what: String) {
        let err = Error::local(Code::FailedPrecondition, Reason::LeaseNotHeld, what)
            .context(&self.target, "WatchLease");
        self.lose(LossCause::NotHeld, Some(err));
        self.stop.cancel();
    }
}

impl Renewable for GroupInner {
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
        GroupInner::lose(self, cause, error);
    }

    async fn renew_once(&self, deadline: Instant) -> Result<(), Error> {
        self.renew_call(deadline).await.map(|_| ())
    }
}

impl Followed for GroupInner {
    fn members(&self) -> Vec<(&str, u32, u64)> {
        self.names
            .iter()
            .zip(&self.tokens)
            .map(|(n, t)| (n.as_str(), 0, *t))
            .collect()
    }

    fn is_over(&self) -> bool {
        self.state().loss.is_some()
    }

    fn lose_observed(&self, what: String) {
        GroupInner::lose_observed(self, what);
    }
}
