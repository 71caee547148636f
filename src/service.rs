//! gRPC glue: validates each request, calls the lease protocol, and converts
//! between proto messages and domain types. Each RPC is a few lines; the
//! rules live in [`crate::validate`] and the protocol in [`crate::lease`].

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use crate::error::{Error, Reason};
use crate::lease::{AcquireArgs, Holding, Leases};
use crate::proto;
use crate::proto::lease_service_server::LeaseService;
use crate::shutdown::Shutdown;
use crate::validate::{self, Limits};
use crate::watch::{Event, EventKind, Filter};

/// How much of a client's gRPC deadline an Acquire wait leaves for the reply.
const DEADLINE_MARGIN: Duration = Duration::from_millis(100);

/// The `tenure.v1.LeaseService` implementation.
pub struct LeaseApi {
    /// The lease protocol over the bucket.
    leases: Leases,
    /// Request limits.
    limits: Limits,
    /// Ends watch streams on shutdown.
    shutdown: Shutdown,
}

impl LeaseApi {
    /// The service over `leases`.
    pub fn new(leases: Leases, limits: Limits, shutdown: Shutdown) -> LeaseApi {
        LeaseApi {
            leases,
            limits,
            shutdown,
        }
    }

    /// Refuses new work once shutdown has begun.
    fn check_running(&self) -> Result<(), Error> {
        if self.shutdown.is_shutdown() {
            return Err(Error::new(
                Reason::ShuttingDown,
                "the server is shutting down; retry on another replica",
            ));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl LeaseService for LeaseApi {
    async fn acquire(
        &self,
        request: Request<proto::AcquireRequest>,
    ) -> Result<Response<proto::AcquireResponse>, Status> {
        self.check_running()?;
        let deadline = grpc_timeout(request.metadata());
        let req = request.into_inner();
        let name = validate::name(&req.name)?;
        let holder = validate::holder(&req.holder)?;
        let ttl_s = validate::ttl(req.ttl.as_ref(), &self.limits, self.limits.default_ttl_s)?;
        let key =
            validate::lease_key(&req.lease_key)?.map_or_else(validate::mint_key, str::to_string);
        let mut wait = validate::wait(req.wait.as_ref(), &self.limits)?;
        if let (Some(w), Some(d)) = (wait, deadline) {
            wait = Some(w.min(d.saturating_sub(DEADLINE_MARGIN)));
        }
        let metadata = validate::metadata(&req.metadata)?;
        let args = AcquireArgs {
            name: name.into(),
            holder: holder.into(),
            ttl_s,
            key,
            wait,
            metadata,
        };
        let holding = self.leases.acquire(&args).await?;
        Ok(Response::new(proto::AcquireResponse {
            lease: Some(lease(&holding)),
            lease_key: args.key,
        }))
    }

    async fn renew(
        &self,
        request: Request<proto::RenewRequest>,
    ) -> Result<Response<proto::RenewResponse>, Status> {
        self.check_running()?;
        let req = request.into_inner();
        let name = validate::name(&req.name)?;
        let expected = validate::revision(req.expected_revision)?;
        let key = validate::presented_key(&req.lease_key)?;
        let ttl_s = match req.ttl.as_ref() {
            Some(ttl) => Some(validate::ttl(
                Some(ttl),
                &self.limits,
                self.limits.default_ttl_s,
            )?),
            None => None,
        };
        let holding = self.leases.renew(name, expected, key, ttl_s).await?;
        Ok(Response::new(proto::RenewResponse {
            lease: Some(lease(&holding)),
        }))
    }

    async fn release(
        &self,
        request: Request<proto::ReleaseRequest>,
    ) -> Result<Response<proto::ReleaseResponse>, Status> {
        self.check_running()?;
        let req = request.into_inner();
        let name = validate::name(&req.name)?;
        let expected = validate::revision(req.expected_revision)?;
        let key = validate::presented_key(&req.lease_key)?;
        let revision = self.leases.release(name, expected, key).await?;
        Ok(Response::new(proto::ReleaseResponse { revision }))
    }

    async fn get_lease(
        &self,
        request: Request<proto::GetLeaseRequest>,
    ) -> Result<Response<proto::GetLeaseResponse>, Status> {
        self.check_running()?;
        let req = request.into_inner();
        let holding = self.leases.get(validate::name(&req.name)?).await?;
        Ok(Response::new(proto::GetLeaseResponse {
            lease: Some(lease(&holding)),
        }))
    }

    type WatchLeaseStream =
        Pin<Box<dyn Stream<Item = Result<proto::WatchLeaseResponse, Status>> + Send>>;

    async fn watch_lease(
        &self,
        request: Request<proto::WatchLeaseRequest>,
    ) -> Result<Response<Self::WatchLeaseStream>, Status> {
        self.check_running()?;
        let req = request.into_inner();
        let filter = validate::watch_filter(&req.name)?;
        let kinds = validate::event_types(&req.event_types)?
            .into_iter()
            .filter_map(event_kind)
            .collect();
        let subscription = self
            .leases
            .hub()
            .watch(Filter::parse(filter), kinds)
            .await?;
        let stream = subscription.into_stream().map(|item| {
            item.map(|e| proto::WatchLeaseResponse {
                event: Some(event(e)),
            })
            .map_err(Status::from)
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_leases(
        &self,
        request: Request<proto::ListLeasesRequest>,
    ) -> Result<Response<proto::ListLeasesResponse>, Status> {
        self.check_running()?;
        let req = request.into_inner();
        let prefix = crate::admin::prefix(&req.prefix)?;
        let page =
            crate::admin::list(self.leases.store(), prefix, req.page_size, &req.page_token).await?;
        Ok(Response::new(proto::ListLeasesResponse {
            leases: page.leases.iter().map(lease).collect(),
            next_page_token: page.next_page_token,
        }))
    }

    async fn revoke_lease(
        &self,
        request: Request<proto::RevokeLeaseRequest>,
    ) -> Result<Response<proto::RevokeLeaseResponse>, Status> {
        self.check_running()?;
        let by = request
            .extensions()
            .get::<crate::auth::Caller>()
            .map_or_else(|| "anonymous".to_string(), |c| c.identity.clone());
        let req = request.into_inner();
        let name = validate::name(&req.name)?;
        let why = crate::admin::reason(&req.reason)?;
        let (revision, holding) =
            crate::admin::revoke(self.leases.store(), name, req.fencing_token, why, &by).await?;
        Ok(Response::new(proto::RevokeLeaseResponse {
            revision,
            revoked: Some(lease(&holding)),
        }))
    }
}

/// A holding as a proto `Lease`.
pub fn lease(h: &Holding) -> proto::Lease {
    proto::Lease {
        name: h.name.clone(),
        holder: h.record.holder.clone(),
        fencing_token: h.token,
        revision: h.revision,
        ttl: Some(prost_types::Duration {
            seconds: h.record.ttl_s as i64,
            nanos: 0,
        }),
        metadata: h
            .record
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        acquire_time: Some(timestamp(h.record.acquired_ms)),
        renew_time: Some(timestamp(h.record.renewed_ms)),
    }
}

/// A domain event as a proto `LeaseEvent`.
fn event(e: Event) -> proto::LeaseEvent {
    let kind = match e.kind {
        EventKind::Current => proto::EventType::Current,
        EventKind::SnapshotComplete => proto::EventType::SnapshotComplete,
        EventKind::Acquired => proto::EventType::Acquired,
        EventKind::Renewed => proto::EventType::Renewed,
        EventKind::Released => proto::EventType::Released,
        EventKind::Expired => proto::EventType::Expired,
        EventKind::Revoked => proto::EventType::Revoked,
    };
    proto::LeaseEvent {
        r#type: kind as i32,
        name: e.name,
        revision: e.revision,
        holder: e.holder,
        fencing_token: e.token,
        lease: e.holding.as_ref().map(lease),
        time: (e.time_ms > 0).then(|| timestamp(e.time_ms)),
    }
}

/// The domain kind of a proto event type filter.
fn event_kind(t: proto::EventType) -> Option<EventKind> {
    Some(match t {
        proto::EventType::Unspecified => return None,
        proto::EventType::Current => EventKind::Current,
        proto::EventType::SnapshotComplete => EventKind::SnapshotComplete,
        proto::EventType::Acquired => EventKind::Acquired,
        proto::EventType::Renewed => EventKind::Renewed,
        proto::EventType::Released => EventKind::Released,
        proto::EventType::Expired => EventKind::Expired,
        proto::EventType::Revoked => EventKind::Revoked,
    })
}

/// Unix milliseconds as a protobuf timestamp.
fn timestamp(ms: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// The client's deadline from the `grpc-timeout` header ("<digits><unit>").
fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unit of the grpc-timeout header is understood.
    #[test]
    fn parses_grpc_timeout() {
        let mut m = tonic::metadata::MetadataMap::new();
        assert_eq!(grpc_timeout(&m), None);
        m.insert("grpc-timeout", "1500m".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_millis(1500)));
        m.insert("grpc-timeout", "2S".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_secs(2)));
        m.insert("grpc-timeout", "x".parse().unwrap());
        assert_eq!(grpc_timeout(&m), None);
    }
}
