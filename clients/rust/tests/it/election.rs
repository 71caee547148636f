//! Leader election helpers against a real Tenure: hand-over when the leader
//! stops, a revoked leader stops and campaigns again, proclaim and leader.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{within, Server};
use tenure_client::{ChangeType, Client, Election, Leader, LeaderChange, Reason};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const TTL: Duration = Duration::from_secs(10);

/// What one participant's callbacks saw.
struct Participant {
    started: mpsc::UnboundedReceiver<u64>,
    stopped: mpsc::UnboundedReceiver<()>,
    stop: CancellationToken,
    done: tokio::task::JoinHandle<Result<(), tenure_client::Error>>,
}

/// Starts `identity` in election `name`; `leading` counts the participants
/// inside their lead callback, `max` the most at once.
fn participate(
    client: &Client,
    name: &str,
    identity: &'static str,
    leading: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
) -> Participant {
    let (started_tx, started) = mpsc::unbounded_channel();
    let (stopped_tx, stopped) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let election = Election::new(client, name);
    let token = stop.clone();
    let done = tokio::spawn(async move {
        election
            .run(
                identity,
                &format!("{identity}:5432"),
                TTL,
                token,
                move |term, ended| {
                    let started_tx = started_tx.clone();
                    let leading = leading.clone();
                    let max = max.clone();
                    async move {
                        let now = leading.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(now, Ordering::SeqCst);
                        started_tx.send(term.fencing_token()).unwrap();
                        ended.cancelled().await;
                        leading.fetch_sub(1, Ordering::SeqCst);
                    }
                },
                move || stopped_tx.send(()).unwrap(),
            )
            .await
    });
    Participant {
        started,
        stopped,
        stop,
        done,
    }
}

async fn leader_is(rx: &mut mpsc::Receiver<Option<Leader>>, identity: &str) -> Leader {
    within(&format!("{identity} as leader"), async {
        loop {
            if let Some(Some(l)) = rx.recv().await {
                if l.identity == identity {
                    return l;
                }
            }
        }
    })
    .await
}

#[tokio::test]
async fn hands_over_when_the_leader_stops() {
    let server = Server::start().await;
    let a_client = server.client().await;
    let b_client = server.client().await;
    let name = "election.handover";
    let (leading, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let observer = CancellationToken::new();
    let mut leaders = Election::new(&b_client, name).observe(observer.clone());

    let mut a = participate(&a_client, name, "node-a", leading.clone(), max.clone());
    let token_a = within("node-a's term", a.started.recv()).await.unwrap();
    let seen = leader_is(&mut leaders, "node-a").await;
    assert_eq!(seen.value, "node-a:5432");
    assert_eq!(seen.fencing_token, token_a);
    let mut b = participate(&b_client, name, "node-b", leading.clone(), max.clone());
    let now = Election::new(&b_client, name).leader().await.unwrap();
    assert_eq!(now.map(|l| l.identity).as_deref(), Some("node-a"));

    a.stop.cancel();
    within("node-a stopped", a.stopped.recv()).await.unwrap();
    within("node-a's run to end", &mut a.done)
        .await
        .unwrap()
        .unwrap();
    let token_b = within("node-b's term", b.started.recv()).await.unwrap();
    assert!(token_b > token_a, "{token_b} is not above {token_a}");
    leader_is(&mut leaders, "node-b").await;
    b.stop.cancel();
    within("node-b stopped", b.stopped.recv()).await.unwrap();
    within("node-b's run to end", &mut b.done)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(max.load(Ordering::SeqCst), 1);
    assert_eq!(Election::new(&a_client, name).leader().await.unwrap(), None);
    observer.cancel();
}

#[tokio::test]
async fn a_revoked_leader_stops_and_campaigns_again() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "election.revoked";
    let zero = || Arc::new(AtomicUsize::new(0));
    let mut p = participate(&client, name, "node-a", zero(), zero());
    let first = within("first term", p.started.recv()).await.unwrap();
    client
        .revoke(name, "test", Some(first))
        .await
        .expect("revoke");
    within("stopped after revoke", p.stopped.recv())
        .await
        .unwrap();
    let second = within("second term", p.started.recv()).await.unwrap();
    assert!(second > first);
    p.stop.cancel();
    within("stopped after cancel", p.stopped.recv())
        .await
        .unwrap();
    within("run to end", &mut p.done).await.unwrap().unwrap();
}

#[tokio::test]
async fn proclaim_changes_the_value_without_a_new_term() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "election.proclaim";
    let election = Election::new(&client, name);
    let term = election
        .campaign("node-a", "10.0.0.1:5432", TTL, Duration::ZERO)
        .await
        .unwrap();
    election.proclaim(&term, "10.0.0.1:6432").await.unwrap();
    let now = election.leader().await.unwrap().unwrap();
    assert_eq!(now.value, "10.0.0.1:6432");
    assert_eq!(now.fencing_token, term.fencing_token());
    // The session renews from the proclaimed revision.
    term.renew().await.expect("renew after proclaim");
    client.revoke(name, "test", None).await.unwrap();
    within("loss after revoke", term.lost().cancelled()).await;
    let err = election.proclaim(&term, "x").await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseNotHeld);
}

async fn next_change(rx: &mut mpsc::Receiver<LeaderChange>) -> LeaderChange {
    within("a change", rx.recv()).await.expect("a change")
}

/// `observe_changes` gives every change with its kind (a `Missed` one,
/// which a client cannot provoke, comes the same way) and the term that
/// ended.
#[tokio::test]
async fn observe_changes_reports_each_change_with_its_kind() {
    let server = Server::start().await;
    let client = server.client().await;
    let name = "election.changes";
    let election = Election::new(&client, name);
    let stop = CancellationToken::new();
    let mut changes = election.observe_changes(stop.clone());
    let first: LeaderChange = next_change(&mut changes).await;
    assert_eq!((first.kind, first.leader), (ChangeType::Current, None));
    let term = election
        .campaign("node-a", "10.0.0.1:5432", TTL, Duration::ZERO)
        .await
        .unwrap();
    let elected = next_change(&mut changes).await;
    assert_eq!(elected.kind, ChangeType::Elected);
    assert_eq!(
        elected.leader,
        Some(Leader {
            identity: "node-a".into(),
            value: "10.0.0.1:5432".into(),
            fencing_token: term.fencing_token(),
        })
    );
    let token = term.fencing_token();
    assert!(term.release().await.unwrap());
    let resigned = next_change(&mut changes).await;
    assert_eq!(resigned.kind, ChangeType::Resigned);
    assert_eq!(resigned.leader, None);
    assert_eq!(
        (
            resigned.ended_identity.as_str(),
            resigned.ended_fencing_token
        ),
        ("node-a", token)
    );
    stop.cancel();
}
