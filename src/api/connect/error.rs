//! A gRPC status as a Connect error: the code's name (the gRPC code in
//! lower snake case), its HTTP status for unary calls, and the error JSON
//!
//! ```json
//! {"code": "failed_precondition", "message": "...",
//!  "details": [{"type": "google.rpc.ErrorInfo", "value": "<base64>",
//!               "debug": {"reason": "LEASE_HELD", "domain": "tenure.v1", "metadata": {...}}}]}
//! ```
//!
//! `type` and `value` (the detail's protobuf, unpadded standard base64)
//! are what Connect clients decode; `debug`, the same detail as JSON, is
//! for people reading the reply (curl), as the protocol allows.

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use http::StatusCode;
use prost::Message;
use prost_reflect::DynamicMessage;
use serde::Serialize;
use tonic::{Code, Status};

use super::schema::Schema;

/// The Connect name of `code`.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "canceled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// The HTTP status of a unary Connect error with `code`.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            StatusCode::BAD_REQUEST
        }
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A Connect error, in the protocol's field order.
#[derive(Serialize)]
pub struct ConnectError {
    /// The code's name.
    code: &'static str,
    /// The status message, when there is one.
    #[serde(skip_serializing_if = "String::is_empty")]
    message: String,
    /// The status details.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    details: Vec<Detail>,
}

/// One error detail.
#[derive(Serialize)]
struct Detail {
    /// The detail's full message name (`google.rpc.ErrorInfo`).
    #[serde(rename = "type")]
    kind: String,
    /// Its protobuf, unpadded standard base64.
    value: String,
    /// The same message as JSON, when its type is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    debug: Option<DynamicMessage>,
}

/// `status` (not OK) as a Connect error.
pub fn error_json(status: &Status, schema: &Schema) -> ConnectError {
    ConnectError {
        code: code_name(status.code()),
        message: status.message().to_string(),
        details: details(status.details(), schema),
    }
}

/// The details of a `grpc-status-details-bin` (a `google.rpc.Status`) as
/// Connect error details.
fn details(encoded: &[u8], schema: &Schema) -> Vec<Detail> {
    if encoded.is_empty() {
        return Vec::new();
    }
    let Ok(rpc_status) = tonic_types::pb::Status::decode(encoded) else {
        return Vec::new();
    };
    rpc_status
        .details
        .iter()
        .map(|any| {
            let kind = any.type_url.rsplit('/').next().unwrap_or(&any.type_url);
            Detail {
                kind: kind.to_string(),
                value: STANDARD_NO_PAD.encode(&any.value),
                debug: schema.detail(kind, &any.value),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, Reason};

    #[test]
    fn codes_are_lower_snake_case_of_grpc() {
        assert_eq!(code_name(Code::FailedPrecondition), "failed_precondition");
        assert_eq!(code_name(Code::Cancelled), "canceled");
        assert_eq!(http_status(Code::ResourceExhausted).as_u16(), 429);
        assert_eq!(http_status(Code::Unauthenticated).as_u16(), 401);
        assert_eq!(http_status(Code::Cancelled).as_u16(), 499);
    }

    #[test]
    fn details_carry_the_reason() {
        let schema = Schema::load().unwrap();
        let status = Status::from(
            Error::new(Reason::LeaseHeld, "held by w1")
                .with("holder", "w1")
                .retry_after(std::time::Duration::from_secs(2)),
        );
        let error = serde_json::to_value(error_json(&status, &schema)).unwrap();
        assert_eq!(error["code"], "failed_precondition");
        assert_eq!(error["message"], "held by w1");
        let detail = |kind: &str| {
            error["details"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["type"] == kind)
                .unwrap_or_else(|| panic!("no {kind} in {error}"))
                .clone()
        };
        let info = &detail("google.rpc.ErrorInfo");
        assert_eq!(info["debug"]["reason"], "LEASE_HELD");
        assert_eq!(info["debug"]["domain"], "tenure.v1");
        assert_eq!(info["debug"]["metadata"]["holder"], "w1");
        let value = STANDARD_NO_PAD
            .decode(info["value"].as_str().unwrap())
            .unwrap();
        let decoded = tonic_types::pb::ErrorInfo::decode(&value[..]).unwrap();
        assert_eq!(decoded.reason, "LEASE_HELD");
        assert_eq!(detail("google.rpc.RetryInfo")["debug"]["retryDelay"], "2s");
        // The protocol's order, for people reading it.
        let text = serde_json::to_string(&error_json(&status, &schema)).unwrap();
        assert!(
            text.starts_with(
                r#"{"code":"failed_precondition","message":"held by w1","details":[{"type":"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#""debug":{"reason":"LEASE_HELD","domain":"tenure.v1""#),
            "{text}"
        );
    }
}
