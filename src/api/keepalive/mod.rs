//! `tenure.v1.LeaseService/KeepAlive`: many renewals over one stream.
//!
//! A unary Renew costs a whole gRPC exchange per holding; a client holding
//! many leases (or many sessions) sends them all here instead, a batch per
//! message. Each entry is renewed exactly as a unary Renew would be: the
//! same per-name authorization (`renew`), the same validation, the same
//! [`crate::lease::Leases::renew`] (key check, CAS on the expected revision,
//! TTL bounds), and its error is what Renew would have returned, carried as
//! a per-entry result instead of the status of the call.
//!
//! Pipelining: the entries of a message run concurrently, and so do the
//! messages of a stream, so their NATS writes are all published before the
//! acks are awaited; responses still go out in request order, one per
//! request, results in entry order.
//!
//! Bounds, each in the file that keeps it:
//! - here: a stream slot per replica and per identity
//!   ([`Class::KeepAliveStream`], refused with TOO_MANY_REQUESTS and a
//!   RetryInfo), and no stream at all for an identity that may renew
//!   nothing (PERMISSION_DENIED: it holds nothing);
//! - [`stream`]: entries per message (`--max-keepalive-entries`, else the
//!   stream ends with REQUEST_TOO_LARGE), renewals in flight per stream
//!   (`--max-keepalive-in-flight`), the bytes of replies not yet taken by
//!   the client (`--max-keepalive-reply-bytes` per stream and
//!   `--max-keepalive-reply-total-bytes` per replica, see
//!   [`super::limits::ReplyBudget`]): past them the stream is not read, so
//!   HTTP/2 flow control pushes back on the client; and an idle timeout
//!   (`--keepalive-idle-timeout`). `--max-request-bytes` applies to each
//!   message, as for every request.
//! - [`batch`]: each entry that reaches NATS takes a renewal permit
//!   ([`Class::Renewal`]: the short budget, else the reserve, each with a
//!   per-identity share) while it runs, so a stream counts as many calls as
//!   it makes NATS operations and one identity's streams cannot use up the
//!   reserve that keeps other holders' renewals going. Entry errors that
//!   repeat an earlier one in the same reply are sent as a reference to it
//!   (`same_as`), so a message of many failing entries is answered in a few
//!   bytes per entry.

mod batch;
mod stream;

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use super::auth::Auth;
use super::limits::{CallLimits, CallPermit, Class, ReplyBudget, Sent};
use super::validate;
use crate::config::{Action, KeepAliveBounds, Limits};
use crate::error::{Error, Reason};
use crate::lease::{Holding, Shards};
use crate::observe::METRICS;
use crate::proto;

use batch::Renewer;

/// Finished responses queued for a client that reads slowly (their bytes
/// are bounded by the reply budget too); past them the stream waits for
/// the client.
const RESPONSE_BUFFER: usize = 4;

/// The response stream of KeepAlive.
pub type KeepAliveStream =
    Pin<Box<dyn Stream<Item = Result<proto::KeepAliveResponse, Status>> + Send>>;

/// What a KeepAlive stream is opened with, shared by the service.
pub(super) struct Opening<'a> {
    /// The lease protocol over each shard.
    pub shards: &'a Shards,
    /// TTL bounds.
    pub limits: &'a Limits,
    /// Who may do what.
    pub auth: &'a Arc<Auth>,
    /// Stream slots and renewal permits.
    pub calls: &'a Arc<CallLimits>,
    /// The replica's reply bytes.
    pub replies: &'a Arc<ReplyBudget>,
    /// Cancelled at shutdown.
    pub shutdown: &'a CancellationToken,
    /// Per-stream bounds.
    pub bounds: KeepAliveBounds,
}

