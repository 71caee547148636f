//! Errors of the client subcommands and their exit codes: every failure
//! becomes one line, `tenure: REASON: what happened; what to do`, and a
//! documented exit code.
//!
//! The reason is the server's `google.rpc.ErrorInfo` reason (one of
//! `crate::proto::ErrorReason`) when there is one, so scripts and people see
//! the same word the API documents; transport failures get the gRPC code's
//! name instead.

use std::fmt;

use tonic::Code;
use tonic_types::StatusExt;

use crate::proto::ErrorReason;

/// Exit code: usage error (bad flag value, unsupported option). Same as
/// clap's own usage errors.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the request was refused or failed for another reason (not
/// found, invalid argument, not held, internal).
pub const EXIT_FAILED: u8 = 1;
/// Exit code: the server cannot be reached or is unavailable
/// (sysexits EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Exit code: the server answered with what no Tenure server sends (a TTL
/// above the 8760h ceiling): it is broken or not Tenure. `tenure lock`
/// releases what it was granted and does not run the command (sysexits
/// EX_SOFTWARE: an error in the software, the server's).
pub const EXIT_BAD_RESPONSE: u8 = 70;
/// Exit code: the lease was not acquired, it is held by another and the
/// wait (if any) ran out (sysexits EX_TEMPFAIL: try again later).
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit code: `tenure lock` lost the lease while the command ran; the
/// command was signalled.
pub const EXIT_LEASE_LOST: u8 = 76;
/// Exit code: authentication failed or the identity lacks the grant
/// (sysexits EX_NOPERM).
pub const EXIT_NO_PERMISSION: u8 = 77;
/// Exit code: the command was found but could not be run (as in shells).
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// Exit code: the command was not found (as in shells).
pub const EXIT_NOT_FOUND: u8 = 127;

/// One failure, ready to print as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// The process exit code it leads to.
    pub code: u8,
    /// The reason word: an `ErrorReason` name, a gRPC code name, or
    /// `USAGE`.
    pub reason: String,
    /// What happened (the server's message when it sent one).
    pub message: String,
    /// What to do about it, when there is something to say.
    pub hint: Option<String>,
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "; {h}")?;
        }
        Ok(())
    }
}

impl CliError {
    /// A usage error found by the client itself.
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            code: EXIT_USAGE,
            reason: "USAGE".into(),
            message: message.into(),
            hint: None,
        }
    }

    /// The server cannot be reached at all; `cause` with its sources.
    pub fn unreachable(server: &str, cause: &(dyn std::error::Error + 'static)) -> CliError {
        CliError {
            code: EXIT_UNAVAILABLE,
            reason: "UNAVAILABLE".into(),
            message: format!("cannot reach {server}: {}", chain(cause)),
            hint: Some(
                "check that tenure serve runs there, or set --server / TENURE_SERVER".into(),
            ),
        }
    }

    /// Prints the error as one line on stderr.
    pub fn print(&self) {
        super::output::write_err(&format!("tenure: {}", one_line(&self.to_string())));
    }

    /// The error as a `Status`-derived value: reason from ErrorInfo, the
    /// exit code and a hint from the reason.
    pub fn from_status(status: &tonic::Status) -> CliError {
        let info = status.get_details_error_info();
        let reason = match &info {
            Some(i) => i.reason.clone(),
            None => code_name(status.code()).to_string(),
        };
        let known = ErrorReason::from_str_name(&reason);
        let code = match (known, status.code()) {
            (Some(ErrorReason::LeaseHeld), _) => EXIT_NOT_ACQUIRED,
            (Some(ErrorReason::Unauthenticated | ErrorReason::PermissionDenied), _) => {
                EXIT_NO_PERMISSION
            }
            (Some(ErrorReason::NatsUnavailable | ErrorReason::ShuttingDown), _) => EXIT_UNAVAILABLE,
            (None, Code::Unauthenticated | Code::PermissionDenied) => EXIT_NO_PERMISSION,
            (
                None,
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown,
            ) => EXIT_UNAVAILABLE,
            _ => EXIT_FAILED,
        };
        let mut message = status.message().to_string();
        if message.is_empty() {
            message = format!("{:?}", status.code());
        }
        if info.is_none() {
            if let Some(source) = std::error::Error::source(status) {
                message = format!("{message}: {}", chain(source));
            }
        }
        let hint = match known {
            Some(r) => hint(r),
            None => match status.code() {
                Code::Unavailable | Code::Cancelled | Code::Unknown => Some(
                    "check that the server runs and --server points at it; a server that requires client certificates closes the connection without --tls-cert/--tls-key",
                ),
                Code::DeadlineExceeded => {
                    Some("the server did not answer in time; raise --timeout or check its load")
                }
                Code::Unimplemented => Some("the server is older than this client; upgrade it"),
                _ => None,
            },
        };
        CliError {
            code,
            reason,
            message,
            hint: hint.map(str::to_string),
        }
    }
}

