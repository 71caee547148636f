//! `tenure.v1.LeaseService`: each RPC is written once, as a few lines that
//! validate the request, call the lease protocol and convert the answer.
//!
//! What every RPC needs around that (authentication and authorization, the
//! refusal of new work during shutdown, the trace span with the lease name,
//! holder, fencing token, revision and outcome, and the RPC metrics) is the
//! one generic wrapper [`LeaseApi::rpc`], driven by what each request type
//! says of itself ([`Call`]) and what each response shows ([`Reply`]).
//! The wrapper checks the name (or prefix, or watch target) before
//! authorizing, so a refusal never quotes invalid input, and takes the
//! call's in-flight permit ([`CallLimits`]) only after that: a caller that
//! is not authenticated, or not allowed, holds nothing. The request-size,
//! metadata and body-time limits act earlier, as a tower layer around the
//! whole server ([`super::limits::LimitLayer`]). The span never records a
//! lease key: only the fields named above are put on it, and caller input
//! on it is clipped to 64 bytes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, Response, Status};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::auth::{clip, Auth, Caller, Target};
use super::convert::{self, lease};
use super::fence::Fences;
use super::keepalive::{self, KeepAliveStream, Opening, Renewal};
use super::limits::{CallLimits, Class, ReplyBudget, WatchLimits};
use super::validate;
use crate::config::{Action, KeepAliveBounds, Limits};
use crate::error::{Error, Reason};
use crate::lease::{AcquireArgs, Filter, GroupArgs, GroupMember, HistoryQuery, Shards};
use crate::observe::{self, METRICS};
use crate::proto;
use crate::proto::lease_service_server::LeaseService;

/// Most history messages one LeaseHistory reads (about 20 MB of NATS
/// reads); past it the answer says where to go on from (`more_since`).
const HISTORY_MAX_MESSAGES: usize = 100_000;

/// How much of a client's gRPC deadline an Acquire wait leaves for the reply.
pub(super) const DEADLINE_MARGIN: Duration = Duration::from_millis(100);

/// The `tenure.v1.LeaseService` implementation.
pub struct LeaseApi {
    /// The lease protocol over each shard of the bucket.
    pub(super) shards: Shards,
    /// TTL and wait bounds for requests.
    pub(super) limits: Limits,
    /// Who may do what.
    auth: Arc<Auth>,
    /// Open watch streams per identity and in total.
    pub(super) watches: Arc<WatchLimits>,
    /// Calls in flight: short, waiting, renewals; KeepAlive streams.
    calls: Arc<CallLimits>,
    /// Cancelled when the server shuts down: new calls are refused.
    shutdown: CancellationToken,
    /// The bounds of each KeepAlive stream.
    keepalive: KeepAliveBounds,
    /// The bytes of KeepAlive replies owed across the replica.
    replies: Arc<ReplyBudget>,
    /// Signs the fence proof of each grant; serves the keys.
    pub(super) fences: Arc<Fences>,
}

/// What the wrapper knows of the caller of one RPC.
pub(super) struct Context {
    /// Who is calling.
    pub(super) caller: Caller,
    /// The client's deadline, from `grpc-timeout`, if it set one.
    pub(super) deadline: Option<Duration>,
}

/// What each request type says of itself, for authorization and the span.
pub(super) trait Call {
    /// The RPC method name.
    const METHOD: &'static str;
    /// The action authorized.
    const ACTION: Action;
    /// The lease name, prefix or watch filter the call touches.
    fn subject(&self) -> &str;
    /// Checks the subject's syntax (before authorization, so that
    /// refusals never quote an invalid name), against the server's
    /// `limits` where a limit applies.
    fn check(&self, _limits: &Limits) -> Result<(), Error> {
        validate::name(self.subject()).map(drop)
    }
    /// Which in-flight budget the call counts against.
    fn class(&self) -> Class {
        Class::Short
    }
    /// How many places of that budget it takes: one, but a waiting
    /// AcquireGroup waits for every member, so it counts as that many
    /// waiters.
    fn weight(&self) -> usize {
        1
    }
    /// What authorization checks the grant against.
    fn target(&self) -> Target<'_> {
        Target::Name(self.subject())
    }
    /// Every target authorization checks: the one [`Call::target`], or
    /// each name of a group (the caller needs the grant on all of them).
    fn targets(&self) -> Vec<Target<'_>> {
        vec![self.target()]
    }
    /// The holder named by the request, if any.
    fn holder(&self) -> Option<&str> {
        None
    }
}

