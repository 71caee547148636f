//! [`ClientConfig`]: where the server is and how to authenticate to it
//! (bearer token, static or refreshed per call; TLS with a CA; mTLS with a
//! client certificate; extra per-call metadata), and the tonic interceptor
//! ([`CallCredentials`]) that puts the token and metadata on every call.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};
use tonic::service::Interceptor;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tonic::Code;

use crate::error::{Error, Reason};

/// How long [`Client::connect`](crate::Client::connect) tries to open the
/// connection, unless [`ClientConfig::connect_timeout`] says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A function that returns the bearer token to send with one call; called
/// before every call, so it can hand out a refreshed token. An `Err` fails
/// that call with `UNAUTHENTICATED` and the error's text, without sending it.
pub type TokenFn = dyn Fn() -> Result<String, String> + Send + Sync;

/// Where the server is and how to authenticate to it; for
/// [`Client::connect_with`](crate::Client::connect_with).
///
/// ```no_run
/// # async fn f() -> Result<(), tenure_client::Error> {
/// use tenure_client::{Client, ClientConfig};
///
/// let config = ClientConfig::new("https://tenure.internal:7419")
///     .tls_ca_file("/etc/tenure/ca.pem")?
///     .tls_identity_files("/etc/tenure/worker.pem", "/etc/tenure/worker.key")?
///     .bearer_token("worker-token-0123456789abcdef")
///     .metadata("x-request-source", "nightly-batch")?;
/// let client = Client::connect_with(config).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ClientConfig {
    /// `"host:port"`, `"http://host:port"` or `"https://host:port"`; TLS is
    /// used for `https://` or when any TLS setting is given.
    pub target: String,
    /// PEM of the CA(s) the server's certificate must chain to (TLS).
    pub tls_ca_pem: Option<Vec<u8>>,
    /// PEM certificate chain and key of this client (mTLS).
    pub tls_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// The server name to verify; default: the target's host.
    pub tls_domain: Option<String>,
    /// Where the bearer token comes from; `None` sends none.
    pub token: Option<Arc<TokenFn>>,
    /// Extra metadata (gRPC headers) sent with every call.
    pub metadata: Vec<(AsciiMetadataKey, AsciiMetadataValue)>,
    /// How long connecting may take.
    pub connect_timeout: Duration,
}

impl ClientConfig {
    /// A configuration for `target` with no TLS, no token and no metadata.
    pub fn new(target: impl Into<String>) -> ClientConfig {
        ClientConfig {
            target: target.into(),
            tls_ca_pem: None,
            tls_identity_pem: None,
            tls_domain: None,
            token: None,
            metadata: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Sends `authorization: Bearer <token>` with every call.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        let token = token.into();
        self.token = Some(Arc::new(move || Ok(token.clone())));
        self
    }

    /// Sends `authorization: Bearer <f()>` with every call, calling `f`
    /// before each one (so it may return a refreshed token).
    pub fn bearer_token_fn(
        mut self,
        f: impl Fn() -> Result<String, String> + Send + Sync + 'static,
    ) -> Self {
        self.token = Some(Arc::new(f));
        self
    }

    /// Uses TLS and verifies the server against this CA (PEM).
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca_pem = Some(pem.into());
        self
    }

    /// Uses TLS and verifies the server against the CA in this PEM file.
    ///
    /// # Errors
    ///
    /// The file cannot be read ([`Reason::InvalidArgument`]).
    pub fn tls_ca_file(self, path: impl AsRef<Path>) -> Result<Self, Error> {
        let pem = read(path.as_ref(), "TLS CA")?;
        Ok(self.tls_ca_pem(pem))
    }

