//! Fence proofs on grants (docs/fencing.md): every grant reply (Acquire, a
//! semaphore slot, each AcquireGroup member, Campaign) carries a proof that
//! verifies against the keys GetFenceKeys serves and states that grant; no
//! key, no proof; renewals carry none; a SIGHUP rotation keeps old proofs
//! verifiable and signs new ones with the new key; a reload that fails keeps
//! the keys in force; bad key files stop the start with the flag named;
//! `tenure fence-keys` prints the keyset a store pins and generates keys
//! without ever overwriting one.

use std::path::{Path, PathBuf};

use crate::common::*;
use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey};
use ed25519_dalek::SigningKey;
use tenure::proto::election_service_client::ElectionServiceClient;
use tenure::proto::{
    AcquireGroupRequest, AcquireRequest, CampaignRequest, GetFenceKeysRequest, RenewRequest,
};
use tenure_fence::{Keyset, Verified};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Writes an Ed25519 signing key from `seed` as PKCS#8 PEM.
fn key_file(dir: &Path, name: &str, seed: u8) -> PathBuf {
    let path = dir.join(name);
    let pem = SigningKey::from_bytes(&[seed; 32])
        .to_pkcs8_pem(LineEnding::LF)
        .unwrap();
    std::fs::write(&path, pem.as_bytes()).unwrap();
    path
}

/// The keyset the server serves now.
async fn keyset(client: &mut LeaseClient) -> Keyset {
    let resp = client
        .get_fence_keys(GetFenceKeysRequest {})
        .await
        .expect("GetFenceKeys")
        .into_inner();
    Keyset::parse(&resp.keyset).expect("the served keyset parses")
}

type LeaseClient =
    tenure::proto::lease_service_client::LeaseServiceClient<tonic::transport::Channel>;

/// Checks that `proof` verifies and states the holding `lease`.
fn states(keys: &Keyset, lease: &tenure::proto::Lease) -> Verified {
    let v = keys.verify(&lease.fence_proof).expect("the proof verifies");
    assert_eq!(v.fence.bucket, "tenure");
    assert_eq!(v.fence.name, lease.name);
    assert_eq!(v.fence.token, lease.fencing_token);
    assert_eq!(v.fence.slot, lease.slot);
    assert_eq!(v.fence.holder, lease.holder);
    assert_eq!(v.fence.ttl_s as i64, lease.ttl.unwrap().seconds);
    let at = lease.acquire_time.unwrap();
    assert_eq!(
        v.fence.granted_at_ms as i64,
        at.seconds * 1000 + at.nanos as i64 / 1_000_000
    );
    v
}