/// What each response shows on the RPC's span.
pub(super) trait Reply {
    /// Records the holding's fields on `span`.
    fn record(&self, _span: &Span) {}
}

impl LeaseApi {
    /// The service over `shards`, checking requests against `limits`,
    /// callers against `auth`, watch streams against `watches` and calls in
    /// flight against `calls`, KeepAlive streams against `keepalive`.
    pub fn new(
        shards: Shards,
        limits: Limits,
        auth: Arc<Auth>,
        watches: Arc<WatchLimits>,
        calls: Arc<CallLimits>,
        shutdown: CancellationToken,
        keepalive: KeepAliveBounds,
    ) -> LeaseApi {
        LeaseApi {
            shards,
            limits,
            auth,
            watches,
            calls,
            shutdown,
            keepalive,
            replies: ReplyBudget::new(keepalive.reply_bytes, keepalive.reply_total_bytes),
            fences: Arc::new(Fences::none()),
        }
    }

    /// The service signing grants' fence proofs with `fences` (none by
    /// default).
    pub fn with_fences(mut self, fences: Arc<Fences>) -> LeaseApi {
        self.fences = fences;
        self
    }

    /// A granted holding as a proto `Lease`, with its fence proof.
    pub(super) fn granted(&self, holding: &crate::lease::Holding) -> proto::Lease {
        proto::Lease {
            fence_proof: self.fences.proof(holding),
            ..lease(holding)
        }
    }

    /// Runs one RPC: opens its span (continuing the caller's trace context),
    /// identifies the caller, checks the name and then the grant, refuses
    /// new work during shutdown, takes the call's in-flight permit, runs
    /// `handle`, and records the outcome on the span and in
    /// the metrics. A call dropped before it finishes (its deadline passed,
    /// or the client went away) is recorded as CANCELLED.
    pub(super) async fn rpc<Req, Resp, Fut>(
        &self,
        request: Request<Req>,
        handle: impl FnOnce(Req, Context) -> Fut,
    ) -> Result<Response<Resp>, Status>
    where
        Req: Call,
        Resp: Reply,
        Fut: Future<Output = Result<Resp, Error>>,
    {
        let span = rpc_span(Req::METHOD, request.get_ref());
        observe::set_parent(&span, request.metadata());
        let mut outcome = Outcome {
            method: Req::METHOD,
            started: Instant::now(),
            span: span.clone(),
            done: false,
        };
        let result = async {
            let caller = self.auth.authenticate(&request)?;
            Span::current().record("identity", clip(&caller.identity));
            request.get_ref().check(&self.limits)?;
            for target in request.get_ref().targets() {
                if let Err(err) = self.auth.authorize(&caller, Req::ACTION, target) {
                    tracing::info!(method = Req::METHOD, lease.name = clip(request.get_ref().subject()), identity = %caller.identity, action = Req::ACTION.as_str(), "permission denied: {}", err.message);
                    return Err(err);
                }
            }
            if self.shutdown.is_cancelled() {
                return Err(Error::new(
                    Reason::ShuttingDown,
                    "the server is shutting down; retry on another replica",
                ));
            }
            let _permit = self
                .calls
                .admit_n(
                    request.get_ref().class(),
                    &caller.identity,
                    request.get_ref().weight(),
                )?;
            let deadline = convert::grpc_timeout(request.metadata());
            let reply = handle(request.into_inner(), Context { caller, deadline }).await?;
            reply.record(&Span::current());
            Ok(Response::new(reply))
        }
        .instrument(span)
        .await
        .map_err(Status::from);
        outcome.finish(match &result {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        });
        result
    }
}

