//! Leader election, in the shape of client-go's `leaderelection` and etcd's
//! `concurrency.Election`.
//!
//! An election is the lease of the same name (`tenure.v1.ElectionService`),
//! so a term is a [`Session`]: its fencing token is the term's token, it is
//! renewed in the background, and [`Session::lost`] fires at its safe
//! deadline or as soon as the server or the shared watch says it ended.
//! [`Election::run`] campaigns, runs the leader's work with a token that is
//! cancelled when the term ends, and campaigns again; [`Election::observe`]
//! follows who leads. A participant campaigns with a preference
//! ([`Election::with_preference`]), and a leader hands over to a waiting
//! candidate of greater preference.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::client::{AcquireOptions, Client};
use crate::error::{Error, Reason};
use crate::proto::{
    ChangeType, LeaderRequest, Leadership, Lease, ObserveRequest, ObserveResponse, ProclaimRequest,
    ResignRequest,
};
use crate::session::Session;
use crate::stub::{ElectionStub, DEFAULT_CALL_TIMEOUT};
use crate::watch::{FIRST_BACKOFF, MAX_BACKOFF};

/// The lease metadata key that holds a leader's value.
pub const VALUE_KEY: &str = "value";

/// How long one campaign waits before it is sent again (the server caps it).
const CAMPAIGN_WAIT: Duration = Duration::from_secs(30);

/// Who leads an election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's holder name.
    pub identity: String,
    /// What the leader published (e.g. its address).
    pub value: String,
    /// The term's fencing token.
    pub fencing_token: u64,
}

/// A candidate waiting to lead, as the Observe stream names the preferred
/// one ([`LeaderChange::preferred`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The candidate's holder name: the successor a leader hands over to.
    pub identity: String,
    /// Its preference ([`AcquireOptions::preference`]).
    pub preference: u32,
}

impl From<crate::proto::Candidate> for Candidate {
    fn from(c: crate::proto::Candidate) -> Candidate {
        Candidate {
            identity: c.holder,
            preference: c.preference,
        }
    }
}

impl From<Leadership> for Leader {
    fn from(l: Leadership) -> Leader {
        Leader {
            identity: l.holder,
            value: l.value,
            fencing_token: l.fencing_token,
        }
    }
}

/// One change of an election's leadership, from
/// [`Election::observe_changes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderChange {
    /// What changed: [`ChangeType::Current`] first (the state when the
    /// stream opened, again after a reconnect), then `Elected`,
    /// `Proclaimed`, `Resigned`, `Expired`, `Revoked`, `Missed` or
    /// `Preferred`.
    ///
    /// [`ChangeType::Preferred`]: a new preferred candidate, or none any
    /// more (see `preferred`); the leader is unchanged.
    ///
    /// [`ChangeType::Missed`]: the stream did not see every change of the
    /// election (its server's watcher fell behind), so who leads is unknown
    /// until the next change; the leader in `ended_identity` and
    /// `ended_fencing_token` (when known, token != 0) no longer leads, and
    /// other terms may have come and gone.
    pub kind: ChangeType,
    /// Who leads after the change; `None` when nobody does (or, for
    /// `Missed`, nobody is known to).
    pub leader: Option<Leader>,
    /// For `Resigned`, `Expired`, `Revoked` and `Missed`, the leader whose
    /// term ended ("" when the stream never saw it).
    pub ended_identity: String,
    /// For `Resigned`, `Expired`, `Revoked` and `Missed`, the token of the
    /// term that ended (0 when unknown).
    pub ended_fencing_token: u64,
    /// The bucket revision of the change (0 for `Current` without a
    /// leader).
    pub revision: u64,
    /// The waiting candidate with the highest preference above 0 (the
    /// earliest of equals) when the change was sent, on every change;
    /// `None` when no such candidate waits. A leader of lower preference
    /// hands over to it (as [`Election::run`] does).
    pub preferred: Option<Candidate>,
}

