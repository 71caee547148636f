//! [`Watch`]: a stream of lease events.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use futures_core::Stream;

use crate::error::Error;
use crate::proto::{EventType, Lease, LeaseEvent, WatchLeaseResponse};

/// One change of a lease, or one entry of the initial snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// What happened.
    pub kind: EventType,
    /// The lease it happened to (empty for `SNAPSHOT_COMPLETE`).
    pub name: String,
    /// The bucket revision of the change.
    pub revision: u64,
    /// The holder concerned. For `EXPIRED` and `REVOKED` it is what this
    /// stream saw earlier, and empty when it never saw the holding.
    pub holder: String,
    /// The fencing token of the holding concerned, where known (else 0).
    pub fencing_token: u64,
    /// The full holding, for `CURRENT`, `ACQUIRED` and `RENEWED`.
    pub lease: Option<Lease>,
    /// When the change was written (server clock).
    pub time: Option<SystemTime>,
}

impl Event {
    /// The event of a proto `LeaseEvent`; `None` for a type this client does
    /// not know (or `UNSPECIFIED`).
    pub fn from_proto(event: LeaseEvent) -> Option<Event> {
        let kind = match EventType::try_from(event.r#type) {
            Ok(EventType::Unspecified) | Err(_) => return None,
            Ok(kind) => kind,
        };
        Some(Event {
            kind,
            name: event.name,
            revision: event.revision,
            holder: event.holder,
            fencing_token: event.fencing_token,
            lease: event.lease,
            time: event.time.and_then(|t| SystemTime::try_from(t).ok()),
        })
    }
}

/// The events of one `WatchLease` stream, from
/// [`Client::watch`](crate::Client::watch): a [`Stream`] of
/// `Result<Event, Error>`.
///
/// It ends (`None`) when the server closes the stream cleanly; a failed
/// stream yields one `Err` (e.g. `SHUTTING_DOWN`) and then ends. Dropping it
/// cancels the stream. Events of types newer than this client are skipped.
pub struct Watch {
    /// The gRPC stream.
    stream: tonic::Streaming<WatchLeaseResponse>,
    /// The stream failed or ended: yield nothing more.
    done: bool,
    /// The server, for errors.
    target: Arc<str>,
}

impl Watch {
    pub(crate) fn new(stream: tonic::Streaming<WatchLeaseResponse>, target: Arc<str>) -> Watch {
        Watch {
            stream,
            done: false,
            target,
        }
    }
}

impl Stream for Watch {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            let item = match Pin::new(&mut self.stream).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(item) => item,
            };
            match item {
                None => {
                    self.done = true;
                    return Poll::Ready(None);
                }
                Some(Err(status)) => {
                    self.done = true;
                    let err = Error::from(status).context(&self.target, "WatchLease");
                    return Poll::Ready(Some(Err(err)));
                }
                Some(Ok(response)) => {
                    if let Some(event) = response.event.and_then(Event::from_proto) {
                        return Poll::Ready(Some(Ok(event)));
                    }
                }
            }
        }
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}