#[tonic::async_trait]
impl LeaseService for LeaseApi {
    async fn acquire_group(
        &self,
        request: Request<proto::AcquireGroupRequest>,
    ) -> Result<Response<proto::AcquireGroupResponse>, Status> {
        self.rpc(request, |req, cx| async move {
            let max = self.limits.max_group_size;
            let names = validate::group(req.names.iter().map(String::as_str), 2, max)?;
            let holder = validate::holder(&req.holder)?;
            let ttl_s = validate::ttl(req.ttl.as_ref(), &self.limits, self.limits.default_ttl_s)?;
            let key = validate::lease_key(&req.lease_key)?;
            let mut wait = validate::wait(req.wait.as_ref(), &self.limits)?;
            if let (Some(w), Some(d)) = (wait, cx.deadline) {
                wait = Some(w.min(d.saturating_sub(DEADLINE_MARGIN)));
            }
            let args = GroupArgs {
                names,
                holder: holder.into(),
                ttl_s,
                key: key.map_or_else(validate::mint_key, str::to_string),
                wait,
                metadata: validate::metadata(&req.metadata)?,
                lock_delay_s: validate::lock_delay(req.lock_delay.as_ref(), &self.limits)?,
            };
            let leases = self
                .shards
                .of_group(args.names.iter().map(String::as_str))?;
            let holdings = leases.acquire_group(&args).await?;
            Ok(proto::AcquireGroupResponse {
                leases: holdings.iter().map(|h| self.granted(h)).collect(),
                lease_key: args.key,
            })
        })
        .await
    }

    async fn renew_group(
        &self,
        request: Request<proto::RenewGroupRequest>,
    ) -> Result<Response<proto::RenewGroupResponse>, Status> {
        self.rpc(request, |req, _| async move {
            let members = members(&req.members, &self.limits)?;
            let key = validate::presented_key(&req.lease_key)?;
            let ttl_s = match req.ttl.as_ref() {
                Some(ttl) => Some(validate::ttl(
                    Some(ttl),
                    &self.limits,
                    self.limits.default_ttl_s,
                )?),
                None => None,
            };
            let leases = self
                .shards
                .of_group(members.iter().map(|m| m.name.as_str()))?;
            let holdings = leases.renew_group(&members, key, ttl_s).await?;
            Ok(proto::RenewGroupResponse {
                leases: holdings.iter().map(lease).collect(),
            })
        })
        .await
    }

    async fn release_group(
        &self,
        request: Request<proto::ReleaseGroupRequest>,
    ) -> Result<Response<proto::ReleaseGroupResponse>, Status> {
        self.rpc(request, |req, _| async move {
            let members = members(&req.members, &self.limits)?;
            let key = validate::presented_key(&req.lease_key)?;
            let leases = self
                .shards
                .of_group(members.iter().map(|m| m.name.as_str()))?;
            let done = leases.release_group(&members, key).await?;
            Ok(proto::ReleaseGroupResponse {
                released: done.released,
                not_held: done.not_held,
                revision: done.revision,
            })
        })
        .await
    }

