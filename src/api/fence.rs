//! Fence proofs on grants: the signing key in force, the proof of a
//! holding, the keys GetFenceKeys serves, and their reload.
//!
//! A proof states a grant (docs/fencing.md): it is signed when a reply
//! grants a holding (Acquire, AcquireGroup, Campaign) and never stored, so
//! every replica with the same key answers the same proof for the same
//! holding (Ed25519 signatures are deterministic). The keys are swapped
//! whole on reload (SIGHUP), so a call signs with the old key or the new
//! one, never a mix; a reload that fails keeps the keys in force.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use tenure_fence::{key_id, keyset_line, Fence, Signer};

use crate::config::{Config, FenceKeyFiles};
use crate::lease::Holding;
use crate::proto;

/// The fence keys of this replica.
#[derive(Debug)]
pub struct Fences {
    /// The bucket every proof names.
    bucket: String,
    /// `--fence-signing-key`, re-read on reload.
    signing: Option<PathBuf>,
    /// `--fence-verify-keys`, re-read on reload.
    verify: Vec<PathBuf>,
    /// The keys in force.
    keys: RwLock<Arc<Keys>>,
}

/// One loaded set of keys.
#[derive(Debug, Default)]
struct Keys {
    /// Signs proofs; none: grants carry no proof.
    signer: Option<Signer>,
    /// Further public keys served for verification.
    verify: Vec<[u8; 32]>,
}

impl Keys {
    fn from_files(files: FenceKeyFiles) -> Keys {
        Keys {
            signer: files.signing.as_ref().map(Signer::from_seed),
            verify: files.verify,
        }
    }

    /// Every public key served, the signing key first.
    fn public(&self) -> Vec<([u8; 32], bool)> {
        let mut out: Vec<([u8; 32], bool)> = Vec::new();
        if let Some(s) = &self.signer {
            out.push((s.public_key(), true));
        }
        for k in &self.verify {
            if !out.iter().any(|(p, _)| p == k) {
                out.push((*k, false));
            }
        }
        out
    }
}

impl Fences {
    /// The keys `config` names. Errors say which flag and file is wrong.
    pub fn load(config: &Config) -> Result<Fences, String> {
        let files = FenceKeyFiles::load(config)?;
        Ok(Fences {
            bucket: config.bucket.clone(),
            signing: config.fence_signing_key.clone(),
            verify: config.fence_verify_keys.clone(),
            keys: RwLock::new(Arc::new(Keys::from_files(files))),
        })
    }

    /// No keys: grants carry no proof.
    pub fn none() -> Fences {
        Fences {
            bucket: String::new(),
            signing: None,
            verify: Vec::new(),
            keys: RwLock::new(Arc::new(Keys::default())),
        }
    }

    /// Re-reads the key files and puts them in force; on an error the keys
    /// in force stay. Returns a one-line summary of what is in force.
    pub fn reload(&self) -> Result<String, String> {
        let files = FenceKeyFiles::read(self.signing.as_deref(), &self.verify)?;
        let keys = Arc::new(Keys::from_files(files));
        let summary = summary(&keys);
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
        Ok(summary)
    }

    /// A one-line summary of the keys in force, for the log.
    pub fn summary(&self) -> String {
        summary(&self.current())
    }

    fn current(&self) -> Arc<Keys> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The fence proof of `holding` as granted now; empty without a
    /// signing key.
    pub fn proof(&self, holding: &Holding) -> Vec<u8> {
        let keys = self.current();
        let Some(signer) = &keys.signer else {
            return Vec::new();
        };
        signer
            .sign(&Fence {
                bucket: self.bucket.clone(),
                name: holding.name.clone(),
                slot: holding.slot,
                token: holding.token,
                granted_at_ms: holding.record.acquired_ms,
                ttl_s: u32::try_from(holding.record.ttl_s).unwrap_or(u32::MAX),
                holder: holding.record.holder.clone(),
            })
            .0
    }

    /// The GetFenceKeys answer.
    pub fn keys(&self) -> proto::GetFenceKeysResponse {
        let keys = self.current();
        let public = keys.public();
        let mut keyset = String::from("# Tenure fence keys\n");
        let mut out = Vec::with_capacity(public.len());
        for (key, active) in public {
            keyset.push_str(&keyset_line(&key, if active { "active" } else { "" }));
            keyset.push('\n');
            out.push(proto::FenceKey {
                key_id: hex::encode(key_id(&key)),
                public_key: key.to_vec(),
                active,
            });
        }
        if out.is_empty() {
            keyset.clear();
        }
        proto::GetFenceKeysResponse { keys: out, keyset }
    }
}

fn summary(keys: &Keys) -> String {
    match &keys.signer {
        Some(s) => format!(
            "fence proofs signed with key {}; {} further key(s) served",
            hex::encode(s.key_id()),
            keys.verify.len()
        ),
        None => format!(
            "fence proofs off (no --fence-signing-key); {} key(s) served",
            keys.verify.len()
        ),
    }
}
