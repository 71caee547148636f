//! The forged writes of the `negative-forged-tokens` control: what a
//! buggy or hostile writer sends to poison a fenced store.
//!
//! A store that takes "the highest token wins" on trust can be poisoned
//! by one huge token: it becomes the highest, and every genuine holder is
//! refused from then on. Fence proofs exist to stop that. A hostile client
//! (`tenure-safety client --forge`) is a genuine holder that keeps the
//! proofs of its own grants, and on the side sends writes of four kinds
//! through the same application-layer path as every write (the proof
//! check of `admit`, then the kit):
//!
//! - `no-proof`: token 2^62, no proof;
//! - `lower-proof`: token 2^62 with a genuine proof of a lower token (one
//!   of its earlier grants of the name);
//! - `bad-signature`: a genuine proof with its token rewritten to 2^62 and
//!   one signature byte flipped, claiming 2^62;
//! - `other-name`: a genuine proof of another lease name (its newest
//!   grant, so its token is above the resource's highest), claiming that
//!   proof's token.
//!
//! Every one must be refused, and the store's highest token must stay one
//! Tenure granted for the resource.

use rand::seq::IndexedRandom;
use rand::Rng;

/// The forged token: 2^62, far above any token of a run, and below 2^63 so
/// the checker's `bigint` log holds it should a store take it.
pub const FORGED_TOKEN: u64 = 1 << 62;

/// The kinds of forged write, sent in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forgery {
    /// Token 2^62 without a proof.
    NoProof,
    /// Token 2^62 with a genuine proof of a lower token.
    LowerProof,
    /// A genuine proof altered to state 2^62, a signature byte flipped.
    BadSignature,
    /// A genuine proof of another lease name, with its own token.
    OtherName,
}

impl Forgery {
    /// Every kind, in the order a forger sends them.
    pub const ALL: [Forgery; 4] = [
        Forgery::NoProof,
        Forgery::LowerProof,
        Forgery::BadSignature,
        Forgery::OtherName,
    ];