    async fn acquire(
        &self,
        request: Request<proto::AcquireRequest>,
    ) -> Result<Response<proto::AcquireResponse>, Status> {
        self.rpc(request, |req, cx| async move {
            let name = validate::name(&req.name)?;
            let holder = validate::holder(&req.holder)?;
            let ttl_s = validate::ttl(req.ttl.as_ref(), &self.limits, self.limits.default_ttl_s)?;
            let key = validate::lease_key(&req.lease_key)?;
            let mut wait = validate::wait(req.wait.as_ref(), &self.limits)?;
            if let (Some(w), Some(d)) = (wait, cx.deadline) {
                wait = Some(w.min(d.saturating_sub(DEADLINE_MARGIN)));
            }
            let lock_delay_s = validate::lock_delay(req.lock_delay.as_ref(), &self.limits)?;
            let mode = validate::mode(req.mode, req.limit, lock_delay_s, req.preference)?;
            let limit = match mode {
                Some(_) => self.limits.max_shared_holders,
                None => validate::limit(req.limit, lock_delay_s, &self.limits)?,
            };
            let args = AcquireArgs {
                limit,
                mode,
                preference: validate::preference(req.preference, limit)?,
                name: name.into(),
                holder: holder.into(),
                ttl_s,
                key: key.map_or_else(validate::mint_key, str::to_string),
                wait,
                metadata: validate::metadata(&req.metadata)?,
                lock_delay_s,
            };
            let holding = self.shards.of(&args.name).acquire(&args).await?;
            Ok(proto::AcquireResponse {
                lease: Some(self.granted(&holding)),
                lease_key: args.key,
            })
        })
        .await
    }

    async fn renew(
        &self,
        request: Request<proto::RenewRequest>,
    ) -> Result<Response<proto::RenewResponse>, Status> {
        self.rpc(request, |req, _| async move {
            let holding = Renewal::check(
                &self.limits,
                &req.name,
                req.expected_revision,
                &req.lease_key,
                req.ttl.as_ref(),
                req.slot,
            )?
            .run(&self.shards)
            .await?;
            Ok(proto::RenewResponse {
                lease: Some(lease(&holding)),
            })
        })
        .await
    }

    async fn release(
        &self,
        request: Request<proto::ReleaseRequest>,
    ) -> Result<Response<proto::ReleaseResponse>, Status> {
        self.rpc(request, |req, _| async move {
            let name = validate::name(&req.name)?;
            let expected = validate::revision(req.expected_revision)?;
            let key = validate::presented_key(&req.lease_key)?;
            let leases = self.shards.of(name);
            let revision = match validate::slot(req.slot, &self.limits)? {
                0 => leases.release(name, expected, key).await?,
                slot => leases.release_slot(name, slot, expected, key).await?,
            };
            Ok(proto::ReleaseResponse { revision })
        })
        .await
    }

    async fn get_lease(
        &self,
        request: Request<proto::GetLeaseRequest>,
    ) -> Result<Response<proto::GetLeaseResponse>, Status> {
        self.rpc(request, |req, _| async move {
            let name = validate::name(&req.name)?;
            let leases = self.shards.of(name);
            let waiting = leases.waiting(name).await? as u32;
            let not_found = match leases.get(name).await {
                Err(err) if err.reason == Reason::LeaseNotFound => err,
                other => {
                    return other.map(|holding| proto::GetLeaseResponse {
                        lease: Some(lease(&holding)),
                        waiting,
                        ..Default::default()
                    })
                }
            };
            // Not a held lease: a semaphore with live holders, or nothing.
            let Some(sem) = leases.semaphore(name).await? else {
                return Err(not_found);
            };
            let first = sem.holders.iter().min_by_key(|h| h.token).map(lease);
            Ok(proto::GetLeaseResponse {
                lease: first,
                waiting: leases.semaphore_waiting(name).await? as u32,
                free_slots: sem.limit.saturating_sub(sem.holders.len() as u32),
                limit: sem.limit,
                holders: sem.holders.iter().map(lease).collect(),
            })
        })
        .await
    }

    type WatchLeaseStream =
        Pin<Box<dyn Stream<Item = Result<proto::WatchLeaseResponse, Status>> + Send>>;

