//! The fence key files: the Ed25519 private key that signs fence proofs and
//! the further public keys served during a rotation, read with a bound on
//! their size. Parsing them is configuration; signing with them is the
//! API's (`api::fence`).

use std::io::Read;
use std::path::{Path, PathBuf};

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey};
use ed25519_dalek::{SigningKey, VerifyingKey};

use super::Config;

/// The most a key file may hold: a PEM key is under 200 bytes, a keyset a
/// line per key. A larger file (or `/dev/zero`) is refused unread.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// What the fence key files hold.
#[derive(Clone, Default)]
pub struct FenceKeyFiles {
    /// The signing key's 32-byte seed, if one is configured.
    pub signing: Option<[u8; 32]>,
    /// Further public keys to serve, in file order, without duplicates.
    pub verify: Vec<[u8; 32]>,
}

impl std::fmt::Debug for FenceKeyFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceKeyFiles")
            .field("signing", &self.signing.map(|_| "<secret>"))
            .field("verify", &self.verify.len())
            .finish()
    }
}

impl FenceKeyFiles {
    /// Reads `--fence-signing-key` and `--fence-verify-keys`. Errors name
    /// the flag and the file and say what is wrong.
    pub fn load(config: &Config) -> Result<FenceKeyFiles, String> {
        Self::read(
            config.fence_signing_key.as_deref(),
            &config.fence_verify_keys,
        )
    }

    /// Reads a signing key file and verify key files.
    pub fn read(signing: Option<&Path>, verify: &[PathBuf]) -> Result<FenceKeyFiles, String> {
        let mut keys = FenceKeyFiles::default();
        if let Some(path) = signing {
            let text = read_bounded("--fence-signing-key", path)?;
            let key = SigningKey::from_pkcs8_pem(&text).map_err(|e| {
                format!(
                    "--fence-signing-key {}: not an Ed25519 private key in PKCS#8 PEM ({e}); \
                     create one with `tenure fence-keys --generate FILE`",
                    path.display()
                )
            })?;
            keys.signing = Some(key.to_bytes());
        }
        for path in verify {
            let text = read_bounded("--fence-verify-keys", path)?;
            for key in public_keys(&text)
                .map_err(|e| format!("--fence-verify-keys {}: {e}", path.display()))?
            {
                if !keys.verify.contains(&key) {
                    keys.verify.push(key);
                }
            }
        }
        Ok(keys)
    }
}

/// The public keys of a PEM public key or of a keyset's text form.
fn public_keys(text: &str) -> Result<Vec<[u8; 32]>, String> {
    if text.contains("-----BEGIN") {
        let key = VerifyingKey::from_public_key_pem(text)
            .map_err(|e| format!("not an Ed25519 public key in PEM ({e})"))?;
        return Ok(vec![key.to_bytes()]);
    }
    let keys = tenure_fence::Keyset::parse(text)?.public_keys();
    Ok(keys)
}

/// A key file's text, refusing more than [`MAX_KEY_FILE_BYTES`].
fn read_bounded(flag: &str, path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(format!(
            "{flag} {}: larger than {MAX_KEY_FILE_BYTES} bytes; a key file is a few lines",
            path.display()
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey, EncodePublicKey};

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn reads_pem_keys_and_keysets() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::from_bytes(&[5; 32]);
        let pem = key.to_pkcs8_pem(LineEnding::LF).unwrap();
        let signing = write(dir.path(), "s.pem", &pem);
        let other = SigningKey::from_bytes(&[6; 32]).verifying_key();
        let pub_pem = other.to_public_key_pem(LineEnding::LF).unwrap();
        let v1 = write(dir.path(), "v.pem", &pub_pem);
        let line = tenure_fence::Signer::from_seed(&[6; 32]).public_key_text();
        let v2 = write(dir.path(), "v.keys", &format!("# keys\n{line}  # old\n"));
        let keys = FenceKeyFiles::read(Some(&signing), &[v1, v2]).unwrap();
        assert_eq!(keys.signing, Some([5; 32]));
        assert_eq!(keys.verify, vec![other.to_bytes()], "one key, once");
    }

    #[test]
    fn refuses_what_is_not_a_key_with_the_flag_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let junk = write(dir.path(), "junk", "hello\n");
        let err = FenceKeyFiles::read(Some(&junk), &[]).unwrap_err();
        assert!(
            err.starts_with("--fence-signing-key ") && err.contains("--generate"),
            "{err}"
        );
        let err = FenceKeyFiles::read(None, &[junk]).unwrap_err();
        assert!(
            err.contains("--fence-verify-keys") && err.contains("line 1"),
            "{err}"
        );
        let big = write(dir.path(), "big", &"A".repeat(70_000));
        assert!(FenceKeyFiles::read(Some(&big), &[])
            .unwrap_err()
            .contains("larger than"));
        let missing = dir.path().join("missing.pem");
        assert!(FenceKeyFiles::read(Some(&missing), &[]).is_err());
    }
}
