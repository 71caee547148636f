//! The generated stubs over a client's channel ([`Stub`], with its
//! credentials interceptor), the deadline of a unary call, and the opening
//! of a `WatchLease` stream: what the [`Client`](crate::Client) and the
//! helpers under it (the sessions, the shared watch, the `KeepAlive`
//! stream) all call through.

use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::Code;

use crate::config::CallCredentials;
use crate::error::{Error, Reason};
use crate::proto::election_service_client::ElectionServiceClient;
use crate::proto::lease_service_client::LeaseServiceClient;
use crate::proto::{WatchLeaseRequest, WatchLeaseResponse};

/// Deadline of a unary call, on top of an Acquire's wait.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The generated stub over the client's channel, with its credentials
/// interceptor.
pub type Stub = LeaseServiceClient<InterceptedService<Channel, CallCredentials>>;

/// The generated election stub over the client's channel, with its
/// credentials interceptor.
pub(crate) type ElectionStub = ElectionServiceClient<InterceptedService<Channel, CallCredentials>>;

/// Opens a `WatchLease` stream (the opening is bounded by
/// [`DEFAULT_CALL_TIMEOUT`]; the stream itself is not).
pub(crate) async fn open_watch(
    stub: &Stub,
    request: WatchLeaseRequest,
) -> Result<tonic::Streaming<WatchLeaseResponse>, Error> {
    let mut stub = stub.clone();
    let stream = tokio::time::timeout(DEFAULT_CALL_TIMEOUT, stub.watch_lease(request))
        .await
        .map_err(|_| timeout_error(DEFAULT_CALL_TIMEOUT))??
        .into_inner();
    Ok(stream)
}

/// The error of a call that got no answer within `timeout`.
pub(crate) fn timeout_error(timeout: Duration) -> Error {
    Error::local(
        Code::DeadlineExceeded,
        Reason::Unspecified,
        format!("no answer within {timeout:?}"),
    )
}
