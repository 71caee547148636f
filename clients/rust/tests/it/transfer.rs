//! Handing a lease over against a real Tenure: `Session::transfer` to a
//! waiting acquire of another client, `NO_WAITER`, and an election's
//! `resign_to` (the leader stops before the successor starts).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{within, Server};
use tenure_client::{AcquireOptions, ChangeType, Client, Election, LossCause, Reason};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const TTL: Duration = Duration::from_secs(10);

/// Polls `inspect` until at least one acquire waits for `name` (queueing
/// has no event to wait for); bounded by `within`.
async fn a_waiter(client: &Client, name: &str) {
    within(&format!("a waiter for {name}"), async {
        loop {
            if let Ok(info) = client.inspect(name).await {
                if info.waiting >= 1 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // poll interval
        }
    })
    .await
}

#[tokio::test]
async fn transfer_hands_the_holding_to_a_waiting_acquire() {
    let server = Server::start().await;
    let client = server.client().await;
    let other = server.client().await;
    let name = "transfer.session";
    let giver = client
        .acquire(
            name,
            "giver",
            Duration::from_secs(30),
            AcquireOptions::default(),
        )
        .await
        .unwrap();

    // Nobody waits: NO_WAITER (permanent), and the session is unchanged.
    let err = giver.transfer(None).await.unwrap_err();
    assert_eq!(err.reason(), Reason::NoWaiter, "{err}");
    assert!(!err.is_retryable());
    assert!(giver.is_held() && giver.loss().is_none());

    let waiting = {
        let other = other.clone();
        tokio::spawn(async move {
            other
                .acquire(
                    name,
                    "waiter",
                    TTL,
                    AcquireOptions::default().wait(crate::common::WAIT),
                )
                .await
        })
    };
    a_waiter(&client, name).await;
    // A waiter, but not the one named: NO_WAITER; still held and renewing.
    let err = giver.transfer(Some("someone-else")).await.unwrap_err();
    assert_eq!(err.reason(), Reason::NoWaiter, "{err}");
    assert!(giver.is_held());
    giver.renew().await.expect("renew after NO_WAITER");

    let lease = giver.transfer(Some("waiter")).await.unwrap();
    assert_eq!(lease.holder, "waiter");
    assert!(lease.fencing_token > giver.fencing_token());
    let waiter = within("the waiter's acquire", waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(waiter.fencing_token(), lease.fencing_token);
    assert!(waiter.is_held());

    // The giver's session ended as a release, not a loss.
    assert!(!giver.is_held());
    assert!(giver.lost().is_cancelled());
    assert_eq!(giver.loss().map(|l| l.cause), Some(LossCause::Transferred));
    assert!(!giver.release().await.unwrap());
    let err = giver.transfer(None).await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseNotHeld);

    // The recipient hands over to the head of the queue.
    let third_waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .acquire(
                    name,
                    "third",
                    TTL,
                    AcquireOptions::default().wait(crate::common::WAIT),
                )
                .await
        })
    };
    a_waiter(&client, name).await;
    let lease3 = waiter.transfer(None).await.unwrap();
    let third = within("the third acquire", third_waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease3.holder, "third");
    assert_eq!(third.fencing_token(), lease3.fencing_token);
    assert!(lease3.fencing_token > waiter.fencing_token());
    assert_eq!(waiter.loss().map(|l| l.cause), Some(LossCause::Transferred));
    assert_eq!(client.inspect(name).await.unwrap().lease.holder, "third");
    assert!(third.release().await.unwrap());
}

/// One candidate whose callbacks write to a log shared by all.
struct Candidate {
    election: Election,
    started: mpsc::UnboundedReceiver<u64>,
    stop: CancellationToken,
    done: tokio::task::JoinHandle<Result<(), tenure_client::Error>>,
}

fn candidate(
    client: &Client,
    name: &str,
    identity: &'static str,
    log: Arc<Mutex<Vec<String>>>,
) -> Candidate {
    candidate_with(client, name, identity, log, TTL, 0)
}

