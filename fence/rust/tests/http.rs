//! The tower layer (`tenure_fence::http`) behind a real hyper HTTP/1 server
//! on 127.0.0.1, exercised with real requests from a hyper client: the HTTP
//! middleware contract of docs/fencing.md, every refusal reason with its
//! body, the shared vectors, and forged tokens that must never move a
//! lease's highest token.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::routing::post;
use axum::{Extension, Router};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::{json, Value};
use tenure_fence::http::{FenceLayer, MemoryTokenStore, TokenStore};
use tenure_fence::{Fence, Keyset, Proof, Signer, Verified};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tower::{Layer, Service};

/// The shared vectors file.
const VECTORS: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../vectors/v1.json"));

/// 2^62: the forged token of docs/fencing.md's demonstration.
const HUGE: u64 = 1 << 62;

/// The shared vectors.
fn vectors() -> Value {
    serde_json::from_str(VECTORS).expect("fence/vectors/v1.json is JSON")
}

/// The vectors' keyset: keys "active" (seed 1) and "older" (seed 2).
fn keys() -> Keyset {
    Keyset::parse(vectors()["keyset"].as_str().expect("a keyset")).expect("the vectors' keyset")
}

/// The pinned "active" key of the vectors.
fn active() -> Signer {
    Signer::from_seed(&[1; 32])
}

/// A key nobody pinned.
fn stranger() -> Signer {
    Signer::from_seed(&[3; 32])
}

/// A grant of lease `name`.
fn fence(name: &str, token: u64, holder: &str) -> Fence {
    Fence {
        bucket: "tenure".into(),
        name: name.into(),
        slot: 0,
        token,
        granted_at_ms: 1_767_225_600_123,
        ttl_s: 10,
        holder: holder.into(),
    }
}

/// The text of a proof `signer` signed.
fn proof(signer: &Signer, name: &str, token: u64, holder: &str) -> String {
    signer.sign(&fence(name, token, holder)).to_text()
}

/// A genuine proof of lease `name` whose token bytes were then changed to
/// `token`: the signature no longer matches.
fn tampered(name: &str, genuine: u64, token: u64) -> String {
    let mut bytes = active().sign(&fence(name, genuine, "worker-1")).0;
    bytes[9..17].copy_from_slice(&token.to_be_bytes());
    Proof(bytes).to_text()
}

/// The lease guarding a request's resource: its path without the leading
/// `/` (so `/jobs/eu-1.report` is guarded by lease `jobs/eu-1.report`).
fn lease_of<B>(request: &Request<B>) -> String {
    request.uri().path().trim_start_matches('/').to_owned()
}

/// A server task; aborting it drops the listener and every connection.
struct Server {
    /// Where it listens.
    addr: SocketAddr,
    /// The accept loop, owning the connections.
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `service` over HTTP/1 on a free port of 127.0.0.1.
async fn serve<S, B>(service: S) -> Server
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("the listener's address");
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            let (stream, _) = listener.accept().await.expect("accept a connection");
            let service = TowerToHyperService::new(service.clone());
            connections.spawn(async move {
                // A client closing its connection is not the server's error.
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Server { addr, task }
}

/// One HTTP/1 client connection.
struct Client {
    /// The connection's request half.
    send: SendRequest<Full<Bytes>>,
}

/// A response, read whole.
struct Reply {
    /// The status.
    status: StatusCode,
    /// The `Content-Type` header, if any.
    content_type: Option<String>,
    /// The body.
    body: String,
}

impl Reply {
    /// The body as JSON.
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("the body {:?} is not JSON: {e}", self.body))
    }

    /// Asserts a refusal: 409, JSON, `reason`, a message, and the
    /// `FENCE_STALE` fields only for that reason. Returns the body.
    fn refused(&self, reason: &str) -> Value {
        assert_eq!(self.status, StatusCode::CONFLICT, "body: {}", self.body);
        assert_eq!(self.content_type.as_deref(), Some("application/json"));
        let body = self.json();
        assert_eq!(body["reason"], reason, "body: {body}");
        let message = body["message"].as_str().expect("a message");
        assert!(!message.is_empty(), "an empty message");
        let fields = body.as_object().expect("an object").len();
        assert_eq!(
            fields,
            if reason == "FENCE_STALE" { 4 } else { 2 },
            "body: {body}"
        );
        body
    }
}

