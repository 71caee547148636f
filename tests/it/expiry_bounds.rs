//! Expiry bounds: a lease is never granted to another holder before the
//! previous holding's TTL has run from its last write, and a waiting holder
//! gets it soon after. Asserted on the times Tenure stamps in the records
//! (one clock, the server's), so the check does not depend on how fast the
//! test or the machine runs; the upper bound gets generous slack.

use crate::common::*;
use tenure::proto::AcquireRequest;

/// The record's timestamps in Unix milliseconds.
fn ms(t: &Option<prost_types::Timestamp>) -> i64 {
    let t = t.as_ref().expect("a timestamp");
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

/// TTL of the first holder, seconds.
const TTL_S: i64 = 2;
/// How late after expiry the waiter may be granted: the 1.5 s, plus
/// slack for a loaded CI machine.
const LATE_MS: i64 = 1500 + 3000;

#[tokio::test]
async fn a_lease_passes_on_after_its_ttl_and_not_before() {
    let t = Tenure::start().await;
    let mut a = t.client().await;
    let mut b = t.client().await;
    let (first, key) = acquire(&mut a, acquire_req("bounds.job", "alice", TTL_S)).await;
    // Two renewals move the deadline; then alice goes silent.
    let mut last = first.clone();
    for _ in 0..2 {
        last = renew(&mut a, renew_req("bounds.job", last.revision, &key)).await;
    }
    let last_write_ms = ms(&last.renew_time);
    // bob waits for it.
    let granted = within(
        "bob to be granted the lease",
        b.acquire(AcquireRequest {
            wait: Some(secs(30)),
            ..acquire_req("bounds.job", "bob", 10)
        }),
    )
    .await
    .expect("bob acquires")
    .into_inner()
    .lease
    .unwrap();
    let granted_ms = ms(&granted.acquire_time);
    assert!(
        granted.fencing_token > last.revision,
        "a new, greater token"
    );
    assert!(
        granted_ms >= last_write_ms + TTL_S * 1000,
        "granted {} ms after alice's last write, before her {TTL_S} s TTL ran out",
        granted_ms - last_write_ms
    );
    assert!(
        granted_ms <= last_write_ms + TTL_S * 1000 + LATE_MS,
        "granted {} ms after alice's last write: later than TTL + {LATE_MS} ms",
        granted_ms - last_write_ms
    );
    // alice's stale renewal is refused: her holding is over.
    let err = a
        .renew(renew_req("bounds.job", last.revision, &key))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
}

/// A holder that keeps renewing is never passed over, however long a
/// waiter waits: the waiter's wait runs out with LEASE_HELD.
#[tokio::test]
async fn a_renewed_lease_is_not_granted_to_a_waiter() {
    let t = Tenure::start().await;
    let mut a = t.client().await;
    let mut b = t.client().await;
    let (first, key) = acquire(&mut a, acquire_req("bounds.kept", "alice", TTL_S)).await;
    let waiter = tokio::spawn(async move {
        b.acquire(AcquireRequest {
            wait: Some(secs(4)),
            ..acquire_req("bounds.kept", "bob", 10)
        })
        .await
    });
    let mut last = first;
    // Renew every TTL/3 until the waiter gives up.
    while !waiter.is_finished() {
        last = renew(&mut a, renew_req("bounds.kept", last.revision, &key)).await;
        tokio::time::sleep(std::time::Duration::from_millis(TTL_S as u64 * 1000 / 3)).await;
    }
    let err = waiter.await.unwrap().unwrap_err();
    assert_eq!(reason(&err), "LEASE_HELD");
    let still = renew(&mut a, renew_req("bounds.kept", last.revision, &key)).await;
    assert_eq!(
        still.fencing_token, last.fencing_token,
        "alice still holds it"
    );
}
