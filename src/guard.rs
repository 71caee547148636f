//! What every RPC passes through before and after the lease logic:
//! authentication and authorization ([`crate::auth`]), the watch-stream
//! limits ([`crate::limits`]), the RPC metrics ([`crate::metrics`]) and a
//! trace span carrying the lease name, holder, fencing token, revision and
//! outcome (continuing the caller's W3C trace context when it sent one).
//!
//! [`Guarded`] implements the gRPC service by wrapping
//! [`crate::service::LeaseApi`], so the request handling itself stays free of
//! these concerns. The span never records a lease key: only the fields
//! named above are ever put on it.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::auth::{Action, Auth, Caller, Target};
use crate::limits::WatchLimits;
use crate::metrics::{code_name, METRICS};
use crate::proto;
use crate::proto::lease_service_server::LeaseService;
use crate::service::LeaseApi;

/// The lease service behind authentication, authorization, limits, metrics
/// and tracing.
pub struct Guarded {
    /// The request handling.
    inner: LeaseApi,
    /// Who may do what.
    auth: Arc<Auth>,
    /// Open watch streams per identity and in total.
    watches: Arc<WatchLimits>,
}

impl Guarded {
    /// Wraps `inner`.
    pub fn new(inner: LeaseApi, auth: Arc<Auth>, watches: Arc<WatchLimits>) -> Guarded {
        Guarded {
            inner,
            auth,
            watches,
        }
    }

    /// Runs one RPC: identifies the caller, checks the grant for `action` on
    /// `target`, runs `call` inside `span`, and counts the outcome.
    async fn run<T, R, Fut>(
        &self,
        method: &'static str,
        action: Action,
        target: Target<'_>,
        mut request: Request<T>,
        span: Span,
        call: impl FnOnce(Request<T>) -> Fut,
    ) -> Result<Response<R>, Status>
    where
        Fut: Future<Output = Result<Response<R>, Status>>,
    {
        crate::telemetry::set_parent(&span, request.metadata());
        let mut outcome = Outcome {
            method,
            started: Instant::now(),
            span: span.clone(),
            done: false,
        };
        let result = async {
            let caller = self.auth.authenticate(&request)?;
            Span::current().record("identity", caller.identity.as_str());
            if let Err(err) = self.auth.authorize(&caller, action, target) {
                tracing::info!(identity = %caller.identity, action = action.as_str(), "permission denied: {}", err.message);
                return Err(err.into());
            }
            request.extensions_mut().insert(caller);
            call(request).await
        }
        .instrument(span.clone())
        .await;
        outcome.finish(match &result {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        });
        result
    }
}

/// Records how an RPC ended, in metrics and on its span. A call whose
/// future is dropped before it finishes (its deadline passed, or the client
/// went away) is recorded as CANCELLED when it is dropped.
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
        self.span.record("outcome", code_name(code));
    }
}

impl Drop for Outcome {
    fn drop(&mut self) {
        if !self.done {
            self.finish(Code::Cancelled);
        }
    }
}

/// The span of one RPC, with the fields filled in as they become known.
fn rpc_span(method: &'static str, name: &str) -> Span {
    tracing::info_span!(
        "rpc",
        otel.name = method,
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.method = method,
        lease.name = name,
        lease.holder = Empty,
        lease.fencing_token = Empty,
        lease.revision = Empty,
        identity = Empty,
        outcome = Empty,
    )
}

/// Records a holding's holder, token and revision on `span`.
fn record_lease(span: &Span, lease: Option<&proto::Lease>) {
    if let Some(l) = lease {
        span.record("lease.holder", l.holder.as_str());
        span.record("lease.fencing_token", l.fencing_token);
        span.record("lease.revision", l.revision);
    }
}

#[tonic::async_trait]
impl LeaseService for Guarded {
    async fn acquire(
        &self,
        request: Request<proto::AcquireRequest>,
    ) -> Result<Response<proto::AcquireResponse>, Status> {
        let name = request.get_ref().name.clone();
        let span = rpc_span("Acquire", &name);
        span.record("lease.holder", request.get_ref().holder.as_str());
        let result = self
            .run(
                "Acquire",
                Action::Acquire,
                Target::Name(&name),
                request,
                span.clone(),
                |r| self.inner.acquire(r),
            )
            .await;
        if let Ok(resp) = &result {
            let lease = resp.get_ref().lease.as_ref();
            record_lease(&span, lease);
            // A retried Acquire renews the holding it took: same token, a
            // later revision. Only a new token is a new holding.
            if lease.is_some_and(|l| l.revision == l.fencing_token) {
                METRICS.acquired.inc();
            }
        }
        result
    }