impl Client {
    /// Connects to `addr`.
    async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("HTTP/1 handshake");
        // Ends when `send` is dropped.
        tokio::spawn(connection);
        Client { send }
    }

    /// POSTs to `path` with `headers`.
    async fn post(&mut self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = Request::post(path).header("host", "127.0.0.1");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from_static(b"write")))
            .expect("a request");
        self.send.ready().await.expect("the connection is ready");
        let response = self.send.send_request(request).await.expect("a response");
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().expect("an ASCII content type").to_owned());
        let body = response
            .into_body()
            .collect()
            .await
            .expect("the body")
            .to_bytes();
        Reply {
            status,
            content_type,
            body: String::from_utf8(body.to_vec()).expect("a UTF-8 body"),
        }
    }

    /// POSTs proof text `proof` (and no token header) to `path`.
    async fn write(&mut self, path: &str, proof: &str) -> Reply {
        self.post(path, &[("Tenure-Fence", proof)]).await
    }
}

/// A fenced handler behind a server, with what the test inspects.
struct Fixture<T> {
    /// A clone of the layer, sharing its token store.
    layer: FenceLayer<fn(&Request<Incoming>) -> String, T>,
    /// How often the handler ran.
    calls: Arc<AtomicUsize>,
    /// A client connected to the server.
    client: Client,
    /// The server, stopped when the fixture is dropped.
    _server: Server,
}

/// The handler: counts its calls and answers the fence it was given, as
/// JSON (`null` if it had none).
fn handler(
    calls: Arc<AtomicUsize>,
) -> impl Service<
    Request<Incoming>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone
       + Send {
    tower::service_fn(move |request: Request<Incoming>| {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let seen = request.extensions().get::<Verified>().map(|v| {
                json!({
                    "name": v.fence.name,
                    "token": v.fence.token.to_string(),
                    "holder": v.fence.holder,
                    "slot": v.fence.slot,
                    "key_id": v.key_id,
                })
            });
            let body = serde_json::to_vec(&seen).expect("JSON");
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
        }
    })
}

/// Serves the handler behind a layer with `store`.
async fn fixture<T: TokenStore + Send + Sync + 'static>(store: T) -> Fixture<T> {
    let lease: fn(&Request<Incoming>) -> String = lease_of;
    let layer = FenceLayer::new(keys(), lease).with_store(store);
    let calls = Arc::new(AtomicUsize::new(0));
    let server = serve(layer.layer(handler(calls.clone()))).await;
    let client = Client::connect(server.addr).await;
    Fixture {
        layer,
        calls,
        client,
        _server: server,
    }
}

/// Serves the handler behind a layer with the in-memory store.
async fn memory_fixture() -> Fixture<MemoryTokenStore> {
    fixture(MemoryTokenStore::default()).await
}