impl From<ObserveResponse> for LeaderChange {
    fn from(msg: ObserveResponse) -> LeaderChange {
        LeaderChange {
            kind: ChangeType::try_from(msg.r#type).unwrap_or(ChangeType::Unspecified),
            leader: msg.leader.map(Leader::from),
            ended_identity: msg.ended_holder,
            ended_fencing_token: msg.ended_fencing_token,
            revision: msg.revision,
            preferred: msg.preferred.map(Candidate::from),
        }
    }
}

/// One election over a [`Client`]'s connection and credentials. Cheap to
/// clone (clones share the hand-over requests of [`Election::resign_to`]).
#[derive(Debug, Clone)]
pub struct Election {
    /// The client whose sessions are the terms.
    client: Client,
    /// The election (a lease name).
    name: Arc<str>,
    /// The preference this participant campaigns with (0: none).
    preference: u32,
    /// Where [`Election::resign_to`] asks the running [`Election::run`] to
    /// hand over: set while it leads.
    handovers: Arc<Mutex<Option<mpsc::Sender<Handover>>>>,
}

/// Why [`Election::run`] hands its term over.
#[derive(Debug)]
enum Ask {
    /// [`Election::resign_to`] asked.
    Asked(Handover),
    /// The preferred candidate (identity) has a greater preference.
    Preferred(String),
}

/// The latest preferred candidate the Observe stream named, for
/// [`Election::run`].
#[derive(Debug, Clone, Default)]
struct Named {
    /// The preferred candidate; `None` when none waits.
    candidate: Option<Candidate>,
    /// How many Observe messages named a candidate.
    seq: u64,
}

impl Named {
    /// Takes the preferred candidate of one Observe message.
    fn take(&mut self, preferred: Option<Candidate>) {
        self.candidate = preferred.filter(|c| !c.identity.is_empty());
        if self.candidate.is_some() {
            self.seq += 1;
        }
    }

    /// The candidate a leader (`identity`, preference `own`) hands over to
    /// now: the preferred one, when its preference is greater and this
    /// naming of it was not tried yet (`tried`, which it then updates).
    fn due(&self, identity: &str, own: u32, tried: &mut u64) -> Option<String> {
        let c = self.candidate.as_ref()?;
        if c.identity == identity || c.preference <= own || self.seq == *tried {
            return None;
        }
        *tried = self.seq;
        Some(c.identity.clone())
    }
}

/// One [`Election::resign_to`] request and where its answer goes.
#[derive(Debug)]
struct Handover {
    /// The waiting candidate to hand over to; `None`: the next one.
    successor: Option<String>,
    /// Told the successor, or why there is none.
    reply: oneshot::Sender<Result<Leader, Error>>,
}

impl Election {
    /// The election `name`.
    pub fn new(client: &Client, name: impl Into<String>) -> Election {
        Election {
            client: client.clone(),
            name: name.into().into(),
            preference: 0,
            handovers: Arc::new(Mutex::new(None)),
        }
    }

    /// This participant's preference as a candidate (0, the default:
    /// none): [`campaign`](Election::campaign) and [`run`](Election::run)
    /// campaign with it ([`AcquireOptions::preference`]), and while `run`
    /// leads, a waiting candidate of greater preference takes over (see
    /// [`run`](Election::run)).
    ///
    /// For a rolling update, campaign with the deployment's generation: the
    /// first candidate of the new version to wait takes over from an
    /// old-version leader once, with no leaderless moment; candidates of
    /// equal preference never displace each other.
    #[must_use]
    pub fn with_preference(mut self, preference: u32) -> Election {
        self.preference = preference;
        self
    }

