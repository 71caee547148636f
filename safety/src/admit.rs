//! The application-layer check every fenced write passes before its token
//! reaches a store kit.
//!
//! The kits (`fence/kits`) compare tokens; they do not check proofs. So,
//! as `fence/kits/README.md` asks of an application, a write is admitted
//! only when its fence proof verifies against the keyset pinned from
//! `GetFenceKeys` (`tenure-fence`), is for the lease name (and semaphore
//! slot) that guards the resource written, and states the token the writer
//! claims. Only then does the kit see (lease, token), through an
//! [`Admitted`], which nothing else makes: a token that was never verified
//! cannot reach a kit by mistake. The one way around it is
//! [`unchecked`], the `no-proof-check` test fault of the forged-token
//! control, refused unless `TENURE_TEST_FAULTS=1` is set.
//!
//! The refusals are the reasons of the HTTP middleware (docs/fencing.md),
//! so a history reads like a store's log would.

use tenure_fence::{FenceError, Keyset};

/// The environment variable that must be `1` for the `no-proof-check` test
/// fault: the same switch `tenure serve --test-fault` needs, since it
/// breaks the store's defence on purpose.
pub const TEST_FAULTS_ENV: &str = "TENURE_TEST_FAULTS";

/// A write the proof check let through: what the kit is called with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The lease name the proof is for (the resource's guard).
    pub name: String,
    /// The semaphore slot the proof is for (0: a plain lease).
    pub slot: u32,
    /// The proof's fencing token.
    pub token: u64,
}

impl Admitted {
    /// The store resource (and the kit's lease key) of this write:
    /// `<prefix><name>`, or `<prefix><name>#<slot>` for a semaphore slot,
    /// whose holders succeed each other like a lock's. The run's prefix
    /// keeps every scenario's rows apart (each starts a new bucket, whose
    /// tokens start again at 1).
    pub fn resource(&self, prefix: &str) -> String {
        resource(prefix, &self.name, self.slot)
    }
}

/// The resource of `name` (and `slot`) under `prefix`; see
/// [`Admitted::resource`].
pub fn resource(prefix: &str, name: &str, slot: u32) -> String {
    if slot > 0 {
        format!("{prefix}{name}#{slot}")
    } else {
        format!("{prefix}{name}")
    }
}

/// Why a write was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No proof came with the write.
    Missing,
    /// The proof does not verify (malformed, unknown key, bad signature).
    Proof(FenceError),
    /// A genuine proof for another lease name.
    WrongName(String),
    /// A genuine proof for another slot of the semaphore.
    WrongSlot {
        /// The slot the proof is for.
        proved: u32,
        /// The slot of the resource written.
        resource: u32,
    },
    /// The token claimed is not the one the proof states.
    TokenMismatch {
        /// The token the writer claimed.
        claimed: u64,
        /// The token the proof states.
        proved: u64,
    },
}

impl Refusal {
    /// The reason as the middleware names it (`FENCE_MISSING`...).
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Missing => "FENCE_MISSING",
            Refusal::Proof(FenceError::Malformed(_)) => "FENCE_MALFORMED",
            Refusal::Proof(FenceError::UnsupportedVersion(_)) => "FENCE_UNSUPPORTED_VERSION",
            Refusal::Proof(FenceError::UnknownKey(_)) => "FENCE_UNKNOWN_KEY",
            Refusal::Proof(FenceError::BadSignature) => "FENCE_BAD_SIGNATURE",
            Refusal::WrongName(_) | Refusal::WrongSlot { .. } => "FENCE_WRONG_NAME",
            Refusal::TokenMismatch { .. } => "FENCE_TOKEN_MISMATCH",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reason = self.reason();
        match self {
            Refusal::Missing => write!(f, "{reason}: the write carries no fence proof"),
            Refusal::Proof(err) => write!(f, "{reason}: {err}"),
            Refusal::WrongName(why) => write!(f, "{reason}: {why}"),
            Refusal::WrongSlot { proved, resource } => write!(
                f,
                "{reason}: the fence proof is for slot {proved}, not {resource}"
            ),
            Refusal::TokenMismatch { claimed, proved } => write!(
                f,
                "{reason}: token {claimed} claimed, the fence proof states {proved}"
            ),
        }
    }
}

/// Admits a write to the resource guarded by lease `name` (semaphore slot
/// `slot`, 0 for a lease) claiming token `claimed` with `proof`, in the
/// middleware's order: a proof is present, it verifies against `keys`, it
/// is for `name` (`Verified::check_name`) and `slot`, and it states
/// `claimed`.
pub fn admit(
    keys: &Keyset,
    proof: Option<&[u8]>,
    name: &str,
    slot: u32,
    claimed: u64,
) -> Result<Admitted, Refusal> {
    let proof = proof.filter(|p| !p.is_empty()).ok_or(Refusal::Missing)?;
    let verified = keys.verify(proof).map_err(Refusal::Proof)?;
    verified.check_name(name).map_err(Refusal::WrongName)?;
    let fence = verified.fence;
    if fence.slot != slot {
        return Err(Refusal::WrongSlot {
            proved: fence.slot,
            resource: slot,
        });
    }
    if fence.token != claimed {
        return Err(Refusal::TokenMismatch {
            claimed,
            proved: fence.token,
        });
    }
    Ok(Admitted {
        name: fence.name,
        slot,
        token: fence.token,
    })
}

