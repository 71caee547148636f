//! TLS, mTLS, bearer tokens and grants, with certificates made in the test:
//! a client without a valid certificate is refused before any RPC runs;
//! an identity outside its prefix gets PERMISSION_DENIED for every action;
//! admin RPCs need the admin grant; tokens identify callers too.

use crate::common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{GetLeaseRequest, ListLeasesRequest, RevokeLeaseRequest, WatchLeaseRequest};
use tenure::{Action, Grant};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::Code;

/// A test CA and files for the server's and clients' certificates.
struct Pki {
    /// Holds the PEM files.
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
            .push(DnType::CommonName, "tenure test CA");
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

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// Writes the server's certificate and key; returns their paths.
    fn server_files(&self) -> (std::path::PathBuf, std::path::PathBuf) {
        let (cert, key) = self.issue("tenure", &["localhost"]);
        std::fs::write(self.path("server.pem"), cert).unwrap();
        std::fs::write(self.path("server.key"), key).unwrap();
        (self.path("server.pem"), self.path("server.key"))
    }
}

fn grant(identity: &str, prefixes: &[&str], actions: &[Action]) -> Grant {
    Grant {
        identity: identity.into(),
        prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
        actions: actions.to_vec(),
    }
}

/// A TLS channel to the server, with a client certificate when given.
async fn tls_channel(
    t: &Tenure,
    pki: &Pki,
    client: Option<(String, String)>,
) -> Result<Channel, tonic::transport::Error> {
    let addr = t.running.as_ref().unwrap().addr();
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pki.ca_pem))
        .domain_name("localhost");
    if let Some((cert, key)) = client {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Channel::from_shared(format!("https://127.0.0.1:{}", addr.port()))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await
}

/// Tenure with mTLS required; billing may lease under "billing.", ops may
/// administer everything.
async fn mtls_tenure(pki: &Pki) -> Tenure {
    let (cert, key) = pki.server_files();
    let ca = pki.path("ca.pem");
    Tenure::start_with(|c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
        c.tls_client_ca = Some(ca);
        c.grants = vec![
            grant(
                "billing",
                &["billing."],
                &[
                    Action::Acquire,
                    Action::Renew,
                    Action::Release,
                    Action::Watch,
                ],
            ),
            grant("ops", &[""], &[Action::Admin, Action::Watch]),
        ];
    })
    .await
}