    /// The preference this participant campaigns with.
    pub fn preference(&self) -> u32 {
        self.preference
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns once: waits up to `wait` for the election to have no
    /// leader (as a candidate of this election's
    /// [`preference`](Election::with_preference)), then makes `identity`
    /// its leader publishing `value`, and returns the term
    /// ([`Session::release`] resigns).
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseHeld`] when the wait ran out with another leader; the
    /// errors of [`Client::acquire`].
    pub async fn campaign(
        &self,
        identity: impl Into<String>,
        value: impl Into<String>,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Session, Error> {
        let mut options = AcquireOptions::default()
            .metadata(VALUE_KEY, value)
            .preference(self.preference);
        if !wait.is_zero() {
            options = options.wait(wait);
        }
        self.client
            .acquire(self.name.to_string(), identity, ttl, options)
            .await
    }

    /// Replaces the value the term's leader publishes, without a new term
    /// (a renewal that also writes the value).
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseNotHeld`] when the term has ended.
    pub async fn proclaim(&self, term: &Session, value: impl Into<String>) -> Result<(), Error> {
        if !term.is_held() {
            return Err(Error::local(
                Code::FailedPrecondition,
                Reason::LeaseNotHeld,
                format!("the term of {:?} has ended", self.name),
            ));
        }
        let mut request = tonic::Request::new(ProclaimRequest {
            name: self.name.to_string(),
            expected_revision: term.revision(),
            lease_key: term.lease_key().to_string(),
            value: value.into(),
        });
        request.set_timeout(DEFAULT_CALL_TIMEOUT);
        let sent = Instant::now();
        let mut stub = self.stub();
        let reply = stub
            .proclaim(request)
            .await
            .map_err(|s| Error::from(s).context(self.client.target(), "Proclaim"))?
            .into_inner();
        if let Some(l) = reply.leadership {
            let lease = Lease {
                name: l.name,
                holder: l.holder,
                fencing_token: l.fencing_token,
                revision: l.revision,
                ttl: l.ttl,
                ..term.lease()
            };
            term.renewed_by(&lease, sent);
        }
        Ok(())
    }

    /// Hands `term`'s leadership to a waiting candidate, with no moment
    /// without a leader (`ElectionService.Resign` with a successor): to the
    /// candidate whose identity is `successor`, or, with `None`, to the
    /// earliest waiting candidate. Returns the successor, whose fencing
    /// token is greater; the term then ends as handed over
    /// ([`LossCause::Transferred`](crate::LossCause::Transferred)). Within
    /// [`run`](Election::run), use [`resign_to`](Election::resign_to), which
    /// stops the leader first.
    ///
    /// # Errors
    ///
    /// [`Reason::NoWaiter`] when that candidate does not wait (the term is
    /// unchanged and still held); [`Reason::LeaseNotHeld`] when the term
    /// has ended.
    pub async fn hand_over(
        &self,
        term: &Session,
        successor: Option<&str>,
    ) -> Result<Leader, Error> {
        let name = self.name.to_string();
        let lease_key = term.lease_key().to_string();
        let successor = successor.unwrap_or_default().to_string();
        let mut stub = self.stub();
        term.hand_over("Resign", |lease| async move {
            let mut request = tonic::Request::new(ResignRequest {
                name,
                expected_revision: lease.revision,
                lease_key,
                to_next_candidate: successor.is_empty(),
                successor,
            });
            request.set_timeout(DEFAULT_CALL_TIMEOUT);
            let reply = stub.resign(request).await?.into_inner();
            reply.successor.map(Leader::from).ok_or_else(|| {
                Error::local(
                    Code::Internal,
                    Reason::Unspecified,
                    "Resign replied without a successor",
                )
            })
        })
        .await
    }

    /// Asks the running [`run`](Election::run) of this election (or of a
    /// clone of it) to hand its leadership to a waiting candidate: to the
    /// candidate whose identity is `successor`, or, with `None`, to the
    /// earliest waiting one. Returns the successor, whose fencing token is
    /// greater.
    ///
    /// Before the hand-over is sent the leader stops: `run` cancels the
    /// `ended` token of `lead`, waits for `lead` to return, and calls
    /// `stopped`; so the successor cannot start leading before this leader
    /// stopped, and `stopped` has run when this returns. `run` then
    /// campaigns again (cancel its `stop` to leave the election).
    ///
    /// # Errors
    ///
    /// [`Reason::NoWaiter`] when that candidate does not wait: `run` keeps
    /// the term and leads it again (`lead` is called anew with it), as
    /// after any other failure while the term is still held.
    /// [`Reason::LeaseNotHeld`] when `run` does not lead.
    pub async fn resign_to(&self, successor: Option<&str>) -> Result<Leader, Error> {
        let not_leading = || {
            Error::local(
                Code::FailedPrecondition,
                Reason::LeaseNotHeld,
                format!("this elector does not lead {:?}", self.name),
            )
        };
        let sender = self
            .handovers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(sender) = sender else {
            return Err(not_leading());
        };
        let (reply, answer) = oneshot::channel();
        let asked = Handover {
            successor: successor.map(str::to_string),
            reply,
        };
        sender.send(asked).await.map_err(|_| not_leading())?;
        answer.await.map_err(|_| not_leading())?
    }

