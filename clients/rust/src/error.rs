//! Typed errors: the `google.rpc.ErrorInfo` reason of a failed call.

use std::collections::HashMap;
use std::fmt;

use tonic::Code;
use tonic_types::StatusExt;

/// The `google.rpc.ErrorInfo` domain of every Tenure error.
pub const DOMAIN: &str = "tenure.v1";

/// Why a Tenure call failed: the `ErrorInfo.reason` the server sent, as the
/// enum generated from `proto/tenure/v1/error_reason.proto`
/// ([`proto::ErrorReason`](crate::proto::ErrorReason)), so it has every reason
/// the server sends.
///
/// [`Reason::Unspecified`] stands for a failure without a Tenure `ErrorInfo`:
/// the server could not be reached, the call's deadline passed, or the
/// server sent a reason newer than this client (see [`Error::raw_reason`]).
/// Whether retrying can help is [`Reason::is_retryable`].
pub use crate::proto::ErrorReason as Reason;

/// The numbers of every `ErrorReason` value, written by `build.rs` from the
/// proto's descriptors.
const REASON_NUMBERS: &[i32] = &include!(concat!(env!("OUT_DIR"), "/error_reason_numbers.rs"));

/// The reasons after which sending the same request again may succeed: the
/// one classification of the reasons (the "Error reasons" table of
/// `clients/README.md`); every other reason is permanent. The renewal task
/// decides with it.
pub const RETRYABLE_REASONS: [Reason; 7] = [
    Reason::NatsUnavailable,
    Reason::WatchLagged,
    Reason::ShuttingDown,
    Reason::TooManyRequests,
    Reason::TooManyWatches,
    Reason::TooManyWaiters,
    Reason::TooManySharedHolders,
];

impl Reason {
    /// Every reason the server sends: every value of the generated enum but
    /// [`Reason::Unspecified`], in proto order.
    pub fn all() -> impl Iterator<Item = Reason> {
        REASON_NUMBERS
            .iter()
            .filter_map(|&n| Reason::try_from(n).ok())
            .filter(|&r| r != Reason::Unspecified)
    }

