//! `tenure.v1.ElectionService`: leader election, each RPC a few lines over
//! the election domain API ([`Elections`]).
//!
//! Every RPC goes through the same wrapper as the lease RPCs
//! ([`LeaseApi::rpc`]): authentication, the name check before
//! authorization, the shutdown refusal, the in-flight permit, the span and
//! the metrics. An election is a lease of the same name, so the grants are
//! the lease actions on that name: Campaign needs `acquire`, Proclaim
//! `renew`, Resign `release`, Leader and Observe `watch`. A waiting Campaign
//! counts as a waiting call, Proclaim and Resign as renewals, and each
//! Observe stream holds a watch slot ([`super::WatchLimits`]) until it ends.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};
use tracing::Span;

use super::convert::timestamp;
use super::limits::Class;
use super::service::{wait_class, Call, LeaseApi, Reply, DEADLINE_MARGIN};
use super::validate;
use crate::config::Action;
use crate::error::{Error, Reason};
use crate::lease::{self, CampaignArgs, Change, ChangeKind, Elections, Holding};
use crate::proto;
use crate::proto::election_service_server::ElectionService;

/// The `tenure.v1.ElectionService` implementation.
pub struct ElectionApi {
    /// The lease service whose wrapper, limits and watch slots every
    /// election RPC shares.
    api: Arc<LeaseApi>,
    /// Elections over the same lease protocol, one per shard.
    elections: Vec<Elections>,
}

impl ElectionApi {
    /// The election service beside `api`, on the same leases.
    pub fn new(api: Arc<LeaseApi>) -> ElectionApi {
        let elections = api
            .shards
            .all()
            .iter()
            .cloned()
            .map(Elections::new)
            .collect();
        ElectionApi { api, elections }
    }

    /// The elections of the shard that holds `name`.
    fn of(&self, name: &str) -> &Elections {
        &self.elections[self.api.shards.index_of(name) as usize]
    }
}

/// Checks a leader's value: the rule of one metadata entry [`lease::VALUE_KEY`]
/// (no control or invisible formatting characters, and the entry within
/// the metadata byte limit).
fn value(value: &str) -> Result<String, Error> {
    let entry = HashMap::from([(lease::VALUE_KEY.to_string(), value.to_string())]);
    validate::metadata(&entry).map_err(|_| {
        Error::new(
            Reason::InvalidArgument,
            format!(
                "value must have no control or invisible formatting characters and at most \
                 {} bytes (got {} bytes)",
                validate::MAX_METADATA_BYTES - lease::VALUE_KEY.len(),
                value.len()
            ),
        )
    })?;
    Ok(value.to_string())
}

/// A holding as a proto `Leadership`; `ttl_left` only when asked for (a
/// read of the current state, not a write's reply).
fn leadership(h: &Holding, with_ttl_left: bool) -> proto::Leadership {
    proto::Leadership {
        name: h.name.clone(),
        holder: h.record.holder.clone(),
        value: lease::value_of(h).to_string(),
        fencing_token: h.token,
        revision: h.revision,
        ttl: Some(prost_types::Duration {
            seconds: h.record.ttl_s as i64,
            nanos: 0,
        }),
        elected_time: Some(timestamp(h.record.acquired_ms)),
        renew_time: Some(timestamp(h.record.renewed_ms)),
        ttl_left: with_ttl_left.then(|| {
            let left = lease::ttl_left(h);
            prost_types::Duration {
                seconds: left.as_secs() as i64,
                nanos: (left.subsec_millis() * 1_000_000) as i32,
            }
        }),
        fence_proof: Vec::new(),
    }
}

/// A leadership change as a proto `ObserveResponse`.
fn change(c: &Change) -> proto::ObserveResponse {
    let kind = match c.kind {
        ChangeKind::Current => proto::ChangeType::Current,
        ChangeKind::Elected => proto::ChangeType::Elected,
        ChangeKind::Proclaimed => proto::ChangeType::Proclaimed,
        ChangeKind::Resigned => proto::ChangeType::Resigned,
        ChangeKind::Expired => proto::ChangeType::Expired,
        ChangeKind::Revoked => proto::ChangeType::Revoked,
        ChangeKind::Missed => proto::ChangeType::Missed,
        ChangeKind::Preferred => proto::ChangeType::Preferred,
    };
    proto::ObserveResponse {
        r#type: kind as i32,
        leader: c.leader.as_deref().map(|h| leadership(h, true)),
        ended_holder: c.ended_holder.clone(),
        ended_fencing_token: c.ended_token,
        revision: c.revision,
        preferred: c.preferred.as_ref().map(|p| proto::Candidate {
            holder: p.holder.clone(),
            preference: p.preference,
        }),
    }
}

#[tonic::async_trait]
impl ElectionService for ElectionApi {
    async fn campaign(
        &self,
        request: Request<proto::CampaignRequest>,
    ) -> Result<Response<proto::CampaignResponse>, Status> {
        let limits = &self.api.limits;
        self.api
            .rpc(request, |req, cx| async move {
                let mut wait = validate::wait(req.wait.as_ref(), limits)?;
                if let (Some(w), Some(d)) = (wait, cx.deadline) {
                    wait = Some(w.min(d.saturating_sub(DEADLINE_MARGIN)));
                }
                let key = validate::lease_key(&req.lease_key)?;
                let args = CampaignArgs {
                    name: validate::name(&req.name)?.into(),
                    holder: validate::holder(&req.holder)?.into(),
                    value: value(&req.value)?,
                    ttl_s: validate::ttl(req.ttl.as_ref(), limits, limits.default_ttl_s)?,
                    key: key.map_or_else(validate::mint_key, str::to_string),
                    wait,
                    preference: req.preference,
                };
                let holding = self.of(&args.name).campaign(&args).await?;
                Ok(proto::CampaignResponse {
                    leadership: Some(proto::Leadership {
                        fence_proof: self.api.fences.proof(&holding),
                        ..leadership(&holding, false)
                    }),
                    lease_key: args.key,
                })
            })
            .await
    }