    async fn watch_lease(
        &self,
        request: Request<proto::WatchLeaseRequest>,
    ) -> Result<Response<Self::WatchLeaseStream>, Status> {
        self.rpc(request, |req, cx| async move {
            let filter = validate::watch_filter(&req.name)?;
            let kinds = validate::event_types(&req.event_types)?
                .into_iter()
                .filter_map(convert::event_kind)
                .collect();
            let permit = self.watches.acquire(&cx.caller.identity)?;
            let from = validate::watch_start(req.start_revision, &req.shard_revisions)?;
            let watch = self
                .shards
                .watch(Filter::parse(filter), kinds, from)
                .await?;
            // The slot is held until the stream ends: the client goes away,
            // the server shuts down, or the watch falls behind (then at
            // once, even if the client never reads the end).
            watch.hold(permit);
            let stream = watch.into_stream().map(move |item| {
                item.map(|e| proto::WatchLeaseResponse {
                    event: Some(convert::shard_event(&e)),
                })
                .map_err(Status::from)
            });
            Ok(Box::pin(stream) as Self::WatchLeaseStream)
        })
        .await
    }

    async fn list_leases(
        &self,
        request: Request<proto::ListLeasesRequest>,
    ) -> Result<Response<proto::ListLeasesResponse>, Status> {
        self.rpc(request, |req, _| async move {
            let prefix = validate::prefix(&req.prefix)?;
            let token = validate::page_token(&req.page_token)?;
            let page = self.shards.list(prefix, req.page_size, token).await?;
            Ok(proto::ListLeasesResponse {
                leases: page.leases.iter().map(lease).collect(),
                next_page_token: page.next_page_token,
            })
        })
        .await
    }

    async fn revoke_lease(
        &self,
        request: Request<proto::RevokeLeaseRequest>,
    ) -> Result<Response<proto::RevokeLeaseResponse>, Status> {
        self.rpc(request, |req, cx| async move {
            let name = validate::name(&req.name)?;
            let why = validate::revoke_reason(&req.reason)?;
            let by = &cx.caller.identity;
            let leases = self.shards.of(name);
            let (revision, holding) = match validate::slot(req.slot, &self.limits)? {
                0 => leases.revoke(name, req.fencing_token, why, by).await?,
                slot => {
                    let token = req.fencing_token;
                    leases.revoke_slot(name, slot, token, why, by).await?
                }
            };
            Ok(proto::RevokeLeaseResponse {
                revision,
                revoked: Some(lease(&holding)),
            })
        })
        .await
    }

    async fn transfer(
        &self,
        request: Request<proto::TransferRequest>,
    ) -> Result<Response<proto::TransferResponse>, Status> {
        self.rpc(request, |req, _| async move {
            let name = validate::name(&req.name)?;
            let expected = validate::revision(req.expected_revision)?;
            let key = validate::presented_key(&req.lease_key)?;
            let to = match req.to_holder.as_str() {
                "" => None,
                to => Some(validate::holder(to)?),
            };
            let holding = self
                .shards
                .of(name)
                .transfer(name, expected, key, to)
                .await?;
            Ok(proto::TransferResponse {
                lease: Some(lease(&holding)),
            })
        })
        .await
    }

    async fn downgrade(
        &self,
        request: Request<proto::DowngradeRequest>,
    ) -> Result<Response<proto::DowngradeResponse>, Status> {
        self.rpc(request, |req, _| async move {
            let name = validate::name(&req.name)?;
            let expected = validate::revision(req.expected_revision)?;
            let key = validate::presented_key(&req.lease_key)?;
            let slot = match validate::slot(req.slot, &self.limits)? {
                0 => return Err(validate::downgrade_slot()),
                slot => slot,
            };
            let holding = self
                .shards
                .of(name)
                .downgrade(name, slot, expected, key)
                .await?;
            // A new token: the reply carries its fence proof, as a grant's.
            Ok(proto::DowngradeResponse {
                lease: Some(self.granted(&holding)),
            })
        })
        .await
    }