    /// Sets (or clears) where [`resign_to`](Election::resign_to) asks.
    fn set_handovers(&self, sender: Option<mpsc::Sender<Handover>>) {
        *self.handovers.lock().unwrap_or_else(|e| e.into_inner()) = sender;
    }

    /// Who leads now; `None` when nobody does.
    ///
    /// # Errors
    ///
    /// The server could not be reached or refused (grants, credentials).
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let mut request = tonic::Request::new(LeaderRequest {
            name: self.name.to_string(),
        });
        request.set_timeout(DEFAULT_CALL_TIMEOUT);
        let mut stub = self.stub();
        match stub.leader(request).await {
            Ok(reply) => Ok(reply.into_inner().leadership.map(Leader::from)),
            Err(status) => {
                let err = Error::from(status).context(self.client.target(), "Leader");
                if err.reason() == Reason::LeaseNotFound {
                    Ok(None)
                } else {
                    Err(err)
                }
            }
        }
    }

    /// Follows who leads until `stop` is cancelled: the receiver gets the
    /// current leader first, then every change (`None`: nobody leads, or,
    /// after a `MISSED` change, nobody is known to;
    /// [`observe_changes`](Election::observe_changes) tells them apart). The
    /// Observe stream is reopened after errors (it starts with the current
    /// state, so a reconnect never leaves a stale leader); a permanent
    /// refusal (grants, credentials, arguments) ends it, as does dropping
    /// the receiver. A `PREFERRED` change (a new preferred candidate) keeps
    /// the leader, so it is not sent.
    pub fn observe(&self, stop: CancellationToken) -> mpsc::Receiver<Option<Leader>> {
        self.follow(stop, true, |change| match change.kind {
            ChangeType::Missed => None,
            _ => change.leader,
        })
    }

    /// Follows the election's changes until `stop` is cancelled, as
    /// [`observe`](Election::observe) does, but with every change as the
    /// server sent it ([`LeaderChange`]: its kind, including
    /// [`ChangeType::Missed`] when the stream missed changes, and the term
    /// that ended; [`ChangeType::Preferred`] when the preferred candidate
    /// changed, and on every change the preferred candidate). After a
    /// reconnect the stream starts again with a `Current` change.
    pub fn observe_changes(&self, stop: CancellationToken) -> mpsc::Receiver<LeaderChange> {
        self.follow(stop, false, |change| change)
    }

    /// Follows the preferred candidate of the Observe stream until `stop`
    /// (for [`run`](Election::run)).
    fn follow_preferred(&self, stop: CancellationToken) -> watch::Receiver<Named> {
        let mut changes = self.follow(stop, false, |change| change.preferred);
        let (named, receiver) = watch::channel(Named::default());
        tokio::spawn(async move {
            while let Some(preferred) = changes.recv().await {
                named.send_modify(|n| n.take(preferred));
            }
        });
        receiver
    }

