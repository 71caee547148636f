//! gRPC-Web and the Connect protocol on the gRPC port, driven with plain
//! HTTP/1.1 over a TCP socket (no Connect or gRPC library): the unary
//! walkthrough with its error JSON and ErrorInfo reason, authentication,
//! a watch over Connect streaming, a gRPC-Web call, and the hostile-client
//! bounds (body size, stalled bodies, metadata size, waiting-call slots,
//! watch slots) as Connect callers meet them.

use std::net::SocketAddr;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use prost::Message;
use serde_json::{json, Value};
use tenure::{Action, Grant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::common::{acquire_req, within, Tenure};

const LEASES: &str = "/tenure.v1.LeaseService";
const JSON: (&str, &str) = ("content-type", "application/json");
const STREAM_JSON: (&str, &str) = ("content-type", "application/connect+json");

/// An HTTP/1.1 reply.
struct Reply {
    /// The status code.
    status: u16,
    /// The headers, names lowercased.
    headers: Vec<(String, String)>,
    /// The body, de-chunked.
    body: Vec<u8>,
}

impl Reply {
    /// The value of header `name`.
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// The head of a request for `path` with `headers` and a body of `length`
/// bytes; the connection closes after the reply.
fn head(path: &str, headers: &[(&str, &str)], length: usize) -> String {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: tenure\r\nConnection: close\r\nContent-Length: {length}\r\n"
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// POSTs `body` to `path` and reads the whole reply.
async fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let mut request = head(path, headers, body.len()).into_bytes();
    request.extend_from_slice(body);
    conn.write_all(&request).await.unwrap();
    read_reply(&mut conn).await
}

/// Reads a reply to its end (the server closes the connection).
async fn read_reply(conn: &mut TcpStream) -> Reply {
    let mut raw = Vec::new();
    within("the reply", conn.read_to_end(&mut raw))
        .await
        .expect("read the reply");
    let mut stream = Stream {
        conn: None,
        raw,
        data: Vec::new(),
        chunked: false,
    };
    let (status, headers) = stream.head().await;
    if stream.chunked {
        stream.dechunk();
    } else {
        stream.data = std::mem::take(&mut stream.raw);
    }
    Reply {
        status,
        headers,
        body: stream.data,
    }
}

/// A reply read as it arrives: the head, then Connect envelopes.
struct Stream {
    /// The connection, while open.
    conn: Option<TcpStream>,
    /// Bytes read and not yet parsed.
    raw: Vec<u8>,
    /// The body so far, de-chunked, not yet taken.
    data: Vec<u8>,
    /// Whether the body is chunked.
    chunked: bool,
}

impl Stream {
    /// POSTs `body` to `path`; the reply is read as it comes.
    async fn open(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Stream {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        let mut request = head(path, headers, body.len()).into_bytes();
        request.extend_from_slice(body);
        conn.write_all(&request).await.unwrap();
        Stream {
            conn: Some(conn),
            raw: Vec::new(),
            data: Vec::new(),
            chunked: false,
        }
    }

    /// Reads more bytes; false at the end of the connection.
    async fn fill(&mut self) -> bool {
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        let mut buf = [0u8; 4096];
        let n = within("more of the reply", conn.read(&mut buf))
            .await
            .unwrap();
        self.raw.extend_from_slice(&buf[..n]);
        n > 0
    }

    /// The status and headers.
    async fn head(&mut self) -> (u16, Vec<(String, String)>) {
        let end = loop {
            if let Some(end) = self.raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            assert!(self.fill().await, "the connection closed before the head");
        };
        let text = String::from_utf8(self.raw[..end].to_vec()).unwrap();
        self.raw.drain(..end + 4);
        let mut lines = text.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        self.chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
        (status.parse().unwrap(), headers)
    }

    /// Moves every whole chunk from `raw` to `data`.
    fn dechunk(&mut self) {
        loop {
            let Some(eol) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let size = std::str::from_utf8(&self.raw[..eol]).unwrap();
            let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
            if self.raw.len() < eol + 2 + size + 2 {
                return;
            }
            self.data
                .extend_from_slice(&self.raw[eol + 2..eol + 2 + size]);
            self.raw.drain(..eol + 2 + size + 2);
            if size == 0 {
                return;
            }
        }
    }

    /// The next Connect envelope: its flags and message.
    async fn envelope(&mut self) -> (u8, Vec<u8>) {
        loop {
            self.dechunk();
            if self.data.len() >= 5 {
                let length =
                    u32::from_be_bytes([self.data[1], self.data[2], self.data[3], self.data[4]])
                        as usize;
                if self.data.len() >= 5 + length {
                    let flags = self.data[0];
                    let message = self.data[5..5 + length].to_vec();
                    self.data.drain(..5 + length);
                    return (flags, message);
                }
            }
            assert!(self.fill().await, "the stream closed mid-envelope");
        }
    }

    /// The next envelope's JSON, with whether it is the end message.
    async fn next_json(&mut self) -> (bool, Value) {
        let (flags, message) = self.envelope().await;
        (flags & 0x02 != 0, serde_json::from_slice(&message).unwrap())
    }

    /// The next lease event of a Connect watch, skipping others until one
    /// of `kind`.
    async fn next_event(&mut self, kind: &str) -> Value {
        loop {
            let (end, message) = self.next_json().await;
            assert!(!end, "the watch ended: {message}");
            if message["event"]["type"] == kind {
                return message["event"].clone();
            }
        }
    }
}

/// One message as a Connect (or gRPC-Web) envelope.
fn envelope(flags: u8, message: &[u8]) -> Vec<u8> {
    let mut out = vec![flags];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The address of the in-process server.
fn addr(t: &Tenure) -> SocketAddr {
    t.running.as_ref().unwrap().addr()
}

/// A unary Connect call with a JSON body.
async fn call(addr: SocketAddr, method: &str, body: Value, extra: &[(&str, &str)]) -> Reply {
    let mut headers = vec![JSON];
    headers.extend_from_slice(extra);
    post(
        addr,
        &format!("{LEASES}/{method}"),
        &headers,
        body.to_string().as_bytes(),
    )
    .await
}

/// The ErrorInfo of a Connect error JSON, checked both ways: decoded from
/// the detail's `value` (what Connect clients read) and its `debug` form.
fn error_info(error: &Value) -> tonic_types::pb::ErrorInfo {
    let detail = error["details"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["type"] == "google.rpc.ErrorInfo"))
        .unwrap_or_else(|| panic!("no ErrorInfo detail in {error}"));
    let bytes = STANDARD_NO_PAD
        .decode(detail["value"].as_str().unwrap())
        .expect("value is unpadded base64");
    let info = tonic_types::pb::ErrorInfo::decode(&bytes[..]).expect("value is an ErrorInfo");
    assert_eq!(detail["debug"]["reason"], info.reason.as_str(), "{error}");
    assert_eq!(info.domain, "tenure.v1");
    info
}

/// The README walkthrough over Connect with JSON: acquire, renew, the
/// refused Acquire of another holder (HTTP 400, `failed_precondition`,
/// reason LEASE_HELD with the holder), release, and the next holder's
/// greater token; a missing lease is 404 `not_found`.
#[tokio::test]
async fn unary_walkthrough_with_error_json() {
    let t = Tenure::start().await;
    let addr = addr(&t);
    let key = "my-secret-lease-key-1";

    let acquired = call(
        addr,
        "Acquire",
        json!({"name": "jobs.nightly", "holder": "worker-1", "ttl": "30s", "lease_key": key}),
        &[],
    )
    .await;
    assert_eq!(
        acquired.status,
        200,
        "{}",
        String::from_utf8_lossy(&acquired.body)
    );
    assert_eq!(acquired.header("content-type"), Some("application/json"));
    let lease = &acquired.json()["lease"];
    assert_eq!(lease["holder"], "worker-1");
    assert_eq!(lease["ttl"], "30s");
    assert_eq!(acquired.json()["leaseKey"], key);
    let token: u64 = lease["fencingToken"].as_str().unwrap().parse().unwrap();
    let revision: u64 = lease["revision"].as_str().unwrap().parse().unwrap();

    // camelCase names and a string revision, as Connect clients send them.
    let renewed = call(
        addr,
        "Renew",
        json!({"name": "jobs.nightly", "expectedRevision": revision.to_string(), "leaseKey": key}),
        &[("connect-protocol-version", "1")],
    )
    .await;
    assert_eq!(
        renewed.status,
        200,
        "{}",
        String::from_utf8_lossy(&renewed.body)
    );
    let renewed = renewed.json()["lease"].clone();
    assert_eq!(renewed["fencingToken"], token.to_string());
    let revision: u64 = renewed["revision"].as_str().unwrap().parse().unwrap();

    let held = call(
        addr,
        "Acquire",
        json!({"name": "jobs.nightly", "holder": "worker-2", "ttl": "5s"}),
        &[],
    )
    .await;
    assert_eq!(held.status, 400);
    assert_eq!(held.header("content-type"), Some("application/json"));
    let error = held.json();
    assert_eq!(error["code"], "failed_precondition", "{error}");
    assert!(error["message"].as_str().unwrap().contains("worker-1"));
    let info = error_info(&error);
    assert_eq!(info.reason, "LEASE_HELD");
    assert_eq!(info.metadata["holder"], "worker-1");
    assert_eq!(info.metadata["fencing_token"], token.to_string());

    let released = call(
        addr,
        "Release",
        json!({"name": "jobs.nightly", "expected_revision": revision, "lease_key": key}),
        &[],
    )
    .await;
    assert_eq!(released.status, 200);
    assert!(released.json()["revision"].as_str().is_some());

    let next = call(
        addr,
        "Acquire",
        json!({"name": "jobs.nightly", "holder": "worker-2", "ttl": "5s"}),
        &[],
    )
    .await;
    assert_eq!(next.status, 200);
    let next_token: u64 = next.json()["lease"]["fencingToken"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(next_token > token);

    let missing = call(addr, "GetLease", json!({"name": "jobs.none"}), &[]).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["code"], "not_found");
    assert_eq!(error_info(&missing.json()).reason, "LEASE_NOT_FOUND");

    // Bad input is the caller's fault, with the reason of every other
    // invalid request.
    let bad = post(addr, &format!("{LEASES}/Acquire"), &[JSON], b"{\"name\":").await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["code"], "invalid_argument");
    assert_eq!(error_info(&bad.json()).reason, "INVALID_ARGUMENT");
    let invalid = call(
        addr,
        "Acquire",
        json!({"name": "no spaces", "holder": "w"}),
        &[],
    )
    .await;
    assert_eq!(invalid.status, 400);
    assert_eq!(error_info(&invalid.json()).reason, "INVALID_NAME");
}

/// Connect calls in binary protobuf (`application/proto`) work too, and
/// what Connect cannot carry is refused: KeepAlive (it streams requests)
/// is 501 `unimplemented`, compressed requests too, and a streaming method
/// called as unary says how to call it.
#[tokio::test]
async fn binary_calls_and_refusals() {
    let t = Tenure::start().await;
    let addr = addr(&t);
    let request = acquire_req("jobs.binary", "w1", 30).encode_to_vec();
    let reply = post(
        addr,
        &format!("{LEASES}/Acquire"),
        &[("content-type", "application/proto")],
        &request,
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/proto"));
    let answer = tenure::proto::AcquireResponse::decode(&reply.body[..]).unwrap();
    assert_eq!(answer.lease.unwrap().holder, "w1");

    let keepalive = call(addr, "KeepAlive", json!({}), &[]).await;
    assert_eq!(keepalive.status, 501);
    assert_eq!(keepalive.json()["code"], "unimplemented");

    let gzip = call(
        addr,
        "GetLease",
        json!({"name": "a.b"}),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_eq!(gzip.status, 501);
    assert_eq!(gzip.json()["code"], "unimplemented");

    let unary_watch = call(addr, "WatchLease", json!({"name": "a.b"}), &[]).await;
    assert_eq!(unary_watch.status, 400);
    assert!(
        unary_watch.json()["message"]
            .as_str()
            .unwrap()
            .contains("application/connect+json"),
        "{}",
        unary_watch.json()
    );

    let unknown = post(addr, "/tenure.v1.Nope/Acquire", &[JSON], b"{}").await;
    assert_eq!(unknown.status, 501);

    // The health check answers Connect JSON too.
    let health = post(
        addr,
        "/grpc.health.v1.Health/Check",
        &[JSON],
        br#"{"service":"tenure.v1.LeaseService"}"#,
    )
    .await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "SERVING");
}

/// Bearer tokens and grants apply to Connect calls as to gRPC ones: no
/// token is 401 `unauthenticated`, a token without the grant is 403
/// `permission_denied`, the right token is served.
#[tokio::test]
async fn authentication_and_grants_apply() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "ops ops-token-0123456789abcdef\nother other-token-0123456789abcdef\n",
    )
    .unwrap();
    let t = Tenure::start_with(|c| {
        c.auth_tokens = Some(tokens);
        c.grants = vec![Grant {
            identity: "ops".into(),
            prefixes: vec!["ops.".into()],
            actions: vec![Action::All],
        }];
    })
    .await;
    let addr = addr(&t);
    let body = json!({"name": "ops.job", "holder": "w1", "ttl": "10s"});

    let anonymous = call(addr, "Acquire", body.clone(), &[]).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.json()["code"], "unauthenticated");
    assert_eq!(error_info(&anonymous.json()).reason, "UNAUTHENTICATED");

    let other = call(
        addr,
        "Acquire",
        body.clone(),
        &[("authorization", "Bearer other-token-0123456789abcdef")],
    )
    .await;
    assert_eq!(other.status, 403);
    assert_eq!(error_info(&other.json()).reason, "PERMISSION_DENIED");

    let ops = call(
        addr,
        "Acquire",
        body,
        &[("authorization", "Bearer ops-token-0123456789abcdef")],
    )
    .await;
    assert_eq!(ops.status, 200, "{}", String::from_utf8_lossy(&ops.body));

    // gRPC-Web carries the same header the same way.
    let web = grpc_web(
        addr,
        "Acquire",
        &acquire_req("ops.web", "w1", 10).encode_to_vec(),
        &[],
    )
    .await;
    assert_eq!(web.trailers["grpc-status"], "16");
}

