//! Sessions against a real Tenure: acquire/renew/release, races, fencing
//! tokens, loss signalling, waits, retries, typed errors.

use std::time::Duration;

use crate::common::{expect_event, within, Server};
use tenure_client::proto::ReleaseRequest;
use tenure_client::{AcquireOptions, Client, EventType, FencingGuard, LossCause, Reason};
use tokio::time::Instant;
use tonic::Code;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn opts() -> AcquireOptions {
    AcquireOptions::default()
}

#[tokio::test]
async fn acquire_renew_release_round_trip() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "round.trip";
    let mut renewals = client
        .watch_filtered(name, &[EventType::Renewed])
        .await
        .unwrap();
    expect_event(&mut renewals, EventType::SnapshotComplete).await;

    let before = Instant::now();
    let session = client
        .acquire(name, "worker-1", Duration::from_millis(1500), opts())
        .await
        .unwrap();
    let after = Instant::now();
    assert_eq!(session.name(), name);
    assert_eq!(session.holder(), "worker-1");
    assert_eq!(
        session.ttl(),
        secs(2),
        "the TTL is granted in whole seconds"
    );
    assert!(session.fencing_token() > 0);
    assert_eq!(session.revision(), session.fencing_token());
    assert!(session.lease_key().len() >= 16, "the server mints a key");
    assert_eq!(session.safety_margin(), Duration::from_millis(200));
    // The safe deadline counts from the send time: between these bounds.
    let span = secs(2) - session.safety_margin();
    assert!(session.safe_deadline() >= before + span);
    assert!(session.safe_deadline() <= after + span);
    assert!(session.is_held() && !session.lost().is_cancelled());
    let current = client.get(name).await.unwrap();
    assert_eq!(current.holder, "worker-1");
    assert_eq!(current.fencing_token, session.fencing_token());

    // The background task renews with the same fencing token ...
    let renewed = expect_event(&mut renewals, EventType::Renewed).await;
    assert_eq!(renewed.holder, "worker-1");
    assert_eq!(renewed.fencing_token, session.fencing_token());
    assert!(renewed.revision > session.fencing_token());

    // ... and so does a renewal on demand, which moves the deadline on.
    let (revision, deadline) = (session.revision(), session.safe_deadline());
    let lease = session.renew().await.unwrap();
    assert!(lease.revision > revision);
    assert_eq!(session.revision(), lease.revision);
    assert_eq!(lease.fencing_token, session.fencing_token());
    assert!(session.safe_deadline() > deadline);

    assert!(session.release().await.unwrap(), "release ends the holding");
    assert!(session.lost().is_cancelled());
    assert!(!session.is_held());
    assert_eq!(session.remaining(), Duration::ZERO);
    assert_eq!(session.loss().unwrap().cause, LossCause::Released);
    let err = client.get(name).await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseNotFound);
    assert_eq!(err.code(), Code::NotFound);
    assert!(!session.release().await.unwrap(), "nothing left to release");
    let err = session.renew().await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseNotHeld);
}

#[tokio::test]
async fn racing_sessions_one_wins() {
    let server = Server::start().await;
    let (a, b) = (server.client().await, server.client().await);
    for i in 0..5 {
        let name = format!("race.{i}");
        let (ra, rb) = tokio::join!(
            a.acquire(&name, "a", secs(5), opts()),
            b.acquire(&name, "b", secs(5), opts()),
        );
        let (winner, loser) = match (ra, rb) {
            (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
            (ra, rb) => panic!("exactly one must win: {ra:?} / {rb:?}"),
        };
        assert_eq!(loser.reason(), Reason::LeaseHeld);
        assert_eq!(loser.code(), Code::FailedPrecondition);
        assert!(!loser.is_retryable());
        assert_eq!(loser.metadata()["holder"], winner.holder());
        assert_eq!(
            loser.metadata()["fencing_token"],
            winner.fencing_token().to_string()
        );
        assert_eq!(loser.metadata()["ttl_seconds"], "5");
        assert_eq!(a.get(&name).await.unwrap().holder, winner.holder());
        assert!(winner.release().await.unwrap());
    }
}

#[tokio::test]
async fn fencing_token_is_stable_across_renewals_and_greater_for_the_next_holder() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "fence.me";
    let mut renewals = client
        .watch_filtered(name, &[EventType::Renewed])
        .await
        .unwrap();
    expect_event(&mut renewals, EventType::SnapshotComplete).await;

    let first = client
        .acquire(name, "first", secs(1), opts())
        .await
        .unwrap();
    let mut last_revision = first.fencing_token();
    for _ in 0..3 {
        let event = expect_event(&mut renewals, EventType::Renewed).await;
        assert_eq!(event.fencing_token, first.fencing_token());
        assert!(event.revision > last_revision);
        last_revision = event.revision;
    }
    assert_eq!(
        first.renew().await.unwrap().fencing_token,
        first.fencing_token()
    );
    assert!(first.release().await.unwrap());

    let second = client
        .acquire(name, "second", secs(1), opts())
        .await
        .unwrap();
    assert!(second.fencing_token() > first.fencing_token());

    let guard = FencingGuard::new();
    assert!(guard.accept(name, first.fencing_token()));
    assert!(guard.accept(name, second.fencing_token()));
    assert!(
        !guard.accept(name, first.fencing_token()),
        "the old holder is fenced off"
    );
    second.release().await.unwrap();
}

