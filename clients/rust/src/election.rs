//! Leader election, in the shape of client-go's `leaderelection` and etcd's
//! `concurrency.Election`.
//!
//! An election is the lease of the same name (`tenure.v1.ElectionService`),
//! so a term is a [`Session`]: its fencing token is the term's token, it is
//! renewed in the background, and [`Session::lost`] fires at its safe
//! deadline or as soon as the server or the shared watch says it ended.
//! [`Election::run`] campaigns, runs the leader's work with a token that is
//! cancelled when the term ends, and campaigns again; [`Election::observe`]
//! follows who leads.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
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
    /// `Proclaimed`, `Resigned`, `Expired`, `Revoked` or `Missed`.
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
}

impl From<ObserveResponse> for LeaderChange {
    fn from(msg: ObserveResponse) -> LeaderChange {
        LeaderChange {
            kind: ChangeType::try_from(msg.r#type).unwrap_or(ChangeType::Unspecified),
            leader: msg.leader.map(Leader::from),
            ended_identity: msg.ended_holder,
            ended_fencing_token: msg.ended_fencing_token,
            revision: msg.revision,
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
    /// Where [`Election::resign_to`] asks the running [`Election::run`] to
    /// hand over: set while it leads.
    handovers: Arc<Mutex<Option<mpsc::Sender<Handover>>>>,
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
            handovers: Arc::new(Mutex::new(None)),
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns once: waits up to `wait` for the election to have no
    /// leader, then makes `identity` its leader publishing `value`, and
    /// returns the term ([`Session::release`] resigns).
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
        let mut options = AcquireOptions::default().metadata(VALUE_KEY, value);
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
    /// the receiver.
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
    /// that ended). After a reconnect the stream starts again with a
    /// `Current` change.
    pub fn observe_changes(&self, stop: CancellationToken) -> mpsc::Receiver<LeaderChange> {
        self.follow(stop, false, |change| change)
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
                    let handover = tokio::select! {
                        biased;
                        () = &mut work => None,
                        Some(handover) = asked.recv() => Some(handover),
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
                let Some(handover) = handover else {
                    // Resign: the next participant leads at once, not after
                    // the TTL. A term already lost reports false; an
                    // unreachable server lets the term expire at its TTL.
                    let _ = term.release().await;
                    stopped();
                    break;
                };
                stopped();
                let result = self.hand_over(&term, handover.successor.as_deref()).await;
                let failed = result.is_err();
                let _ = handover.reply.send(result);
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