impl<T> Fixture<T> {
    /// How often the handler ran.
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn a_genuine_proof_is_admitted_and_the_handler_sees_its_fence() {
    let mut f = memory_fixture().await;
    let text = proof(&active(), "orders", 42, "worker-1");

    let reply = f.client.write("/orders", &text).await;
    assert_eq!(reply.status, StatusCode::OK, "body: {}", reply.body);
    assert_eq!(
        reply.json(),
        json!({"name": "orders", "token": "42", "holder": "worker-1", "slot": 0,
               "key_id": "34750f98bd59fcfc"})
    );
    assert_eq!(f.layer.store().highest("orders"), Some(42));

    // The same holder again, now with the token header too.
    let reply = f
        .client
        .post(
            "/orders",
            &[("Tenure-Fence", &text), ("Tenure-Fencing-Token", "42")],
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "body: {}", reply.body);
    assert_eq!(reply.json()["token"], "42");
    assert_eq!(f.calls(), 2);
}

#[tokio::test]
async fn every_valid_vector_is_admitted_for_its_own_lease() {
    let mut f = memory_fixture().await;
    let vectors = vectors();
    let valid = vectors["valid"].as_array().expect("valid vectors");
    assert!(valid.len() >= 5, "the vectors lost their valid cases");
    for case in valid {
        let name = case["fence"]["name"].as_str().expect("a name");
        let text = case["proof_text"].as_str().expect("a proof");
        let token = case["fence"]["token"].as_str().expect("a token");
        let reply = f
            .client
            .post(
                &format!("/{name}"),
                &[("Tenure-Fence", text), ("Tenure-Fencing-Token", token)],
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{}: {}",
            case["about"],
            reply.body
        );
        let seen = reply.json();
        assert_eq!(seen["name"], name, "{}", case["about"]);
        assert_eq!(seen["token"], token, "{}", case["about"]);
        assert_eq!(seen["holder"], case["fence"]["holder"], "{}", case["about"]);
        assert_eq!(seen["key_id"], case["key_id"], "{}", case["about"]);
        assert_eq!(
            f.layer
                .store()
                .highest(name)
                .map(|t| t.to_string())
                .as_deref(),
            Some(token),
            "{}",
            case["about"]
        );
    }
    assert_eq!(f.calls(), valid.len());
}

#[tokio::test]
async fn every_invalid_vector_is_refused_with_its_kind() {
    let mut f = memory_fixture().await;
    let vectors = vectors();
    let invalid = vectors["invalid"].as_array().expect("invalid vectors");
    assert!(invalid.len() >= 10, "the vectors lost their invalid cases");
    for case in invalid {
        let text = case["proof_text"].as_str().expect("a proof text");
        let kind = case["error"].as_str().expect("an error kind");
        let reply = f.client.write("/orders", text).await;
        let reason = format!("FENCE_{}", kind.to_ascii_uppercase());
        assert_eq!(reply.status, StatusCode::CONFLICT, "{}", case["about"]);
        assert_eq!(reply.json()["reason"], reason.as_str(), "{}", case["about"]);
        reply.refused(&reason);
    }
    assert_eq!(f.calls(), 0, "the handler ran for a refused request");
    assert_eq!(f.layer.store().highest("orders"), None);
}

#[tokio::test]
async fn every_refusal_reason_is_a_409_with_its_body_and_the_handler_is_not_called() {
    let mut f = memory_fixture().await;
    let genuine = proof(&active(), "orders", 42, "worker-1");
    assert_eq!(
        f.client.write("/orders", &genuine).await.status,
        StatusCode::OK
    );
    assert_eq!(f.calls(), 1);

    let body = f.client.post("/orders", &[]).await.refused("FENCE_MISSING");
    assert!(body["message"].as_str().unwrap().contains("Tenure-Fence"));

    f.client
        .write("/orders", "not*a*proof")
        .await
        .refused("FENCE_MALFORMED");
    let twice = f
        .client
        .post(
            "/orders",
            &[("Tenure-Fence", &genuine), ("Tenure-Fence", &genuine)],
        )
        .await;
    twice.refused("FENCE_MALFORMED");

    let mut version_2 = Proof::from_text(&genuine).unwrap().0;
    version_2[0] = 2;
    let version_2 = Proof(version_2).to_text();
    f.client
        .write("/orders", &version_2)
        .await
        .refused("FENCE_UNSUPPORTED_VERSION");

    let foreign = proof(&stranger(), "orders", 43, "worker-1");
    let body = f
        .client
        .write("/orders", &foreign)
        .await
        .refused("FENCE_UNKNOWN_KEY");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("tenure fence-keys"));

    f.client
        .write("/orders", &tampered("orders", 42, 43))
        .await
        .refused("FENCE_BAD_SIGNATURE");