#[tokio::test]
async fn a_stalled_holder_is_lost_before_the_next_holder_takes_over() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "stalled.job";
    let stalled = client
        .acquire(name, "stalled", secs(1), opts())
        .await
        .unwrap();
    stalled.pause_renewals();
    let successor = client
        .acquire(name, "next", secs(2), opts().wait(secs(20)))
        .await
        .unwrap();
    let taken_over = Instant::now();
    // The stalled holder stopped believing it held the lease (its safe
    // deadline) before the server let the next holder in ...
    assert!(stalled.safe_deadline() <= taken_over);
    assert!(!stalled.is_held());
    // ... and signalled the loss then.
    within("loss", stalled.lost().cancelled()).await;
    let loss = stalled.loss().unwrap();
    assert_eq!(loss.cause, LossCause::Deadline);
    assert!(
        loss.at >= stalled.safe_deadline(),
        "not lost before the deadline"
    );
    assert!(loss.error.is_none(), "no renewal was even tried");
    assert!(successor.fencing_token() > stalled.fencing_token());

    // Waking up, the stalled holder cannot disturb the new holding.
    stalled.resume_renewals();
    assert!(!stalled.release().await.unwrap());
    let current = client.get(name).await.unwrap();
    assert_eq!(current.holder, "next");
    assert_eq!(current.fencing_token, successor.fencing_token());
    assert!(successor.is_held());
    successor.release().await.unwrap();
}

#[tokio::test]
async fn a_release_behind_the_sessions_back_signals_loss_at_once() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "taken.over";
    let victim = client
        .acquire(name, "victim", secs(3), opts())
        .await
        .unwrap();
    // The holding ends behind the session's back (a Release with its key,
    // as an operator or a crashed twin could send) and another holder
    // takes the name.
    victim.pause_renewals();
    client
        .stub()
        .release(ReleaseRequest {
            name: name.into(),
            expected_revision: victim.revision(),
            lease_key: victim.lease_key().into(),
            slot: 0,
        })
        .await
        .unwrap();
    let thief = client
        .acquire(name, "thief", secs(3), opts())
        .await
        .unwrap();
    victim.resume_renewals();

    within("loss", victim.lost().cancelled()).await;
    let loss = victim.loss().unwrap();
    assert_eq!(
        loss.cause,
        LossCause::NotHeld,
        "lost to what the client's watch saw, not the deadline"
    );
    // Renewals were paused: the client's watch saw the RELEASED (or the
    // thief's ACQUIRED), or, when the release came before the watch was
    // open, a snapshot without the victim's holding, and said so.
    let err = loss.error.unwrap();
    assert_eq!(err.reason(), Reason::LeaseNotHeld);
    assert_eq!(err.rpc(), "WatchLease", "{err}");
    let text = err.to_string();
    assert!(
        text.contains("RELEASED") || text.contains("thief") || text.contains("does not show it"),
        "{err}"
    );
    assert!(!victim.is_held());
    assert!(thief.fencing_token() > victim.fencing_token());
    assert_eq!(client.get(name).await.unwrap().holder, "thief");
    assert!(
        !victim.release().await.unwrap(),
        "nothing of ours to release"
    );
    assert!(thief.is_held());
    thief.release().await.unwrap();
}