/// What to do about each reason.
fn hint(reason: ErrorReason) -> Option<&'static str> {
    Some(match reason {
        ErrorReason::LeaseHeld => "to wait for it, add --wait 30s (or --wait forever)",
        ErrorReason::LeaseNotHeld => {
            "the holding ended (released, expired, revoked or taken) or the revision/key is not its latest; acquire again"
        }
        ErrorReason::InvalidName => "names use [-/_=.a-zA-Z0-9], up to 255, no leading/trailing or double dots",
        ErrorReason::InvalidTtl => "ask for a TTL between the server's --min-ttl and --max-ttl",
        ErrorReason::InvalidWait => "ask for a shorter --wait, up to the server's --max-wait",
        ErrorReason::InvalidLeaseKey => "lease keys are 16 to 256 printable ASCII characters",
        ErrorReason::InvalidHolder => "give --holder as 1 to 256 bytes of printable text",
        ErrorReason::InvalidMetadata => "use at most 16 --meta entries, 1024 bytes in all",
        ErrorReason::InvalidRevision => "pass --revision from the last acquire or renew",
        ErrorReason::Unauthenticated => "pass a valid --token / --token-file (or TENURE_TOKEN), or a client certificate",
        ErrorReason::PermissionDenied => "ask an operator for a grant covering this name and action",
        ErrorReason::NatsUnavailable => "the server cannot reach NATS; retry shortly",
        ErrorReason::ShuttingDown => "this replica is stopping; retry (on another replica)",
        ErrorReason::TooManyRequests | ErrorReason::TooManyWatches => "the server is at its limit; retry shortly",
        ErrorReason::TooManyWaiters => "too many Acquires wait for this name; retry later or without --wait",
        ErrorReason::RecordUnreadable => "an operator must remove the foreign value under this name",
        ErrorReason::Internal => "a bug in the server: report it with this line",
        ErrorReason::WatchLagged => "the watch fell behind; start it again",
        _ => return None,
    })
}

/// The canonical name of a gRPC code (`UNAVAILABLE`).
fn code_name(code: Code) -> &'static str {
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

/// An error with its chain of causes, `a: b: c`, on one line (a cause
/// already quoted by the one above it is not repeated).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = cause.source();
    }
    one_line(&parts.join(": "))
}

/// Joins lines so the error stays one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a status means the caller no longer holds, or never will hold,
/// the lease with this request: retrying the same Renew cannot help.
pub fn permanent(status: &tonic::Status) -> bool {
    match status.get_details_error_info() {
        Some(info) => !matches!(
            ErrorReason::from_str_name(&info.reason),
            Some(
                ErrorReason::NatsUnavailable
                    | ErrorReason::ShuttingDown
                    | ErrorReason::TooManyRequests
                    | ErrorReason::TooManyWatches
                    | ErrorReason::TooManyWaiters
                    | ErrorReason::WatchLagged
            )
        ),
        // No ErrorInfo: the call never reached Tenure (transport, timeout).
        None => !matches!(
            status.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Unknown
                | Code::ResourceExhausted
                | Code::Internal
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::{ErrorDetails, StatusExt};

    fn status(code: Code, reason: &str) -> tonic::Status {
        tonic::Status::with_error_details(
            code,
            "lease \"a\" is held by \"w1\"",
            ErrorDetails::with_error_info(reason, "tenure.v1", []),
        )
    }

    /// LEASE_HELD is "not acquired" (75) with a hint to wait; one line.
    #[test]
    fn lease_held() {
        let e = CliError::from_status(&status(Code::FailedPrecondition, "LEASE_HELD"));
        assert_eq!(e.code, EXIT_NOT_ACQUIRED);
        assert_eq!(e.reason, "LEASE_HELD");
        let line = e.to_string();
        assert!(
            line.starts_with("LEASE_HELD: lease \"a\" is held by \"w1\"; "),
            "{line}"
        );
        assert!(line.contains("--wait"), "{line}");
    }

    /// Permission and transport failures get their own codes.
    #[test]
    fn codes() {
        assert_eq!(
            CliError::from_status(&status(Code::PermissionDenied, "PERMISSION_DENIED")).code,
            EXIT_NO_PERMISSION
        );
        assert_eq!(
            CliError::from_status(&status(Code::Unavailable, "NATS_UNAVAILABLE")).code,
            EXIT_UNAVAILABLE
        );
        let bare = CliError::from_status(&tonic::Status::unavailable("connection refused"));
        assert_eq!(
            (bare.code, bare.reason.as_str()),
            (EXIT_UNAVAILABLE, "UNAVAILABLE")
        );
        assert_eq!(
            CliError::from_status(&status(Code::NotFound, "LEASE_NOT_FOUND")).code,
            EXIT_FAILED
        );
    }

    /// What a lock's renewer gives up on and what it retries.
    #[test]
    fn permanence() {
        assert!(permanent(&status(
            Code::FailedPrecondition,
            "LEASE_NOT_HELD"
        )));
        assert!(permanent(&status(
            Code::PermissionDenied,
            "PERMISSION_DENIED"
        )));
        assert!(!permanent(&status(Code::Unavailable, "NATS_UNAVAILABLE")));
        assert!(!permanent(&tonic::Status::unavailable("refused")));
        assert!(!permanent(&tonic::Status::deadline_exceeded("slow")));
    }

    /// Multi-line causes are folded onto one line.
    #[test]
    fn folded() {
        assert_eq!(one_line("a\n  b\tc"), "a b c");
    }
}