    async fn proclaim(
        &self,
        request: Request<proto::ProclaimRequest>,
    ) -> Result<Response<proto::ProclaimResponse>, Status> {
        self.api
            .rpc(request, |req, _| async move {
                let name = validate::name(&req.name)?;
                let expected = validate::revision(req.expected_revision)?;
                let key = validate::presented_key(&req.lease_key)?;
                let value = value(&req.value)?;
                let holding = self.of(name).proclaim(name, expected, key, &value).await?;
                Ok(proto::ProclaimResponse {
                    leadership: Some(leadership(&holding, false)),
                })
            })
            .await
    }

    async fn resign(
        &self,
        request: Request<proto::ResignRequest>,
    ) -> Result<Response<proto::ResignResponse>, Status> {
        self.api
            .rpc(request, |req, _| async move {
                let name = validate::name(&req.name)?;
                let expected = validate::revision(req.expected_revision)?;
                let key = validate::presented_key(&req.lease_key)?;
                let to = match (req.successor.as_str(), req.to_next_candidate) {
                    ("", false) => {
                        let revision = self.of(name).resign(name, expected, key).await?;
                        return Ok(proto::ResignResponse {
                            revision,
                            successor: None,
                        });
                    }
                    ("", true) => None,
                    (to, false) => Some(validate::holder(to)?),
                    (_, true) => {
                        return Err(crate::error::Error::new(
                            crate::error::Reason::InvalidArgument,
                            "give successor or to_next_candidate, not both",
                        ))
                    }
                };
                let term = self.of(name).hand_over(name, expected, key, to).await?;
                Ok(proto::ResignResponse {
                    revision: term.revision,
                    successor: Some(leadership(&term, false)),
                })
            })
            .await
    }

    async fn leader(
        &self,
        request: Request<proto::LeaderRequest>,
    ) -> Result<Response<proto::LeaderResponse>, Status> {
        self.api
            .rpc(request, |req, _| async move {
                let name = validate::name(&req.name)?;
                let holding = self.of(name).leader(name).await?;
                Ok(proto::LeaderResponse {
                    leadership: Some(leadership(&holding, true)),
                })
            })
            .await
    }

    type ObserveStream = Pin<Box<dyn Stream<Item = Result<proto::ObserveResponse, Status>> + Send>>;

    async fn observe(
        &self,
        request: Request<proto::ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        self.api
            .rpc(request, |req, cx| async move {
                let name = validate::name(&req.name)?;
                let permit = self.api.watches.acquire(&cx.caller.identity)?;
                let observation = self.of(name).observe(name).await?;
                // The slot is held until the stream ends, as for WatchLease.
                observation.hold(permit);
                let stream = observation
                    .into_stream()
                    .map(|item| item.map(|c| change(&c)).map_err(Status::from));
                Ok(Box::pin(stream) as Self::ObserveStream)
            })
            .await
    }
}

impl Call for proto::CampaignRequest {
    const METHOD: &'static str = "Campaign";
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

impl Call for proto::ProclaimRequest {
    const METHOD: &'static str = "Proclaim";
    const ACTION: Action = Action::Renew;
    fn subject(&self) -> &str {
        &self.name
    }
    fn class(&self) -> Class {
        Class::Renewal
    }
}

impl Call for proto::ResignRequest {
    const METHOD: &'static str = "Resign";
    const ACTION: Action = Action::Release;
    fn subject(&self) -> &str {
        &self.name
    }
    fn class(&self) -> Class {
        Class::Renewal
    }
}

impl Call for proto::LeaderRequest {
    const METHOD: &'static str = "Leader";
    const ACTION: Action = Action::Watch;
    fn subject(&self) -> &str {
        &self.name
    }
}

impl Call for proto::ObserveRequest {
    const METHOD: &'static str = "Observe";
    const ACTION: Action = Action::Watch;
    fn subject(&self) -> &str {
        &self.name
    }
}

/// Records a leadership's holder, token and revision on `span`.
fn record(span: &Span, l: Option<&proto::Leadership>) {
    if let Some(l) = l {
        span.record("lease.holder", l.holder.as_str());
        span.record("lease.fencing_token", l.fencing_token);
        span.record("lease.revision", l.revision);
    }
}

impl Reply for proto::CampaignResponse {
    fn record(&self, span: &Span) {
        record(span, self.leadership.as_ref());
    }
}

impl Reply for proto::ProclaimResponse {
    fn record(&self, span: &Span) {
        record(span, self.leadership.as_ref());
    }
}

impl Reply for proto::ResignResponse {
    fn record(&self, span: &Span) {
        span.record("lease.revision", self.revision);
    }
}

impl Reply for proto::LeaderResponse {
    fn record(&self, span: &Span) {
        record(span, self.leadership.as_ref());
    }
}

impl Reply for <ElectionApi as ElectionService>::ObserveStream {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value fits in one metadata entry; control characters and
    /// oversized values are refused with INVALID_ARGUMENT.
    #[test]
    fn values() {
        assert_eq!(value("10.0.0.1:8080").unwrap(), "10.0.0.1:8080");
        assert_eq!(value("").unwrap(), "");
        assert_eq!(value("a\nb").unwrap_err().reason, Reason::InvalidArgument);
        let big = "x".repeat(validate::MAX_METADATA_BYTES);
        let err = value(&big).unwrap_err();
        assert!(err.message.contains("at most"), "{}", err.message);
    }
}