#[tokio::test]
async fn acquire_with_wait_gets_the_lease_when_released() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "wait.for.it";
    let holder = client
        .acquire(name, "holder", secs(30), opts())
        .await
        .unwrap();
    let mut acquired = client
        .watch_filtered(name, &[EventType::Acquired])
        .await
        .unwrap();
    expect_event(&mut acquired, EventType::SnapshotComplete).await;
    let waiting = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .acquire(name, "waiter", secs(2), opts().wait(secs(20)))
                .await
        }
    });
    assert!(holder.release().await.unwrap());
    let waiter = within("the waiter", waiting).await.unwrap().unwrap();
    let event = expect_event(&mut acquired, EventType::Acquired).await;
    assert_eq!(event.holder, "waiter");
    assert_eq!(event.fencing_token, waiter.fencing_token());
    assert!(waiter.is_held());
    assert!(waiter.fencing_token() > holder.fencing_token());
    waiter.release().await.unwrap();
}

#[tokio::test]
async fn a_long_wait_renews_before_returning() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "long.wait";
    let gone = client.acquire(name, "gone", secs(1), opts()).await.unwrap();
    gone.pause_renewals(); // it expires on the server in about a second
    let waiter = client
        .acquire(name, "waiter", secs(1), opts().wait(secs(20)))
        .await
        .unwrap();
    // The wait outlasted a renew interval, so the session renewed once
    // before being returned: its deadline counts from that renewal.
    assert!(waiter.revision() > waiter.fencing_token());
    assert!(waiter.is_held());
    assert!(waiter.fencing_token() > gone.fencing_token());
    waiter.release().await.unwrap();
}

#[tokio::test]
async fn a_retried_acquire_with_the_same_key_returns_the_same_holding() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "retry.me";
    let key = "retry-key-0123456789abcdef";
    let first = client
        .acquire(name, "retrier", secs(2), opts().lease_key(key))
        .await
        .unwrap();
    first.pause_renewals();
    let again = client
        .acquire(name, "retrier", secs(2), opts().lease_key(key))
        .await
        .unwrap();
    assert_eq!(again.fencing_token(), first.fencing_token());
    assert!(again.revision() > first.revision());
    assert_eq!(again.lease_key(), key);
    assert!(again.release().await.unwrap());
    assert!(!first.release().await.unwrap(), "its revision is stale");
}

#[tokio::test]
async fn dropping_a_session_releases_it() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "drop.me";
    let mut released = client
        .watch_filtered(name, &[EventType::Released])
        .await
        .unwrap();
    expect_event(&mut released, EventType::SnapshotComplete).await;
    let session = client
        .acquire(name, "dropper", secs(30), opts())
        .await
        .unwrap();
    let token = session.fencing_token();
    let lost = session.lost().clone();
    drop(session);
    assert!(
        lost.is_cancelled(),
        "loss is signalled before the release is sent"
    );
    let event = expect_event(&mut released, EventType::Released).await;
    assert_eq!(event.holder, "dropper");
    assert_eq!(event.fencing_token, token);
    let next = client.acquire(name, "next", secs(2), opts()).await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

/// A current-thread runtime: while the test blocks the thread, the renewal
/// task cannot run.
#[tokio::test(flavor = "current_thread")]
async fn is_held_reads_the_clock_even_when_the_runtime_is_stalled() {
    let server = Server::start().await;
    let client = server.client().await;
    let session = client
        .acquire("busy.loop", "busy", secs(1), opts())
        .await
        .unwrap();
    // A long synchronous step: the runtime is blocked past the deadline.
    while Instant::now() <= session.safe_deadline() {
        std::thread::sleep(session.safe_deadline() - Instant::now() + Duration::from_millis(1));
    }
    assert!(
        !session.lost().is_cancelled(),
        "the task had no chance to run"
    );
    assert!(!session.is_held(), "but is_held() reads the clock");
    assert_eq!(session.remaining(), Duration::ZERO);
    within("loss", session.lost().cancelled()).await;
    assert_eq!(session.loss().unwrap().cause, LossCause::Deadline);
}