    /// Reads Observe streams until `stop`, sending `map` of each change
    /// (only when it differs from the last one sent, if `dedup`).
    fn follow<T>(
        &self,
        stop: CancellationToken,
        dedup: bool,
        map: fn(LeaderChange) -> T,
    ) -> mpsc::Receiver<T>
    where
        T: Clone + PartialEq + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(16);
        let this = self.clone();
        tokio::spawn(async move {
            let mut last: Option<T> = None;
            let mut backoff = FIRST_BACKOFF;
            while !stop.is_cancelled() {
                let request = ObserveRequest {
                    name: this.name.to_string(),
                };
                let mut stub = this.stub();
                let opened = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = stub.observe(request) => r,
                };
                let failure = match opened {
                    Ok(stream) => {
                        let mut stream = stream.into_inner();
                        loop {
                            let msg = tokio::select! {
                                _ = stop.cancelled() => return,
                                m = stream.message() => m,
                            };
                            match msg {
                                Ok(Some(msg)) => {
                                    backoff = FIRST_BACKOFF;
                                    let now = map(LeaderChange::from(msg));
                                    if !dedup || last.as_ref() != Some(&now) {
                                        last = Some(now.clone());
                                        if tx.send(now).await.is_err() {
                                            return;
                                        }
                                    }
                                }
                                Ok(None) => break None,
                                Err(status) => break Some(status.code()),
                            }
                        }
                    }
                    Err(status) => Some(status.code()),
                };
                if matches!(
                    failure,
                    Some(Code::PermissionDenied | Code::Unauthenticated | Code::InvalidArgument)
                ) {
                    return;
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        });
        rx
    }

    /// Takes part in the election until `stop` is cancelled: campaigns as
    /// `identity` publishing `value`, and while it leads runs
    /// `lead(term, ended)` (the term shared with the elector, which resigns it afterwards), where `ended` is cancelled when the term ends
    /// (its safe deadline, a revoke or expiry, a `MISSED` naming the term's
    /// token, or `stop`). The leader must
    /// stop acting when `ended` fires and pass `term.fencing_token()` with
    /// every downstream write. When `lead` returns, the term is resigned (if
    /// still held) and `stopped` is called; then it campaigns again.
    /// [`resign_to`](Election::resign_to) hands the leadership over (`lead`
    /// and `stopped` are then called again for the same term if the
    /// hand-over fails with the term still held).
    ///
    /// It campaigns with this election's
    /// [`preference`](Election::with_preference) and follows the Observe
    /// stream all along for the preferred candidate (the waiting one with
    /// the highest preference, the earliest of equals). While it leads,
    /// when that candidate's preference is greater than its own, it hands
    /// the term over to it as `resign_to` does (`ended` is cancelled,
    /// `lead` returns, `stopped` is called, then the resignation to that
    /// successor is sent), so the successor never starts before this leader
    /// stopped, leads from the very write that ends this term (no moment
    /// without a leader), and has a greater fencing token. When such a
    /// candidate is already named as a term is won, it hands over at once,
    /// without calling `lead` or `stopped` for that term. When the
    /// hand-over fails (`NO_WAITER`: the candidate stopped waiting) it
    /// leads the same term again, and tries again only when an Observe
    /// message names a preferred candidate anew (never in a loop).
    /// Candidates of equal preference never displace each other.
    ///
    /// # Errors
    ///
    /// A permanent error of a campaign (arguments, credentials, grants);
    /// `Ok(())` once `stop` is cancelled.
    pub async fn run<L, F>(
        &self,
        identity: &str,
        value: &str,
        ttl: Duration,
        stop: CancellationToken,
        mut lead: L,
        mut stopped: impl FnMut(),
    ) -> Result<(), Error>
    where
        L: FnMut(Arc<Session>, CancellationToken) -> F,
        F: Future<Output = ()>,
    {
        // The preferred candidate, followed until this returns.
        let observing = stop.child_token();
        let _observing = observing.clone().drop_guard();
        let mut named = self.follow_preferred(observing);
        let mut tried = 0; // the naming last handed over to (Named::seq)
        let mut backoff = FIRST_BACKOFF;
        while !stop.is_cancelled() {
            let campaign = tokio::select! {
                _ = stop.cancelled() => break,
                c = self.campaign(identity, value, ttl, CAMPAIGN_WAIT) => c,
            };
            let term = match campaign {
                Ok(term) => term,
                Err(err) if err.reason() == Reason::LeaseHeld => continue,
                Err(err) if !err.is_retryable() => return Err(err),
                Err(_) => {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            backoff = FIRST_BACKOFF;
            let term = Arc::new(term);
            loop {
                // A preferred candidate already named as the term is won:
                // hand over before leading.
                let due = named
                    .borrow_and_update()
                    .due(identity, self.preference, &mut tried);
                if let Some(successor) = due {
                    let result = self.hand_over(&term, Some(&successor)).await;
                    if result.is_err() && term.is_held() && !stop.is_cancelled() {
                        continue; // NO_WAITER (or a failed call): lead the term
                    }
                    let _ = term.release().await; // nothing to do after a hand-over
                    break;
                }
                let ended = term.lost().child_token();
                let on_stop = {
                    let ended = ended.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        stop.cancelled().await;
                        ended.cancel();
                    })
                };
                let (asks, mut asked) = mpsc::channel(1);
                self.set_handovers(Some(asks));
                let handover = {
                    let work = lead(Arc::clone(&term), ended.clone());
                    tokio::pin!(work);
                    let handover = loop {
                        tokio::select! {
                            biased;
                            () = &mut work => break None,
                            Some(handover) = asked.recv() => break Some(Ask::Asked(handover)),
                            Ok(()) = named.changed() => {
                                let due = named
                                    .borrow_and_update()
                                    .due(identity, self.preference, &mut tried);
                                if let Some(successor) = due {
                                    break Some(Ask::Preferred(successor));
                                }
                            }
                        }
                    };
                    if handover.is_some() {
                        // Stop the leader before handing over.
                        ended.cancel();
                        work.await;
                    }
                    handover
                };
                self.set_handovers(None);
                drop(asked); // requests not taken: "does not lead"
                ended.cancel();
                on_stop.abort();
                let (successor, reply) = match handover {
                    Some(Ask::Asked(h)) => (h.successor, Some(h.reply)),
                    Some(Ask::Preferred(successor)) => (Some(successor), None),
                    None => {
                        // Resign: the next participant leads at once, not
                        // after the TTL. A term already lost reports false;
                        // an unreachable server lets the term expire at its
                        // TTL.
                        let _ = term.release().await;
                        stopped();
                        break;
                    }
                };
                stopped();
                let result = self.hand_over(&term, successor.as_deref()).await;
                let failed = result.is_err();
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
                if failed && term.is_held() && !stop.is_cancelled() {
                    continue; // NO_WAITER (or a failed call): lead the term again
                }
                let _ = term.release().await; // nothing to do after a hand-over
                break;
            }
        }
        Ok(())
    }