    let other = proof(&active(), "payments", 43, "worker-1");
    let body = f
        .client
        .write("/orders", &other)
        .await
        .refused("FENCE_WRONG_NAME");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("\"payments\"") && message.contains("\"orders\""),
        "{message}"
    );

    for sent in [
        "43",
        "forty-two",
        "+42",
        "4 2",
        "",
        "99999999999999999999999",
    ] {
        let reply = f
            .client
            .post(
                "/orders",
                &[("Tenure-Fence", &genuine), ("Tenure-Fencing-Token", sent)],
            )
            .await;
        reply.refused("FENCE_TOKEN_MISMATCH");
    }
    let two_tokens = f
        .client
        .post(
            "/orders",
            &[
                ("Tenure-Fence", &genuine),
                ("Tenure-Fencing-Token", "42"),
                ("Tenure-Fencing-Token", "42"),
            ],
        )
        .await;
    two_tokens.refused("FENCE_TOKEN_MISMATCH");

    let older = proof(&active(), "orders", 41, "worker-0");
    let body = f
        .client
        .write("/orders", &older)
        .await
        .refused("FENCE_STALE");
    assert_eq!(body["token"], "41");
    assert_eq!(body["highest"], "42");

    assert_eq!(f.calls(), 1, "the handler ran for a refused request");
    assert_eq!(f.layer.store().highest("orders"), Some(42));
}

#[tokio::test]
async fn forged_tokens_are_refused_and_never_move_the_highest_token() {
    let mut f = memory_fixture().await;
    let holder = proof(&active(), "orders", 7, "worker-1");
    let reply = f
        .client
        .post(
            "/orders",
            &[("Tenure-Fence", &holder), ("Tenure-Fencing-Token", "7")],
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "body: {}", reply.body);
    assert_eq!(f.layer.store().highest("orders"), Some(7));

    let huge = HUGE.to_string();
    // A bare token, no proof: what an unfenced store would have recorded.
    let reply = f
        .client
        .post("/orders", &[("Tenure-Fencing-Token", &huge)])
        .await;
    reply.refused("FENCE_MISSING");
    assert_eq!(f.layer.store().highest("orders"), Some(7));

    // The huge token in the header beside the holder's genuine, lower proof.
    let reply = f
        .client
        .post(
            "/orders",
            &[("Tenure-Fence", &holder), ("Tenure-Fencing-Token", &huge)],
        )
        .await;
    reply.refused("FENCE_TOKEN_MISMATCH");
    assert_eq!(f.layer.store().highest("orders"), Some(7));

    // The genuine proof with its token changed to 2^62: a bad signature.
    let forged = tampered("orders", 7, HUGE);
    let reply = f
        .client
        .post(
            "/orders",
            &[("Tenure-Fence", &forged), ("Tenure-Fencing-Token", &huge)],
        )
        .await;
    reply.refused("FENCE_BAD_SIGNATURE");
    assert_eq!(f.layer.store().highest("orders"), Some(7));

    // A genuine proof with token 2^62, but signed for another lease name.
    let foreign_name = proof(&active(), "payments", HUGE, "worker-9");
    let reply = f
        .client
        .post(
            "/orders",
            &[
                ("Tenure-Fence", &foreign_name),
                ("Tenure-Fencing-Token", &huge),
            ],
        )
        .await;
    reply.refused("FENCE_WRONG_NAME");
    assert_eq!(f.layer.store().highest("orders"), Some(7));

    // A well-formed proof with token 2^62 by a key nobody pinned.
    let unpinned = proof(&stranger(), "orders", HUGE, "worker-9");
    let reply = f.client.write("/orders", &unpinned).await;
    reply.refused("FENCE_UNKNOWN_KEY");
    assert_eq!(f.layer.store().highest("orders"), Some(7));
    assert_eq!(f.layer.store().highest("payments"), None);
    assert_eq!(f.calls(), 1, "the handler ran for a forged request");

    // The genuine holder is not locked out: its next write is admitted.
    let reply = f
        .client
        .post(
            "/orders",
            &[("Tenure-Fence", &holder), ("Tenure-Fencing-Token", "7")],
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "body: {}", reply.body);
    assert_eq!(reply.json()["token"], "7");
    assert_eq!(f.layer.store().highest("orders"), Some(7));

    // A later genuine holder still fences the earlier one out.
    let next = proof(&active(), "orders", 8, "worker-2");
    assert_eq!(
        f.client.write("/orders", &next).await.status,
        StatusCode::OK
    );
    let body = f
        .client
        .write("/orders", &holder)
        .await
        .refused("FENCE_STALE");
    assert_eq!(
        (&body["token"], &body["highest"]),
        (&json!("7"), &json!("8"))
    );
    assert_eq!(f.calls(), 3);
}

