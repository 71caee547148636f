//! Typed errors: the `google.rpc.ErrorInfo` reason of a failed call.

use std::collections::HashMap;
use std::fmt;

use tonic::Code;
use tonic_types::StatusExt;

/// The `google.rpc.ErrorInfo` domain of every Tenure error.
pub const DOMAIN: &str = "tenure.v1";

/// Why a Tenure call failed: the `ErrorInfo.reason` the server sent, as a
/// typed value.
///
/// [`Reason::Unknown`] stands for a failure without a Tenure `ErrorInfo`:
/// the server could not be reached, the call's deadline passed, or the
/// server sent a reason newer than this client (see [`Error::raw_reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// Another holder has the lease (`FAILED_PRECONDITION`); the metadata has
    /// `holder`, `fencing_token` and `ttl_seconds`.
    LeaseHeld,
    /// The caller does not hold the lease (any more) (`FAILED_PRECONDITION`);
    /// the metadata has `state`.
    LeaseNotHeld,
    /// Nobody holds the lease (`NOT_FOUND`).
    LeaseNotFound,
    /// The lease name breaks the naming rule (`INVALID_ARGUMENT`).
    InvalidName,
    /// The holder is empty, too long or not printable (`INVALID_ARGUMENT`).
    InvalidHolder,
    /// The TTL is zero, negative or above the server's maximum
    /// (`INVALID_ARGUMENT`).
    InvalidTtl,
    /// The lease key is too short, too long or not printable ASCII
    /// (`INVALID_ARGUMENT`).
    InvalidLeaseKey,
    /// The expected revision is missing (`INVALID_ARGUMENT`).
    InvalidRevision,
    /// The metadata has too many entries or is too large (`INVALID_ARGUMENT`).
    InvalidMetadata,
    /// The wait is negative or above the server's maximum (`INVALID_ARGUMENT`).
    InvalidWait,
    /// Another argument is malformed (`INVALID_ARGUMENT`); also used by this
    /// client for options it refuses before calling (e.g. a renew fraction
    /// outside (0, 1)).
    InvalidArgument,
    /// The bucket holds a value under this name that Tenure cannot read
    /// (`DATA_LOSS`).
    RecordUnreadable,
    /// NATS cannot be reached or did not answer in time (`UNAVAILABLE`).
    NatsUnavailable,
    /// The server is shutting down (`UNAVAILABLE`).
    ShuttingDown,
    /// An unexpected failure on the server (`INTERNAL`).
    Internal,
    /// No Tenure `ErrorInfo`: a transport failure, a deadline, or a reason
    /// this client does not know.
    Unknown,
}

impl Reason {
    /// Every reason the server sends (all but [`Reason::Unknown`]).
    pub const ALL: [Reason; 15] = [
        Reason::LeaseHeld,
        Reason::LeaseNotHeld,
        Reason::LeaseNotFound,
        Reason::InvalidName,
        Reason::InvalidHolder,
        Reason::InvalidTtl,
        Reason::InvalidLeaseKey,
        Reason::InvalidRevision,
        Reason::InvalidMetadata,
        Reason::InvalidWait,
        Reason::InvalidArgument,
        Reason::RecordUnreadable,
        Reason::NatsUnavailable,
        Reason::ShuttingDown,
        Reason::Internal,
    ];

    /// The server's UPPER_SNAKE form (`"LEASE_HELD"`, …; `"UNKNOWN"` for
    /// [`Reason::Unknown`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::LeaseHeld => "LEASE_HELD",
            Reason::LeaseNotHeld => "LEASE_NOT_HELD",
            Reason::LeaseNotFound => "LEASE_NOT_FOUND",
            Reason::InvalidName => "INVALID_NAME",
            Reason::InvalidHolder => "INVALID_HOLDER",
            Reason::InvalidTtl => "INVALID_TTL",
            Reason::InvalidLeaseKey => "INVALID_LEASE_KEY",
            Reason::InvalidRevision => "INVALID_REVISION",
            Reason::InvalidMetadata => "INVALID_METADATA",
            Reason::InvalidWait => "INVALID_WAIT",
            Reason::InvalidArgument => "INVALID_ARGUMENT",
            Reason::RecordUnreadable => "RECORD_UNREADABLE",
            Reason::NatsUnavailable => "NATS_UNAVAILABLE",
            Reason::ShuttingDown => "SHUTTING_DOWN",
            Reason::Internal => "INTERNAL",
            Reason::Unknown => "UNKNOWN",
        }
    }

    /// Parses the server's UPPER_SNAKE form; anything else is
    /// [`Reason::Unknown`].
    pub fn parse(s: &str) -> Reason {
        Reason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .unwrap_or(Reason::Unknown)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed call: its gRPC code, its typed [`Reason`], the server's message
/// and the `ErrorInfo` metadata.
///
/// ```no_run
/// # async fn f(client: &tenure_client::Client) {
/// use std::time::Duration;
/// use tenure_client::{AcquireOptions, Reason};
///
/// match client.acquire("jobs.nightly", "worker-2", Duration::from_secs(10), AcquireOptions::default()).await {
///     Ok(session) => { /* ... */ }
///     Err(err) if err.reason() == Reason::LeaseHeld => {
///         println!("held by {:?}", err.metadata().get("holder"));
///     }
///     Err(err) => eprintln!("acquire failed: {err}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Error {
    code: Code,
    reason: Reason,
    raw_reason: String,
    message: String,
    metadata: HashMap<String, String>,
}