/// [`candidate`] with a term TTL and a preference.
fn candidate_with(
    client: &Client,
    name: &str,
    identity: &'static str,
    log: Arc<Mutex<Vec<String>>>,
    ttl: Duration,
    preference: u32,
) -> Candidate {
    let (started_tx, started) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let election = Election::new(client, name).with_preference(preference);
    let running = election.clone();
    let token = stop.clone();
    let stopped_log = log.clone();
    let done = tokio::spawn(async move {
        running
            .run(
                identity,
                &format!("{identity}:5432"),
                ttl,
                token,
                move |term, ended| {
                    let started_tx = started_tx.clone();
                    let log = log.clone();
                    async move {
                        log.lock()
                            .unwrap()
                            .push(format!("{identity} started {}", term.fencing_token()));
                        started_tx.send(term.fencing_token()).unwrap();
                        ended.cancelled().await;
                        log.lock().unwrap().push(format!("{identity} work ended"));
                    }
                },
                move || {
                    stopped_log
                        .lock()
                        .unwrap()
                        .push(format!("{identity} stopped"))
                },
            )
            .await
    });
    Candidate {
        election,
        started,
        stop,
        done,
    }
}

fn lines(log: &Mutex<Vec<String>>) -> Vec<String> {
    log.lock().unwrap().clone()
}

#[tokio::test]
async fn resign_to_stops_the_leader_before_handing_over() {
    let server = Server::start().await;
    let a_client = server.client().await;
    let b_client = server.client().await;
    let name = "transfer.election";
    let log = Arc::new(Mutex::new(Vec::new()));

    let mut a = candidate(&a_client, name, "node-a", log.clone());
    let token_a = within("node-a's term", a.started.recv()).await.unwrap();
    let mut b = candidate(&b_client, name, "node-b", log.clone());
    a_waiter(&a_client, name).await;
    let err = b.election.resign_to(Some("node-a")).await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseNotHeld, "{err}");

    let successor = within("resign_to node-b", a.election.resign_to(Some("node-b")))
        .await
        .unwrap();
    assert_eq!(successor.identity, "node-b");
    assert_eq!(successor.value, "node-b:5432");
    assert!(successor.fencing_token > token_a);
    // node-a had stopped when resign_to returned.
    assert_eq!(
        lines(&log)[..3],
        [
            format!("node-a started {token_a}"),
            "node-a work ended".into(),
            "node-a stopped".into()
        ]
    );
    let token_b = within("node-b's term", b.started.recv()).await.unwrap();
    assert_eq!(token_b, successor.fencing_token);
    assert_eq!(lines(&log)[3], format!("node-b started {token_b}"));

    // node-a campaigns again; a successor that does not wait gets
    // NO_WAITER and node-b leads the same term again.
    a_waiter(&b_client, name).await;
    let err = within("resign_to node-c", b.election.resign_to(Some("node-c")))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::NoWaiter, "{err}");
    assert_eq!(
        within("node-b again", b.started.recv()).await.unwrap(),
        token_b
    );
    let now = Election::new(&a_client, name)
        .leader()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (now.identity.as_str(), now.fencing_token),
        ("node-b", token_b)
    );

    // To the next candidate: node-a, with a greater token.
    let next = within("resign_to the next", b.election.resign_to(None))
        .await
        .unwrap();
    let token_a2 = within("node-a's second term", a.started.recv())
        .await
        .unwrap();
    assert_eq!(next.identity, "node-a");
    assert_eq!(next.fencing_token, token_a2);
    assert!(token_a2 > token_b);
    assert_eq!(
        lines(&log)[3..],
        [
            format!("node-b started {token_b}"),
            "node-b work ended".into(),
            "node-b stopped".into(),
            format!("node-b started {token_b}"),
            "node-b work ended".into(),
            "node-b stopped".into(),
            format!("node-a started {token_a2}"),
        ]
    );

    a.stop.cancel();
    b.stop.cancel();
    within("node-a's run to end", &mut a.done)
        .await
        .unwrap()
        .unwrap();
    within("node-b's run to end", &mut b.done)
        .await
        .unwrap()
        .unwrap();
}

