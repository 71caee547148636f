//! Fencing tokens: strictly increasing across holders, constant across
//! renewals, whatever way the previous holding ended.

use std::time::Duration;

use crate::common::*;

/// 1,000 handoffs of one name, mixing releases, expiries, acquires over a
/// release tombstone, over an expiry marker, and over an empty subject (the
/// marker TTL is 1 s here, so markers and tombstones age out mid-run). Every
/// new holder's token is greater than every revision the previous holder had;
/// renewals never change the token.
#[tokio::test]
async fn tokens_increase_across_1000_mixed_handoffs() {
    let t = Tenure::start_with(|c| c.marker_ttl = Duration::from_secs(1)).await;
    let mut c = t.client().await;
    let name = "fence.job";
    let mut highest_seen = 0u64;
    let mut expiries = 0;
    for i in 0..1000u32 {
        let expire = i % 100 == 99;
        let mut req = acquire_req(name, &format!("holder-{i}"), if expire { 1 } else { 30 });
        // The holding before may still be ending (expiry): wait for it.
        req.wait = Some(secs(30));
        let (lease, key) = within("acquire", acquire(&mut c, req)).await;
        assert!(
            lease.fencing_token > highest_seen,
            "handoff {i}: token {} not above {highest_seen}",
            lease.fencing_token
        );
        assert_eq!(
            lease.fencing_token, lease.revision,
            "the acquiring write's revision is the token"
        );
        let mut revision = lease.revision;
        for _ in 0..(i % 3) {
            let renewed = renew(&mut c, renew_req(name, revision, key.clone())).await;
            assert_eq!(
                renewed.fencing_token, lease.fencing_token,
                "renewal keeps the token"
            );
            assert!(renewed.revision > revision);
            revision = renewed.revision;
        }
        highest_seen = revision;
        if expire {
            expiries += 1;
        } else {
            let rel = c
                .release(release_req(name, revision, key))
                .await
                .unwrap()
                .into_inner();
            highest_seen = rel.revision;
        }
    }
    assert_eq!(expiries, 10);
}
