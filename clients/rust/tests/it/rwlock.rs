//! Read-write locks against a real Tenure: shared holders together and a
//! writer refused meanwhile, a queued writer going before a later reader
//! (ordered by the watch's events), and a writer downgrading in place while
//! it keeps holding and renewing.

use std::time::Duration;

use crate::common::{expect_event, server_with_metrics, watch_streams_open, within, Server, WAIT};
use tenure_client::proto::DowngradeRequest;
use tenure_client::{
    AcquireOptions, Client, Event, EventType, LeaseInfo, LockMode, Reason, Semaphore, Watch,
};
use tonic::Code;

const TTL: Duration = Duration::from_secs(10);

/// Polls `inspect` until `check` holds for its answer (the queue has no
/// event to wait for); bounded by `within`.
async fn until(client: &Client, name: &str, check: impl Fn(&LeaseInfo) -> bool) -> LeaseInfo {
    within(&format!("the state of {name}"), async {
        loop {
            if let Ok(info) = client.inspect(name).await {
                if check(&info) {
                    return info;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // poll interval
        }
    })
    .await
}

/// The watch's events up to and including the first one `last` matches,
/// RENEWED left out.
async fn events_until(watch: &mut Watch, last: impl Fn(&Event) -> bool) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        let event = crate::common::next_event(watch).await;
        if event.kind == EventType::Renewed {
            continue;
        }
        let done = last(&event);
        events.push(event);
        if done {
            return events;
        }
    }
}

/// Where in `events` the first `kind` event of fencing token `token` is.
fn position(events: &[Event], kind: EventType, token: u64) -> usize {
    events
        .iter()
        .position(|e| e.kind == kind && e.fencing_token == token)
        .unwrap_or_else(|| panic!("no {kind:?} of token {token} in {events:#?}"))
}