/// The terms' TTL in `a_candidate_of_greater_preference_takes_over`: far
/// above every wait of the test (`within`: 30 s), so a takeover at the TTL
/// (rather than a hand-over) would fail it.
const PREFER_TTL: Duration = Duration::from_secs(120);

/// An elector of preference 1 leads; one of preference 2 joins and takes
/// over by itself: without waiting for the TTL, the leader's work ended
/// and its `stopped` ran before the successor's `lead` (one shared log),
/// with a greater token. Observe named node-b as the preferred candidate in
/// a `Preferred` change with node-a still leading, and `observe` (leaders
/// only) did not repeat node-a for it.
#[tokio::test]
async fn a_candidate_of_greater_preference_takes_over() {
    let server = Server::start().await;
    let a_client = server.client().await;
    let b_client = server.client().await;
    let name = "transfer.preference";
    let log = Arc::new(Mutex::new(Vec::new()));
    let observer = Election::new(&a_client, name);
    let watching = CancellationToken::new();

    let mut a = candidate_with(&a_client, name, "node-a", log.clone(), PREFER_TTL, 1);
    let token_a = within("node-a's term", a.started.recv()).await.unwrap();
    let mut leaders = observer.observe(watching.clone());
    let mut changes = observer.observe_changes(watching.clone());
    let first = within("the current leader", leaders.recv()).await.unwrap();
    assert_eq!(first.map(|l| l.identity).as_deref(), Some("node-a"));
    // Both streams are open before node-b campaigns: a `changes` stream
    // still opening could start with node-b already preferred (in its
    // `Current` change), and no `Preferred` change would follow.
    let current = within("the changes stream's first", changes.recv())
        .await
        .unwrap();
    assert_eq!(current.kind, ChangeType::Current);
    assert_eq!(current.preferred, None);

    let mut b = candidate_with(&b_client, name, "node-b", log.clone(), PREFER_TTL, 2);
    let token_b = within("node-b's term (a hand-over, not the TTL)", b.started.recv())
        .await
        .unwrap();
    assert!(token_b > token_a, "node-b's token {token_b} <= {token_a}");
    assert_eq!(
        lines(&log)[..4],
        [
            format!("node-a started {token_a}"),
            "node-a work ended".into(),
            "node-a stopped".into(),
            format!("node-b started {token_b}"),
        ]
    );

    // The changes up to node-b's election include the PREFERRED change
    // naming it, node-a still leading.
    let mut preferred_seen = false;
    loop {
        let change = within("a change", changes.recv()).await.unwrap();
        let leader = change.leader.as_ref().map(|l| l.identity.as_str());
        if change.kind == ChangeType::Preferred
            && leader == Some("node-a")
            && change.preferred
                == Some(tenure_client::Candidate {
                    identity: "node-b".into(),
                    preference: 2,
                })
        {
            preferred_seen = true;
        }
        if change.kind == ChangeType::Elected && leader == Some("node-b") {
            break;
        }
    }
    assert!(preferred_seen, "no PREFERRED change named node-b");
    // `observe` reported node-a once (not again for the PREFERRED change),
    // then (after nobody, if the stream showed the hand-over as RESIGNED
    // then ELECTED) node-b.
    let mut seen = Vec::new();
    loop {
        let leader = within("node-b as leader", leaders.recv()).await.unwrap();
        let identity = leader.map(|l| l.identity);
        let done = identity.as_deref() == Some("node-b");
        seen.push(identity);
        if done {
            break;
        }
    }
    assert!(
        !seen.contains(&Some("node-a".to_string())),
        "observe repeated node-a: {seen:?}"
    );
    let now = observer.leader().await.unwrap().unwrap();
    assert_eq!(
        (now.identity.as_str(), now.fencing_token),
        ("node-b", token_b)
    );

    watching.cancel();
    a.stop.cancel();
    b.stop.cancel();
    within("node-a's run to end", &mut a.done)
        .await
        .unwrap()
        .unwrap();
    within("node-b's run to end", &mut b.done)
        .await
        .unwrap()
        .unwrap();
}