/// A watch over Connect streaming: the snapshot, then live events as
/// another client (gRPC) changes the lease; the end message after the
/// server ends the stream carries the error with its reason.
#[tokio::test]
async fn watch_over_connect_streaming() {
    let mut t = Tenure::start_with(|c| c.shutdown_grace = Duration::from_secs(5)).await;
    let addr = addr(&t);
    let mut grpc = t.client().await;
    grpc.acquire(acquire_req("jobs.a", "w1", 30)).await.unwrap();

    let request = envelope(0, br#"{"name":"jobs.>"}"#);
    let mut watch = Stream::open(
        addr,
        &format!("{LEASES}/WatchLease"),
        &[STREAM_JSON, ("connect-protocol-version", "1")],
        &request,
    )
    .await;
    let (status, headers) = watch.head().await;
    assert_eq!(status, 200);
    assert!(headers
        .iter()
        .any(|(n, v)| n == "content-type" && v == "application/connect+json"));
    let current = watch.next_event("EVENT_TYPE_CURRENT").await;
    assert_eq!(current["holder"], "w1");
    watch.next_event("EVENT_TYPE_SNAPSHOT_COMPLETE").await;

    grpc.acquire(acquire_req("jobs.b", "w2", 30)).await.unwrap();
    let acquired = within(
        "the ACQUIRED event",
        watch.next_event("EVENT_TYPE_ACQUIRED"),
    )
    .await;
    assert_eq!(acquired["name"], "jobs.b");
    assert_eq!(acquired["holder"], "w2");

    // Shutdown ends the watch: the end message carries UNAVAILABLE with
    // the SHUTTING_DOWN reason.
    t.running.take().unwrap().shutdown().await;
    let (end, message) = loop {
        let (end, message) = watch.next_json().await;
        if end {
            break (end, message);
        }
    };
    assert!(end);
    assert_eq!(message["error"]["code"], "unavailable", "{message}");
    assert_eq!(error_info(&message["error"]).reason, "SHUTTING_DOWN");
}

/// What a gRPC-Web call answered: its messages and trailers.
struct WebReply {
    /// The HTTP status.
    status: u16,
    /// The messages (protobuf).
    messages: Vec<Vec<u8>>,
    /// The trailers, names lowercased.
    trailers: std::collections::HashMap<String, String>,
}

/// A gRPC-Web call of `method` over HTTP/1.1, with `message` (protobuf).
async fn grpc_web(
    addr: SocketAddr,
    method: &str,
    message: &[u8],
    extra: &[(&str, &str)],
) -> WebReply {
    let mut headers = vec![
        ("content-type", "application/grpc-web+proto"),
        ("x-grpc-web", "1"),
    ];
    headers.extend_from_slice(extra);
    let reply = post(
        addr,
        &format!("{LEASES}/{method}"),
        &headers,
        &envelope(0, message),
    )
    .await;
    assert!(
        reply
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/grpc-web")),
        "{:?}",
        reply.headers
    );
    let mut body = &reply.body[..];
    let mut messages = Vec::new();
    let mut trailers = std::collections::HashMap::new();
    // A trailers-only answer has its status in the headers.
    for (name, value) in &reply.headers {
        if name.starts_with("grpc-") {
            trailers.insert(name.clone(), value.clone());
        }
    }
    while body.len() >= 5 {
        let length = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let frame = &body[5..5 + length];
        if body[0] & 0x80 != 0 {
            for line in String::from_utf8_lossy(frame).split("\r\n") {
                if let Some((name, value)) = line.split_once(':') {
                    trailers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
                }
            }
        } else {
            messages.push(frame.to_vec());
        }
        body = &body[5 + length..];
    }
    WebReply {
        status: reply.status,
        messages,
        trailers,
    }
}

/// A gRPC-Web call over HTTP/1.1 acquires; a refused one carries its
/// status and the ErrorInfo details in its trailers.
#[tokio::test]
async fn grpc_web_calls_work() {
    let t = Tenure::start().await;
    let addr = addr(&t);
    let ok = grpc_web(
        addr,
        "Acquire",
        &acquire_req("jobs.web", "w1", 30).encode_to_vec(),
        &[],
    )
    .await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.trailers["grpc-status"], "0", "{:?}", ok.trailers);
    let answer = tenure::proto::AcquireResponse::decode(&ok.messages[0][..]).unwrap();
    assert_eq!(answer.lease.unwrap().holder, "w1");

    let held = grpc_web(
        addr,
        "Acquire",
        &acquire_req("jobs.web", "w2", 30).encode_to_vec(),
        &[],
    )
    .await;
    assert_eq!(held.trailers["grpc-status"], "9");
    let details = base64::engine::general_purpose::STANDARD
        .decode(&held.trailers["grpc-status-details-bin"])
        .or_else(|_| STANDARD_NO_PAD.decode(&held.trailers["grpc-status-details-bin"]))
        .unwrap();
    let status = tonic_types::pb::Status::decode(&details[..]).unwrap();
    let info = tonic_types::pb::ErrorInfo::decode(&status.details[0].value[..]).unwrap();
    assert_eq!(info.reason, "LEASE_HELD");
}

