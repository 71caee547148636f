//! Fencing on the downstream side: refuse writes from a holder whose lease
//! has passed on.
//!
//! A holder can be paused (GC, swap, a stalled VM) past its lease and then
//! write, still believing it holds. The fencing token stops that: Tenure
//! gives every new holder of a name a strictly greater token, so a store
//! that remembers the highest token it has seen for a resource, and refuses
//! smaller ones, never accepts a write from an old holder once a newer
//! holder has written.
//!
//! [`FencingGuard`] does this in memory, for one process that fronts a
//! resource. A real store must check and write atomically; in SQL, keep the
//! token in the row and make the write conditional on it:
//!
//! ```sql
//! -- once: ALTER TABLE jobs ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0;
//! UPDATE jobs
//!    SET state = :state, fencing_token = :token
//!  WHERE id = :id AND fencing_token <= :token;
//! -- 0 rows updated: a newer holder has written; stop acting as holder.
//!
//! INSERT INTO jobs (id, state, fencing_token) VALUES (:id, :state, :token)
//! ON CONFLICT (id) DO UPDATE
//!    SET state = EXCLUDED.state, fencing_token = EXCLUDED.fencing_token
//!  WHERE jobs.fencing_token <= EXCLUDED.fencing_token;
//! ```
//!
//! A token alone can be forged: with fence proofs on (docs/fencing.md), a
//! holder also sends [`Session::fence_headers`](crate::Session::fence_headers)
//! and the store verifies the proof (the `tenure-fence` crate) before it
//! compares tokens.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

/// Remembers, per resource, the highest fencing token seen, and accepts a
/// token only if it is at least that high. Thread-safe (share it in an
/// `Arc`).
///
/// ```
/// use tenure_client::FencingGuard;
///
/// let guard = FencingGuard::new();
/// assert!(guard.accept("orders", 7));
/// assert!(guard.accept("orders", 7)); // the same holder writes again
/// assert!(guard.accept("orders", 9)); // a newer holder
/// assert!(!guard.accept("orders", 7)); // the old holder, woken up: refused
/// assert!(guard.check("orders", 8).is_err());
/// assert_eq!(guard.highest("orders"), Some(9));
/// ```
#[derive(Debug, Default)]
pub struct FencingGuard {
    highest: Mutex<HashMap<String, u64>>,
}

impl FencingGuard {
    /// A guard that has seen no tokens.
    pub fn new() -> FencingGuard {
        FencingGuard::default()
    }

    /// True (and remembers `token`) if `token` is at least the highest seen
    /// for `resource`; false if it is stale.
    pub fn accept(&self, resource: &str, token: u64) -> bool {
        self.check(resource, token).is_ok()
    }

    /// Like [`FencingGuard::accept`], with the refusal as an error.
    pub fn check(&self, resource: &str, token: u64) -> Result<(), StaleTokenError> {
        let mut highest = self.highest.lock().unwrap_or_else(|e| e.into_inner());
        match highest.get_mut(resource) {
            Some(seen) if token < *seen => Err(StaleTokenError {
                resource: resource.to_string(),
                token,
                highest: *seen,
            }),
            Some(seen) => {
                *seen = token;
                Ok(())
            }
            None => {
                highest.insert(resource.to_string(), token);
                Ok(())
            }
        }
    }

    /// The highest token accepted for `resource`, if any.
    pub fn highest(&self, resource: &str) -> Option<u64> {
        let highest = self.highest.lock().unwrap_or_else(|e| e.into_inner());
        highest.get(resource).copied()
    }
}

/// A write carried a fencing token below the highest seen for its resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleTokenError {
    /// The resource written to.
    pub resource: String,
    /// The token the write carried.
    pub token: u64,
    /// The highest token seen for the resource.
    pub highest: u64,
}

impl fmt::Display for StaleTokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fencing token {} for {:?} is stale (highest seen: {})",
            self.token, self.resource, self.highest
        )
    }
}

impl std::error::Error for StaleTokenError {}

/// The `Tenure-Fence` (when there is a proof) and `Tenure-Fencing-Token`
/// headers of a holding.
pub(crate) fn headers(proof: &[u8], token: u64) -> Vec<(&'static str, String)> {
    use base64::Engine as _;
    let mut out = Vec::with_capacity(2);
    if !proof.is_empty() {
        out.push((
            "Tenure-Fence",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(proof),
        ));
    }
    out.push(("Tenure-Fencing-Token", token.to_string()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn resources_are_fenced_independently() {
        let guard = FencingGuard::new();
        assert!(guard.accept("a", 10));
        assert!(guard.accept("b", 3));
        assert!(!guard.accept("a", 9));
        assert_eq!(guard.highest("a"), Some(10));
        assert_eq!(guard.highest("b"), Some(3));
        assert_eq!(guard.highest("c"), None);
        let err = guard.check("a", 4).unwrap_err();
        assert_eq!((err.token, err.highest), (4, 10));
        assert!(err.to_string().contains("stale"));
    }

    #[test]
    fn concurrent_writers_never_lower_the_highest_token() {
        let guard = Arc::new(FencingGuard::new());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let guard = guard.clone();
                std::thread::spawn(move || {
                    let mut accepted = Vec::new();
                    for i in 0..1000u64 {
                        let token = i * 4 + t;
                        if guard.accept("r", token) {
                            accepted.push(token);
                        }
                    }
                    accepted
                })
            })
            .collect();
        for thread in threads {
            let accepted = thread.join().unwrap();
            assert!(accepted.windows(2).all(|w| w[0] < w[1]));
        }
        assert_eq!(guard.highest("r"), Some(3999));
    }
}
