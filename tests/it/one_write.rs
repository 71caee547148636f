//! One write per step of a lock cycle (design section 16, "One write"): a
//! lease's record sits beside its queue, under one wildcard, so a replica
//! that wrote a name's line last (its grant, its release, nobody queued)
//! releases it and takes it again with one conditional write each and no
//! read, and a waiter that queued in between fails that write. The test
//! fault `one-write-exact` (the write conditional on the record alone) is
//! the control: it must take the name ahead of that waiter.

use std::time::Duration;

use crate::common::*;
use async_nats::jetstream::message::PublishMessage;
use futures::{FutureExt, StreamExt};
use tonic_types::StatusExt;

/// The NATS requests and writes Tenure sends for `name` while `f` runs:
/// leader reads (`STREAM.MSG.GET` naming one of the name's keys) and
/// writes to any of its keys, counted from core subscriptions of this
/// test's own connection.
async fn traffic<F: std::future::Future>(
    t: &Tenure,
    name: &str,
    f: F,
) -> (usize, usize, F::Output) {
    let bucket = &t.config.bucket;
    let nats = async_nats::connect(t.nats.url()).await.unwrap();
    let mut reads = nats
        .subscribe(format!("$JS.API.STREAM.MSG.GET.KV_{bucket}"))
        .await
        .unwrap();
    let mut writes = nats
        .subscribe(format!("$KV.{bucket}._tenure.*.{name}.>"))
        .await
        .unwrap();
    // A message of our own through the server, there and back: once it is
    // back, the server has both subscriptions (it handled them before it),
    // and, the second time, it has routed to them everything it handled
    // before it, which includes every write and read Tenure made for `f`.
    let inbox = nats.new_inbox();
    let mut barrier = nats.subscribe(inbox.clone()).await.unwrap();
    nats.publish(inbox.clone(), "".into()).await.unwrap();
    within("the barrier", barrier.next()).await.unwrap();
    let out = f.await;
    nats.publish(inbox, "".into()).await.unwrap();
    within("the barrier", barrier.next()).await.unwrap();
    let count = |sub: &mut async_nats::Subscriber, needle: Option<String>| {
        let mut n = 0;
        // Unconstrained: a receive that is ready is never put off by the
        // task's cooperative budget.
        while let Some(Some(msg)) = tokio::task::unconstrained(sub.next()).now_or_never() {
            let payload = String::from_utf8_lossy(&msg.payload).to_string();
            if needle.as_ref().is_none_or(|s| payload.contains(s.as_str())) {
                n += 1;
            }
        }
        n
    };
    let r = count(&mut reads, Some(format!(".{name}.")));
    let w = count(&mut writes, None);
    (r, w, out)
}

/// A queued waiter's ticket written behind Tenure's back, as a waiter on a
/// replica that then died leaves it (it expires after `ttl`).
async fn ghost_ticket(t: &Tenure, name: &str, ttl: Duration) {
    let js = t.nats.jetstream().await;
    js.send_publish(
        format!("$KV.{}._tenure.q.{name}.ticket.7", t.config.bucket),
        PublishMessage::build()
            .payload(r#"{"place":0,"holder":"ghost"}"#.into())
            .ttl(ttl),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

/// Acquire, Release and Acquire again through one replica: the release and
/// the second Acquire are one write each and read nothing; the record is
/// at its documented key and names the release it replaced.
#[tokio::test]
async fn a_release_and_the_next_acquire_are_one_write_each() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let name = "ow.cycle";
    let (first, key) = acquire(&mut c, acquire_req(name, "a", 30)).await;
    let (reads, writes, released) = traffic(&t, name, async {
        c.release(release_req(name, first.revision, key))
            .await
            .unwrap()
            .into_inner()
    })
    .await;
    assert_eq!((reads, writes), (0, 1), "the release: one write, no read");
    let (reads, writes, (second, _)) =
        traffic(&t, name, acquire(&mut c, acquire_req(name, "a", 30))).await;
    assert_eq!((reads, writes), (0, 1), "the Acquire: one write, no read");
    assert!(second.fencing_token > released.revision);
    let entry = t
        .kv()
        .await
        .entry(format!("_tenure.q.{name}.lease.holder"))
        .await
        .unwrap()
        .expect("the record at its documented key");
    assert_eq!(entry.revision, second.revision);
    let record: serde_json::Value = serde_json::from_slice(&entry.value).unwrap();
    assert_eq!(record["over"], released.revision, "{record}");
}

/// A waiter that queued after this replica's release fails the one write:
/// the Acquire reads, sees the ticket and is refused (QUEUED); with the
/// test fault `one-write-exact` the same Acquire takes the name ahead of
/// the waiter, which is what the line's condition prevents.
#[tokio::test]
async fn a_waiter_queued_since_the_release_is_never_jumped() {
    for fault in [false, true] {
        let t = Tenure::start_with(|c| {
            if fault {
                c.test_fault = vec![tenure::TestFault::OneWriteExact];
            }
        })
        .await;
        let mut c = t.client().await;
        let name = "ow.jump";
        let (l, key) = acquire(&mut c, acquire_req(name, "a", 30)).await;
        c.release(release_req(name, l.revision, key)).await.unwrap();
        ghost_ticket(&t, name, Duration::from_secs(30)).await;
        let got = c.acquire(acquire_req(name, "barger", 30)).await;
        if fault {
            let jumped = got.expect("the control takes the name over the waiter");
            assert_eq!(jumped.into_inner().lease.unwrap().holder, "barger");
        } else {
            let err = got.unwrap_err();
            assert_eq!(reason(&err), "LEASE_HELD", "{err:?}");
            let info = err.get_details_error_info().unwrap();
            assert_eq!(info.metadata["state"], "QUEUED");
            assert_eq!(info.metadata["waiters"], "1");
        }
    }
}

/// A release whose line changed since the grant (a waiter queued) is still
/// a release: its one write fails and it is written on the record alone;
/// the name is then free with a waiter queued, so a plain Acquire is
/// refused.
#[tokio::test]
async fn a_release_after_a_waiter_queued_still_releases() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let name = "ow.release";
    let (l, key) = acquire(&mut c, acquire_req(name, "a", 30)).await;
    ghost_ticket(&t, name, Duration::from_secs(30)).await;
    c.release(release_req(name, l.revision, key))
        .await
        .expect("released all the same");
    let err = c
        .acquire(acquire_req(name, "barger", 30))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_HELD", "{err:?}");
    assert_eq!(
        err.get_details_error_info().unwrap().metadata["state"],
        "QUEUED"
    );
}

/// A name another replica took since this replica's release fails the one
/// write too: the Acquire reads and is refused as held by the other.
#[tokio::test]
async fn a_name_taken_elsewhere_since_is_read_again() {
    let t = Tenure::start().await;
    let (_other, mut b) = t.replica().await;
    let mut a = t.client().await;
    let name = "ow.elsewhere";
    let (l, key) = acquire(&mut a, acquire_req(name, "a", 30)).await;
    a.release(release_req(name, l.revision, key)).await.unwrap();
    let (taken, _) = acquire(&mut b, acquire_req(name, "b", 30)).await;
    let err = a.acquire(acquire_req(name, "a", 30)).await.unwrap_err();
    assert_eq!(reason(&err), "LEASE_HELD", "{err:?}");
    assert_eq!(
        err.get_details_error_info().unwrap().metadata["fencing_token"],
        taken.fencing_token.to_string()
    );
}
