//! Fence proofs through the Rust client against a real Tenure started with
//! `--fence-signing-key`: a session's proof verifies with the keyset the
//! client reads from GetFenceKeys (the `tenure-fence` crate a store would
//! use), states the session's grant, and goes out as the two HTTP headers;
//! each group member has its own; without a key there is no proof and no
//! `Tenure-Fence` header.

use std::time::Duration;

use crate::common::Server;
use base64::Engine as _;
use tenure_client::AcquireOptions;
use tenure_fence::Keyset;

/// A server with a signing key made by `tenure fence-keys --generate`.
async fn signing_server() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("fence.pem");
    let status = std::process::Command::new(crate::common::tenure_bin())
        .args(["fence-keys", "--generate"])
        .arg(&key)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let server = Server::start_with(
        &["--fence-signing-key".into(), key.display().to_string()],
        None,
    )
    .await;
    (server, dir)
}

#[tokio::test]
async fn a_sessions_proof_verifies_and_travels_as_headers() {
    let (server, _dir) = signing_server().await;
    let client = server.client().await;
    let keys = Keyset::parse(&client.fence_keyset().await.unwrap()).unwrap();
    let session = client
        .acquire(
            "fenced.orders",
            "w1",
            Duration::from_secs(10),
            AcquireOptions::default(),
        )
        .await
        .unwrap();
    let v = keys.verify(session.fence_proof()).unwrap();
    assert_eq!(v.fence.name, "fenced.orders");
    assert_eq!(v.fence.token, session.fencing_token());
    assert_eq!(v.fence.holder, "w1");
    let headers = session.fence_headers();
    assert_eq!(headers[0].0, "Tenure-Fence");
    assert_eq!(keys.verify_text(&headers[0].1).unwrap(), v);
    assert_eq!(
        headers[1],
        ("Tenure-Fencing-Token", session.fencing_token().to_string())
    );
    // The text form is base64url without padding.
    assert!(!headers[0].1.contains(['=', '+', '/']));
    assert_eq!(
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&headers[0].1)
            .unwrap(),
        session.fence_proof()
    );

    let group = client
        .acquire_group(
            &["fenced.a", "fenced.b"],
            "w2",
            Duration::from_secs(10),
            AcquireOptions::default(),
        )
        .await
        .unwrap();
    for name in ["fenced.a", "fenced.b"] {
        let v = keys.verify(group.fence_proof(name).unwrap()).unwrap();
        assert_eq!(
            (v.fence.name.as_str(), Some(v.fence.token)),
            (name, group.fencing_token(name))
        );
    }
    assert!(group.fence_proof("fenced.c").is_none());
    session.release().await.unwrap();
    group.release().await.unwrap();
}

#[tokio::test]
async fn without_a_signing_key_there_is_no_proof() {
    let server = Server::start().await;
    let client = server.client().await;
    assert_eq!(client.fence_keyset().await.unwrap(), "");
    let session = client
        .acquire(
            "unfenced",
            "w",
            Duration::from_secs(10),
            AcquireOptions::default(),
        )
        .await
        .unwrap();
    assert!(session.fence_proof().is_empty());
    assert_eq!(
        session.fence_headers(),
        vec![("Tenure-Fencing-Token", session.fencing_token().to_string())]
    );
    session.release().await.unwrap();
}
