//! `tenure fence-keys`: the public keys a downstream store pins to verify
//! fence proofs (GetFenceKeys), and `--generate FILE`, a new signing key for
//! `tenure serve --fence-signing-key`.
//!
//! The keyset printed is rebuilt from the keys' bytes, ids computed here:
//! what a store pins never depends on text the server chose.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey as _};
use ed25519_dalek::SigningKey;

use super::args::{FenceKeysArgs, OutputFormat};
use super::connect::{channel, request};
use super::error::{CliError, EXIT_BAD_RESPONSE, EXIT_FAILED};
use super::output;
use crate::proto::lease_service_client::LeaseServiceClient;
use crate::proto::GetFenceKeysRequest;

/// `tenure fence-keys [--generate FILE]`.
pub async fn fence_keys(a: FenceKeysArgs) -> Result<(), CliError> {
    if let Some(path) = &a.generate {
        return generate(path);
    }
    let mut client = LeaseServiceClient::new(channel(&a.conn).await?);
    let resp = client
        .get_fence_keys(request(GetFenceKeysRequest {}, &a.conn, Default::default()))
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner();
    let mut keys = Vec::with_capacity(resp.keys.len());
    for k in &resp.keys {
        let raw: [u8; 32] = k.public_key.as_slice().try_into().map_err(|_| CliError {
            code: EXIT_BAD_RESPONSE,
            reason: "BAD_RESPONSE".into(),
            message: format!(
                "the server sent a fence key of {} bytes; Ed25519 keys are 32",
                k.public_key.len()
            ),
            hint: None,
        })?;
        keys.push((raw, k.active));
    }
    match a.output.output {
        OutputFormat::Json => {
            let list: Vec<_> = keys
                .iter()
                .map(|(k, active)| {
                    serde_json::json!({
                        "key_id": hex::encode(tenure_fence::key_id(k)),
                        "public_key": URL_SAFE_NO_PAD.encode(k),
                        "active": active,
                    })
                })
                .collect();
            let _ = output::write_json(&serde_json::json!({ "keys": list }), false);
        }
        OutputFormat::Table => {
            if keys.is_empty() {
                return Err(CliError {
                    code: EXIT_FAILED,
                    reason: "NO_FENCE_KEYS".into(),
                    message: format!("{} signs no fence proofs", a.conn.server),
                    hint: Some(
                        "start it with --fence-signing-key FILE (tenure fence-keys --generate FILE makes one)"
                            .into(),
                    ),
                });
            }
            let _ = output::write_line("# Tenure fence keys");
            for (k, active) in &keys {
                let _ = output::write_line(&keyset_line(k, *active));
            }
        }
    }
    Ok(())
}

/// One keyset line: the key, then its id (and whether it signs).
fn keyset_line(key: &[u8; 32], active: bool) -> String {
    tenure_fence::keyset_line(key, if active { "active" } else { "" })
}

/// Writes a new signing key to `path` (never over an existing file) and
/// prints its public key.
fn generate(path: &std::path::Path) -> Result<(), CliError> {
    let key = SigningKey::from_bytes(&rand::random::<[u8; 32]>());
    let pem = key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| CliError::usage(format!("cannot encode the key: {e}")))?;
    let fail = |e: std::io::Error| CliError {
        code: EXIT_FAILED,
        reason: "CANNOT_WRITE".into(),
        message: format!("--generate {}: {e}", path.display()),
        hint: (e.kind() == std::io::ErrorKind::AlreadyExists)
            .then(|| "choose a new file: an existing key is never overwritten".into()),
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(fail)?;
    file.write_all(pem.as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    let _ = output::write_line(&keyset_line(&key.verifying_key().to_bytes(), true));
    Ok(())
}
