//! The Connect protocol (connectrpc.com/docs/protocol) on the gRPC port:
//! [`ConnectLayer`], a tower layer in front of the gRPC server that turns
//! each Connect call into a gRPC call of the same generated tonic service
//! and its gRPC answer back into Connect. A Connect caller therefore goes
//! through everything a gRPC caller does, unchanged: the limit layer
//! (metadata size, the request body's time to arrive, the connection's
//! busy mark, the rewriting of tonic's refusals), and then the one RPC
//! wrapper (authentication from the same `authorization` header,
//! validation, authorization, call permits, watch slots, spans, metrics,
//! error reasons). Nothing here knows what a lease is.
//!
//! What it serves: unary calls with `application/json` or
//! `application/proto` bodies, and server-streaming calls (`WatchLease`,
//! `Observe`, health `Watch`) with `application/connect+json` or
//! `application/connect+proto` enveloped messages, over HTTP/1.1 or
//! HTTP/2, POST only. It refuses, as Connect errors: methods that stream
//! requests (`KeepAlive`, reflection), which need gRPC; compressed
//! requests (`content-encoding` other than `identity`); and Connect's GET
//! form of unary calls. Requests of no Connect content type pass through
//! untouched (gRPC, gRPC-Web). JSON is the proto3 JSON mapping, read and
//! written from the descriptor set the server is built from (no
//! per-message code); unknown JSON fields are ignored, as unknown protobuf
//! fields are.
//!
//! The files, along a call:
//!
//! - `mod.rs` (here): the layer; which requests are Connect requests and
//!   which method they call, and the refusals of what is not served.
//! - [`schema`]: the descriptor pool of the served services and of the
//!   error details; JSON ↔ protobuf of one message.
//! - [`request`]: the Connect request made a gRPC request: its headers
//!   (`connect-timeout-ms` becomes `grpc-timeout`) and its body, read
//!   within `--max-request-bytes` and re-encoded as one gRPC message when
//!   tonic reads it (so the limit layer's body timeout covers it).
//! - [`response`]: the gRPC response made a Connect one: a unary reply or
//!   error, or the enveloped messages of a stream and its end message.
//! - [`error`]: a gRPC status as Connect error JSON: code name, HTTP
//!   status, and details with `type`, `value` (base64 protobuf) and
//!   `debug` (the detail as JSON, so the ErrorInfo reason is readable).

mod error;
mod request;
mod response;
mod schema;

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{BoxFuture, Either};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, Method};
use prost_reflect::MethodDescriptor;
use tonic::body::Body;
use tonic::Status;

use crate::config::Config;
use crate::error::{Error, Reason};
use schema::Schema;

/// The tower layer serving Connect calls in front of the gRPC server.
#[derive(Clone)]
pub struct ConnectLayer {
    /// What every call shares.
    shared: Arc<Shared>,
}

/// The schema and limits of every Connect call.
struct Shared {
    /// The services and messages, for JSON and method lookup.
    schema: Schema,
    /// The largest request message (`--max-request-bytes`): the bound of a
    /// request body, JSON or protobuf.
    max_request_bytes: usize,
}

impl ConnectLayer {
    /// The layer for `config`'s limits, over the descriptor sets the server
    /// is built from. Fails only if those do not load (a build defect).
    pub fn new(config: &Config) -> Result<ConnectLayer, String> {
        Ok(ConnectLayer {
            shared: Arc::new(Shared {
                schema: Schema::load()?,
                max_request_bytes: config.max_request_bytes,
            }),
        })
    }
}

impl<S> tower::Layer<S> for ConnectLayer {
    type Service = ConnectService<S>;

    fn layer(&self, inner: S) -> ConnectService<S> {
        ConnectService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`ConnectLayer`] wraps around the gRPC server.
#[derive(Clone)]
pub struct ConnectService<S> {
    /// The gRPC server (behind the limit layer).
    inner: S,
    /// Schema and limits.
    shared: Arc<Shared>,
}

/// How messages are encoded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Codec {
    /// The proto3 JSON mapping.
    Json,
    /// Binary protobuf.
    Proto,
}

