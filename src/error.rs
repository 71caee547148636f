//! The one error type of Tenure and its mapping to gRPC statuses.
//!
//! Every failure a caller can see is an [`Error`] with a [`Reason`]. The
//! reason decides the gRPC code in exactly one place ([`Reason::code`]), and
//! every status carries a `google.rpc.ErrorInfo` with domain `tenure.v1`,
//! the reason in UPPER_SNAKE form and optional metadata.

use tonic_types::{ErrorDetails, StatusExt};

/// The `google.rpc.ErrorInfo` domain of every Tenure error.
pub const DOMAIN: &str = "tenure.v1";

/// Why a call failed. The string form (see [`Reason::as_str`]) is part of
/// the API and never changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The lease name breaks the naming rule.
    InvalidName,
    /// The holder is empty, too long or not printable.
    InvalidHolder,
    /// The TTL is zero, negative or above the server's maximum.
    InvalidTtl,
    /// The lease key is too short, too long or not printable ASCII.
    InvalidLeaseKey,
    /// The expected revision is missing.
    InvalidRevision,
    /// The metadata has too many entries or is too large.
    InvalidMetadata,
    /// The wait is negative or above the server's maximum.
    InvalidWait,
    /// Another argument is malformed (e.g. an unknown enum value).
    InvalidArgument,
    /// Another holder has the lease.
    LeaseHeld,
    /// The caller does not hold the lease (any more).
    LeaseNotHeld,
    /// Nobody holds the lease.
    LeaseNotFound,
    /// The bucket holds a value under this name that Tenure cannot read.
    RecordUnreadable,
    /// NATS cannot be reached or did not answer in time.
    NatsUnavailable,
    /// A watch fell too far behind and was ended.
    WatchLagged,
    /// The server is shutting down.
    ShuttingDown,
    /// The caller presented no credentials, or ones that are not valid.
    Unauthenticated,
    /// The caller's identity has no grant for this action on this name.
    PermissionDenied,
    /// The server is running as many requests as it is allowed to.
    TooManyRequests,
    /// The caller (or the whole server) has as many watch streams open as
    /// it is allowed to.
    TooManyWatches,
    /// The request message is larger than the server accepts.
    RequestTooLarge,
    /// The request's gRPC metadata (headers) is larger than the server accepts.
    MetadataTooLarge,
    /// An unexpected failure; the message says what.
    Internal,
}

impl Reason {
    /// The stable UPPER_SNAKE reason sent in `ErrorInfo.reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidName => "INVALID_NAME",
            Reason::InvalidHolder => "INVALID_HOLDER",
            Reason::InvalidTtl => "INVALID_TTL",
            Reason::InvalidLeaseKey => "INVALID_LEASE_KEY",
            Reason::InvalidRevision => "INVALID_REVISION",
            Reason::InvalidMetadata => "INVALID_METADATA",
            Reason::InvalidWait => "INVALID_WAIT",
            Reason::InvalidArgument => "INVALID_ARGUMENT",
            Reason::LeaseHeld => "LEASE_HELD",
            Reason::LeaseNotHeld => "LEASE_NOT_HELD",
            Reason::LeaseNotFound => "LEASE_NOT_FOUND",
            Reason::RecordUnreadable => "RECORD_UNREADABLE",
            Reason::NatsUnavailable => "NATS_UNAVAILABLE",
            Reason::WatchLagged => "WATCH_LAGGED",
            Reason::ShuttingDown => "SHUTTING_DOWN",
            Reason::Unauthenticated => "UNAUTHENTICATED",
            Reason::PermissionDenied => "PERMISSION_DENIED",
            Reason::TooManyRequests => "TOO_MANY_REQUESTS",
            Reason::TooManyWatches => "TOO_MANY_WATCHES",
            Reason::RequestTooLarge => "REQUEST_TOO_LARGE",
            Reason::MetadataTooLarge => "METADATA_TOO_LARGE",
            Reason::Internal => "INTERNAL",
        }
    }

    /// The gRPC code of this reason: the only place the mapping is made.
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
            Reason::LeaseHeld | Reason::LeaseNotHeld => Code::FailedPrecondition,
            Reason::LeaseNotFound => Code::NotFound,
            Reason::RecordUnreadable => Code::DataLoss,
            Reason::WatchLagged => Code::ResourceExhausted,
            Reason::NatsUnavailable | Reason::ShuttingDown => Code::Unavailable,
            Reason::Unauthenticated => Code::Unauthenticated,
            Reason::PermissionDenied => Code::PermissionDenied,
            Reason::TooManyRequests
            | Reason::TooManyWatches
            | Reason::RequestTooLarge
            | Reason::MetadataTooLarge => Code::ResourceExhausted,
            Reason::Internal => Code::Internal,
        }
    }
}

/// A failure with its reason, a one-line message for a person, and
/// machine-readable details that go into `ErrorInfo.metadata`.
#[derive(Debug, Clone, thiserror::Error)]
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
        let mut details = ErrorDetails::with_error_info(err.reason.as_str(), DOMAIN, metadata);
        if let Some(delay) = err.retry_after {
            details.set_retry_info(Some(delay));
        }
        tonic::Status::with_error_details(err.reason.code(), err.message, details)
    }
}