    /// Its name in histories and reports.
    pub fn name(self) -> &'static str {
        match self {
            Forgery::NoProof => "no-proof",
            Forgery::LowerProof => "lower-proof",
            Forgery::BadSignature => "bad-signature",
            Forgery::OtherName => "other-name",
        }
    }

    /// The kind a history's forged write names (the first word of its
    /// detail, before `:`).
    pub fn of_detail(detail: &str) -> Option<Forgery> {
        let name = detail.split(':').next().unwrap_or_default();
        Forgery::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A genuine grant the forger held: its proof, and what it states.
#[derive(Debug, Clone)]
pub struct Genuine {
    /// The lease name.
    pub name: String,
    /// The semaphore slot (0: a lease).
    pub slot: u32,
    /// The fencing token.
    pub token: u64,
    /// The proof's bytes, as Tenure sent them.
    pub proof: Vec<u8>,
}

/// One forged write.
#[derive(Debug, Clone)]
pub struct Forged {
    /// Its kind.
    pub kind: Forgery,
    /// The lease name guarding the resource it writes.
    pub name: String,
    /// The slot of the resource it writes.
    pub slot: u32,
    /// The token it claims.
    pub claimed: u64,
    /// The proof it carries, if any.
    pub proof: Option<Vec<u8>>,
}

/// Offset of the token in a proof (version 1: after the version byte and
/// the 8-byte key id).
const TOKEN_AT: usize = 9;

/// A forged write of `kind` to the resource of `target`, built from the
/// genuine grant `from` (the kinds with a proof need one; `None` without).
pub fn make(kind: Forgery, target: &str, from: Option<&Genuine>) -> Option<Forged> {
    let forged = |claimed, proof, slot| Forged {
        kind,
        name: target.to_string(),
        slot,
        claimed,
        proof,
    };
    match kind {
        Forgery::NoProof => Some(forged(FORGED_TOKEN, None, 0)),
        Forgery::LowerProof => {
            let g = from?;
            Some(forged(FORGED_TOKEN, Some(g.proof.clone()), g.slot))
        }
        Forgery::BadSignature => {
            let g = from?;
            let mut proof = g.proof.clone();
            proof
                .get_mut(TOKEN_AT..TOKEN_AT + 8)?
                .copy_from_slice(&FORGED_TOKEN.to_be_bytes());
            *proof.last_mut()? ^= 0x01;
            Some(forged(FORGED_TOKEN, Some(proof), g.slot))
        }
        Forgery::OtherName => {
            let g = from?;
            (g.name != target).then(|| forged(g.token, Some(g.proof.clone()), g.slot))
        }
    }
}

/// The genuine grants a forger keeps (the newest few), to forge from.
#[derive(Debug, Default)]
pub struct Book {
    /// Its grants, oldest first.
    grants: Vec<Genuine>,
}

impl Book {
    /// Grants kept: enough for an old proof of every name.
    const KEEP: usize = 32;

    /// Keeps a grant.
    pub fn add(&mut self, grant: Genuine) {
        if self.grants.len() == Self::KEEP {
            self.grants.remove(0);
        }
        self.grants.push(grant);
    }

    /// The next forged write of `kind` against one of `names`: `None`
    /// while the book has no grant to forge it from.
    pub fn next(&self, kind: Forgery, names: &[String], rng: &mut impl Rng) -> Option<Forged> {
        match kind {
            Forgery::NoProof => make(kind, names.choose(rng)?, None),
            // The oldest grant kept: its token is below the name's newest.
            Forgery::LowerProof => {
                let g = self.grants.first()?;
                make(kind, &g.name, Some(g))
            }
            Forgery::BadSignature => {
                let g = self.grants.choose(rng)?;
                make(kind, &g.name, Some(g))
            }
            // The newest grant, against another name: its token is above
            // that name's highest, so only the name check stops it.
            Forgery::OtherName => {
                let g = self.grants.last()?;
                let others: Vec<&String> = names.iter().filter(|n| **n != g.name).collect();
                make(kind, others.choose(rng)?, Some(g))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(name: &str, token: u64) -> Genuine {
        Genuine {
            name: name.into(),
            slot: 0,
            token,
            proof: vec![1; 121],
        }
    }

    #[test]
    fn forgeries_claim_what_the_control_says() {
        let g = grant("res.a", 7);
        let bad = make(Forgery::BadSignature, "res.a", Some(&g)).unwrap();
        let proof = bad.proof.unwrap();
        assert_eq!(proof[TOKEN_AT..TOKEN_AT + 8], FORGED_TOKEN.to_be_bytes());
        assert_eq!(proof.last(), Some(&0));
        assert_eq!(bad.claimed, FORGED_TOKEN);
        let lower = make(Forgery::LowerProof, "res.a", Some(&g)).unwrap();
        assert_eq!((lower.claimed, lower.proof), (FORGED_TOKEN, Some(g.proof)));
        // Another name's proof is only a forgery against another name.
        assert!(make(Forgery::OtherName, "res.a", Some(&grant("res.a", 9))).is_none());
        let other = make(Forgery::OtherName, "res.b", Some(&grant("res.a", 9))).unwrap();
        assert_eq!((other.name.as_str(), other.claimed), ("res.b", 9));
        // The kinds that need a proof wait for one.
        assert!(make(Forgery::LowerProof, "res.a", None).is_none());
        assert!(Book::default()
            .next(Forgery::OtherName, &["res.a".into()], &mut rand::rng())
            .is_none());
    }

    #[test]
    fn the_book_forges_from_its_oldest_and_newest_grants() {
        let mut book = Book::default();
        for t in 1..=40 {
            book.add(grant(if t % 2 == 0 { "res.a" } else { "res.b" }, t));
        }
        let names = vec!["res.a".to_string(), "res.b".to_string()];
        let lower = book
            .next(Forgery::LowerProof, &names, &mut rand::rng())
            .unwrap();
        assert_eq!(lower.name, "res.b", "the oldest kept: token 9");
        let other = book
            .next(Forgery::OtherName, &names, &mut rand::rng())
            .unwrap();
        assert_eq!((other.name.as_str(), other.claimed), ("res.b", 40));
        assert_eq!(
            Forgery::of_detail("bad-signature: refused"),
            Some(Forgery::BadSignature)
        );
        assert_eq!(Forgery::of_detail("stale"), None);
    }
}