#[tokio::test]
async fn shared_holders_hold_together_and_a_writer_without_a_wait_is_refused() {
    let server = Server::start_with(&["--max-shared-holders".into(), "2".into()], None).await;
    let client = server.client().await;
    let other = server.client().await;
    let name = "rw.shared";
    let lock = client.rwlock(name);
    assert_eq!(lock.name(), name);
    assert_eq!(lock.read("x").mode(), LockMode::Shared);
    assert_eq!(lock.write("x").mode(), LockMode::Exclusive);

    let r1 = lock.read("r1").ttl(TTL).await.unwrap();
    let r2 = other.rwlock(name).read("r2").ttl(TTL).await.unwrap();
    for r in [&r1, &r2] {
        assert_eq!(r.mode(), LockMode::Shared);
        assert_eq!(r.lease().mode(), LockMode::Shared);
        assert!(r.slot() > 0);
        assert!(r.is_held());
    }
    assert_ne!(r1.slot(), r2.slot());
    assert!(r2.fencing_token() > r1.fencing_token());
    let holders = lock.holders().await.unwrap();
    let mut tokens: Vec<u64> = holders.iter().map(|l| l.fencing_token).collect();
    tokens.sort();
    assert_eq!(tokens, vec![r1.fencing_token(), r2.fencing_token()]);
    assert!(holders.iter().all(|l| l.mode() == LockMode::Shared));

    // A writer without a wait: refused while they hold.
    let err = other.rwlock(name).write("w").ttl(TTL).await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseHeld, "{err}");
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(!err.is_retryable());

    // A third reader without a wait: --max-shared-holders 2 are in.
    let err = lock.read("r3").ttl(TTL).await.unwrap_err();
    assert_eq!(err.reason(), Reason::TooManySharedHolders, "{err}");
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(err.is_retryable());
    assert_eq!(err.metadata().get("holders").map(String::as_str), Some("2"));
    assert_eq!(
        err.metadata().get("max_shared_holders").map(String::as_str),
        Some("2")
    );

    // The name is a read-write lock's: not a semaphore's.
    let err = Semaphore::new(&client, name, 3)
        .acquire("s", TTL, AcquireOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::ModeMismatch, "{err}");
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(!err.is_retryable());

    // A shared holding has nothing to downgrade: refused by the client, and
    // by the server when asked directly; the holding is unchanged.
    let err = r1.downgrade().await.unwrap_err();
    assert_eq!(err.reason(), Reason::ModeMismatch, "{err}");
    let status = client
        .stub()
        .downgrade(DowngradeRequest {
            name: name.into(),
            expected_revision: r1.revision(),
            lease_key: r1.lease_key().into(),
            slot: r1.slot(),
        })
        .await
        .unwrap_err();
    let err = tenure_client::Error::from(status);
    assert_eq!(err.reason(), Reason::ModeMismatch, "{err}");
    assert!(r1.is_held() && r1.loss().is_none());
    r1.renew().await.unwrap();

    // No upgrade: r1's holder and key asking for the write lock.
    let err = lock
        .write("r1")
        .lease_key(r1.lease_key())
        .ttl(TTL)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::ModeMismatch, "{err}");
    assert!(r1.is_held());

    // A lock delay or a preference is refused locally.
    let err = lock
        .write("w")
        .options(AcquireOptions::default().lock_delay(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::InvalidArgument, "{err}");

    // Once both have left, the writer gets it at once, after their tokens.
    assert!(r1.release().await.unwrap());
    assert!(r2.release().await.unwrap());
    let w = other.rwlock(name).write("w").ttl(TTL).await.unwrap();
    assert_eq!(w.mode(), LockMode::Exclusive);
    assert!(w.fencing_token() > r2.fencing_token());
    let err = lock.read("r4").ttl(TTL).await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseHeld, "{err}");
    assert!(w.release().await.unwrap());
    assert!(lock.holders().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_queued_writer_goes_after_the_readers_and_before_a_later_reader() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "rw.order";
    let mut watch = server.client().await.watch(name).await.unwrap();
    expect_event(&mut watch, EventType::SnapshotComplete).await;
    let lock = client.rwlock(name);

    let r1 = lock.read("r1").ttl(TTL).await.unwrap();
    let r2 = lock.read("r2").ttl(TTL).await.unwrap();

    let writer = {
        let lock = server.client().await.rwlock(name);
        tokio::spawn(async move { lock.write("w").ttl(TTL).wait(WAIT).await })
    };
    until(&client, name, |i| i.waiting == 1).await;
    // A reader arriving now queues behind the writer: without a wait it is
    // refused although only readers hold the lock ...
    let err = lock.read("r-now").ttl(TTL).await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseHeld, "{err}");
    assert_eq!(
        err.metadata().get("state").map(String::as_str),
        Some("QUEUED")
    );
    // ... and with a wait it waits behind the writer.
    let late_reader = {
        let lock = server.client().await.rwlock(name);
        tokio::spawn(async move { lock.read("r3").ttl(TTL).wait(WAIT).await })
    };
    until(&client, name, |i| i.waiting == 2).await;

    assert!(r1.release().await.unwrap());
    // r2 still reads: the writer cannot be in.
    assert!(!writer.is_finished());
    assert!(r2.release().await.unwrap());
    let w = within("the writer's acquire", writer)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(w.mode(), LockMode::Exclusive);
    assert!(w.fencing_token() > r1.fencing_token());
    assert!(w.fencing_token() > r2.fencing_token());
    // The writer holds alone; the late reader still waits.
    let info = client.inspect(name).await.unwrap();
    assert_eq!(info.waiting, 1, "the late reader waits");
    assert_eq!(info.lease.fencing_token, w.fencing_token());
    let holders: Vec<u64> = info.holders.iter().map(|l| l.fencing_token).collect();
    assert_eq!(holders, vec![w.fencing_token()]);
    assert_eq!(info.holders[0].mode(), LockMode::Exclusive);
    assert!(!late_reader.is_finished());

    assert!(w.release().await.unwrap());
    let r3 = within("the late reader's acquire", late_reader)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r3.mode(), LockMode::Shared);
    assert!(r3.fencing_token() > w.fencing_token());

    // The order the server wrote: both readers left before the writer came
    // in, and the writer left before the late reader came in.
    let r3_token = r3.fencing_token();
    let events = events_until(&mut watch, |e| {
        e.kind == EventType::Acquired && e.fencing_token == r3_token
    })
    .await;
    let w_in = position(&events, EventType::Acquired, w.fencing_token());
    assert!(position(&events, EventType::Released, r1.fencing_token()) < w_in);
    assert!(position(&events, EventType::Released, r2.fencing_token()) < w_in);
    let w_out = position(&events, EventType::Released, w.fencing_token());
    assert!(w_in < w_out);
    assert!(w_out < position(&events, EventType::Acquired, r3_token));
    assert!(r3.release().await.unwrap());
}