    /// The election stub with the client's credentials.
    fn stub(&self) -> ElectionStub {
        self.client.election_stub()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(identity: &str, preference: u32) -> Option<Candidate> {
        Some(Candidate {
            identity: identity.into(),
            preference,
        })
    }

    /// A leader hands over to a preferred candidate of greater preference
    /// once per naming (a failed hand-over is not tried again until the
    /// candidate is named anew), never to one of equal or lower preference
    /// nor to itself, and a leader of preference 0 to any preference.
    #[test]
    fn the_preferred_candidate_is_due_once_per_naming() {
        let mut n = Named::default();
        let mut tried = 0;
        assert_eq!(n.due("a", 1, &mut tried), None);
        n.take(named("b", 2));
        assert_eq!(n.due("a", 1, &mut tried).as_deref(), Some("b"));
        assert_eq!(n.due("a", 1, &mut tried), None, "tried: not again");
        n.take(named("b", 2));
        assert_eq!(n.due("a", 1, &mut tried).as_deref(), Some("b"));
        n.take(None);
        assert_eq!(n.due("a", 1, &mut tried), None);
        n.take(named("c", 1));
        assert_eq!(n.due("a", 1, &mut tried), None, "equal preference");
        n.take(named("c", 0));
        assert_eq!(n.due("a", 1, &mut tried), None, "lower preference");
        n.take(named("a", 5));
        assert_eq!(n.due("a", 1, &mut tried), None, "itself");
        n.take(named("", 5));
        assert_eq!(n.due("a", 1, &mut tried), None, "no identity");
        n.take(named("d", 1));
        assert_eq!(n.due("a", 0, &mut tried).as_deref(), Some("d"));
    }
}
