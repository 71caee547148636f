//! A tower layer that fences HTTP writes: the HTTP middleware contract of
//! docs/fencing.md for any `http::Request<B>` service (axum, a hyper service
//! through `hyper_util::service::TowerToHyperService`, tower stacks).
//!
//! [`FenceLayer`] wraps a service in [`Fenced`]. For every request it reads
//! the `Tenure-Fence` header (the proof text) and, if sent, the
//! `Tenure-Fencing-Token` header (a decimal token), and checks, stopping at
//! the first failure:
//!
//! 1. a proof is present (`FENCE_MISSING`);
//! 2. it verifies against the pinned [`Keyset`] (`FENCE_MALFORMED`,
//!    `FENCE_UNSUPPORTED_VERSION`, `FENCE_UNKNOWN_KEY`,
//!    `FENCE_BAD_SIGNATURE`);
//! 3. it is for the lease name that guards the request's resource
//!    (`FENCE_WRONG_NAME`);
//! 4. the `Tenure-Fencing-Token` header, if sent, equals the proof's token
//!    (`FENCE_TOKEN_MISMATCH`);
//! 5. the token is not lower than the highest the [`TokenStore`] has seen
//!    for the name, which then becomes this token (`FENCE_STALE`).
//!
//! A refusal is `409 Conflict` with `Content-Type: application/json` and the
//! body `{"reason": ..., "message": ...}` (`FENCE_STALE` adds `"token"` and
//! `"highest"` as decimal strings); the inner service is not called. An
//! admitted request reaches the inner service with the [`Verified`] proof in
//! its extensions (axum: `Extension<Verified>`).
//!
//! # Response bodies
//!
//! The wrapped service answers `Response<Either<ResB, Full<Bytes>>>`: the
//! inner service's body untouched on the left, the refusal's JSON on the
//! right. That works for every inner body type, with no conversion and no
//! boxing: axum accepts it (`Either` is an `http_body::Body` with `Bytes`
//! data, so the response is `IntoResponse`) and so does hyper's server. A
//! stack that needs one concrete body type maps it once, e.g. with
//! `axum::body::Body::new` or `http_body_util::BodyExt::boxed`.
//!
//! ```
//! use axum::{routing::post, Extension, Router};
//! use tenure_fence::http::FenceLayer;
//! use tenure_fence::{Keyset, Signer, Verified};
//!
//! let keys = Keyset::parse(&Signer::from_seed(&[1; 32]).public_key_text()).unwrap();
//! let app: Router = Router::new()
//!     .route(
//!         "/orders",
//!         post(|Extension(v): Extension<Verified>| async move {
//!             format!("written under token {}", v.fence.token)
//!         }),
//!     )
//!     // Every route of this router writes what lease "orders" guards.
//!     .layer(FenceLayer::new(keys, |_: &axum::extract::Request| "orders"));
//! ```
//!
//! What the layer does not cover (docs/fencing.md): the check is at
//! admission. A request admitted with token 7 that is still running when one
//! with token 9 is admitted can finish after it; a handler whose own write
//! must be ordered too makes that write conditional in its store with the
//! verified token.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::{FenceError, Keyset, Verified};

/// The header carrying the proof text (base64url, no padding).
pub const FENCE_HEADER: &str = "tenure-fence";
/// The optional header carrying the holder's decimal fencing token.
pub const TOKEN_HEADER: &str = "tenure-fencing-token";

/// Where the layer keeps the highest admitted fencing token per lease name.
///
/// The in-memory [`MemoryTokenStore`] is the default; implement this trait
/// to keep the tokens in your database, so that they survive restarts and
/// are shared by every replica of the service. `advance` runs on the request
/// path inside `Service::call`, so it must be quick and must not block on a
/// slow remote call.
pub trait TokenStore {
    /// Records `token` for lease `name` if it is not lower than the highest
    /// recorded, atomically. `Err` carries that highest token when `token` is
    /// lower (the write is stale and nothing is recorded).
    fn advance(&self, name: &str, token: u64) -> Result<(), u64>;
}

/// A [`TokenStore`] in process memory: one `u64` per lease name, behind a
/// mutex. It holds only names of genuine proofs the layer admitted, so a
/// client cannot grow it without tokens Tenure granted.
#[derive(Debug, Default)]
pub struct MemoryTokenStore {
    /// The highest admitted token per lease name.
    highest: Mutex<HashMap<String, u64>>,
}

impl MemoryTokenStore {
    /// The highest token admitted for lease `name`, if any was.
    pub fn highest(&self, name: &str) -> Option<u64> {
        self.tokens().get(name).copied()
    }