/// The `no-proof-check` test fault: admits the claimed token without
/// looking at any proof, as an application that trusts tokens would. Only
/// the forged-token control's demonstration uses it (see
/// [`check_test_fault`]).
pub fn unchecked(name: &str, slot: u32, claimed: u64) -> Admitted {
    Admitted {
        name: name.to_string(),
        slot,
        token: claimed,
    }
}

/// `Ok` when the proof check stays on, or `env` (the value of
/// [`TEST_FAULTS_ENV`]) is `1`; otherwise the message that refuses to run.
pub fn check_test_fault(no_proof_check: bool, env: Option<&str>) -> Result<(), String> {
    if !no_proof_check || env == Some("1") {
        return Ok(());
    }
    Err(format!(
        "--test-fault no-proof-check turns the stores' proof check off on purpose (the forged-token control's demonstration, docs/safety.md); \
         refused unless {TEST_FAULTS_ENV}=1 is set. Never use it outside a test"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::{self, Forgery, Genuine, FORGED_TOKEN};
    use tenure_fence::{Fence, Signer};

    /// The keyset of the test signer.
    fn keys() -> Keyset {
        Keyset::parse(&Signer::from_seed(&[9; 32]).public_key_text()).unwrap()
    }

    /// A genuine grant of `name` (`slot`) with `token`, signed by the test
    /// signer.
    fn genuine(name: &str, slot: u32, token: u64) -> Genuine {
        let proof = Signer::from_seed(&[9; 32]).sign(&Fence {
            bucket: "tenure".into(),
            name: name.into(),
            slot,
            token,
            granted_at_ms: 1_767_225_600_000,
            ttl_s: 3,
            holder: "c0.0".into(),
        });
        Genuine {
            name: name.into(),
            slot,
            token,
            proof: proof.0,
        }
    }

    #[test]
    fn a_genuine_proof_is_admitted_with_its_name_slot_and_token() {
        let g = genuine("res.a", 2, 41);
        let a = admit(&keys(), Some(&g.proof), "res.a", 2, 41).unwrap();
        assert_eq!((a.name.as_str(), a.slot, a.token), ("res.a", 2, 41));
        assert_eq!(a.resource("run/s/"), "run/s/res.a#2");
        assert_eq!(resource("run/s/", "res.a", 0), "run/s/res.a");
    }

    #[test]
    fn every_forgery_of_the_control_is_refused_with_its_reason() {
        let lower = genuine("res.a", 0, 7);
        let other = genuine("res.b", 0, 90);
        let cases = [
            (Forgery::NoProof, None, "FENCE_MISSING"),
            (Forgery::LowerProof, Some(&lower), "FENCE_TOKEN_MISMATCH"),
            (Forgery::BadSignature, Some(&lower), "FENCE_BAD_SIGNATURE"),
            (Forgery::OtherName, Some(&other), "FENCE_WRONG_NAME"),
        ];
        for (kind, from, reason) in cases {
            let forged = forge::make(kind, "res.a", from).unwrap();
            let refused = admit(
                &keys(),
                forged.proof.as_deref(),
                &forged.name,
                forged.slot,
                forged.claimed,
            )
            .unwrap_err();
            assert_eq!(refused.reason(), reason, "{kind:?}: {refused}");
        }
        // The genuine proof the lower-proof forgery carries is admitted
        // with its own token: only the claim of 2^62 is refused.
        assert!(admit(&keys(), Some(&lower.proof), "res.a", 0, 7).is_ok());
        // A proof for another slot of the same semaphore is refused too.
        let slot1 = genuine("res.a", 1, 7);
        let refused = admit(&keys(), Some(&slot1.proof), "res.a", 2, 7).unwrap_err();
        assert_eq!(refused.reason(), "FENCE_WRONG_NAME");
        // And a proof signed by a key the store did not pin.
        let stranger = Keyset::parse(&Signer::from_seed(&[3; 32]).public_key_text()).unwrap();
        let refused = admit(&stranger, Some(&lower.proof), "res.a", 0, 7).unwrap_err();
        assert_eq!(refused.reason(), "FENCE_UNKNOWN_KEY");
        assert_eq!(
            admit(&keys(), Some(&[]), "res.a", 0, 7).unwrap_err(),
            Refusal::Missing
        );
    }

    #[test]
    fn without_the_proof_check_the_forged_token_goes_through() {
        // What the test fault does: the kit would see 2^62.
        let forged = forge::make(Forgery::NoProof, "res.a", None).unwrap();
        let a = unchecked(&forged.name, 0, forged.claimed);
        assert_eq!(a.token, FORGED_TOKEN);
    }

    #[test]
    fn the_test_fault_is_refused_without_the_environment_switch() {
        assert!(check_test_fault(false, None).is_ok());
        assert!(check_test_fault(true, Some("1")).is_ok());
        for env in [None, Some("0"), Some("yes")] {
            let err = check_test_fault(true, env).unwrap_err();
            assert!(err.contains("TENURE_TEST_FAULTS=1"), "{err}");
        }
    }
}