#[tokio::test]
async fn every_grant_carries_a_proof_of_itself() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "fence.pem", 9);
    let t = Tenure::start_with(|c| c.fence_signing_key = Some(key)).await;
    let mut c = t.client().await;
    let keys = keyset(&mut c).await;
    let served = c
        .get_fence_keys(GetFenceKeysRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(served.keys.len(), 1);
    assert!(served.keys[0].active);
    assert_eq!(
        served.keys[0].key_id,
        hex::encode(tenure_fence::key_id(
            &SigningKey::from_bytes(&[9; 32]).verifying_key().to_bytes()
        ))
    );

    // A plain lease; its retry (same key) answers the same proof.
    let req = AcquireRequest {
        lease_key: "fence-proof-key-0001".into(),
        ..acquire_req("orders", "worker-1", 30)
    };
    let (lease, key) = acquire(&mut c, req.clone()).await;
    states(&keys, &lease);
    let (again, _) = acquire(&mut c, req).await;
    assert_eq!(
        again.fence_proof, lease.fence_proof,
        "a retry is the same grant"
    );
    // A renewal does not change the proof, and carries none.
    let renewed = renew(&mut c, renew_req("orders", lease.revision, &key)).await;
    assert!(renewed.fence_proof.is_empty());

    // A semaphore slot.
    let (slot, _) = acquire(
        &mut c,
        AcquireRequest {
            limit: 3,
            ..acquire_req("pool", "w2", 30)
        },
    )
    .await;
    assert_eq!(states(&keys, &slot).fence.slot, slot.slot);
    assert!(slot.slot >= 1);

    // A read-write lock's exclusive holding, and the shared one its
    // Downgrade makes: a new token, with a proof of its own.
    let (writer, wkey) = acquire(
        &mut c,
        AcquireRequest {
            mode: tenure::proto::LockMode::Exclusive as i32,
            ..acquire_req("catalog", "w5", 30)
        },
    )
    .await;
    states(&keys, &writer);
    let shared = c
        .downgrade(tenure::proto::DowngradeRequest {
            name: "catalog".into(),
            expected_revision: writer.revision,
            lease_key: wkey,
            slot: writer.slot,
        })
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    assert!(shared.fencing_token > writer.fencing_token);
    states(&keys, &shared);

    // Each group member: its own name and token.
    let group = c
        .acquire_group(AcquireGroupRequest {
            names: vec!["g.a".into(), "g.b".into()],
            holder: "w3".into(),
            ttl: Some(secs(30)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    for member in &group.leases {
        states(&keys, member);
    }

    // An election term.
    let mut e = ElectionServiceClient::new(t.channel().await);
    let term = e
        .campaign(CampaignRequest {
            name: "leader".into(),
            holder: "w4".into(),
            value: "10.0.0.4:80".into(),
            ttl: Some(secs(30)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .leadership
        .unwrap();
    let v = keys
        .verify(&term.fence_proof)
        .expect("the term's proof verifies");
    assert_eq!(
        (v.fence.name.as_str(), v.fence.token),
        ("leader", term.fencing_token)
    );

    // A proof is for its own name: a store guarding "orders" refuses the
    // group member's genuine proof.
    let member = keys.verify(&group.leases[0].fence_proof).unwrap();
    assert!(member.check_name("orders").is_err());
}

#[tokio::test]
async fn without_a_key_grants_carry_no_proof() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, _) = acquire(&mut c, acquire_req("plain", "w", 30)).await;
    assert!(lease.fence_proof.is_empty());
    let keys = c
        .get_fence_keys(GetFenceKeysRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(keys.keys.is_empty() && keys.keyset.is_empty());
    // The CLI says so, with the way out.
    let out = run_to_end(
        tenure_cli(&format!("http://{}", t.running.as_ref().unwrap().addr())).arg("fence-keys"),
    )
    .await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("--fence-signing-key"), "{out:?}");
}

#[tokio::test]
async fn a_bad_key_file_stops_the_start_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a key\n").unwrap();
    let nats = Nats::start().await;
    for args in [
        vec!["--fence-signing-key", junk.to_str().unwrap()],
        vec!["--fence-verify-keys", junk.to_str().unwrap()],
    ] {
        let out = run_to_end(
            tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
                .args([
                    "serve",
                    "--nats-url",
                    &nats.url(),
                    "--listen",
                    "127.0.0.1:0",
                ])
                .args(&args),
        )
        .await;
        assert_ne!(out.code, 0, "{out:?}");
        assert!(out.stderr.contains(args[0]), "{out:?}");
    }
}

/// Rotation by SIGHUP on a running `tenure serve`: the next key served
/// first, then signing, the old one still served; proofs from before the
/// rotation still verify; a broken file on reload keeps the keys in force.
#[tokio::test]
async fn sighup_rotates_keys_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let active = key_file(dir.path(), "active.pem", 1);
    let next = key_file(dir.path(), "next.pem", 2);
    // The verify file lists the active key to begin with (served once).
    let verify = dir.path().join("verify.keys");
    let old_pub = tenure_fence::Signer::from_seed(&[1; 32]).public_key_text();
    std::fs::write(&verify, format!("{old_pub}\n")).unwrap();
    let nats = Nats::start().await;
    let log = dir.path().join("serve.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let serve = Serve::start_adjusted(
        &nats,
        &[
            "--fence-signing-key",
            active.to_str().unwrap(),
            "--fence-verify-keys",
            verify.to_str().unwrap(),
        ],
        |c| {
            c.env("RUST_LOG", "info").stderr(log_file);
        },
    )
    .await;
    let mut c = serve.client().await;
    let (before, _) = acquire(&mut c, acquire_req("rotating", "w1", 60)).await;
    let old_keys = keyset(&mut c).await;
    states(&old_keys, &before);

    // Step 1: serve the next key (stores pick it up) while still signing
    // with the active one; step 2: sign with the next key, the old one
    // still served. Both by editing files and SIGHUP.
    let next_pub = tenure_fence::Signer::from_seed(&[2; 32]).public_key_text();
    std::fs::write(&verify, format!("{old_pub}\n{next_pub}\n")).unwrap();
    let hangup = |serve: &Serve| unsafe { libc::kill(serve.pid as i32, libc::SIGHUP) };
    hangup(&serve);
    wait_for_line(&log, "fence keys reloaded", 1).await;
    let served = keyset(&mut c).await;
    assert_eq!(served.key_ids().len(), 2);
    std::fs::copy(&next, &active).unwrap();
    hangup(&serve);
    wait_for_line(&log, "fence keys reloaded", 2).await;
    let keys = keyset(&mut c).await;
    let (after, _) = acquire(&mut c, acquire_req("rotated", "w2", 60)).await;
    let v = states(&keys, &after);
    assert_eq!(
        v.key_id,
        hex::encode(tenure_fence::Signer::from_seed(&[2; 32]).key_id()),
        "new grants are signed with the new key"
    );
    states(&keys, &before); // the old proof still verifies

    // A broken signing key file: the reload fails, the keys stay.
    std::fs::write(&active, "broken\n").unwrap();
    hangup(&serve);
    wait_for_line(&log, "fence keys not reloaded", 1).await;
    let (still, _) = acquire(&mut c, acquire_req("still", "w3", 60)).await;
    assert_eq!(states(&keys, &still).key_id, v.key_id);
    serve.stop().await;
}

/// Waits until `path` holds `count` lines containing `needle`.
async fn wait_for_line(path: &Path, needle: &str, count: usize) {
    within(&format!("{count} log line(s) with {needle:?}"), async {
        loop {
            let file = tokio::fs::File::open(path).await.unwrap();
            let mut lines = BufReader::new(file).lines();
            let mut seen = 0;
            while let Some(line) = lines.next_line().await.unwrap() {
                seen += line.contains(needle) as usize;
            }
            if seen >= count {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test]
async fn the_cli_generates_keys_and_prints_the_keyset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.pem");
    let out = run_to_end(
        tenure_cli("http://127.0.0.1:1")
            .arg("fence-keys")
            .arg("--generate")
            .arg(&path),
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let generated = Keyset::parse(&out.stdout).expect("the printed line is a keyset");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Never over an existing key.
    let before = std::fs::read(&path).unwrap();
    let out = run_to_end(
        tenure_cli("http://127.0.0.1:1")
            .arg("fence-keys")
            .arg("--generate")
            .arg(&path),
    )
    .await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("never overwritten"), "{out:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // The server signs with it, and `tenure fence-keys` prints what a store
    // pins: the same key.
    let t = Tenure::start_with(|c| c.fence_signing_key = Some(path.clone())).await;
    let url = format!("http://{}", t.running.as_ref().unwrap().addr());
    let out = run_to_end(tenure_cli(&url).arg("fence-keys")).await;
    assert_eq!(out.code, 0, "{out:?}");
    let pinned = Keyset::parse(&out.stdout).unwrap();
    assert_eq!(pinned.key_ids(), generated.key_ids());
    assert!(out.stdout.contains(" active"), "{}", out.stdout);
    let mut c = t.client().await;
    let (lease, _) = acquire(&mut c, acquire_req("cli", "w", 30)).await;
    states(&pinned, &lease);
    // `tenure acquire -o json` shows the proof's text form.
    let out = run_to_end(tenure_cli(&url).args(["acquire", "cli2", "-o", "json"])).await;
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let text = v["fence_proof"].as_str().expect("fence_proof in the JSON");
    assert_eq!(pinned.verify_text(text).unwrap().fence.name, "cli2");
}

/// Renew never signs: the proof is the grant's.
#[tokio::test]
async fn renew_replies_carry_no_proof() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "k.pem", 4);
    let t = Tenure::start_with(|c| c.fence_signing_key = Some(key)).await;
    let mut c = t.client().await;
    let (lease, key) = acquire(&mut c, acquire_req("r", "w", 30)).await;
    assert!(!lease.fence_proof.is_empty());
    let renewed = c
        .renew(RenewRequest {
            ..renew_req("r", lease.revision, key)
        })
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    assert!(renewed.fence_proof.is_empty());
}