    /// The map, even after a panic elsewhere poisoned the mutex: every
    /// update is a single insert, so the map is never half-written.
    fn tokens(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.highest.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl TokenStore for MemoryTokenStore {
    fn advance(&self, name: &str, token: u64) -> Result<(), u64> {
        let mut tokens = self.tokens();
        match tokens.get_mut(name) {
            Some(highest) if token < *highest => Err(*highest),
            Some(highest) => {
                *highest = token;
                Ok(())
            }
            None => {
                tokens.insert(name.to_owned(), token);
                Ok(())
            }
        }
    }
}

/// Why the layer refused a request: one variant per reason of the HTTP
/// contract. Refused responses carry it in their extensions, so an outer
/// layer can log or count refusals without parsing the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No `Tenure-Fence` header.
    #[error("no Tenure-Fence header: send the fence proof of your lease's grant (its fence_proof) with every write")]
    Missing,
    /// The proof did not verify (malformed, unsupported version, unknown
    /// key, bad signature).
    #[error("{0}")]
    Invalid(FenceError),
    /// The proof is genuine but for another lease name.
    #[error(
        "the fence proof is for lease {proof:?}, but this resource is guarded by lease {lease:?}"
    )]
    WrongName {
        /// The lease name the proof states.
        proof: String,
        /// The lease name guarding the request's resource.
        lease: String,
    },
    /// The `Tenure-Fencing-Token` header differs from the proof's token.
    #[error("{}", token_mismatch(*.sent, *.proof))]
    TokenMismatch {
        /// The header's token; `None` when it is not one decimal `u64`.
        sent: Option<u64>,
        /// The token the proof states.
        proof: u64,
    },
    /// A newer holder's token was already admitted for the lease name.
    #[error("fencing token {token} of lease {name:?} is lower than {highest}, the highest admitted: a newer holder has the lease, so this holder must stop writing")]
    Stale {
        /// The lease name.
        name: String,
        /// The request's token.
        token: u64,
        /// The highest token admitted for the name.
        highest: u64,
    },
}

/// The message of [`Refusal::TokenMismatch`].
fn token_mismatch(sent: Option<u64>, proof: u64) -> String {
    match sent {
        Some(sent) => format!(
            "the Tenure-Fencing-Token header says {sent} but the fence proof states {proof}: send the token of the grant whose proof you send"
        ),
        None => format!(
            "the Tenure-Fencing-Token header is not one decimal token (the fence proof states {proof}): send that token or leave the header out"
        ),
    }
}

impl Refusal {
    /// The reason as the response body names it, e.g. `FENCE_STALE`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Missing => "FENCE_MISSING",
            Refusal::Invalid(e) => match e {
                FenceError::Malformed(_) => "FENCE_MALFORMED",
                FenceError::UnsupportedVersion(_) => "FENCE_UNSUPPORTED_VERSION",
                FenceError::UnknownKey(_) => "FENCE_UNKNOWN_KEY",
                FenceError::BadSignature => "FENCE_BAD_SIGNATURE",
            },
            Refusal::WrongName { .. } => "FENCE_WRONG_NAME",
            Refusal::TokenMismatch { .. } => "FENCE_TOKEN_MISMATCH",
            Refusal::Stale { .. } => "FENCE_STALE",
        }
    }

    /// The JSON body of the refusal.
    pub fn to_json(&self) -> String {
        let mut body = serde_json::json!({
            "reason": self.reason(),
            "message": self.to_string(),
        });
        if let Refusal::Stale { token, highest, .. } = self {
            body["token"] = token.to_string().into();
            body["highest"] = highest.to_string().into();
        }
        body.to_string()
    }

    /// The `409 Conflict` response, with this refusal in its extensions.
    pub fn to_response(&self) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(Bytes::from(self.to_json())));
        *response.status_mut() = StatusCode::CONFLICT;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response.extensions_mut().insert(self.clone());
        response
    }
}

/// Fences the requests of the services it wraps (see the module doc).
///
/// `F` names the lease guarding a request's resource: any
/// `Fn(&Request<B>) -> N` where `N: AsRef<str>` (a `String`, or a
/// `&'static str` for a service that writes one resource). `T` is the
/// [`TokenStore`], in memory unless [`FenceLayer::with_store`] sets one.
/// Clones share the keyset, the function and the store.
pub struct FenceLayer<F, T = MemoryTokenStore> {
    /// The pinned public keys.
    keys: Arc<Keyset>,
    /// The request's lease name.
    lease_name: Arc<F>,
    /// The highest token per lease name.
    store: Arc<T>,
}

impl<F> FenceLayer<F> {
    /// A layer verifying proofs against `keys`, checking them against the
    /// lease `lease_name` names for each request, with an in-memory token
    /// store.
    pub fn new(keys: Keyset, lease_name: F) -> Self {
        FenceLayer {
            keys: Arc::new(keys),
            lease_name: Arc::new(lease_name),
            store: Arc::new(MemoryTokenStore::default()),
        }
    }
}

impl<F, T> FenceLayer<F, T> {
    /// The same layer with `store` keeping the highest tokens.
    pub fn with_store<U>(self, store: U) -> FenceLayer<F, U> {
        FenceLayer {
            keys: self.keys,
            lease_name: self.lease_name,
            store: Arc::new(store),
        }
    }

    /// The token store, e.g. to read [`MemoryTokenStore::highest`].
    pub fn store(&self) -> &T {
        &self.store
    }
}