    async fn renew(
        &self,
        request: Request<proto::RenewRequest>,
    ) -> Result<Response<proto::RenewResponse>, Status> {
        let name = request.get_ref().name.clone();
        let span = rpc_span("Renew", &name);
        let result = self
            .run(
                "Renew",
                Action::Renew,
                Target::Name(&name),
                request,
                span.clone(),
                |r| self.inner.renew(r),
            )
            .await;
        if let Ok(resp) = &result {
            record_lease(&span, resp.get_ref().lease.as_ref());
        }
        result
    }

    async fn release(
        &self,
        request: Request<proto::ReleaseRequest>,
    ) -> Result<Response<proto::ReleaseResponse>, Status> {
        let name = request.get_ref().name.clone();
        let span = rpc_span("Release", &name);
        let result = self
            .run(
                "Release",
                Action::Release,
                Target::Name(&name),
                request,
                span.clone(),
                |r| self.inner.release(r),
            )
            .await;
        if let Ok(resp) = &result {
            span.record("lease.revision", resp.get_ref().revision);
            METRICS.released.inc();
        }
        result
    }

    async fn get_lease(
        &self,
        request: Request<proto::GetLeaseRequest>,
    ) -> Result<Response<proto::GetLeaseResponse>, Status> {
        let name = request.get_ref().name.clone();
        let span = rpc_span("GetLease", &name);
        let result = self
            .run(
                "GetLease",
                Action::Watch,
                Target::Name(&name),
                request,
                span.clone(),
                |r| self.inner.get_lease(r),
            )
            .await;
        if let Ok(resp) = &result {
            record_lease(&span, resp.get_ref().lease.as_ref());
        }
        result
    }

    type WatchLeaseStream = <LeaseApi as LeaseService>::WatchLeaseStream;

    async fn watch_lease(
        &self,
        request: Request<proto::WatchLeaseRequest>,
    ) -> Result<Response<Self::WatchLeaseStream>, Status> {
        let filter = request.get_ref().name.clone();
        let span = rpc_span("WatchLease", &filter);
        // "jobs.>" covers every name under "jobs.", ">" every name.
        let target = match filter.strip_suffix('>') {
            Some(subtree) => Target::Prefix(subtree),
            None => Target::Name(&filter),
        };
        self.run(
            "WatchLease",
            Action::Watch,
            target,
            request,
            span,
            |r| async move {
                let identity = r
                    .extensions()
                    .get::<Caller>()
                    .map_or_else(|| "anonymous".to_string(), |c| c.identity.clone());
                let permit = self.watches.acquire(&identity)?;
                let stream = self.inner.watch_lease(r).await?.into_inner();
                // The permit lives as long as the stream: dropping the
                // stream (client gone, server done) frees the slot.
                let stream = stream.map(move |item| {
                    let _held = &permit;
                    item
                });
                Ok(Response::new(Box::pin(stream) as Self::WatchLeaseStream))
            },
        )
        .await
    }

    async fn list_leases(
        &self,
        request: Request<proto::ListLeasesRequest>,
    ) -> Result<Response<proto::ListLeasesResponse>, Status> {
        let prefix = request.get_ref().prefix.clone();
        let span = rpc_span("ListLeases", &prefix);
        self.run(
            "ListLeases",
            Action::Admin,
            Target::Prefix(&prefix),
            request,
            span,
            |r| self.inner.list_leases(r),
        )
        .await
    }

    async fn revoke_lease(
        &self,
        request: Request<proto::RevokeLeaseRequest>,
    ) -> Result<Response<proto::RevokeLeaseResponse>, Status> {
        let name = request.get_ref().name.clone();
        let span = rpc_span("RevokeLease", &name);
        let result = self
            .run(
                "RevokeLease",
                Action::Admin,
                Target::Name(&name),
                request,
                span.clone(),
                |r| self.inner.revoke_lease(r),
            )
            .await;
        if let Ok(resp) = &result {
            record_lease(&span, resp.get_ref().revoked.as_ref());
            span.record("lease.revision", resp.get_ref().revision);
            METRICS.revoked.inc();
        }
        result
    }
}
