//! Credentials against a real Tenure with TLS, mTLS, `--auth-tokens` and
//! `[[grant]]`s (certificates made in the test with rcgen): the client's
//! static and callback bearer tokens, per-call metadata, the TLS CA and the
//! client certificate all reach the server, and refusals surface as the
//! typed reasons UNAUTHENTICATED and PERMISSION_DENIED, naming target and
//! RPC. Also: without a `watch` grant the shared loss watch is refused and
//! loss is noticed at renewal.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{within, Server};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tenure_client::{AcquireOptions, Client, ClientConfig, LossCause, Reason};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

const WORKER_TOKEN: &str = "worker-token-0123456789";
const OPS_TOKEN: &str = "ops-token-0123456789abcdef";
const NOWATCH_TOKEN: &str = "nowatch-token-0123456789";

/// A test CA, and a directory for the server's files.
struct Pki {
    /// Holds the PEM files, the token file and the config.
    dir: tempfile::TempDir,
    /// The CA certificate, PEM.
    ca_pem: String,
    /// The CA, to sign with.
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "tenure client test CA");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Pki {
            dir,
            ca_pem: ca.pem(),
            ca,
        }
    }

    /// A certificate with this CN and SANs: (cert PEM, key PEM).
    fn issue(&self, cn: &str, sans: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Writes a file into the directory; returns its path as a string.
    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// The `tenure serve` arguments for TLS with a certificate for
    /// localhost, the three tokens and their grants; with `mtls`, client
    /// certificates signed by the CA are required too.
    fn server_args(&self, mtls: bool) -> Vec<String> {
        let (cert, key) = self.issue("tenure", &["localhost"]);
        let tokens = format!("worker {WORKER_TOKEN}\nops {OPS_TOKEN}\nnowatch {NOWATCH_TOKEN}\n");
        let config = r#"
[[grant]]
identity = "worker"
prefixes = ["jobs."]
actions = ["acquire", "renew", "release", "watch"]

[[grant]]
identity = "nowatch"
prefixes = ["jobs."]
actions = ["acquire", "renew", "release"]

[[grant]]
identity = "ops"
prefixes = [""]
actions = ["admin", "watch"]
"#;
        let mut args = vec![
            "--tls-cert".to_string(),
            self.write("server.pem", &cert),
            "--tls-key".to_string(),
            self.write("server.key", &key),
            "--auth-tokens".to_string(),
            self.write("tokens", &tokens),
            "--config".to_string(),
            self.write("tenure.toml", config),
        ];
        if mtls {
            args.push("--tls-client-ca".to_string());
            args.push(self.dir.path().join("ca.pem").display().to_string());
        }
        args
    }

    /// What the harness's readiness check connects with.
    fn ready_tls(&self, mtls: bool) -> ClientTlsConfig {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .domain_name("localhost");
        if mtls {
            let (cert, key) = self.issue("ready", &[]);
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        tls
    }

    /// A client configuration trusting the CA, for the server's address.
    fn config(&self, server: &Server) -> ClientConfig {
        ClientConfig::new(server.addr())
            .tls_ca_pem(self.ca_pem.clone())
            .tls_domain("localhost")
    }
}

/// A failure of the connection itself (TLS handshake or HTTP/2), not an
/// answer of the server: no ErrorInfo reason. tonic reports such failures
/// as UNAVAILABLE, UNKNOWN (broken pipe) or INTERNAL (an h2 protocol error
/// when plaintext meets TLS).
fn assert_refused_before_any_rpc(err: &tenure_client::Error) {
    assert_eq!(err.reason(), Reason::Unspecified, "{err}");
    // With TLS 1.3 the client finishes its half of the handshake before the
    // server checks the client certificate, so the refusal may reach the
    // first call as the connection closing (CANCELLED) rather than as a
    // failed connect: either way no Tenure reason, so no RPC ran.
    assert!(
        matches!(
            err.code(),
            tonic::Code::Unavailable
                | tonic::Code::Unknown
                | tonic::Code::Internal
                | tonic::Code::Cancelled
        ),
        "{err}"
    );
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test]
async fn tokens_over_tls_static_callback_and_metadata() {
    let pki = Pki::new();
    let server = Server::start_with(&pki.server_args(false), Some(pki.ready_tls(false))).await;
    let addr = server.addr();

    // No token: UNAUTHENTICATED, typed, naming target and RPC.
    let anonymous = Client::connect_with(pki.config(&server)).await.unwrap();
    let err = anonymous
        .acquire("jobs.a", "anon", secs(5), AcquireOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::Unauthenticated, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert_eq!(err.rpc(), "Acquire");
    assert!(
        err.to_string()
            .starts_with(&format!("tenure at {addr}: Acquire: ")),
        "{err}"
    );

    // A wrong token: UNAUTHENTICATED too.
    let wrong = Client::connect_with(pki.config(&server).bearer_token("not-a-known-token-at-all"))
        .await
        .unwrap();
    let err = wrong.get("jobs.a").await.unwrap_err();
    assert_eq!(err.reason(), Reason::Unauthenticated, "{err}");

    // A static token: the grant's actions work, others are PERMISSION_DENIED.
    let worker = Client::connect_with(pki.config(&server).bearer_token(WORKER_TOKEN))
        .await
        .unwrap();
    let session = worker
        .acquire("jobs.a", "w1", secs(5), AcquireOptions::default())
        .await
        .unwrap();
    assert!(session.fencing_token() > 0);
    let err = worker
        .acquire("billing.a", "w1", secs(5), AcquireOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::PermissionDenied, "{err}");
    assert!(!err.is_retryable());
    assert_eq!(
        err.metadata().get("identity").map(String::as_str),
        Some("worker")
    );
    let err = worker.list("jobs.").await.unwrap_err();
    assert_eq!(err.reason(), Reason::PermissionDenied, "{err}");
    assert_eq!(err.rpc(), "ListLeases");
    assert!(session.release().await.unwrap());

    // A token callback is asked on every call (a refreshed token works).
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let callback = Client::connect_with(pki.config(&server).bearer_token_fn(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(WORKER_TOKEN.to_string())
    }))
    .await
    .unwrap();
    let session = callback
        .acquire("jobs.b", "w2", secs(5), AcquireOptions::default())
        .await
        .unwrap();
    let after_acquire = calls.load(Ordering::SeqCst);
    assert!(after_acquire >= 1);
    session.renew().await.unwrap();
    assert!(
        calls.load(Ordering::SeqCst) > after_acquire,
        "asked again for the renewal"
    );
    assert!(session.release().await.unwrap());

    // A callback that fails: the call fails with its message, not sent.
    let failing = Client::connect_with(
        pki.config(&server)
            .bearer_token_fn(|| Err("the token vault is sealed".to_string())),
    )
    .await
    .unwrap();
    let err = failing.get("jobs.b").await.unwrap_err();
    assert!(
        err.to_string().contains("the token vault is sealed"),
        "{err}"
    );

    // The configuration's metadata is sent with every call: an
    // authorization header given as plain metadata authenticates.
    let by_metadata = Client::connect_with(
        pki.config(&server)
            .metadata("authorization", &format!("Bearer {OPS_TOKEN}"))
            .unwrap(),
    )
    .await
    .unwrap();
    assert!(by_metadata.list("").await.unwrap().is_empty());

    // Plaintext against the TLS port never gets an answer.
    let plain = ClientConfig::new(addr.clone())
        .bearer_token(WORKER_TOKEN)
        .connect_timeout(secs(5));
    if let Ok(client) = Client::connect_with(plain).await {
        let err = client.get("jobs.a").await.unwrap_err();
        assert_refused_before_any_rpc(&err);
    }
    // A CA that did not sign the server's certificate: refused.
    let other = Pki::new();
    let result = Client::connect_with(
        ClientConfig::new(addr)
            .tls_ca_pem(other.ca_pem.clone())
            .tls_domain("localhost")
            .bearer_token(WORKER_TOKEN),
    )
    .await;
    match result {
        Err(err) => assert_refused_before_any_rpc(&err),
        Ok(client) => {
            let err = client.get("jobs.a").await.unwrap_err();
            assert_refused_before_any_rpc(&err);
        }
    }
}

#[tokio::test]
async fn mtls_client_certificate_identifies_the_caller() {
    let pki = Pki::new();
    let server = Server::start_with(&pki.server_args(true), Some(pki.ready_tls(true))).await;

    // The certificate's CN is the identity: "worker" may lease under jobs.
    let (cert, key) = pki.issue("worker", &[]);
    let client = Client::connect_with(pki.config(&server).tls_identity_pem(cert, key))
        .await
        .unwrap();
    let session = client
        .acquire("jobs.mtls", "w1", secs(5), AcquireOptions::default())
        .await
        .unwrap();
    let err = client.list("jobs.").await.unwrap_err();
    assert_eq!(err.reason(), Reason::PermissionDenied, "{err}");
    assert!(session.release().await.unwrap());

    // The same files from disk (tls_ca_file / tls_identity_files).
    let (cert, key) = pki.issue("ops", &[]);
    let config = ClientConfig::new(server.addr())
        .tls_ca_file(pki.dir.path().join("ca.pem"))
        .unwrap()
        .tls_domain("localhost")
        .tls_identity_files(pki.write("ops.pem", &cert), pki.write("ops.key", &key))
        .unwrap();
    let ops = Client::connect_with(config).await.unwrap();
    assert!(ops.list("").await.unwrap().is_empty());

    // Without a client certificate the handshake is refused: no RPC runs.
    let result = Client::connect_with(pki.config(&server).bearer_token(WORKER_TOKEN)).await;
    let err = match result {
        Err(err) => err,
        Ok(client) => client.get("jobs.mtls").await.unwrap_err(),
    };
    assert_refused_before_any_rpc(&err);
}

#[tokio::test]
async fn without_a_watch_grant_loss_is_noticed_at_renewal() {
    let pki = Pki::new();
    let server = Server::start_with(&pki.server_args(false), Some(pki.ready_tls(false))).await;
    let client = Client::connect_with(pki.config(&server).bearer_token(NOWATCH_TOKEN))
        .await
        .unwrap();
    let ops = Client::connect_with(pki.config(&server).bearer_token(OPS_TOKEN))
        .await
        .unwrap();
    // The client's loss watch on jobs.x is refused (no watch grant): the
    // session still works, and a revoke is noticed by the next renewal.
    let session = client
        .acquire("jobs.x", "w", secs(2), AcquireOptions::default())
        .await
        .unwrap();
    ops.revoke("jobs.x", "test: revoke without watch", None)
        .await
        .unwrap();
    within("loss at renewal", session.lost().cancelled()).await;
    let loss = session.loss().unwrap();
    assert_eq!(loss.cause, LossCause::NotHeld, "{loss:?}");
    let err = loss.error.unwrap();
    assert_eq!(
        err.rpc(),
        "Renew",
        "noticed by a renewal, not a watch: {err}"
    );
    assert!(!session.release().await.unwrap(), "nothing left to release");
}