/// Body sizes: a JSON body over --max-request-bytes is refused with
/// REQUEST_TOO_LARGE (429 `resource_exhausted`), and so is a streaming
/// request whose envelope says it is too large, before it arrives; a
/// gRPC-Web message over the limit too.
#[tokio::test]
async fn oversized_bodies_are_refused() {
    let t = Tenure::start_with(|c| c.max_request_bytes = 2048).await;
    let addr = addr(&t);
    let big = json!({"name": "jobs.big", "holder": "w", "metadata": {"k": "x".repeat(3000)}});
    let reply = call(addr, "Acquire", big, &[]).await;
    assert_eq!(
        reply.status,
        429,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.json()["code"], "resource_exhausted");
    assert_eq!(error_info(&reply.json()).reason, "REQUEST_TOO_LARGE");

    // The envelope announces 1 MB; only its prefix is sent.
    let mut watch = Stream::open(
        addr,
        &format!("{LEASES}/WatchLease"),
        &[STREAM_JSON],
        &[0, 0, 0x10, 0, 0],
    )
    .await;
    let (status, _) = watch.head().await;
    assert_eq!(status, 200);
    let (end, message) = watch.next_json().await;
    assert!(end, "{message}");
    assert_eq!(message["error"]["code"], "resource_exhausted");
    assert_eq!(error_info(&message["error"]).reason, "REQUEST_TOO_LARGE");

    let mut request = acquire_req("jobs.web", "w1", 30);
    request.metadata.insert("k".into(), "x".repeat(3000));
    let web = grpc_web(addr, "Acquire", &request.encode_to_vec(), &[]).await;
    assert_eq!(web.trailers["grpc-status"], "8", "{:?}", web.trailers);
}