/// Which Connect shape a request has, from its content type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    /// One bare message each way; errors as HTTP statuses.
    Unary,
    /// Enveloped messages; the end message carries the status.
    Stream,
}

/// What a Connect request is: its shape and codec.
#[derive(Clone, Copy, Debug)]
struct Format {
    /// Unary or streaming.
    shape: Shape,
    /// JSON or protobuf.
    codec: Codec,
}

impl Format {
    /// The Connect format of a request with these headers, or None when it
    /// is not a Connect request (gRPC, gRPC-Web, anything else).
    fn of(headers: &HeaderMap) -> Option<Format> {
        let value = headers.get(CONTENT_TYPE)?.to_str().ok()?;
        let media = value.split(';').next().unwrap_or("").trim();
        let (shape, codec) = match media.to_ascii_lowercase().as_str() {
            "application/json" => (Shape::Unary, Codec::Json),
            "application/proto" => (Shape::Unary, Codec::Proto),
            "application/connect+json" => (Shape::Stream, Codec::Json),
            "application/connect+proto" => (Shape::Stream, Codec::Proto),
            _ => return None,
        };
        Some(Format { shape, codec })
    }

    /// The content type of replies in this format (errors of unary calls
    /// are always JSON).
    fn content_type(self) -> &'static str {
        match (self.shape, self.codec) {
            (Shape::Unary, Codec::Json) => "application/json",
            (Shape::Unary, Codec::Proto) => "application/proto",
            (Shape::Stream, Codec::Json) => "application/connect+json",
            (Shape::Stream, Codec::Proto) => "application/connect+proto",
        }
    }
}

impl<S> tower::Service<http::Request<Body>> for ConnectService<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Either<S::Future, BoxFuture<'static, Result<Self::Response, Self::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let Some(format) = Format::of(request.headers()) else {
            return Either::Left(self.inner.call(request));
        };
        let shared = self.shared.clone();
        let method = match served_method(&shared.schema, &request, format) {
            Ok(method) => method,
            Err(status) => {
                let refusal = response::refusal(format, &status, &shared.schema);
                return Either::Right(Box::pin(async move { Ok(refusal) }));
            }
        };
        let grpc = match request::to_grpc(request, format, &method, shared.max_request_bytes) {
            Ok(grpc) => grpc,
            Err(status) => {
                let refusal = response::refusal(format, &status, &shared.schema);
                return Either::Right(Box::pin(async move { Ok(refusal) }));
            }
        };
        let call = self.inner.call(grpc);
        Either::Right(Box::pin(async move {
            let answer = call.await?;
            Ok(response::from_grpc(answer, format, &method, shared).await)
        }))
    }
}

/// The method a Connect request calls, if it is one served over Connect.
fn served_method(
    schema: &Schema,
    request: &http::Request<Body>,
    format: Format,
) -> Result<MethodDescriptor, Status> {
    if *request.method() != Method::POST {
        return Err(Status::from(Error::new(
            Reason::InvalidArgument,
            format!(
                "Connect calls are POST requests, not {}; send the request message as the body",
                request.method()
            ),
        )));
    }
    let path = request.uri().path();
    let Some(method) = schema.method(path) else {
        return Err(Status::unimplemented(format!(
            "{} is not a method of this server",
            super::auth::clip(path)
        )));
    };
    if method.is_client_streaming() {
        return Err(Status::unimplemented(format!(
            "{} streams requests, which needs gRPC (HTTP/2); call it over gRPC",
            method.full_name()
        )));
    }
    if method.is_server_streaming() && format.shape == Shape::Unary {
        return Err(Status::from(
            Error::new(
                Reason::InvalidArgument,
                format!(
                    "{} streams its replies: send content-type application/connect+json (or +proto) with the request as one enveloped message",
                    method.full_name()
                ),
            )
            .with("field", "content-type"),
        ));
    }
    Ok(method)
}