#[tokio::test]
async fn errors_carry_typed_reasons() {
    let server = Server::start().await;
    let client = server.client().await;

    let err = client
        .acquire("bad..name", "h", secs(1), opts())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::InvalidName);
    assert_eq!(err.raw_reason(), "INVALID_NAME");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(!err.is_retryable());

    let err = client
        .acquire("ok.name", "h", secs(1), opts().lease_key("short"))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::InvalidLeaseKey);

    let err = client
        .acquire("ok.name", "h", Duration::from_secs(1_000_000), opts())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::InvalidTtl);

    let err = client.get("ok.name").await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseNotFound);

    let err = client.watch("bad..name").await.unwrap_err();
    assert_eq!(err.reason(), Reason::InvalidName);

    // Refused locally, before any call: renewals must come before the
    // safe deadline.
    for options in [
        opts().renew_fraction(1.5),
        opts().renew_fraction(0.95),
        opts().safety_margin(Duration::from_millis(900)),
    ] {
        let err = client
            .acquire("ok.name", "h", secs(1), options)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), Reason::InvalidArgument, "{err}");
    }
    assert_eq!(
        client.get("ok.name").await.unwrap_err().reason(),
        Reason::LeaseNotFound
    );

    // Nothing listens on a port we just freed: no ErrorInfo, retryable.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = Client::connect(format!("127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::Unspecified);
    assert_eq!(err.code(), Code::Unavailable);
    assert!(err.is_retryable());
}

#[tokio::test]
async fn a_zero_ttl_takes_the_servers_default() {
    let server = Server::start().await;
    let client = server.client().await;
    let session = client
        .acquire("default.ttl", "h", Duration::ZERO, opts())
        .await
        .unwrap();
    assert_eq!(session.ttl(), secs(10), "the server's --default-ttl");
    assert_eq!(session.safety_margin(), secs(1), "a tenth, at most 1 s");
    let lease = client.get("default.ttl").await.unwrap();
    assert_eq!(lease.ttl.unwrap().seconds, 10);
    assert!(session.release().await.unwrap());
}

#[tokio::test]
async fn a_revoke_is_signalled_by_the_shared_watch_long_before_the_next_renewal() {
    let server = Server::start().await;
    let client = server.client().await;
    let admin = server.client().await;
    // A long TTL: the first renewal would run only after about half of it.
    let session = client
        .acquire("revoked.soon", "victim", secs(60), opts())
        .await
        .unwrap();
    let revoked_at = Instant::now();
    admin
        .revoke("revoked.soon", "test: revoke to loss", None)
        .await
        .unwrap();
    within("loss after the revoke", session.lost().cancelled()).await;
    let loss = session.loss().unwrap();
    let measured = loss.at.saturating_duration_since(revoked_at);
    println!("revoke-to-loss: {measured:?} (renewal due after about 30 s)");
    assert_eq!(loss.cause, LossCause::NotHeld, "{loss:?}");
    let err = loss.error.unwrap();
    assert_eq!(
        err.rpc(),
        "WatchLease",
        "seen by the watch, not a renewal: {err}"
    );
    assert!(
        err.to_string().contains("REVOKED") || err.to_string().contains("does not show it"),
        "{err}"
    );
    assert!(!session.release().await.unwrap(), "nothing left to release");
}

#[tokio::test]
async fn the_loss_watch_resumes_across_a_restart_and_sees_a_revoke() {
    let mut server = Server::start().await;
    let client = server.client().await;
    // A long TTL: the first renewal would run only after about 30 s.
    let session = client
        .acquire("restart.victim", "victim", secs(60), opts())
        .await
        .unwrap();
    server.kill().await;
    server.restart().await;
    // Revoked right after the restart: the client's loss watch sees it
    // replayed (it reconnected after the revoke, resuming from its last
    // revision) or live; or, when the kill came before the watch had shown
    // anything (no revision to resume from), its fresh snapshot lacks the
    // holding.
    let admin = server.client().await;
    admin
        .revoke("restart.victim", "test: revoke after restart", None)
        .await
        .unwrap();
    within("loss after the revoke", session.lost().cancelled()).await;
    let loss = session.loss().unwrap();
    assert_eq!(loss.cause, LossCause::NotHeld, "{loss:?}");
    let err = loss.error.unwrap();
    assert_eq!(err.rpc(), "WatchLease", "seen by the watch: {err}");
    let text = err.to_string();
    assert!(
        text.contains("REVOKED") || text.contains("does not show it"),
        "{err}"
    );
}