impl Error {
    /// An error made by this client (not sent by the server).
    pub(crate) fn local(code: Code, reason: Reason, message: impl Into<String>) -> Error {
        Error {
            code,
            reason,
            raw_reason: String::new(),
            message: message.into(),
            metadata: HashMap::new(),
        }
    }

    /// Builds the error of a gRPC status, reading the `ErrorInfo` (domain
    /// `tenure.v1`) from its `grpc-status-details-bin` details.
    pub fn from_status(status: &tonic::Status) -> Error {
        let info = status
            .get_details_error_info()
            .filter(|info| info.domain == DOMAIN);
        let (reason, raw_reason, metadata) = match info {
            Some(info) => (Reason::parse(&info.reason), info.reason, info.metadata),
            None => (Reason::Unknown, String::new(), HashMap::new()),
        };
        Error {
            code: status.code(),
            reason,
            raw_reason,
            message: status.message().to_string(),
            metadata,
        }
    }

    /// The gRPC status code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The typed reason ([`Reason::Unknown`] when the status had no Tenure
    /// `ErrorInfo`).
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// The reason string exactly as the server sent it (empty without an
    /// `ErrorInfo`); useful when [`Error::reason`] is [`Reason::Unknown`]
    /// because the server is newer than this client.
    pub fn raw_reason(&self) -> &str {
        &self.raw_reason
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The `ErrorInfo` metadata: `holder`, `fencing_token` and `ttl_seconds`
    /// for [`Reason::LeaseHeld`]; `state` for [`Reason::LeaseNotHeld`].
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// Whether retrying the same call may succeed: the server or NATS was
    /// away, the call timed out or was cut off. False for refusals
    /// (`LEASE_HELD`, `LEASE_NOT_HELD`, `INVALID_*`, `RECORD_UNREADABLE`, …).
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self.code,
            Code::InvalidArgument
                | Code::FailedPrecondition
                | Code::NotFound
                | Code::AlreadyExists
                | Code::OutOfRange
                | Code::DataLoss
                | Code::PermissionDenied
                | Code::Unauthenticated
                | Code::Unimplemented
                | Code::Ok
        )
    }
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Error {
        Error::from_status(&status)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reason == Reason::Unknown {
            write!(f, "{:?}: {}", self.code, self.message)
        } else {
            write!(f, "{}: {}", self.reason, self.message)
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::{ErrorDetails, StatusExt};

    #[test]
    fn reasons_round_trip_through_their_strings() {
        for reason in Reason::ALL {
            assert_eq!(Reason::parse(reason.as_str()), reason);
        }
        assert_eq!(Reason::parse("SOMETHING_NEW"), Reason::Unknown);
        assert_eq!(Reason::LeaseHeld.to_string(), "LEASE_HELD");
    }

    #[test]
    fn error_info_is_read_from_the_status_details() {
        let status = tonic::Status::with_error_details(
            Code::FailedPrecondition,
            "held by a",
            ErrorDetails::with_error_info(
                "LEASE_HELD",
                DOMAIN,
                [("holder".to_string(), "a".to_string())],
            ),
        );
        let err = Error::from(status);
        assert_eq!(err.reason(), Reason::LeaseHeld);
        assert_eq!(err.code(), Code::FailedPrecondition);
        assert_eq!(err.metadata()["holder"], "a");
        assert_eq!(err.message(), "held by a");
        assert!(!err.is_retryable());
    }

    #[test]
    fn statuses_without_tenure_error_info_are_unknown() {
        let err = Error::from(tonic::Status::unavailable("connection refused"));
        assert_eq!(err.reason(), Reason::Unknown);
        assert!(err.is_retryable());

        let foreign = tonic::Status::with_error_details(
            Code::Internal,
            "x",
            ErrorDetails::with_error_info("LEASE_HELD", "other.domain", []),
        );
        assert_eq!(Error::from(foreign).reason(), Reason::Unknown);

        let newer = tonic::Status::with_error_details(
            Code::FailedPrecondition,
            "x",
            ErrorDetails::with_error_info("LEASE_FROZEN", DOMAIN, []),
        );
        let err = Error::from(newer);
        assert_eq!(err.reason(), Reason::Unknown);
        assert_eq!(err.raw_reason(), "LEASE_FROZEN");
    }
}
