//! Group sessions against a real Tenure with AcquireGroup: all members
//! taken with their own fencing tokens, renewed together, lost as a whole
//! when any member is, released with one call.

use std::collections::HashSet;
use std::time::Duration;

use crate::common::{expect_event, within, Server};
use tenure_client::{AcquireOptions, EventType, LossCause, Reason};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test]
async fn a_group_is_taken_renewed_and_released_as_one() {
    let server = Server::start().await;
    let client = server.client().await;
    let other = server.client().await;
    let mut renewals = client
        .watch_filtered("grp.a", &[EventType::Renewed])
        .await
        .unwrap();
    expect_event(&mut renewals, EventType::SnapshotComplete).await;

    let names = ["grp.a", "grp.b", "grp.c"];
    let group = client
        .acquire_group(&names, "mover", secs(1), AcquireOptions::default())
        .await
        .unwrap();
    assert_eq!(group.names(), names);
    let tokens: HashSet<u64> = group.fencing_tokens().iter().map(|t| t.1).collect();
    assert_eq!(tokens.len(), 3, "each member has its own fencing token");
    for lease in group.leases() {
        assert_eq!(lease.group, names, "each member lists the group");
        assert_eq!(Some(lease.fencing_token), group.fencing_token(&lease.name));
    }
    assert!(group.is_held());
    let err = other
        .acquire("grp.b", "intruder", secs(5), AcquireOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseHeld);

    // The background task renews every member with RenewGroup (1 s TTL:
    // a few renewals), with the same tokens.
    for _ in 0..2 {
        let event = expect_event(&mut renewals, EventType::Renewed).await;
        assert_eq!(Some(event.fencing_token), group.fencing_token("grp.a"));
    }
    let renewed = group.renew().await.unwrap();
    assert_eq!(renewed.len(), 3);
    assert!(group.is_held());

    let released = group.release().await.unwrap();
    assert_eq!(released.released, names);
    assert!(released.not_held.is_empty());
    assert_eq!(group.loss().unwrap().cause, LossCause::Released);
    for name in names {
        let err = client.get(name).await.unwrap_err();
        assert_eq!(err.reason(), Reason::LeaseNotFound);
    }
}

#[tokio::test]
async fn losing_one_member_loses_the_group_and_release_frees_the_rest() {
    let server = Server::start().await;
    let client = server.client().await;
    let names = ["grp2.a", "grp2.b", "grp2.c"];
    let group = client
        .acquire_group(&names, "mover", secs(10), AcquireOptions::default())
        .await
        .unwrap();
    client.revoke("grp2.b", "test", None).await.unwrap();
    within("the group's loss", group.lost().cancelled()).await;
    assert!(!group.is_held());
    let loss = group.loss().unwrap();
    assert_eq!(loss.cause, LossCause::NotHeld);
    let message = loss.error.unwrap().to_string();
    // Seen live (REVOKED), or by a loss watch opened just after the revoke
    // (its snapshot lacks the member).
    assert!(
        message.contains("grp2.b")
            && (message.contains("REVOKED") || message.contains("does not show it")),
        "{message}"
    );
    let err = group.renew().await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseNotHeld);

    // Release after the loss is not an error: it frees what is still held.
    let released = group.release().await.unwrap();
    assert_eq!(released.not_held, ["grp2.b"]);
    assert_eq!(released.released, ["grp2.a", "grp2.c"]);
    for name in names {
        assert_eq!(
            client.get(name).await.unwrap_err().reason(),
            Reason::LeaseNotFound
        );
    }
}