    /// The server's UPPER_SNAKE form (`"LEASE_HELD"`, …;
    /// `"ERROR_REASON_UNSPECIFIED"` for [`Reason::Unspecified`]).
    pub fn as_str(self) -> &'static str {
        self.as_str_name()
    }

    /// Parses the server's UPPER_SNAKE form; anything else is
    /// [`Reason::Unspecified`].
    pub fn parse(s: &str) -> Reason {
        Reason::from_str_name(s).unwrap_or(Reason::Unspecified)
    }

    /// Whether sending the same request again may succeed after a failure
    /// with this reason (it is in [`RETRYABLE_REASONS`]). False for every
    /// other reason, [`Reason::Unspecified`] included: classify an error,
    /// which may carry no reason, with [`Error::is_retryable`].
    pub fn is_retryable(self) -> bool {
        RETRYABLE_REASONS.contains(&self)
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
    /// The server the call went to (`host:port`) and the RPC (`Acquire`,
    /// `Renew`, …, or `connect`); `None` if unknown. Boxed to keep `Error`
    /// small.
    context: Option<Box<(String, String)>>,
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
            context: None,
        }
    }

    /// Names the server and the RPC of the failed call (kept if already
    /// set), so the message says where and what failed.
    pub(crate) fn context(mut self, target: &str, rpc: &str) -> Error {
        if self.context.is_none() {
            self.context = Some(Box::new((target.to_string(), rpc.to_string())));
        }
        self
    }

    /// Builds the error of a gRPC status, reading the `ErrorInfo` (domain
    /// `tenure.v1`) from its `grpc-status-details-bin` details.
    pub fn from_status(status: &tonic::Status) -> Error {
        let info = status
            .get_details_error_info()
            .filter(|info| info.domain == DOMAIN);
        let (reason, raw_reason, metadata) = match info {
            Some(info) => (Reason::parse(&info.reason), info.reason, info.metadata),
            // Auth failures keep their typed reason even from a proxy or
            // this client's own token callback.
            None => match status.code() {
                Code::Unauthenticated => (Reason::Unauthenticated, String::new(), HashMap::new()),
                Code::PermissionDenied => (Reason::PermissionDenied, String::new(), HashMap::new()),
                _ => (Reason::Unspecified, String::new(), HashMap::new()),
            },
        };
        // A transport failure's status says little ("transport error"):
        // its source chain has the cause ("Connection refused", a TLS error).
        let mut message = status.message().to_string();
        let mut source = std::error::Error::source(status);
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            if !message.contains(&cause_text) {
                message = format!("{message}: {cause_text}");
            }
            source = cause.source();
        }
        Error {
            code: status.code(),
            reason,
            raw_reason,
            message,
            metadata,
            context: None,
        }
    }

    /// The error of one failed `KeepAlive` entry: exactly what a unary
    /// Renew's status with that code and `ErrorInfo` would give.
    pub(crate) fn from_keepalive(e: crate::proto::KeepAliveError) -> Error {
        Error {
            code: Code::from_i32(e.code),
            reason: Reason::parse(&e.reason),
            raw_reason: e.reason,
            message: e.message,
            metadata: e.metadata,
            context: None,
        }
    }

    /// The server the failed call went to (`host:port`; empty if unknown).
    pub fn target(&self) -> &str {
        self.context.as_ref().map_or("", |c| c.0.as_str())
    }

    /// The RPC that failed (`Acquire`, `Renew`, `Release`, `GetLease`,
    /// `WatchLease`, `ListLeases`, `RevokeLease`, or `connect`; empty if
    /// unknown).
    pub fn rpc(&self) -> &str {
        self.context.as_ref().map_or("", |c| c.1.as_str())
    }

    /// The gRPC status code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The typed reason ([`Reason::Unspecified`] when the status had no Tenure
    /// `ErrorInfo`, or a reason this client does not know).
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// The reason string exactly as the server sent it (empty without an
    /// `ErrorInfo`); useful when [`Error::reason`] is [`Reason::Unspecified`]
    /// because the server is newer than this client.
    pub fn raw_reason(&self) -> &str {
        &self.raw_reason
    }

    /// The human-readable message (the server's, or the cause of a local or
    /// transport failure), without the target and RPC that `Display` adds.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The `ErrorInfo` metadata: `holder`, `fencing_token` and `ttl_seconds`
    /// for [`Reason::LeaseHeld`] (`state` `LOCK_DELAY` and
    /// `free_at_unix_ms` during a lock-delay, `state` `QUEUED` when others
    /// are queued for the name); `state` for [`Reason::LeaseNotHeld`];
    /// `limit` for [`Reason::LimitMismatch`]; `holders` and
    /// `max_shared_holders` for [`Reason::TooManySharedHolders`]; `in_use_as`
    /// or `mode` for [`Reason::ModeMismatch`]; `required_nats_server`,
    /// `bucket` and `stream` for [`Reason::AtomicBatchUnsupported`].
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// Whether sending the same call again may succeed. With a reason this
    /// client knows, that is [`Reason::is_retryable`] (NATS or the server
    /// away, too many requests, …); without one (the server could not be
    /// reached, the deadline passed, a newer server's reason) it goes by the
    /// gRPC code: `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`,
    /// `ABORTED`, `INTERNAL`, `UNKNOWN` and `CANCELLED` are retryable.
    pub fn is_retryable(&self) -> bool {
        if self.reason != Reason::Unspecified {
            return self.reason.is_retryable();
        }
        matches!(
            self.code,
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::ResourceExhausted
                | Code::Aborted
                | Code::Internal
                | Code::Unknown
                | Code::Cancelled
        )
    }
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Error {
        Error::from_status(&status)
    }
}

/// `Display`: `tenure at <target>: <RPC>: <REASON or CODE>: <message>`,
/// e.g. `tenure at 127.0.0.1:7419: Acquire: LEASE_HELD: …`.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.target().is_empty() {
            write!(f, "tenure at {}: ", self.target())?;
        }
        if !self.rpc().is_empty() {
            write!(f, "{}: ", self.rpc())?;
        }
        if self.reason != Reason::Unspecified {
            write!(f, "{}: {}", self.reason, self.message)
        } else if !self.raw_reason.is_empty() {
            write!(f, "{}: {}", self.raw_reason, self.message)
        } else {
            write!(f, "{}: {}", code_name(self.code), self.message)
        }
    }
}