    async fn lease_history(
        &self,
        request: Request<proto::LeaseHistoryRequest>,
    ) -> Result<Response<proto::LeaseHistoryResponse>, Status> {
        self.rpc(request, |req, _| async move {
            let name = validate::name(&req.name)?;
            let query = HistoryQuery {
                since_ms: validate::time_ms(req.since.as_ref(), "since")?.unwrap_or(0),
                at_ms: validate::time_ms(req.at.as_ref(), "at")?,
                page_size: validate::history_page(req.page_size)?,
                max_messages: HISTORY_MAX_MESSAGES,
                max_ttl_ms: self.limits.max_ttl_s.saturating_mul(1000),
            };
            let page = self.shards.history(name, query).await?;
            Ok(proto::LeaseHistoryResponse {
                holdings: page.tenures.iter().map(convert::historic).collect(),
                gaps: page.gaps.iter().map(convert::history_gap).collect(),
                more_since: page.more_since_ms.map(convert::timestamp),
                oldest: page.oldest_ms.map(convert::timestamp),
                retention: Some(prost_types::Duration {
                    seconds: page.retention_s as i64,
                    nanos: 0,
                }),
            })
        })
        .await
    }

    async fn get_fence_keys(
        &self,
        request: Request<proto::GetFenceKeysRequest>,
    ) -> Result<Response<proto::GetFenceKeysResponse>, Status> {
        self.rpc(request, |_, _| async move { Ok(self.fences.keys()) })
            .await
    }

    type KeepAliveStream = KeepAliveStream;

    async fn keep_alive(
        &self,
        request: Request<tonic::Streaming<proto::KeepAliveRequest>>,
    ) -> Result<Response<KeepAliveStream>, Status> {
        keepalive::open(
            request,
            Opening {
                shards: &self.shards,
                limits: &self.limits,
                auth: &self.auth,
                calls: &self.calls,
                replies: &self.replies,
                shutdown: &self.shutdown,
                bounds: self.keepalive,
            },
        )
    }
}

impl Call for proto::AcquireRequest {
    const METHOD: &'static str = "Acquire";
    const ACTION: Action = Action::Acquire;
    fn subject(&self) -> &str {
        &self.name
    }
    fn holder(&self) -> Option<&str> {
        Some(&self.holder)
    }
    fn class(&self) -> Class {
        wait_class(self.wait.as_ref())
    }
}

/// The request class of a call that may wait: waiting ones take a waiting
/// slot, the others a short one.
pub(super) fn wait_class(wait: Option<&prost_types::Duration>) -> Class {
    match wait {
        Some(w) if w.seconds > 0 || w.nanos > 0 => Class::Waiting,
        _ => Class::Short,
    }
}

impl Call for proto::RenewRequest {
    const METHOD: &'static str = "Renew";
    const ACTION: Action = Action::Renew;
    fn subject(&self) -> &str {
        &self.name
    }
    fn class(&self) -> Class {
        Class::Renewal
    }
}

impl Call for proto::ReleaseRequest {
    const METHOD: &'static str = "Release";
    const ACTION: Action = Action::Release;
    fn subject(&self) -> &str {
        &self.name
    }
    fn class(&self) -> Class {
        Class::Renewal
    }
}

impl Call for proto::TransferRequest {
    const METHOD: &'static str = "Transfer";
    const ACTION: Action = Action::Release;
    fn subject(&self) -> &str {
        &self.name
    }
}

impl Reply for proto::TransferResponse {
    fn record(&self, span: &Span) {
        record_lease(span, self.lease.as_ref());
    }
}

impl Call for proto::DowngradeRequest {
    const METHOD: &'static str = "Downgrade";
    const ACTION: Action = Action::Acquire;
    fn subject(&self) -> &str {
        &self.name
    }
    fn class(&self) -> Class {
        Class::Renewal
    }
}

impl Reply for proto::DowngradeResponse {
    fn record(&self, span: &Span) {
        record_lease(span, self.lease.as_ref());
    }
}

impl Call for proto::LeaseHistoryRequest {
    const METHOD: &'static str = "LeaseHistory";
    const ACTION: Action = Action::Watch;
    fn subject(&self) -> &str {
        &self.name
    }
}

impl Reply for proto::LeaseHistoryResponse {}