/// Opens a KeepAlive stream: authenticates the caller, refuses one that
/// may renew nothing and new streams during shutdown, takes the stream's
/// slot, and runs the stream in a task of its own until the client
/// half-closes (after every pending request is answered), goes away,
/// breaks a bound, or the server shuts down.
pub(super) fn open(
    request: Request<Streaming<proto::KeepAliveRequest>>,
    with: Opening<'_>,
) -> Result<Response<KeepAliveStream>, Status> {
    let caller = with.auth.authenticate(&request)?;
    if !with.auth.may_ever(&caller, Action::Renew) {
        METRICS.rejected("keepalive_no_grant");
        tracing::info!(method = "KeepAlive", identity = %caller.identity, action = "renew", "permission denied: no renew grant, KeepAlive stream refused");
        return Err(Error::new(
            Reason::PermissionDenied,
            format!(
                "identity {:?} may not renew any lease, so it has nothing to keep alive; add a [[grant]] with the renew action to the server's config",
                super::auth::clip(&caller.identity)
            ),
        )
        .with("identity", super::auth::clip(&caller.identity))
        .with("action", Action::Renew.as_str())
        .into());
    }
    if with.shutdown.is_cancelled() {
        return Err(shutting_down().into());
    }
    let slot = with.calls.admit(Class::KeepAliveStream, &caller.identity)?;
    let renewer = Arc::new(Renewer {
        shards: with.shards.clone(),
        limits: *with.limits,
        auth: with.auth.clone(),
        calls: with.calls.clone(),
        caller,
    });
    let replies = with.replies.stream();
    let (tx, rx) = mpsc::channel(RESPONSE_BUFFER);
    let inbound = request.into_inner();
    tokio::spawn(run(
        renewer,
        inbound,
        tx,
        replies.clone(),
        with.bounds,
        with.shutdown.clone(),
        slot,
    ));
    Ok(Response::new(
        Box::pin(Sent::new(ReceiverStream::new(rx), replies)) as KeepAliveStream,
    ))
}

/// One renewal's fields, checked: what Renew and each KeepAlive entry
/// renew once they are authorized and validated.
pub(super) struct Renewal<'a> {
    /// The lease name.
    name: &'a str,
    /// The revision the caller last saw.
    expected: u64,
    /// The presented lease key.
    key: &'a str,
    /// A new TTL, whole seconds, if asked.
    ttl_s: Option<u64>,
    /// The semaphore slot, 0 for a plain lease.
    slot: u32,
}

impl<'a> Renewal<'a> {
    /// Validates the fields of a renewal against `limits`.
    pub(super) fn check(
        limits: &Limits,
        name: &'a str,
        expected_revision: u64,
        lease_key: &'a str,
        ttl: Option<&prost_types::Duration>,
        slot: u32,
    ) -> Result<Renewal<'a>, Error> {
        let name = validate::name(name)?;
        let expected = validate::revision(expected_revision)?;
        let key = validate::presented_key(lease_key)?;
        let ttl_s = match ttl {
            Some(ttl) => Some(validate::ttl(Some(ttl), limits, limits.default_ttl_s)?),
            None => None,
        };
        let slot = validate::slot(slot, limits)?;
        Ok(Renewal {
            name,
            expected,
            key,
            ttl_s,
            slot,
        })
    }

    /// Renews the holding through the lease protocol.
    pub(super) async fn run(self, shards: &Shards) -> Result<Holding, Error> {
        let leases = shards.of(self.name);
        match self.slot {
            0 => {
                leases
                    .renew(self.name, self.expected, self.key, self.ttl_s)
                    .await
            }
            slot => {
                leases
                    .renew_slot(self.name, slot, self.expected, self.key, self.ttl_s)
                    .await
            }
        }
    }
}

/// One stream's task: [`stream::serve`], then frees the stream's `slot` in
/// the stream budget *before* the client can see the stream end, so a
/// client that saw its stream end may open another at once.
async fn run(
    renewer: Arc<Renewer>,
    inbound: Streaming<proto::KeepAliveRequest>,
    tx: stream::Outbound,
    replies: Arc<super::limits::StreamReplies>,
    bounds: KeepAliveBounds,
    shutdown: CancellationToken,
    slot: CallPermit,
) {
    let end = stream::serve(renewer, inbound, &tx, &replies, bounds, shutdown).await;
    drop(slot);
    if let Some(status) = end {
        let _ = tx.send((Err(status), 0)).await;
    }
}

/// The end of calls cut off by shutdown.
fn shutting_down() -> Error {
    Error::new(
        Reason::ShuttingDown,
        "the server is shutting down; retry on another replica",
    )
}