    /// Presents this client certificate chain and key (PEM) for mTLS.
    pub fn tls_identity_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.tls_identity_pem = Some((cert.into(), key.into()));
        self
    }

    /// Presents the client certificate and key in these PEM files (mTLS).
    ///
    /// # Errors
    ///
    /// A file cannot be read ([`Reason::InvalidArgument`]).
    pub fn tls_identity_files(
        self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Self, Error> {
        let cert = read(cert.as_ref(), "TLS client certificate")?;
        let key = read(key.as_ref(), "TLS client key")?;
        Ok(self.tls_identity_pem(cert, key))
    }

    /// Verifies the server's certificate for this name instead of the
    /// target's host.
    pub fn tls_domain(mut self, name: impl Into<String>) -> Self {
        self.tls_domain = Some(name.into());
        self
    }

    /// Sends this metadata entry (a gRPC header) with every call.
    ///
    /// # Errors
    ///
    /// The key or value is not valid ASCII metadata ([`Reason::InvalidArgument`]).
    pub fn metadata(mut self, key: &str, value: &str) -> Result<Self, Error> {
        let bad = |what: &str| {
            Error::local(
                Code::InvalidArgument,
                Reason::InvalidArgument,
                format!("metadata {what} {key:?} is not a valid gRPC ASCII header"),
            )
        };
        let k = AsciiMetadataKey::from_bytes(key.as_bytes()).map_err(|_| bad("key"))?;
        let v = AsciiMetadataValue::try_from(value).map_err(|_| bad("value of"))?;
        self.metadata.push((k, v));
        Ok(self)
    }

    /// Sets [`ClientConfig::connect_timeout`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether the connection uses TLS.
    pub fn uses_tls(&self) -> bool {
        self.target.starts_with("https://")
            || self.tls_ca_pem.is_some()
            || self.tls_identity_pem.is_some()
            || self.tls_domain.is_some()
    }

    /// The target without its scheme, as errors name it.
    pub(crate) fn display_target(&self) -> String {
        let t = self.target.as_str();
        t.split_once("://").map_or(t, |(_, rest)| rest).to_string()
    }

    /// The tonic endpoint: the URI (scheme chosen by [`uses_tls`]) and the
    /// TLS settings.
    ///
    /// [`uses_tls`]: ClientConfig::uses_tls
    pub(crate) fn endpoint(&self) -> Result<Endpoint, Error> {
        let bad = |e: &dyn fmt::Display| {
            Error::local(
                Code::InvalidArgument,
                Reason::InvalidArgument,
                format!("bad Tenure address or TLS settings: {e}"),
            )
            .context(&self.display_target(), "connect")
        };
        let scheme = if self.uses_tls() { "https" } else { "http" };
        let uri = format!("{scheme}://{}", self.display_target());
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(|e| bad(&e))?
            .connect_timeout(self.connect_timeout);
        if self.uses_tls() {
            let mut tls = ClientTlsConfig::new();
            if let Some(ca) = &self.tls_ca_pem {
                tls = tls.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &self.tls_identity_pem {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            if let Some(domain) = &self.tls_domain {
                tls = tls.domain_name(domain.clone());
            }
            endpoint = endpoint.tls_config(tls).map_err(|e| bad(&e))?;
        }
        Ok(endpoint)
    }

    /// The interceptor adding this configuration's token and metadata.
    pub(crate) fn credentials(&self) -> CallCredentials {
        CallCredentials {
            token: self.token.clone(),
            metadata: Arc::new(self.metadata.clone()),
        }
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("target", &self.target)
            .field("tls", &self.uses_tls())
            .field("tls_ca_pem", &self.tls_ca_pem.is_some())
            .field("tls_identity", &self.tls_identity_pem.is_some())
            .field("tls_domain", &self.tls_domain)
            .field("token", &self.token.as_ref().map(|_| "(hidden)"))
            .field(
                "metadata",
                &self.metadata.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// The tonic [`Interceptor`] of a [`Client`](crate::Client): adds the
/// bearer token (asked for anew on every call) and the extra metadata.
#[derive(Clone, Default)]
pub struct CallCredentials {
    /// The token source, if any.
    token: Option<Arc<TokenFn>>,
    /// Extra headers for every call.
    metadata: Arc<Vec<(AsciiMetadataKey, AsciiMetadataValue)>>,
}

impl CallCredentials {
    /// Adds the token and metadata to `metadata`.
    fn apply(&self, metadata: &mut MetadataMap) -> Result<(), tonic::Status> {
        for (k, v) in self.metadata.iter() {
            metadata.insert(k.clone(), v.clone());
        }
        if let Some(token) = &self.token {
            let token = token().map_err(|e| {
                tonic::Status::unauthenticated(format!("the bearer token callback failed: {e}"))
            })?;
            let value = AsciiMetadataValue::try_from(format!("Bearer {token}")).map_err(|_| {
                tonic::Status::unauthenticated("the bearer token is not printable ASCII")
            })?;
            metadata.insert("authorization", value);
        }
        Ok(())
    }
}

impl Interceptor for CallCredentials {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        self.apply(request.metadata_mut())?;
        Ok(request)
    }
}

impl fmt::Debug for CallCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallCredentials")
            .field("token", &self.token.as_ref().map(|_| "(hidden)"))
            .field("metadata", &self.metadata.len())
            .finish()
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| {
        Error::local(
            Code::InvalidArgument,
            Reason::InvalidArgument,
            format!("cannot read the {what} {}: {e}", path.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_callback_is_asked_on_every_call() {
        let n = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = n.clone();
        let config = ClientConfig::new("127.0.0.1:1")
            .bearer_token_fn(move || {
                let i = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(format!("token-{i}"))
            })
            .metadata("x-team", "billing")
            .unwrap();
        let mut creds = config.credentials();
        for i in 0..2 {
            let request = creds.call(tonic::Request::new(())).unwrap();
            let md = request.metadata();
            assert_eq!(
                md.get("authorization").unwrap(),
                &format!("Bearer token-{i}")
            );
            assert_eq!(md.get("x-team").unwrap(), "billing");
        }
        let failing = ClientConfig::new("x:1").bearer_token_fn(|| Err("vault sealed".into()));
        let status = failing
            .credentials()
            .call(tonic::Request::new(()))
            .unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated);
        assert!(status.message().contains("vault sealed"));
        assert!(ClientConfig::new("x:1").metadata("bad key", "v").is_err());
    }

    #[test]
    fn tls_is_chosen_by_scheme_or_settings() {
        assert!(!ClientConfig::new("127.0.0.1:7419").uses_tls());
        assert!(ClientConfig::new("https://h:1").uses_tls());
        assert!(ClientConfig::new("h:1").tls_ca_pem("x").uses_tls());
        assert_eq!(ClientConfig::new("http://h:1").display_target(), "h:1");
        let debug = format!("{:?}", ClientConfig::new("h:1").bearer_token("secret"));
        assert!(!debug.contains("secret"), "{debug}");
    }
}