impl Call for proto::GetFenceKeysRequest {
    const METHOD: &'static str = "GetFenceKeys";
    const ACTION: Action = Action::Watch;
    fn subject(&self) -> &str {
        ""
    }
    fn check(&self, _limits: &Limits) -> Result<(), Error> {
        Ok(())
    }
    /// Public keys are no secret, but an identity with no grant at all
    /// gets nothing from this server.
    fn target(&self) -> Target<'_> {
        Target::Any
    }
}

impl Reply for proto::GetFenceKeysResponse {}

impl Call for proto::GetLeaseRequest {
    const METHOD: &'static str = "GetLease";
    const ACTION: Action = Action::Watch;
    fn subject(&self) -> &str {
        &self.name
    }
}

impl Call for proto::WatchLeaseRequest {
    const METHOD: &'static str = "WatchLease";
    const ACTION: Action = Action::Watch;
    fn subject(&self) -> &str {
        &self.name
    }
    fn check(&self, _limits: &Limits) -> Result<(), Error> {
        validate::watch_filter(&self.name).map(drop)
    }
    /// "jobs.>" covers every name under "jobs.", ">" every name.
    fn target(&self) -> Target<'_> {
        match self.name.strip_suffix('>') {
            Some(subtree) => Target::Prefix(subtree),
            None => Target::Name(&self.name),
        }
    }
}

impl Call for proto::ListLeasesRequest {
    const METHOD: &'static str = "ListLeases";
    const ACTION: Action = Action::Admin;
    fn subject(&self) -> &str {
        &self.prefix
    }
    fn check(&self, _limits: &Limits) -> Result<(), Error> {
        validate::prefix(&self.prefix).map(drop)
    }
    fn target(&self) -> Target<'_> {
        Target::Prefix(&self.prefix)
    }
}

impl Call for proto::RevokeLeaseRequest {
    const METHOD: &'static str = "RevokeLease";
    const ACTION: Action = Action::Admin;
    fn subject(&self) -> &str {
        &self.name
    }
}

impl Call for proto::AcquireGroupRequest {
    const METHOD: &'static str = "AcquireGroup";
    const ACTION: Action = Action::Acquire;
    fn subject(&self) -> &str {
        self.names.first().map_or("", String::as_str)
    }
    fn check(&self, limits: &Limits) -> Result<(), Error> {
        validate::group(
            self.names.iter().map(String::as_str),
            2,
            limits.max_group_size,
        )
        .map(drop)
    }
    fn targets(&self) -> Vec<Target<'_>> {
        self.names.iter().map(|n| Target::Name(n)).collect()
    }
    fn holder(&self) -> Option<&str> {
        Some(&self.holder)
    }
    fn class(&self) -> Class {
        wait_class(self.wait.as_ref())
    }
    fn weight(&self) -> usize {
        match self.class() {
            Class::Waiting => self.names.len().max(1),
            _ => 1,
        }
    }
}

impl Call for proto::RenewGroupRequest {
    const METHOD: &'static str = "RenewGroup";
    const ACTION: Action = Action::Renew;
    fn subject(&self) -> &str {
        self.members.first().map_or("", |m| m.name.as_str())
    }
    fn check(&self, limits: &Limits) -> Result<(), Error> {
        check_members(&self.members, limits)
    }
    fn targets(&self) -> Vec<Target<'_>> {
        self.members.iter().map(|m| Target::Name(&m.name)).collect()
    }
    fn class(&self) -> Class {
        Class::Renewal
    }
}

impl Call for proto::ReleaseGroupRequest {
    const METHOD: &'static str = "ReleaseGroup";
    const ACTION: Action = Action::Release;
    fn subject(&self) -> &str {
        self.members.first().map_or("", |m| m.name.as_str())
    }
    fn check(&self, limits: &Limits) -> Result<(), Error> {
        check_members(&self.members, limits)
    }
    fn targets(&self) -> Vec<Target<'_>> {
        self.members.iter().map(|m| Target::Name(&m.name)).collect()
    }
    fn class(&self) -> Class {
        Class::Renewal
    }
}

