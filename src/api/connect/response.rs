//! The gRPC answer made a Connect one.
//!
//! - Unary: the whole gRPC answer is read (one message and the status),
//!   then sent as `200` with the bare message, or as the error's HTTP
//!   status with the error JSON. Response metadata becomes headers;
//!   trailing metadata becomes `trailer-` headers.
//! - Streaming: `200` at once, then each gRPC message as it comes, as a
//!   Connect envelope (flags 0), and last the end message (flags 0x02):
//!   `{}` after success, `{"error": {...}}` after a failure, with the
//!   trailing metadata under `"metadata"`.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, TE, TRAILER};
use http::{HeaderMap, StatusCode};
use http_body::{Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use prost_reflect::{MessageDescriptor, MethodDescriptor};
use serde::Serialize;
use tonic::body::Body;
use tonic::{Code, Status};

use super::error::{error_json, http_status, ConnectError};
use super::request::PREFIX;
use super::schema::Schema;
use super::{Codec, Format, Shape, Shared};

/// The envelope flag of a stream's end message.
const END_STREAM: u8 = 0x02;

/// The Connect answer to a gRPC `answer` of `method`.
pub async fn from_grpc(
    answer: http::Response<Body>,
    format: Format,
    method: &MethodDescriptor,
    shared: Arc<Shared>,
) -> http::Response<Body> {
    match format.shape {
        Shape::Unary => unary(answer, format, &method.output(), &shared.schema).await,
        Shape::Stream => stream(answer, format, method.output(), shared),
    }
}

/// The Connect answer refusing a call with `status` before it reached the
/// gRPC server.
pub fn refusal(format: Format, status: &Status, schema: &Schema) -> http::Response<Body> {
    match format.shape {
        Shape::Unary => unary_error(status, &HeaderMap::new(), &HeaderMap::new(), schema),
        Shape::Stream => {
            let end = end_message(Some(status), &HeaderMap::new(), schema);
            reply(
                StatusCode::OK,
                format.content_type(),
                &HeaderMap::new(),
                Body::new(Full::new(end)),
            )
        }
    }
}

/// A unary call's answer: read whole, then the message or the error.
async fn unary(
    answer: http::Response<Body>,
    format: Format,
    output: &MessageDescriptor,
    schema: &Schema,
) -> http::Response<Body> {
    let (parts, body) = answer.into_parts();
    let leading = &parts.headers;
    // Trailers-only: the status is in the headers and there is no message.
    if let Some(status) = Status::from_header_map(leading) {
        if status.code() != Code::Ok {
            return unary_error(&status, leading, &HeaderMap::new(), schema);
        }
    }
    let collected = match body.collect().await {
        Ok(collected) => collected,
        Err(status) => return unary_error(&status, leading, &HeaderMap::new(), schema),
    };
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let mut data = BytesMut::from(collected.to_bytes());
    let status = Status::from_header_map(&trailers)
        .or_else(|| Status::from_header_map(leading))
        .unwrap_or_else(|| Status::internal("the call ended without a gRPC status"));
    if status.code() != Code::Ok {
        return unary_error(&status, leading, &trailers, schema);
    }
    let message = match next_message(&mut data) {
        Ok(Some(message)) if data.is_empty() => Ok(message),
        Ok(_) => Err(Status::internal(
            "the call did not answer exactly one message",
        )),
        Err(status) => Err(status),
    }
    .and_then(|message| encode(format.codec, output, message));
    match message {
        Ok(message) => {
            let mut headers = metadata(leading);
            headers.extend(trailer_headers(&trailers));
            reply(
                StatusCode::OK,
                format.content_type(),
                &headers,
                Body::new(Full::new(message)),
            )
        }
        Err(status) => unary_error(&status, leading, &trailers, schema),
    }
}

/// A unary Connect error: the HTTP status of its code and the error JSON.
fn unary_error(
    status: &Status,
    leading: &HeaderMap,
    trailers: &HeaderMap,
    schema: &Schema,
) -> http::Response<Body> {
    let mut headers = metadata(leading);
    headers.extend(trailer_headers(trailers));
    let body = serde_json::to_vec(&error_json(status, schema)).unwrap_or_default();
    reply(
        http_status(status.code()),
        "application/json",
        &headers,
        Body::new(Full::new(Bytes::from(body))),
    )
}

/// A streaming call's answer: `200` now, the messages as they come.
fn stream(
    answer: http::Response<Body>,
    format: Format,
    output: MessageDescriptor,
    shared: Arc<Shared>,
) -> http::Response<Body> {
    let (parts, body) = answer.into_parts();
    // Trailers-only: the status (and trailing metadata) is in the headers.
    let (inner, head_status) = match parts.headers.contains_key("grpc-status") {
        true => (None, Some(parts.headers.clone())),
        false => (Some(body), None),
    };
    let body = StreamBody {
        inner,
        head_status,
        buffer: BytesMut::new(),
        codec: format.codec,
        output,
        shared,
        ended: false,
    };
    let leading = match body.head_status {
        Some(_) => HeaderMap::new(),
        None => metadata(&parts.headers),
    };
    reply(
        StatusCode::OK,
        format.content_type(),
        &leading,
        Body::new(body),
    )
}

/// The HTTP response of a Connect answer.
fn reply(
    status: StatusCode,
    content_type: &'static str,
    headers: &HeaderMap,
    body: Body,
) -> http::Response<Body> {
    let mut response = http::Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers.clone();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Whether a gRPC header is the protocol's own, not the call's metadata.
fn is_protocol(name: &HeaderName) -> bool {
    let name = name.as_str();
    name.starts_with("grpc-")
        || [CONTENT_TYPE, CONTENT_LENGTH, TE, TRAILER]
            .iter()
            .any(|h| h.as_str() == name)
}

/// The call's metadata among gRPC `headers`.
fn metadata(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        if !is_protocol(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// gRPC trailing metadata as `trailer-` headers of a unary answer.
fn trailer_headers(trailers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in trailers {
        if is_protocol(name) {
            continue;
        }
        if let Ok(prefixed) = HeaderName::from_bytes(format!("trailer-{name}").as_bytes()) {
            out.append(prefixed, value.clone());
        }
    }
    out
}

/// Takes the next whole gRPC message off the front of `data`, if one has
/// arrived.
fn next_message(data: &mut BytesMut) -> Result<Option<Bytes>, Status> {
    if data.len() < PREFIX {
        return Ok(None);
    }
    if data[0] != 0 {
        return Err(Status::internal(
            "the gRPC answer was compressed, which Connect calls do not ask for",
        ));
    }
    let length = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
    if data.len() < PREFIX + length {
        return Ok(None);
    }
    data.advance(PREFIX);
    Ok(Some(data.split_to(length).freeze()))
}

/// One reply message in the call's codec.
fn encode(codec: Codec, output: &MessageDescriptor, message: Bytes) -> Result<Bytes, Status> {
    match codec {
        Codec::Proto => Ok(message),
        Codec::Json => Schema::proto_to_json(output, message)
            .map(Bytes::from)
            .map_err(|e| Status::internal(format!("the reply could not be written as JSON: {e}"))),
    }
}

/// A Connect envelope of `payload` with `flags`.
fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(PREFIX + payload.len());
    out.put_u8(flags);
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

/// The end message of a stream.
#[derive(Serialize)]
struct EndStream {
    /// The error, when the call failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ConnectError>,
    /// The trailing metadata: each name with its values.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    metadata: BTreeMap<String, Vec<String>>,
}

/// The end message of a stream: the error (if the call failed) and the
/// trailing metadata, enveloped.
fn end_message(error: Option<&Status>, trailers: &HeaderMap, schema: &Schema) -> Bytes {
    let mut metadata = BTreeMap::<String, Vec<String>>::new();
    for (name, value) in trailers {
        if let (false, Ok(value)) = (is_protocol(name), value.to_str()) {
            metadata
                .entry(name.to_string())
                .or_default()
                .push(value.to_string());
        }
    }
    let end = EndStream {
        error: error
            .filter(|s| s.code() != Code::Ok)
            .map(|s| error_json(s, schema)),
        metadata,
    };
    envelope(END_STREAM, &serde_json::to_vec(&end).unwrap_or_default())
}

/// The body of a streaming Connect answer over the gRPC answer's body.
struct StreamBody {
    /// The gRPC body; None once read to its end (or for trailers-only).
    inner: Option<Body>,
    /// The headers of a trailers-only answer, which hold its status.
    head_status: Option<HeaderMap>,
    /// gRPC bytes received and not yet a whole message.
    buffer: BytesMut,
    /// The codec of the replies.
    codec: Codec,
    /// The reply message type.
    output: MessageDescriptor,
    /// The schema, for error details.
    shared: Arc<Shared>,
    /// Whether the end message has been sent.
    ended: bool,
}

impl StreamBody {
    /// The end message for `status` and `trailers`; ends the body and lets
    /// the gRPC body (and what the call holds) go.
    fn end(
        &mut self,
        status: &Status,
        trailers: &HeaderMap,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.ended = true;
        self.inner = None;
        let end = end_message(Some(status), trailers, &self.shared.schema);
        Poll::Ready(Some(Ok(Frame::data(end))))
    }
}

impl http_body::Body for StreamBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            match next_message(&mut this.buffer) {
                Ok(Some(message)) => match encode(this.codec, &this.output, message) {
                    Ok(payload) => {
                        return Poll::Ready(Some(Ok(Frame::data(envelope(0, &payload)))))
                    }
                    Err(status) => return this.end(&status, &HeaderMap::new()),
                },
                Ok(None) => {}
                Err(status) => return this.end(&status, &HeaderMap::new()),
            }
            let Some(inner) = this.inner.as_mut() else {
                let head = this.head_status.take().unwrap_or_default();
                let status = Status::from_header_map(&head)
                    .unwrap_or_else(|| Status::internal("the call ended without a gRPC status"));
                return this.end(&status, &head);
            };
            match std::task::ready!(Pin::new(inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.buffer.extend_from_slice(&data),
                    Err(frame) => {
                        let trailers = frame.into_trailers().unwrap_or_default();
                        let status = Status::from_header_map(&trailers).unwrap_or_else(|| {
                            Status::internal("the call ended without a gRPC status")
                        });
                        return this.end(&status, &trailers);
                    }
                },
                Some(Err(status)) => return this.end(&status, &HeaderMap::new()),
                None => {
                    let status = Status::internal("the call ended without a gRPC status");
                    return this.end(&status, &HeaderMap::new());
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