/// A store standing in for a database: the highest token of every lease is
/// at least `floor`, and every call is recorded.
struct FloorStore {
    /// The highest token already recorded elsewhere.
    floor: u64,
    /// Every `advance` call: name and token.
    calls: Mutex<Vec<(String, u64)>>,
}

impl TokenStore for FloorStore {
    fn advance(&self, name: &str, token: u64) -> Result<(), u64> {
        self.calls.lock().unwrap().push((name.to_owned(), token));
        if token < self.floor {
            Err(self.floor)
        } else {
            Ok(())
        }
    }
}

#[tokio::test]
async fn a_custom_token_store_decides_staleness_after_every_other_check() {
    let mut f = fixture(FloorStore {
        floor: 100,
        calls: Mutex::new(Vec::new()),
    })
    .await;
    let body = f
        .client
        .write("/orders", &proof(&active(), "orders", 42, "worker-1"))
        .await
        .refused("FENCE_STALE");
    assert_eq!(
        (&body["token"], &body["highest"]),
        (&json!("42"), &json!("100"))
    );

    // Refused before the token rule: the store is not asked.
    f.client
        .write("/orders", &proof(&active(), "payments", 500, "worker-1"))
        .await
        .refused("FENCE_WRONG_NAME");
    f.client
        .write("/orders", &tampered("orders", 42, 500))
        .await
        .refused("FENCE_BAD_SIGNATURE");

    let reply = f
        .client
        .write("/orders", &proof(&active(), "orders", 100, "worker-2"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "body: {}", reply.body);
    assert_eq!(f.calls(), 1);
    assert_eq!(
        *f.layer.store().calls.lock().unwrap(),
        vec![("orders".to_owned(), 42), ("orders".to_owned(), 100)]
    );
}

#[tokio::test]
async fn an_axum_router_takes_the_layer_and_its_handlers_extract_the_fence() {
    let app: Router = Router::new()
        .route(
            "/orders",
            post(|Extension(v): Extension<Verified>| async move {
                format!(
                    "written by {} under token {}",
                    v.fence.holder, v.fence.token
                )
            }),
        )
        .layer(FenceLayer::new(keys(), |_: &axum::extract::Request| {
            "orders"
        }));
    let server = serve(app).await;
    let mut client = Client::connect(server.addr).await;

    let reply = client
        .write("/orders", &proof(&active(), "orders", 42, "worker-1"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "body: {}", reply.body);
    assert_eq!(reply.body, "written by worker-1 under token 42");

    let body = client
        .write("/orders", &proof(&active(), "orders", 41, "worker-0"))
        .await
        .refused("FENCE_STALE");
    assert_eq!(
        (&body["token"], &body["highest"]),
        (&json!("41"), &json!("42"))
    );
    client.post("/orders", &[]).await.refused("FENCE_MISSING");
}

#[test]
fn the_memory_store_keeps_the_highest_token_per_lease() {
    let store = MemoryTokenStore::default();
    assert_eq!(store.highest("orders"), None);
    assert_eq!(store.advance("orders", 7), Ok(()));
    assert_eq!(store.advance("orders", 7), Ok(()), "the same holder again");
    assert_eq!(store.advance("orders", 6), Err(7));
    assert_eq!(
        store.advance("payments", 1),
        Ok(()),
        "names are independent"
    );
    assert_eq!(store.advance("orders", u64::MAX), Ok(()));
    assert_eq!(store.advance("orders", u64::MAX - 1), Err(u64::MAX));
    assert_eq!(store.highest("orders"), Some(u64::MAX));
    assert_eq!(store.highest("payments"), Some(1));
}