/// The nats-server version that an `ATOMIC_BATCH_UNSUPPORTED` error names
/// (its `required_nats_server` metadata): the server's NATS has no atomic
/// batches, which lock-delay, semaphores and groups need. `None` for any
/// other error.
pub fn required_nats_server(err: &Error) -> Option<&str> {
    if err.reason() != Reason::AtomicBatchUnsupported {
        return None;
    }
    err.metadata()
        .get("required_nats_server")
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The gRPC code's canonical name (`UNAVAILABLE`, …).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::{ErrorDetails, StatusExt};

    #[test]
    fn reasons_round_trip_through_their_strings() {
        for reason in Reason::all() {
            assert_eq!(Reason::parse(reason.as_str()), reason);
        }
        assert_eq!(Reason::all().count(), REASON_NUMBERS.len() - 1);
        assert_eq!(Reason::parse("SOMETHING_NEW"), Reason::Unspecified);
        assert_eq!(Reason::parse(""), Reason::Unspecified);
        assert_eq!(Reason::LeaseHeld.to_string(), "LEASE_HELD");
        assert!(!Reason::Unspecified.is_retryable());
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
    fn atomic_batch_unsupported_names_the_nats_server_version() {
        let status = tonic::Status::with_error_details(
            Code::FailedPrecondition,
            "bucket cannot take atomic batch writes",
            ErrorDetails::with_error_info(
                "ATOMIC_BATCH_UNSUPPORTED",
                DOMAIN,
                [
                    ("required_nats_server".to_string(), "2.12".to_string()),
                    ("bucket".to_string(), "tenure".to_string()),
                    ("stream".to_string(), "KV_tenure".to_string()),
                ],
            ),
        );
        let err = Error::from(status);
        assert_eq!(err.reason(), Reason::AtomicBatchUnsupported);
        assert!(!err.is_retryable());
        assert_eq!(required_nats_server(&err), Some("2.12"));
        let held = Error::from(tonic::Status::with_error_details(
            Code::FailedPrecondition,
            "held",
            ErrorDetails::with_error_info(
                "LEASE_HELD",
                DOMAIN,
                [("required_nats_server".to_string(), "2.12".to_string())],
            ),
        ));
        assert_eq!(required_nats_server(&held), None);
    }

    #[test]
    fn permanent_reasons_are_not_retryable_whatever_their_code() {
        let status = |code, reason: &str| {
            Error::from(tonic::Status::with_error_details(
                code,
                "x",
                ErrorDetails::with_error_info(reason, DOMAIN, []),
            ))
        };
        // A RESOURCE_EXHAUSTED code was once enough to retry this one.
        let too_large = status(Code::ResourceExhausted, "REQUEST_TOO_LARGE");
        assert_eq!(too_large.reason(), Reason::RequestTooLarge);
        assert!(!too_large.is_retryable());
        assert!(!status(Code::Internal, "INTERNAL").is_retryable());
        assert!(status(Code::ResourceExhausted, "TOO_MANY_REQUESTS").is_retryable());
        // Read-write locks: a full set of shared holders may thin out; a
        // name used the other way (or an upgrade) never works.
        let full = status(Code::ResourceExhausted, "TOO_MANY_SHARED_HOLDERS");
        assert_eq!(full.reason(), Reason::TooManySharedHolders);
        assert!(full.is_retryable());
        let mismatch = status(Code::FailedPrecondition, "MODE_MISMATCH");
        assert_eq!(mismatch.reason(), Reason::ModeMismatch);
        assert!(!mismatch.is_retryable());
        assert!(status(Code::Unavailable, "SHUTTING_DOWN").is_retryable());
    }

    #[test]
    fn a_keepalive_entry_error_reads_like_the_unary_status() {
        let err = Error::from_keepalive(crate::proto::KeepAliveError {
            code: Code::FailedPrecondition as i32,
            reason: "LEASE_NOT_HELD".into(),
            message: "held by b".into(),
            metadata: [("state".to_string(), "HELD_BY_OTHER".to_string())].into(),
            retry_delay: None,
            same_as: None,
        });
        assert_eq!(err.code(), Code::FailedPrecondition);
        assert_eq!(err.reason(), Reason::LeaseNotHeld);
        assert_eq!(err.metadata()["state"], "HELD_BY_OTHER");
        assert_eq!(err.message(), "held by b");
        assert!(!err.is_retryable());
        let busy = Error::from_keepalive(crate::proto::KeepAliveError {
            code: Code::Unavailable as i32,
            reason: "NATS_UNAVAILABLE".into(),
            ..Default::default()
        });
        assert!(busy.is_retryable());
    }

    #[test]
    fn statuses_without_tenure_error_info_are_unspecified() {
        let err = Error::from(tonic::Status::unavailable("connection refused"));
        assert_eq!(err.reason(), Reason::Unspecified);
        assert!(err.is_retryable());
        assert_eq!(err.to_string(), "UNAVAILABLE: connection refused");
        let err = err.context("127.0.0.1:7001", "Acquire");
        assert_eq!(
            err.to_string(),
            "tenure at 127.0.0.1:7001: Acquire: UNAVAILABLE: connection refused"
        );

        let foreign = tonic::Status::with_error_details(
            Code::Internal,
            "x",
            ErrorDetails::with_error_info("LEASE_HELD", "other.domain", []),
        );
        assert_eq!(Error::from(foreign).reason(), Reason::Unspecified);

        let newer = tonic::Status::with_error_details(
            Code::FailedPrecondition,
            "x",
            ErrorDetails::with_error_info("LEASE_FROZEN", DOMAIN, []),
        );
        let err = Error::from(newer);
        assert_eq!(err.reason(), Reason::Unspecified);
        assert_eq!(err.raw_reason(), "LEASE_FROZEN");
        assert_eq!(err.to_string(), "LEASE_FROZEN: x");
        assert!(!err.is_retryable());
    }
}
