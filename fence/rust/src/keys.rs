//! Keys: the id a proof names its key by, the signer Tenure holds, and the
//! keyset of public keys a store pins.
//!
//! A keyset's text form is what `tenure fence-keys` prints: one public key
//! per line, its 32 bytes in base64url without padding, `#` starting a
//! comment. Key ids are derived, never configured, so a keyset cannot name
//! a key wrongly.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::proof::{parse, statement, Fence, FenceError, Proof, SIGNING_CONTEXT};

/// The id of a public key: the first 8 bytes of SHA-256 of its 32 bytes.
pub fn key_id(public: &[u8; 32]) -> [u8; 8] {
    let digest = Sha256::digest(public);
    digest[..8].try_into().expect("8 bytes")
}

/// Signs fence proofs with one Ed25519 key.
#[derive(Clone)]
pub struct Signer {
    /// The private key.
    key: SigningKey,
    /// Its id, written into every proof.
    id: [u8; 8],
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({})", hex(&self.id))
    }
}

impl Signer {
    /// A signer from a 32-byte Ed25519 seed (the private key).
    pub fn from_seed(seed: &[u8; 32]) -> Signer {
        let key = SigningKey::from_bytes(seed);
        let id = key_id(key.verifying_key().as_bytes());
        Signer { key, id }
    }

    /// The public key's 32 bytes.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// The public key as one keyset line (base64url, no padding).
    pub fn public_key_text(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.public_key())
    }

    /// The key id, as written in proofs.
    pub fn key_id(&self) -> [u8; 8] {
        self.id
    }

    /// A signed proof of `fence`.
    pub fn sign(&self, fence: &Fence) -> Proof {
        let mut bytes = statement(fence, self.id);
        let mut message = Vec::with_capacity(SIGNING_CONTEXT.len() + bytes.len());
        message.extend_from_slice(SIGNING_CONTEXT);
        message.extend_from_slice(&bytes);
        let signature = self.key.sign(&message);
        bytes.extend_from_slice(&signature.to_bytes());
        Proof(bytes)
    }
}

/// A proof whose signature verified against a pinned key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// What the proof states.
    pub fence: Fence,
    /// The id of the key that signed it, 16 hex digits.
    pub key_id: String,
}

impl Verified {
    /// Whether the proof was signed for lease name `name`. A store guarding
    /// a resource under one lease name refuses every proof for another: a
    /// genuine token of another name must not move this resource's highest
    /// token.
    pub fn check_name(&self, name: &str) -> Result<(), String> {
        if self.fence.name == name {
            Ok(())
        } else {
            Err(format!(
                "the fence proof is for lease {:?}, not {:?}",
                self.fence.name, name
            ))
        }
    }
}

/// The public keys a store accepts proofs from.
#[derive(Debug, Clone, Default)]
pub struct Keyset {
    /// Every pinned key, by id.
    keys: Vec<([u8; 8], VerifyingKey)>,
}

impl Keyset {
    /// A keyset from its text form (see the module doc). Fails on a line
    /// that is not a valid Ed25519 public key, or on no key at all.
    pub fn parse(text: &str) -> Result<Keyset, String> {
        let mut set = Keyset::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let raw = URL_SAFE_NO_PAD
                .decode(line)
                .map_err(|_| format!("keyset line {}: not base64url without padding", i + 1))?;
            let raw: [u8; 32] = raw
                .try_into()
                .map_err(|_| format!("keyset line {}: an Ed25519 public key is 32 bytes", i + 1))?;
            set.add(&raw)
                .map_err(|e| format!("keyset line {}: {e}", i + 1))?;
        }
        if set.keys.is_empty() {
            return Err("the keyset has no key".into());
        }
        Ok(set)
    }

    /// Adds one public key.
    pub fn add(&mut self, public: &[u8; 32]) -> Result<(), String> {
        let key = VerifyingKey::from_bytes(public)
            .map_err(|_| "not a valid Ed25519 public key".to_string())?;
        let id = key_id(public);
        if !self.keys.iter().any(|(k, _)| *k == id) {
            self.keys.push((id, key));
        }
        Ok(())
    }

    /// The pinned public keys' 32 bytes, in the order they were added.
    pub fn public_keys(&self) -> Vec<[u8; 32]> {
        self.keys.iter().map(|(_, k)| k.to_bytes()).collect()
    }

    /// The ids of the pinned keys, 16 hex digits each.
    pub fn key_ids(&self) -> Vec<String> {
        self.keys.iter().map(|(id, _)| hex(id)).collect()
    }

    /// Verifies a proof's bytes: its format, that a pinned key signed it,
    /// and the signature (strict Ed25519: no malleable or small-order forms).
    pub fn verify(&self, bytes: &[u8]) -> Result<Verified, FenceError> {
        let parsed = parse(bytes)?;
        let key = self
            .keys
            .iter()
            .find(|(id, _)| *id == parsed.key_id)
            .map(|(_, k)| k)
            .ok_or_else(|| FenceError::UnknownKey(hex(&parsed.key_id)))?;
        let mut message = Vec::with_capacity(SIGNING_CONTEXT.len() + parsed.signed.len());
        message.extend_from_slice(SIGNING_CONTEXT);
        message.extend_from_slice(parsed.signed);
        key.verify_strict(&message, &Signature::from_bytes(&parsed.signature))
            .map_err(|_| FenceError::BadSignature)?;
        Ok(Verified {
            fence: parsed.fence,
            key_id: hex(&parsed.key_id),
        })
    }

    /// Verifies a proof's text form (the `Tenure-Fence` header).
    pub fn verify_text(&self, text: &str) -> Result<Verified, FenceError> {
        self.verify(Proof::from_text(text)?.as_bytes())
    }
}

/// One line of a keyset's text form: the key, then its id and `note` as
/// a comment (what `tenure fence-keys` prints).
pub fn keyset_line(public: &[u8; 32], note: &str) -> String {
    let id = hex(&key_id(public));
    let sep = if note.is_empty() { "" } else { " " };
    format!("{}  # {id}{sep}{note}", URL_SAFE_NO_PAD.encode(public))
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