/// Metadata size: headers over --max-metadata-bytes are refused with
/// METADATA_TOO_LARGE, over Connect as over gRPC.
#[tokio::test]
async fn oversized_metadata_is_refused() {
    let t = Tenure::start_with(|c| c.max_metadata_bytes = 1024).await;
    let big = "x".repeat(2000);
    let reply = call(
        addr(&t),
        "GetLease",
        json!({"name": "a.b"}),
        &[("x-padding", &big)],
    )
    .await;
    assert_eq!(reply.status, 429);
    assert_eq!(error_info(&reply.json()).reason, "METADATA_TOO_LARGE");
}

/// Stalled bodies: a Connect request whose body stops arriving is ended
/// after --request-body-timeout (400 `invalid_argument`), unary and
/// streaming alike, and holds no capacity meanwhile.
#[tokio::test]
async fn stalled_bodies_are_ended() {
    let timeout = Duration::from_millis(800);
    let t = Tenure::start_with(|c| c.request_body_timeout = timeout).await;
    let addr = addr(&t);

    let started = Instant::now();
    let mut unary = TcpStream::connect(addr).await.unwrap();
    let stalled = format!(
        "{}{{\"name\":",
        head(&format!("{LEASES}/Acquire"), &[JSON], 200)
    );
    unary.write_all(stalled.as_bytes()).await.unwrap();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut stalled = head(&format!("{LEASES}/WatchLease"), &[STREAM_JSON], 30).into_bytes();
    stalled.extend_from_slice(&[0, 0, 0, 0, 25, b'{']);
    stream.write_all(&stalled).await.unwrap();

    // Meanwhile other calls are served.
    let ok = call(addr, "GetLease", json!({"name": "a.b"}), &[]).await;
    assert_eq!(ok.status, 404);

    let reply = read_reply(&mut unary).await;
    let waited = started.elapsed();
    assert_eq!(
        reply.status,
        400,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.json()["code"], "invalid_argument");
    assert!(
        reply.json()["message"]
            .as_str()
            .unwrap()
            .contains("--request-body-timeout"),
        "{}",
        reply.json()
    );
    assert!(
        waited >= timeout && waited < timeout + Duration::from_secs(5),
        "{waited:?}"
    );

    let reply = read_reply(&mut stream).await;
    assert_eq!(reply.status, 200);
    let (flags, message) = (reply.body[0], &reply.body[5..]);
    assert_eq!(flags, 0x02);
    let end: Value = serde_json::from_slice(message).unwrap();
    assert_eq!(end["error"]["code"], "invalid_argument", "{end}");
    assert!(end["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--request-body-timeout"));
}