/// Without a client certificate (or without TLS at all) no RPC runs.
#[tokio::test]
async fn mtls_refuses_clients_without_a_valid_certificate() {
    let pki = Pki::new();
    let t = mtls_tenure(&pki).await;
    let before = t.last_sequence().await;

    // TLS without a client certificate: the handshake is refused.
    let refused = match tls_channel(&t, &pki, None).await {
        Err(_) => true,
        Ok(ch) => LeaseServiceClient::new(ch)
            .acquire(acquire_req("billing.a", "x", 10))
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate got through");

    // A certificate from another CA: refused too.
    let stranger = Pki::new();
    let foreign = stranger.issue("billing", &[]);
    let refused = match tls_channel(&t, &pki, Some(foreign)).await {
        Err(_) => true,
        Ok(ch) => LeaseServiceClient::new(ch)
            .acquire(acquire_req("billing.a", "x", 10))
            .await
            .is_err(),
    };
    assert!(refused, "a certificate from another CA got through");

    // Plaintext to a TLS port: refused.
    let addr = t.running.as_ref().unwrap().addr();
    let plain = match Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
    {
        Err(_) => true,
        Ok(ch) => LeaseServiceClient::new(ch)
            .acquire(acquire_req("billing.a", "x", 10))
            .await
            .is_err(),
    };
    assert!(plain, "a plaintext client got through");
    assert_eq!(t.last_sequence().await, before, "nothing was written");

    // The right certificate works.
    let mut c = LeaseServiceClient::new(
        tls_channel(&t, &pki, Some(pki.issue("billing", &[])))
            .await
            .unwrap(),
    );
    acquire(&mut c, acquire_req("billing.a", "x", 10)).await;
}

/// An identity outside its prefix gets PERMISSION_DENIED for each action,
/// and nothing is written; inside its prefix everything works.
#[tokio::test]
async fn identities_stay_inside_their_grants() {
    let pki = Pki::new();
    let t = mtls_tenure(&pki).await;
    let mut ops = LeaseServiceClient::new(
        tls_channel(&t, &pki, Some(pki.issue("ops", &[])))
            .await
            .unwrap(),
    );
    // The SAN names the caller too: CN "svc-17" with DNS SAN "billing".
    let mut billing = LeaseServiceClient::new(
        tls_channel(&t, &pki, Some(pki.issue("svc-17", &["billing"])))
            .await
            .unwrap(),
    );

    // Inside the prefix.
    let (lease, key) = acquire(&mut billing, acquire_req("billing.run", "svc", 30)).await;
    billing
        .renew(renew_req("billing.run", lease.revision, key.clone()))
        .await
        .unwrap();
    let mut w = billing
        .watch_lease(WatchLeaseRequest {
            name: "billing.>".into(),
            event_types: vec![],
            start_revision: 0,
            shard_revisions: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    within("snapshot", w.message()).await.unwrap();

    let before = t.last_sequence().await;
    let denied = |r: Result<tonic::Status, ()>, what: &str| {
        let s = r.unwrap();
        assert_eq!(s.code(), Code::PermissionDenied, "{what}: {s:?}");
        assert_eq!(reason(&s), "PERMISSION_DENIED", "{what}");
        assert!(s.message().contains("svc-17"), "{what}: {}", s.message());
    };
    denied(
        Ok(billing
            .acquire(acquire_req("jobs.x", "svc", 30))
            .await
            .unwrap_err()),
        "acquire",
    );
    denied(
        Ok(billing
            .renew(renew_req("jobs.x", 1, key.clone()))
            .await
            .unwrap_err()),
        "renew",
    );
    denied(
        Ok(billing
            .release(release_req("jobs.x", 1, key.clone()))
            .await
            .unwrap_err()),
        "release",
    );
    denied(
        Ok(billing
            .get_lease(GetLeaseRequest {
                name: "jobs.x".into(),
            })
            .await
            .unwrap_err()),
        "get",
    );
    for target in ["jobs.>", ">", "jobs.x"] {
        denied(
            Ok(billing
                .watch_lease(WatchLeaseRequest {
                    name: target.into(),
                    event_types: vec![],
                    start_revision: 0,
                    shard_revisions: Vec::new(),
                })
                .await
                .unwrap_err()),
            "watch",
        );
    }
    denied(
        Ok(billing
            .list_leases(ListLeasesRequest::default())
            .await
            .unwrap_err()),
        "list",
    );
    denied(
        Ok(billing
            .revoke_lease(RevokeLeaseRequest {
                name: "billing.run".into(),
                reason: "mine".into(),
                fencing_token: 0,
                slot: 0,
            })
            .await
            .unwrap_err()),
        "revoke",
    );
    assert_eq!(t.last_sequence().await, before, "nothing was written");

    // ops may administer but not take leases.
    let err = ops
        .acquire(acquire_req("billing.run", "ops", 30))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    let listed = ops
        .list_leases(ListLeasesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.leases.len(), 1);
    ops.revoke_lease(RevokeLeaseRequest {
        name: "billing.run".into(),
        reason: "maintenance".into(),
        fencing_token: lease.fencing_token,
        slot: 0,
    })
    .await
    .unwrap();
}

/// Bearer tokens from the token file identify callers; an unknown or
/// missing token is UNAUTHENTICATED.
#[tokio::test]
async fn bearer_tokens_identify_callers() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "# identity token\nbatch batch-token-0123456789abcdef\n",
    )
    .unwrap();
    let t = Tenure::start_with(|c| {
        c.auth_tokens = Some(tokens);
        c.grants = vec![grant("batch", &["batch."], &[Action::All])];
    })
    .await;
    let mut c = t.client().await;
    let with = |token: &str, name: &str| {
        let mut r = tonic::Request::new(acquire_req(name, "b", 10));
        r.metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        r
    };
    c.acquire(with("batch-token-0123456789abcdef", "batch.a"))
        .await
        .unwrap();
    let err = c
        .acquire(with("batch-token-0123456789abcdef", "other.a"))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "PERMISSION_DENIED");
    let err = c
        .acquire(with("wrong-token-0123456789abcdef", "batch.b"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert_eq!(reason(&err), "UNAUTHENTICATED");
    let err = c
        .acquire(acquire_req("batch.c", "b", 10))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "UNAUTHENTICATED");
}

/// TLS without client certificates: encrypted, and open as without TLS.
#[tokio::test]
async fn server_tls_without_client_auth() {
    let pki = Pki::new();
    let (cert, key) = pki.server_files();
    let t = Tenure::start_with(|c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
    })
    .await;
    let mut c = LeaseServiceClient::new(tls_channel(&t, &pki, None).await.unwrap());
    acquire(&mut c, acquire_req("any.name", "x", 10)).await;
}
