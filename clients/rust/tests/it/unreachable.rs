//! Loss by the safe deadline when the server goes away.

use std::time::Duration;

use crate::common::{within, Server};
use tenure_client::{AcquireOptions, Client, LossCause, Reason, Session};

async fn hold(client: &Client, name: &str) -> Session {
    client
        .acquire(
            name,
            "holder",
            Duration::from_secs(2),
            AcquireOptions::default(),
        )
        .await
        .unwrap()
}

/// The session is lost at (not before) its safe deadline, after renewals
/// failed, and cannot release either.
async fn assert_lost_by_the_deadline(session: &Session) {
    within("loss", session.lost().cancelled()).await;
    let loss = session.loss().unwrap();
    assert_eq!(loss.cause, LossCause::Deadline);
    assert!(
        loss.at >= session.safe_deadline(),
        "not lost before the deadline"
    );
    assert!(!session.is_held());
    let err = loss.error.expect("the last failed renewal");
    assert!(err.is_retryable(), "{err}");

    // The release cannot get through either; the lease ends at its TTL.
    let err = session.release().await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert_eq!(err.reason(), Reason::Unspecified, "{err}");
}

#[tokio::test]
async fn loss_is_signalled_by_the_safe_deadline_when_the_server_stops() {
    let mut server = Server::start().await;
    let client = server.client().await;
    let name = "stopped.job";
    let session = hold(&client, name).await;

    // SIGTERM: a graceful shutdown. (A `Watch` does not end on the
    // server's SHUTTING_DOWN: it reconnects and resumes, see
    // tests/watch.rs.)
    server.stop().await;

    assert_lost_by_the_deadline(&session).await;
}

#[tokio::test]
async fn loss_is_signalled_by_the_safe_deadline_when_the_server_vanishes() {
    let mut server = Server::start().await;
    let client = server.client().await;
    let session = hold(&client, "killed.job").await;

    server.kill().await; // SIGKILL to Tenure and its nats-server

    assert_lost_by_the_deadline(&session).await;
}
