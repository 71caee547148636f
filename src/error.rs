//! The one error type of Tenure's API, its mapping to gRPC statuses, and
//! the typed error of a server that could not start.
//!
//! Every failure a caller can see is an [`Error`] with a [`Reason`]. The
//! reasons are the `tenure.v1.ErrorReason` enum of the proto (so every
//! client is generated from the same list); the reason decides the gRPC code
//! in exactly one place ([`Reason::code`]), and every status carries a
//! `google.rpc.ErrorInfo` with domain `tenure.v1`, the reason's proto name
//! and optional metadata.

use std::net::SocketAddr;

use tonic_types::{ErrorDetails, StatusExt};

/// Why a call failed: the proto's `tenure.v1.ErrorReason`. Its string form
/// ([`Reason::as_str_name`]) is the `ErrorInfo.reason` and part of the API.
pub use crate::proto::ErrorReason as Reason;

/// The `google.rpc.ErrorInfo` domain of every Tenure error.
pub const DOMAIN: &str = "tenure.v1";

impl Reason {
    /// The gRPC code of this reason: the only place the mapping is made.
    /// `Unspecified` is never sent; should it ever be used it is INTERNAL.
    pub fn code(self) -> tonic::Code {
        use tonic::Code;
        match self {
            Reason::InvalidName
            | Reason::InvalidHolder
            | Reason::InvalidTtl
            | Reason::InvalidLeaseKey
            | Reason::InvalidRevision
            | Reason::InvalidMetadata
            | Reason::InvalidWait
            | Reason::InvalidArgument => Code::InvalidArgument,
            Reason::LeaseHeld
            | Reason::LeaseNotHeld
            | Reason::LimitMismatch
            | Reason::GroupMember
            | Reason::HistoryOff
            | Reason::NoWaiter
            | Reason::ModeMismatch
            | Reason::AtomicBatchUnsupported => Code::FailedPrecondition,
            Reason::LeaseNotFound => Code::NotFound,
            Reason::RecordUnreadable => Code::DataLoss,
            Reason::WatchLagged => Code::ResourceExhausted,
            Reason::WatchHistoryCompacted => Code::OutOfRange,
            Reason::NatsUnavailable | Reason::ShuttingDown => Code::Unavailable,
            Reason::Unauthenticated => Code::Unauthenticated,
            Reason::PermissionDenied => Code::PermissionDenied,
            Reason::TooManyRequests
            | Reason::TooManyWatches
            | Reason::TooManyWaiters
            | Reason::TooManySharedHolders
            | Reason::RequestTooLarge
            | Reason::BucketFull
            | Reason::MetadataTooLarge => Code::ResourceExhausted,
            Reason::Internal | Reason::Unspecified => Code::Internal,
        }
    }

    /// The reason actually sent: `Unspecified` becomes `Internal`.
    /// The reason as sent: `Unspecified` never is (it is sent as INTERNAL).
    pub fn sent(self) -> Reason {
        match self {
            Reason::Unspecified => Reason::Internal,
            other => other,
        }
    }
}

/// A failure with its reason, a one-line message for a person, and
/// machine-readable details that go into `ErrorInfo.metadata`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// Why it failed.
    pub reason: Reason,
    /// What happened and what to do, in one line.
    pub message: String,
    /// Details such as the current holder, sent as `ErrorInfo.metadata`.
    pub metadata: Vec<(&'static str, String)>,
    /// When set, a `google.rpc.RetryInfo` telling the caller how long to
    /// back off before retrying (limits that free up by themselves).
    pub retry_after: Option<std::time::Duration>,
}

/// Result with Tenure's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error with a reason and a message.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Error {
            reason,
            message: message.into(),
            metadata: Vec::new(),
            retry_after: None,
        }
    }

    /// Adds a `RetryInfo` with this back-off.
    pub fn retry_after(mut self, delay: std::time::Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    /// Adds one metadata entry.
    pub fn with(mut self, key: &'static str, value: impl ToString) -> Self {
        self.metadata.push((key, value.to_string()));
        self
    }

    /// NATS could not be reached; `what` names the operation.
    pub fn nats(what: &str, err: impl std::fmt::Display) -> Self {
        Error::new(
            Reason::NatsUnavailable,
            format!("NATS did not complete {what}: {err}; retry shortly"),
        )
    }
}

impl From<Error> for tonic::Status {
    fn from(err: Error) -> Self {
        let metadata: std::collections::HashMap<String, String> = err
            .metadata
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let reason = err.reason.sent();
        let mut details = ErrorDetails::with_error_info(reason.as_str_name(), DOMAIN, metadata);
        if let Some(delay) = err.retry_after {
            details.set_retry_info(Some(delay));
        }
        tonic::Status::with_error_details(reason.code(), err.message, details)
    }
}

/// Why `tenure serve` could not start. Each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The settings, or a file they name (tokens, certificates), cannot be
    /// used.
    #[error("{0}")]
    Config(String),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}; pick another {flag} address")]
    Listen {
        /// The flag that names the address.
        flag: &'static str,
        /// The address.
        addr: SocketAddr,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The local nats-server could not be found or started.
    #[error("{0}")]
    LocalNats(String),
    /// NATS could not be reached, or the bucket could not be opened.
    #[error("{}", .0.message)]
    Nats(Error),
    /// Something Tenure itself should have done failed (e.g. reflection).
    #[error("{0}")]
    Internal(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reason of the proto maps to a code, and a status built from it
    /// carries an ErrorInfo whose reason is a name of the proto enum (never
    /// the unspecified one): the server cannot send a reason the proto lacks.
    #[test]
    fn every_proto_reason_becomes_an_error_info_reason() {
        let mut seen = 0;
        for n in 0..=i32::from(u8::MAX) {
            let Ok(reason) = Reason::try_from(n) else {
                continue;
            };
            seen += 1;
            let status = tonic::Status::from(Error::new(reason, "m").with("k", "v"));
            let info = status.get_details_error_info().expect("error info");
            assert_eq!(info.domain, DOMAIN);
            let sent = Reason::from_str_name(&info.reason).expect("a proto reason");
            assert_ne!(sent, Reason::Unspecified);
            assert_eq!(status.code(), sent.code());
            assert_eq!(info.metadata.get("k").map(String::as_str), Some("v"));
        }
        assert!(seen > 20, "the proto lists the reasons ({seen})");
    }
}
