//! Tenure fence proofs: fencing tokens a store can verify without calling
//! Tenure.
//!
//! A Tenure grant carries a *fence proof*: an Ed25519-signed statement that
//! a lease name's holding, with this fencing token, was granted by the
//! Tenure deployment whose public keys the store pinned. A store that checks
//! the proof before comparing tokens cannot be poisoned by a wrong, huge or
//! foreign token: it only ever records tokens Tenure granted for the name it
//! guards.
//!
//! ```
//! use tenure_fence::{Fence, Keyset, Signer};
//!
//! // Tenure's side (the server holds the private key).
//! let signer = Signer::from_seed(&[7; 32]);
//! let proof = signer.sign(&Fence {
//!     bucket: "tenure".into(),
//!     name: "orders".into(),
//!     slot: 0,
//!     token: 42,
//!     granted_at_ms: 1_767_225_600_000,
//!     ttl_s: 10,
//!     holder: "worker-1".into(),
//! });
//!
//! // The store's side: public keys pinned from `tenure fence-keys`.
//! let keys = Keyset::parse(&signer.public_key_text()).unwrap();
//! let verified = keys.verify_text(&proof.to_text()).unwrap();
//! assert_eq!(verified.fence.token, 42);
//! assert!(verified.check_name("orders").is_ok());
//! ```
//!
//! # Layout
//!
//! - `proof`: the versioned byte format (docs/fencing.md) and its text form.
//! - `keys`: key ids, the signer, and the keyset a store pins.
//! - `http` (feature `http`): a tower layer that fences HTTP writes with the
//!   `Tenure-Fence` and `Tenure-Fencing-Token` headers.

mod keys;
mod proof;

#[cfg(feature = "http")]
pub mod http;

pub use keys::{key_id, keyset_line, Keyset, Signer, Verified};
pub use proof::{
    Fence, FenceError, Proof, MAX_PROOF_BYTES, MIN_PROOF_BYTES, SIGNING_CONTEXT, VERSION,
};
