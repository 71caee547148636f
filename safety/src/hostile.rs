//! The hostile side of a `--forge` client (`negative-forged-tokens`): a
//! task beside its genuine work that sends forged writes (`forge`) every
//! few milliseconds until the end of the load, through the same path as
//! every write: the proof check (`admit`), then the store's kit. Each is
//! recorded as a `forge` line of the client's history: refused (by the
//! check or the kit) or accepted, with its kind and the token it claimed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use tenure_fence::Keyset;

use crate::admit;
use crate::clock::{mono_ns, real_ms};
use crate::forge::{Book, Forged, Forgery};
use crate::history::{Op, OpKind, Phase, Recorder};
use crate::store::{Store, Written};

/// How often a forged write is sent.
const EVERY: Duration = Duration::from_millis(25);

/// Write numbers of forged writes start here, apart from the client's
/// genuine ones (they name the values a Redis store keeps).
const FIRST_WRITE: u64 = 1_000_000_000;

/// What the hostile task needs of its client's settings.
pub struct Settings {
    /// The client's id (the writer of its forged writes).
    pub id: String,
    /// The lease names whose resources it attacks.
    pub names: Vec<String>,
    /// The store resources' prefix.
    pub prefix: String,
    /// When to stop, monotonic ns.
    pub until_ns: u64,
    /// The `no-proof-check` test fault: admit claimed tokens unchecked.
    pub no_proof_check: bool,
    /// The pinned keys.
    pub keys: Keyset,
}

/// Sends forged writes, one kind after the other, until the end of the
/// load; a kind the book cannot make yet (no grant kept) is skipped.
pub async fn run(set: Settings, mut rec: Recorder, mut store: Store, book: Arc<Mutex<Book>>) {
    let mut rng = StdRng::from_os_rng();
    let mut n = FIRST_WRITE;
    let mut turn = 0usize;
    while mono_ns() < set.until_ns {
        let kind = Forgery::ALL[turn % Forgery::ALL.len()];
        turn += 1;
        let forged = match book.lock() {
            Ok(book) => book.next(kind, &set.names, &mut rng),
            Err(_) => return,
        };
        if let Some(forged) = forged {
            n += 1;
            let op = send(&set, &mut store, &forged, n).await;
            rec.record(&op);
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// Sends one forged write and describes what became of it.
async fn send(set: &Settings, store: &mut Store, forged: &Forged, n: u64) -> Op {
    let (t0, w0) = (mono_ns(), real_ms());
    let kind = forged.kind.name();
    let admitted = if set.no_proof_check {
        Ok(admit::unchecked(&forged.name, forged.slot, forged.claimed))
    } else {
        admit::admit(
            &set.keys,
            forged.proof.as_deref(),
            &forged.name,
            forged.slot,
            forged.claimed,
        )
    };
    let (phase, detail) = match admitted {
        Err(refusal) => (
            Phase::Fail,
            format!("{kind}: refused by the proof check: {refusal}"),
        ),
        Ok(fence) => {
            let body = format!("{} forged {kind} write {n}", set.id);
            match store.write(&fence, &set.prefix, &set.id, n, &body).await {
                Ok(Written::Stale) => (
                    Phase::Fail,
                    format!("{kind}: refused by the kit: FENCE_STALE"),
                ),
                Ok(Written::Accepted { .. }) => (
                    Phase::Ok,
                    format!("{kind}: ACCEPTED by the store with token {}", fence.token),
                ),
                Err(err) => (Phase::Info, format!("{kind}: {err}")),
            }
        }
    };
    Op {
        client: set.id.clone(),
        holding: format!("{}#forged", set.id),
        name: forged.name.clone(),
        op: OpKind::Forge,
        phase,
        t0,
        t1: mono_ns(),
        w0,
        token: forged.claimed,
        revision: n,
        ttl_ms: 0,
        deadline: 0,
        server_ms: 0,
        timeout_ms: 0,
        slot: forged.slot,
        wait_ms: 0,
        lock_delay_ms: 0,
        group: String::new(),
        mode: None,
        detail,
        replaced: None,
    }
}
