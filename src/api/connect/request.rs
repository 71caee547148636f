//! A Connect request made a gRPC request of the same method: the headers
//! (metadata kept, `authorization` included; the Connect ones replaced by
//! their gRPC equivalents) and a body that reads the Connect body within
//! `--max-request-bytes` and yields it as one gRPC message.
//!
//! The body is converted when tonic reads it, not before the call: the
//! limit layer's `--request-body-timeout` (and its cut at shutdown) then
//! bounds a Connect body that stalls exactly as it bounds a gRPC one, and
//! the refusals (too large, not valid JSON) reach the caller as the
//! statuses of the call, with their ErrorInfo reasons.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{
    HeaderName, HeaderValue, ACCEPT_ENCODING, CONNECTION, CONTENT_ENCODING, CONTENT_LENGTH,
    CONTENT_TYPE, EXPECT, TE, TRANSFER_ENCODING, UPGRADE,
};
use http::Version;
use http_body::{Frame, SizeHint};
use prost_reflect::{MessageDescriptor, MethodDescriptor};
use tonic::body::Body;
use tonic::Status;

use super::schema::Schema;
use super::{Codec, Format, Shape};
use crate::error::{Error, Reason};
use crate::observe::METRICS;

/// The bytes before each message of a stream (flags, then the length as a
/// big-endian u32), in Connect and gRPC alike.
pub const PREFIX: usize = 5;
/// The envelope flag of a compressed message.
const COMPRESSED: u8 = 0x01;

/// Headers of the Connect protocol and of HTTP/1.1 connections, not
/// passed on as gRPC metadata.
const DROPPED: &[&str] = &[
    "connect-protocol-version",
    "connect-timeout-ms",
    "connect-content-encoding",
    "connect-accept-encoding",
    "keep-alive",
    "proxy-connection",
];