impl<F, T> Clone for FenceLayer<F, T> {
    fn clone(&self) -> Self {
        FenceLayer {
            keys: self.keys.clone(),
            lease_name: self.lease_name.clone(),
            store: self.store.clone(),
        }
    }
}

impl<F, T> fmt::Debug for FenceLayer<F, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceLayer")
            .field("key_ids", &self.keys.key_ids())
            .finish_non_exhaustive()
    }
}

impl<S, F, T> Layer<S> for FenceLayer<F, T> {
    type Service = Fenced<S, F, T>;

    fn layer(&self, inner: S) -> Self::Service {
        Fenced {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service whose requests are fenced by a [`FenceLayer`].
pub struct Fenced<S, F, T = MemoryTokenStore> {
    /// The wrapped service, called for admitted requests only.
    inner: S,
    /// The configuration.
    layer: FenceLayer<F, T>,
}

impl<S: Clone, F, T> Clone for Fenced<S, F, T> {
    fn clone(&self) -> Self {
        Fenced {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, F, T> fmt::Debug for Fenced<S, F, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fenced")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, F, N, T, B, ResB> Service<Request<B>> for Fenced<S, F, T>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    F: Fn(&Request<B>) -> N,
    N: AsRef<str>,
    T: TokenStore,
{
    type Response = Response<Either<ResB, Full<Bytes>>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let kind = match admit(&self.layer, &request) {
            Ok(verified) => {
                request.extensions_mut().insert(verified);
                Kind::Admitted {
                    inner: self.inner.call(request),
                }
            }
            Err(refusal) => Kind::Refused {
                response: Some(refusal.to_response()),
            },
        };
        ResponseFuture { kind }
    }
}

/// The contract's checks, in its order (see the module doc).
fn admit<F, N, T, B>(layer: &FenceLayer<F, T>, request: &Request<B>) -> Result<Verified, Refusal>
where
    F: Fn(&Request<B>) -> N,
    N: AsRef<str>,
    T: TokenStore,
{
    let headers = request.headers();
    let proof = single(headers, FENCE_HEADER)
        .map_err(|()| Refusal::Invalid(FenceError::Malformed("more than one Tenure-Fence header")))?
        .ok_or(Refusal::Missing)?;
    let proof = proof
        .to_str()
        .map_err(|_| Refusal::Invalid(FenceError::Malformed("not base64url without padding")))?;
    let verified = layer.keys.verify_text(proof).map_err(Refusal::Invalid)?;
    let lease = (layer.lease_name)(request);
    let lease = lease.as_ref();
    if verified.check_name(lease).is_err() {
        return Err(Refusal::WrongName {
            proof: verified.fence.name,
            lease: lease.to_owned(),
        });
    }
    let token = verified.fence.token;
    match single(headers, TOKEN_HEADER) {
        Ok(None) => {}
        Ok(Some(sent)) => {
            let sent = decimal(sent);
            if sent != Some(token) {
                return Err(Refusal::TokenMismatch { sent, proof: token });
            }
        }
        Err(()) => {
            return Err(Refusal::TokenMismatch {
                sent: None,
                proof: token,
            })
        }
    }
    layer
        .store
        .advance(lease, token)
        .map_err(|highest| Refusal::Stale {
            name: lease.to_owned(),
            token,
            highest,
        })?;
    Ok(verified)
}

/// The one value of header `name`: `Ok(None)` if absent, `Err` if sent more
/// than once (a proxy could keep either, so neither is trusted).
fn single<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a HeaderValue>, ()> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (first, None) => Ok(first),
        (_, Some(_)) => Err(()),
    }
}

/// A header value as a decimal `u64`: ASCII digits only (no sign, no
/// spaces), at most 20 of them, no overflow.
fn decimal(value: &HeaderValue) -> Option<u64> {
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > 20 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

pin_project! {
    /// The response future of [`Fenced`]: the inner service's response, or
    /// the refusal, ready at once.
    pub struct ResponseFuture<Fut> {
        #[pin]
        kind: Kind<Fut>,
    }
}

pin_project! {
    /// Which of the two a [`ResponseFuture`] is.
    #[project = KindProj]
    enum Kind<Fut> {
        /// The request was admitted: the inner service's future.
        Admitted { #[pin] inner: Fut },
        /// The request was refused: the 409, taken when polled.
        Refused { response: Option<Response<Full<Bytes>>> },
    }
}

impl<Fut, ResB, E> Future for ResponseFuture<Fut>
where
    Fut: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<Either<ResB, Full<Bytes>>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Admitted { inner } => inner
                .poll(cx)
                .map(|result| result.map(|response| response.map(Either::Left))),
            KindProj::Refused { response } => {
                let response = response
                    .take()
                    .expect("a fence ResponseFuture polled after it completed");
                Poll::Ready(Ok(response.map(Either::Right)))
            }
        }
    }
}

impl<Fut> fmt::Debug for ResponseFuture<Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.kind {
            Kind::Admitted { .. } => "admitted",
            Kind::Refused { .. } => "refused",
        };
        f.debug_tuple("ResponseFuture").field(&state).finish()
    }
}
