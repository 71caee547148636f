//! Semaphores against a real Tenure: the limit holds under a race, a
//! mismatched limit is a typed error, and a holder's session follows only
//! its own slot.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{server_with_metrics, watch_streams_open, within, Server};
use tenure_client::proto::ReleaseRequest;
use tenure_client::{limit_in_force, AcquireOptions, LossCause, Reason, Semaphore};
use tonic::Code;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test]
async fn six_clients_racing_for_two_slots_never_hold_three() {
    let server = Server::start().await;
    let live = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let client = server.client().await;
        let (live, most, tokens) = (live.clone(), most.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let slots = Semaphore::new(&client, "sem.race", 2);
            for round in 0..3 {
                let holder = format!("w{i}.{round}");
                let permit = slots
                    .acquire(&holder, secs(5), AcquireOptions::default().wait(secs(25)))
                    .await
                    .unwrap();
                let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!((1..=2).contains(&permit.slot()), "slot {}", permit.slot());
                assert!(permit.is_held());
                tokens.lock().unwrap().push(permit.fencing_token());
                tokio::task::yield_now().await;
                live.fetch_sub(1, Ordering::SeqCst);
                assert!(permit.release().await.unwrap(), "{holder} still held");
            }
        }));
    }
    for task in tasks {
        within("the racers", task).await.unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= 2, "more than 2 holders");
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 18);
    let distinct: HashSet<_> = tokens.iter().collect();
    assert_eq!(distinct.len(), 18, "each holding has its own token");
}

#[tokio::test]
async fn a_mismatched_limit_is_a_typed_error_with_the_limit_in_force() {
    let server = Server::start().await;
    let client = server.client().await;
    let held = Semaphore::new(&client, "sem.limit", 2)
        .acquire("a", secs(5), AcquireOptions::default())
        .await
        .unwrap();
    let err = Semaphore::new(&client, "sem.limit", 3)
        .acquire("b", secs(5), AcquireOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::LimitMismatch);
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(!err.is_retryable());
    assert_eq!(limit_in_force(&err), Some(2));
    let info = Semaphore::new(&client, "sem.limit", 2)
        .inspect()
        .await
        .unwrap();
    assert_eq!((info.limit, info.free_slots), (2, 1));
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].fencing_token, held.fencing_token());
    assert!(held.release().await.unwrap());
}

#[tokio::test]
async fn other_holders_coming_and_going_do_not_end_a_session_but_its_revoke_does() {
    let (server, metrics) = server_with_metrics(&[]).await;
    let client = server.client().await;
    let slots = Semaphore::new(&client, "sem.follow", 3);
    let mine = slots
        .acquire("mine", secs(10), AcquireOptions::default())
        .await
        .unwrap();
    // The client's loss watch is open before the others come and go.
    watch_streams_open(&metrics, 1).await;
    // Another holder on the same connection (so the same watch stream)
    // acquires and releases ...
    let other = slots
        .acquire("other", secs(10), AcquireOptions::default())
        .await
        .unwrap();
    assert_ne!(other.slot(), mine.slot());
    assert!(other.fencing_token() > mine.fencing_token());
    assert!(other.release().await.unwrap());
    let third = slots
        .acquire("third", secs(10), AcquireOptions::default())
        .await
        .unwrap();
    // ... then an operator revokes my slot. The watch shows these events
    // in order: if the others' had ended my session, its loss would name
    // them instead of the end of my slot.
    let what = match client
        .revoke_slot("sem.follow", mine.slot(), "test", None)
        .await
    {
        Ok(revoked) => {
            assert_eq!(revoked.fencing_token, mine.fencing_token());
            "REVOKED".to_string()
        }
        // A server without RevokeLease.slot support looks for a plain lease
        // of that name: end my slot with a Release behind my session's back.
        Err(err) if err.reason() == Reason::LeaseNotFound => {
            let request = ReleaseRequest {
                name: "sem.follow".into(),
                expected_revision: mine.revision(),
                lease_key: mine.lease_key().into(),
                slot: mine.slot(),
            };
            let reply = client.stub().release(request).await.unwrap().into_inner();
            format!("RELEASED at revision {}", reply.revision)
        }
        Err(err) => panic!("revoke: {err}"),
    };
    within("loss of my slot", mine.lost().cancelled()).await;
    let loss = mine.loss().unwrap();
    assert_eq!(loss.cause, LossCause::NotHeld);
    let message = loss.error.unwrap().to_string();
    assert!(message.contains(&what), "{message} does not say {what}");
    // The revoke of my slot does not end the third holder's session.
    assert!(third.is_held() && third.loss().is_none());
    let renewed = third.renew().await.unwrap();
    assert_eq!(renewed.slot, third.slot());
    assert!(third.release().await.unwrap());
}