#[tokio::test]
async fn a_downgraded_writer_lets_a_waiting_reader_in_and_keeps_holding() {
    let (server, metrics) = server_with_metrics(&[]).await;
    let client = server.client().await;
    let name = "rw.downgrade";
    // A short TTL: the downgraded session renews (after 1 s) while the
    // test watches.
    let w = client
        .rwlock(name)
        .write("w")
        .ttl(Duration::from_secs(3))
        .await
        .unwrap();
    let exclusive = w.lease();
    let key = w.lease_key().to_string();
    assert_eq!(w.mode(), LockMode::Exclusive);
    // The client's loss watch is open before the downgrade, so it sees the
    // exclusive holding's RELEASED and the shared one's ACQUIRED.
    watch_streams_open(&metrics, 1).await;
    let observer = server.client().await;
    let mut watch = observer.watch(name).await.unwrap();
    expect_event(&mut watch, EventType::Current).await;
    expect_event(&mut watch, EventType::SnapshotComplete).await;

    let reader = {
        let lock = observer.rwlock(name);
        tokio::spawn(async move { lock.read("r").ttl(TTL).wait(WAIT).await })
    };
    until(&client, name, |i| i.waiting == 1).await;

    let shared = w.downgrade().await.unwrap();
    assert_eq!(shared.mode(), LockMode::Shared);
    assert_eq!(shared.slot, exclusive.slot);
    assert!(shared.fencing_token > exclusive.fencing_token);
    assert!(shared.revision > exclusive.revision);
    // The session goes on in place with the shared holding.
    assert_eq!(w.mode(), LockMode::Shared);
    assert_eq!(w.fencing_token(), shared.fencing_token);
    assert_eq!(w.revision(), shared.revision);
    assert_eq!(w.slot(), exclusive.slot);
    assert_eq!(w.lease_key(), key);
    assert!(w.is_held());

    // The waiting reader gets in beside it, after its new token.
    let r = within("the reader's acquire", reader)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.mode(), LockMode::Shared);
    assert!(r.fencing_token() > shared.fencing_token);
    let mut tokens: Vec<u64> = client
        .rwlock(name)
        .holders()
        .await
        .unwrap()
        .iter()
        .map(|l| l.fencing_token)
        .collect();
    tokens.sort();
    assert_eq!(tokens, vec![shared.fencing_token, r.fencing_token()]);

    // The watch shows the exclusive holding end and the shared one begin
    // at the same write, then the reader, then a background renewal of the
    // shared holding (its new revision presented).
    let events = events_until(&mut watch, |e| {
        e.kind == EventType::Acquired && e.fencing_token == r.fencing_token()
    })
    .await;
    let ended = position(&events, EventType::Released, exclusive.fencing_token);
    let began = position(&events, EventType::Acquired, shared.fencing_token);
    assert_eq!(
        events[ended].revision, events[began].revision,
        "{events:#?}"
    );
    assert_eq!(events[began].slot, exclusive.slot);
    // Two renewals: the first may be the check of the loss its watch
    // reported against the exclusive token (made at once), the second is
    // on the schedule.
    let mut renewals = 0;
    while renewals < 2 {
        let event = crate::common::next_event(&mut watch).await;
        if event.kind == EventType::Renewed && event.fencing_token == shared.fencing_token {
            assert!(event.revision > shared.revision);
            assert_eq!(event.slot, shared.slot);
            renewals += 1;
        }
    }
    // Neither the client's watch (which saw the exclusive holding's
    // RELEASED) nor the renewals ended the session.
    assert!(w.is_held(), "{:?}", w.loss());
    assert!(w.loss().is_none());
    let renewed = w.renew().await.unwrap();
    assert_eq!(renewed.fencing_token, shared.fencing_token);
    assert_eq!(renewed.mode(), LockMode::Shared);

    // Once is enough: a shared holding has nothing to downgrade.
    let err = w.downgrade().await.unwrap_err();
    assert_eq!(err.reason(), Reason::ModeMismatch, "{err}");
    assert!(w.is_held());
    // A writer without a wait is refused while the two read.
    let err = client.rwlock(name).write("w2").ttl(TTL).await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseHeld, "{err}");

    assert!(w.release().await.unwrap());
    assert!(r.release().await.unwrap());
}