/// Slots: the waiting-Acquire budget and the watch-stream limit count
/// Connect calls as they count gRPC ones; the refused call carries the
/// reason and a RetryInfo. A Connect deadline (`connect-timeout-ms`)
/// bounds a waiting Acquire as `grpc-timeout` does.
#[tokio::test]
async fn call_and_watch_slots_apply() {
    let t = Tenure::start_with(|c| {
        c.max_waiting_acquires = 1;
        c.max_watch_streams = 1;
    })
    .await;
    let addr = addr(&t);
    let held = call(
        addr,
        "Acquire",
        json!({"name": "jobs.x", "holder": "w1", "ttl": "30s"}),
        &[],
    )
    .await;
    assert_eq!(held.status, 200);

    // One Acquire waits (its slot taken) ...
    let waiting = tokio::spawn(async move {
        call(
            addr,
            "Acquire",
            json!({"name": "jobs.x", "holder": "w2", "ttl": "5s", "wait": "10s"}),
            &[("connect-timeout-ms", "3000")],
        )
        .await
    });
    // ... (once it is queued) ...
    within("the first Acquire to wait", async {
        loop {
            let lease = call(addr, "GetLease", json!({"name": "jobs.x"}), &[]).await;
            if lease.json()["waiting"] == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // ... so the next waiting one is refused at once.
    let refused = call(
        addr,
        "Acquire",
        json!({"name": "jobs.x", "holder": "w3", "ttl": "5s", "wait": "10s"}),
        &[],
    )
    .await;
    assert_eq!(
        refused.status,
        429,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    let error = refused.json();
    assert_eq!(error["code"], "resource_exhausted");
    assert_eq!(error_info(&error).reason, "TOO_MANY_REQUESTS", "{error}");
    assert!(
        error["details"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["type"] == "google.rpc.RetryInfo"),
        "{error}"
    );
    // The waiter's 3 s Connect deadline ends its wait well before its 10 s.
    let started = Instant::now();
    let waited = within("the waiting Acquire", waiting).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_ne!(waited.status, 200);

    // Watch slots: one open watch, the second is refused in its end message.
    let request = envelope(0, br#"{"name":"jobs.>"}"#);
    let path = format!("{LEASES}/WatchLease");
    let mut first = Stream::open(addr, &path, &[STREAM_JSON], &request).await;
    first.head().await;
    first.next_event("EVENT_TYPE_SNAPSHOT_COMPLETE").await;
    let mut second = Stream::open(addr, &path, &[STREAM_JSON], &request).await;
    let (status, _) = second.head().await;
    assert_eq!(status, 200);
    let (end, message) = second.next_json().await;
    assert!(end, "{message}");
    assert_eq!(message["error"]["code"], "resource_exhausted");
    assert_eq!(error_info(&message["error"]).reason, "TOO_MANY_WATCHES");
}

/// Reads one reply with a `content-length` off a kept-alive connection.
async fn read_one(conn: &mut TcpStream, raw: &mut Vec<u8>) -> (u16, Vec<u8>) {
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("a content-length");
            if raw.len() >= end + 4 + length {
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                let body = raw[end + 4..end + 4 + length].to_vec();
                raw.drain(..end + 4 + length);
                return (status, body);
            }
        }
        let mut buf = [0u8; 4096];
        let n = within("a reply", conn.read(&mut buf)).await.unwrap();
        assert!(n > 0, "the connection closed");
        raw.extend_from_slice(&buf[..n]);
    }
}

/// HTTP/1.1 headers are bounded before hyper parses them: a connection
/// that sends far more than a request's bytes without a call starting is
/// closed without an answer, while headers over --max-metadata-bytes but
/// within that bound get METADATA_TOO_LARGE, and a kept-alive connection
/// may carry any number of calls (the bound is per call).
#[tokio::test]
async fn http1_header_bytes_are_bounded() {
    let t = Tenure::start().await;
    let addr = addr(&t);

    // 200 KiB of header, sent in pieces: closed, no reply.
    let started = Instant::now();
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let line = format!("x-pad-{{}}: {}\r\n", "x".repeat(1000));
    let mut head = format!(
        "POST {LEASES}/GetLease HTTP/1.1\r\nHost: tenure\r\ncontent-type: application/json\r\n"
    );
    for i in 0..200 {
        head.push_str(&line.replace("{}", &i.to_string()));
    }
    let _ = conn.write_all(head.as_bytes()).await; // the server may close mid-way
    let mut raw = Vec::new();
    let read = within("the close", conn.read_to_end(&mut raw)).await;
    assert!(
        read.is_err() || raw.is_empty(),
        "answered: {}",
        String::from_utf8_lossy(&raw)
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // 20 KB: over --max-metadata-bytes (8 KiB), within the bound: refused
    // with its reason.
    let big = "x".repeat(20_000);
    let reply = call(addr, "GetLease", json!({"name": "a.b"}), &[("x-pad", &big)]).await;
    assert_eq!(reply.status, 429);
    assert_eq!(error_info(&reply.json()).reason, "METADATA_TOO_LARGE");

    // 100 calls with 2 KB of headers each on one kept-alive connection:
    // 200 KB in all, fine.
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let pad = "p".repeat(2000);
    let body = br#"{"name":"a.b"}"#;
    let mut raw = Vec::new();
    for _ in 0..100 {
        let request = format!(
            "POST {LEASES}/GetLease HTTP/1.1\r\nHost: tenure\r\ncontent-type: application/json\r\nx-pad: {pad}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        conn.write_all(request.as_bytes()).await.unwrap();
        conn.write_all(body).await.unwrap();
        let (status, _) = read_one(&mut conn, &mut raw).await;
        assert_eq!(status, 404);
    }
}