/// The gRPC request for a Connect `request` of `method` in `format`;
/// Err when its headers already refuse it.
pub fn to_grpc(
    request: http::Request<Body>,
    format: Format,
    method: &MethodDescriptor,
    max_request_bytes: usize,
) -> Result<http::Request<Body>, Status> {
    let (mut parts, body) = request.into_parts();
    let headers = &mut parts.headers;
    if let Some(v) = headers.get("connect-protocol-version") {
        if v.as_bytes() != b"1" {
            return Err(invalid(
                "connect-protocol-version",
                "this server speaks Connect protocol version 1; send connect-protocol-version: 1 or leave it out",
            ));
        }
    }
    let encoding = match format.shape {
        Shape::Unary => CONTENT_ENCODING.as_str(),
        Shape::Stream => "connect-content-encoding",
    };
    if let Some(v) = headers.get(encoding) {
        if !v.as_bytes().eq_ignore_ascii_case(b"identity") {
            return Err(Status::unimplemented(format!(
                "{encoding} {:?} is not supported: this server reads identity (uncompressed) requests only",
                String::from_utf8_lossy(v.as_bytes())
            )));
        }
    }
    let timeout = match headers.get("connect-timeout-ms") {
        Some(v) => Some(grpc_timeout(v).ok_or_else(|| {
            invalid(
                "connect-timeout-ms",
                "connect-timeout-ms must be a positive number of milliseconds of at most 10 digits",
            )
        })?),
        None => None,
    };
    for name in DROPPED {
        headers.remove(*name);
    }
    for name in [
        CONTENT_LENGTH,
        CONTENT_ENCODING,
        ACCEPT_ENCODING,
        CONNECTION,
        TRANSFER_ENCODING,
        UPGRADE,
        EXPECT,
    ] {
        headers.remove(name);
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(TE, HeaderValue::from_static("trailers"));
    if let Some(timeout) = timeout {
        headers.insert(HeaderName::from_static("grpc-timeout"), timeout);
    }
    // The gRPC server behind (and tonic-web in front of it) serve HTTP/2
    // semantics; the connection's own version does not matter past here.
    parts.version = Version::HTTP_2;
    let limit = match format.shape {
        Shape::Unary => max_request_bytes,
        Shape::Stream => max_request_bytes.saturating_add(PREFIX),
    };
    let body = RequestBody {
        inner: body,
        buffer: BytesMut::new(),
        limit,
        format,
        input: method.input(),
        done: false,
    };
    Ok(http::Request::from_parts(parts, Body::new(body)))
}

/// `connect-timeout-ms` as a `grpc-timeout` value (which has at most 8
/// digits: timeouts from 100 000 s on are given in seconds).
fn grpc_timeout(value: &HeaderValue) -> Option<HeaderValue> {
    let text = value.to_str().ok()?;
    if text.is_empty() || text.len() > 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms: u64 = text.parse().ok()?;
    let value = if ms < 100_000_000 {
        format!("{ms}m")
    } else {
        format!("{}S", ms / 1000)
    };
    HeaderValue::from_str(&value).ok()
}

/// An INVALID_ARGUMENT refusal of a request header.
fn invalid(header: &'static str, message: &str) -> Status {
    Status::from(Error::new(Reason::InvalidArgument, message).with("field", header))
}

/// The Connect request body, yielded as one gRPC message once it has all
/// arrived.
struct RequestBody {
    /// The Connect body.
    inner: Body,
    /// What has arrived.
    buffer: BytesMut,
    /// The most bytes the body may have.
    limit: usize,
    /// How the body is encoded.
    format: Format,
    /// The request message type.
    input: MessageDescriptor,
    /// Whether the message (or an error) has been yielded.
    done: bool,
}

impl RequestBody {
    /// The whole body as one gRPC message (prefix and protobuf).
    fn message(&self) -> Result<Bytes, Status> {
        let payload = match self.format.shape {
            Shape::Unary => &self.buffer[..],
            Shape::Stream => envelope(&self.buffer)?,
        };
        let proto = match self.format.codec {
            Codec::Proto => payload.to_vec(),
            Codec::Json => Schema::json_to_proto(&self.input, payload).map_err(|err| {
                Status::from(
                    Error::new(
                        Reason::InvalidArgument,
                        format!(
                            "the request is not a valid JSON {}: {}; send one JSON object in the proto3 JSON mapping",
                            self.input.full_name(),
                            crate::api::auth::clip(&err)
                        ),
                    )
                    .with("field", "request"),
                )
            })?,
        };
        let mut framed = BytesMut::with_capacity(PREFIX + proto.len());
        framed.put_u8(0);
        framed.put_u32(u32::try_from(proto.len()).map_err(|_| too_large(self.limit))?);
        framed.put_slice(&proto);
        Ok(framed.freeze())
    }
}

/// The one message of a streaming request body: exactly one uncompressed
/// envelope.
fn envelope(body: &[u8]) -> Result<&[u8], Status> {
    let refuse = |why: &str| {
        Status::from(
            Error::new(
                Reason::InvalidArgument,
                format!("{why}: a streaming Connect request is one enveloped message (flags 0, a 4-byte big-endian length, the message)"),
            )
            .with("field", "request"),
        )
    };
    if body.len() < PREFIX {
        return Err(refuse("the request has no enveloped message"));
    }
    let flags = body[0];
    if flags & COMPRESSED != 0 {
        return Err(Status::unimplemented(
            "compressed messages are not supported: this server reads uncompressed requests only",
        ));
    }
    if flags != 0 {
        return Err(refuse(&format!("the envelope has flags {flags:#04x}")));
    }
    let length = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if body.len() - PREFIX != length {
        return Err(refuse(&format!(
            "the envelope says {length} bytes but {} follow",
            body.len() - PREFIX
        )));
    }
    Ok(&body[PREFIX..])
}

/// The refusal of a body over `limit` bytes.
fn too_large(limit: usize) -> Status {
    METRICS.rejected("request_bytes");
    Status::from(
        Error::new(
            Reason::RequestTooLarge,
            "the request body is larger than this server accepts (--max-request-bytes); send a smaller request",
        )
        .with("limit_bytes", limit),
    )
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers of a request: nothing to use
                    };
                    if this.buffer.len() + data.len() > this.limit {
                        this.done = true;
                        return Poll::Ready(Some(Err(too_large(this.limit))));
                    }
                    this.buffer.extend_from_slice(&data);
                    // A streaming body says its length up front: refuse a
                    // message that can never fit without waiting for it.
                    if this.format.shape == Shape::Stream && this.buffer.len() >= PREFIX {
                        let b = &this.buffer;
                        let length = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
                        if length > this.limit - PREFIX {
                            this.done = true;
                            return Poll::Ready(Some(Err(too_large(this.limit - PREFIX))));
                        }
                    }
                }
                Some(Err(status)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(status)));
                }
                None => {
                    this.done = true;
                    return Poll::Ready(Some(this.message().map(Frame::data)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_fit_grpc() {
        let t = |s: &str| {
            grpc_timeout(&HeaderValue::from_str(s).unwrap())
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(t("1500").as_deref(), Some("1500m"));
        assert_eq!(t("99999999").as_deref(), Some("99999999m"));
        assert_eq!(t("100000000").as_deref(), Some("100000S"));
        assert_eq!(t("9999999999").as_deref(), Some("9999999S"));
        assert_eq!(t(""), None);
        assert_eq!(t("-1"), None);
        assert_eq!(t("12345678901"), None);
        assert_eq!(t("1.5"), None);
    }

    #[test]
    fn envelopes_are_checked() {
        assert_eq!(envelope(&[0, 0, 0, 0, 2, b'{', b'}']).unwrap(), b"{}");
        assert!(envelope(&[0, 0, 0]).is_err());
        assert!(envelope(&[0, 0, 0, 0, 3, b'{', b'}']).is_err());
        assert_eq!(
            envelope(&[1, 0, 0, 0, 0]).unwrap_err().code(),
            tonic::Code::Unimplemented
        );
        assert!(envelope(&[2, 0, 0, 0, 0]).is_err());
    }
}