/// The syntax check of a RenewGroup's or ReleaseGroup's members (before
/// authorization): 1 to `--max-group-size` valid, distinct names.
fn check_members(members: &[proto::GroupMember], limits: &Limits) -> Result<(), Error> {
    validate::group(
        members.iter().map(|m| m.name.as_str()),
        1,
        limits.max_group_size,
    )
    .map(drop)
}

/// The members of a RenewGroup or ReleaseGroup, validated against the
/// server's --max-group-size.
fn members(members: &[proto::GroupMember], limits: &Limits) -> Result<Vec<GroupMember>, Error> {
    let names = validate::group(
        members.iter().map(|m| m.name.as_str()),
        1,
        limits.max_group_size,
    )?;
    names
        .into_iter()
        .zip(members)
        .map(|(name, m)| {
            Ok(GroupMember {
                name,
                expected: validate::revision(m.expected_revision)?,
            })
        })
        .collect()
}

impl Reply for proto::AcquireGroupResponse {
    fn record(&self, span: &Span) {
        record_lease(span, self.leases.first());
    }
}

impl Reply for proto::RenewGroupResponse {
    fn record(&self, span: &Span) {
        record_lease(span, self.leases.first());
    }
}

impl Reply for proto::ReleaseGroupResponse {
    fn record(&self, span: &Span) {
        span.record("lease.revision", self.revision);
    }
}

impl Reply for proto::AcquireResponse {
    fn record(&self, span: &Span) {
        record_lease(span, self.lease.as_ref());
    }
}

impl Reply for proto::RenewResponse {
    fn record(&self, span: &Span) {
        record_lease(span, self.lease.as_ref());
    }
}

impl Reply for proto::ReleaseResponse {
    fn record(&self, span: &Span) {
        span.record("lease.revision", self.revision);
    }
}

impl Reply for proto::GetLeaseResponse {
    fn record(&self, span: &Span) {
        record_lease(span, self.lease.as_ref());
    }
}

impl Reply for proto::ListLeasesResponse {}

impl Reply for proto::RevokeLeaseResponse {
    fn record(&self, span: &Span) {
        record_lease(span, self.revoked.as_ref());
        span.record("lease.revision", self.revision);
    }
}

impl Reply for <LeaseApi as LeaseService>::WatchLeaseStream {}

/// The span of one RPC, with the fields filled in as they become known.
fn rpc_span<Req: Call>(method: &'static str, request: &Req) -> Span {
    let span = tracing::debug_span!(
        "rpc",
        otel.name = method,
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.method = method,
        lease.name = clip(request.subject()),
        lease.holder = Empty,
        lease.fencing_token = Empty,
        lease.revision = Empty,
        identity = Empty,
        outcome = Empty,
    );
    if let Some(holder) = request.holder() {
        span.record("lease.holder", clip(holder));
    }
    span
}

/// Records a holding's holder, token and revision on `span`.
fn record_lease(span: &Span, lease: Option<&proto::Lease>) {
    if let Some(l) = lease {
        span.record("lease.holder", l.holder.as_str());
        span.record("lease.fencing_token", l.fencing_token);
        span.record("lease.revision", l.revision);
    }
}

/// Records how an RPC ended, in metrics and on its span. A call whose
/// future is dropped before it finishes is recorded as CANCELLED when it is
/// dropped.
struct Outcome {
    /// The RPC method.
    method: &'static str,
    /// When it started.
    started: Instant,
    /// Its span.
    span: Span,
    /// Whether it was recorded.
    done: bool,
}

impl Outcome {
    /// Records the call's gRPC code.
    fn finish(&mut self, code: Code) {
        self.done = true;
        METRICS.rpc(self.method, code, self.started.elapsed());
        self.span.record("outcome", observe::code_name(code));
    }
}

impl Drop for Outcome {
    fn drop(&mut self) {
        if !self.done {
            self.finish(Code::Cancelled);
        }
    }
}
