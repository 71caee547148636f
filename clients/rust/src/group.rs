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
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::error::{Error, Reason};
use crate::follow::Follower;
use crate::lifecycle::{ttl_of, Holding, Lifecycle, Loss, LossCause};
use crate::proto::{GroupMember, Lease, ReleaseGroupRequest, RenewGroupRequest};
use crate::stub::Stub;

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
    inner: Arc<Lifecycle<GroupHolding>>,
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

/// What a [`GroupSession`] holds: its members, renewed with one
/// `RenewGroup` and released with one `ReleaseGroup`.
pub(crate) struct GroupHolding {
    /// The member names, in request order.
    names: Vec<String>,
    /// Each member's fencing token, in the order of `names`.
    tokens: Vec<u64>,
    /// Each member's fence proof, in request order (empty ones when the
    /// server signs none).
    proofs: Vec<Vec<u8>>,
    /// The holder, as acquired.
    holder: String,
    /// The one ownership secret of every member.
    lease_key: String,
    /// The client's stub.
    stub: Stub,
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
        let holding = GroupHolding {
            names: leases.iter().map(|l| l.name.clone()).collect(),
            tokens: leases.iter().map(|l| l.fencing_token).collect(),
            proofs: leases.iter().map(|l| l.fence_proof.clone()).collect(),
            holder: leases.first().map(|l| l.holder.clone()).unwrap_or_default(),
            lease_key,
            stub,
        };
        let session = GroupSession {
            inner: Lifecycle::new(holding, target, leases, sent, renew_fraction, margin_given),
        };
        // On error the session is dropped, which releases the group.
        session.inner.start(&follower).await?;
        Ok(session)
    }

    /// The member names, in request order.
    pub fn names(&self) -> &[String] {
        &self.inner.holding.names
    }

    /// Who holds them, as given to acquire.
    pub fn holder(&self) -> &str {
        &self.inner.holding.holder
    }

    /// The fencing token of member `name` (`None` if it is not a member):
    /// constant across renewals, strictly greater for its next holder.
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        let holding = &self.inner.holding;
        let i = holding.names.iter().position(|n| n == name)?;
        Some(holding.tokens[i])
    }

    /// The fence proof of member `name` (`None` if it is not a member;
    /// empty when the server signs none): what a store guarding that name
    /// verifies (docs/fencing.md).
    pub fn fence_proof(&self, name: &str) -> Option<&[u8]> {
        let holding = &self.inner.holding;
        let i = holding.names.iter().position(|n| n == name)?;
        Some(&holding.proofs[i])
    }

    /// The HTTP headers for a write guarded by member `name` (see
    /// [`Session::fence_headers`](crate::Session::fence_headers)).
    pub fn fence_headers(&self, name: &str) -> Option<Vec<(&'static str, String)>> {
        let token = self.fencing_token(name)?;
        Some(crate::fencing::headers(self.fence_proof(name)?, token))
    }

    /// Every member's (name, fencing token), in request order.
    pub fn fencing_tokens(&self) -> Vec<(String, u64)> {
        let holding = &self.inner.holding;
        holding
            .names
            .iter()
            .cloned()
            .zip(holding.tokens.iter().copied())
            .collect()
    }

    /// The one ownership secret of every member.
    pub fn lease_key(&self) -> &str {
        &self.inner.holding.lease_key
    }

    /// The last holdings the server returned, in request order.
    pub fn leases(&self) -> Vec<Lease> {
        self.inner.held()
    }

    /// The granted time to live (whole seconds).
    pub fn ttl(&self) -> Duration {
        self.inner.ttl()
    }

    /// Send time of the last successful AcquireGroup/RenewGroup + TTL −
    /// safety margin: from then on the group is not believed held.
    pub fn safe_deadline(&self) -> Instant {
        self.inner.safe_deadline()
    }

    /// Whether the caller still holds every member: not lost or released,
    /// and the safe deadline has not passed.
    pub fn is_held(&self) -> bool {
        self.inner.is_held()
    }

    /// Cancelled once any member is lost, or the group is released.
    pub fn lost(&self) -> &CancellationToken {
        self.inner.lost()
    }

    /// How and when the group was lost; `None` while held.
    pub fn loss(&self) -> Option<Loss> {
        self.inner.loss()
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
        self.inner.renew().await
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
        self.inner.pause_renewals(true);
    }

    /// Undoes [`pause_renewals`](GroupSession::pause_renewals).
    pub fn resume_renewals(&self) {
        self.inner.pause_renewals(false);
    }
}

impl Drop for GroupSession {
    fn drop(&mut self) {
        self.inner.dropped();
    }
}

impl fmt::Debug for GroupSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let holding = &self.inner.holding;
        f.debug_struct("GroupSession")
            .field("names", &holding.names)
            .field("holder", &holding.holder)
            .field("fencing_tokens", &holding.tokens)
            .field("ttl", &self.ttl())
            .field("safe_deadline", &self.safe_deadline())
            .field("loss", &self.inner.loss_cause())
            .finish_non_exhaustive()
    }
}

/// The members of `leases` with their last revisions.
fn group_members(leases: &[Lease]) -> Vec<GroupMember> {
    leases
        .iter()
        .map(|l| GroupMember {
            name: l.name.clone(),
            expected_revision: l.revision,
        })
        .collect()
}

impl Holding for GroupHolding {
    type Held = Vec<Lease>;
    type Released = GroupRelease;
    const RENEW_RPC: &'static str = "RenewGroup";
    const RELEASE_RPC: &'static str = "ReleaseGroup";
    // Sent even after a loss: the members still held are freed at once.
    const RELEASE_AFTER_NOT_HELD: bool = true;

    /// The shortest member's TTL (they are written together).
    fn ttl(leases: &Vec<Lease>) -> Duration {
        leases.iter().map(ttl_of).min().unwrap_or_default()
    }

    fn moves_on(_current: &Vec<Lease>, _reply: &Vec<Lease>) -> bool {
        true
    }

    async fn renew(&self, leases: Vec<Lease>, deadline: Instant) -> Result<Vec<Lease>, Error> {
        let mut request = tonic::Request::new(RenewGroupRequest {
            members: group_members(&leases),
            lease_key: self.lease_key.clone(),
            ttl: None,
        });
        request.set_timeout(deadline.saturating_duration_since(Instant::now()));
        let mut stub = self.stub.clone();
        let reply = stub.renew_group(request).await?.into_inner();
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

    async fn release(&self, leases: Vec<Lease>, timeout: Duration) -> Result<GroupRelease, Error> {
        let mut request = tonic::Request::new(ReleaseGroupRequest {
            members: group_members(&leases),
            lease_key: self.lease_key.clone(),
        });
        request.set_timeout(timeout);
        let mut stub = self.stub.clone();
        let reply = stub.release_group(request).await?.into_inner();
        Ok(GroupRelease {
            released: reply.released,
            not_held: reply.not_held,
        })
    }

    fn nothing_released(&self) -> GroupRelease {
        GroupRelease {
            released: Vec::new(),
            not_held: self.names.clone(),
        }
    }

    fn no_longer_held(&self, cause: LossCause) -> String {
        format!(
            "the group session no longer holds {:?} ({:?})",
            self.names, cause
        )
    }

    fn members(&self) -> Vec<(&str, u32, u64)> {
        self.names
            .iter()
            .zip(&self.tokens)
            .map(|(n, t)| (n.as_str(), 0, *t))
            .collect()
    }
}
