//! Fair waiting on a replicated bucket: a 3-node JetStream cluster, the
//! bucket at 3 replicas, three Tenure replicas each attached to another
//! node, and many waiting Acquires and AcquireGroups racing on three
//! overlapping names through all of them.
//!
//! The question (issue 24 §3): on a clustered stream the leader checks a
//! write's expected last sequence against the messages it has *applied*,
//! and holds back in-flight writes only by their exact subject. A group's
//! batch guards each member's queue with a condition over the queue's
//! wildcard (`Nats-Expected-Last-Subject-Sequence-Subject:
//! _tenure.q.<name>.ticket.*`), so a ticket proposed but not yet applied when the
//! batch is checked might not be seen, and the group could be granted
//! ahead of a waiter queued before it.
//!
//! The test records every message of the queues (a KV watch of
//! `_tenure.q.>` from the first revision) and every grant, and judges
//! afterwards, by revision (NATS's own order):
//!
//! - a waiter granted while a ticket of another waiter with an earlier
//!   place was still live was overtaken;
//! - a group granted (its member's token) while any ticket of that member
//!   was live jumped the queue: its batch's guard must have failed;
//! - a grant without a ticket (a waiting Acquire's first try, which found
//!   the name free and nobody queued) while a ticket written a second
//!   before it was sent was still live skipped the queue.
//!
//! Free-running waiters and groups seldom meet the race's millisecond, so
//! probes provoke it: a group woken by a release, and a ticket written the
//! moment the group's batch opens (see [`probes`]). The same load on one
//! node is the control (`no_waiter_is_overtaken_on_one_node`). With
//! nats-server 2.15.1, tickets conditional on their own slot and the guard
//! a condition over the queue's wildcard, the replicated run found the
//! overtaking in about a fifth of the probe rounds (the ticket stored just
//! before the group's batch, whose guard passed; 5 to 17 overtakings a
//! run), the single node in none. A ticket is now conditional on the
//! queue's wildcard too, and the leader holds back a condition while
//! another on the same subject string is in flight: the run finds none.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use async_nats::jetstream::kv::Operation;
use futures::StreamExt;
use rand::Rng;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{AcquireGroupRequest, AcquireRequest, GroupMember, ReleaseGroupRequest};
use tenure::Config;
use tonic::transport::Channel;

/// The names waiters and groups race on (every group takes two of them).
const NAMES: [&str; 3] = ["fq.a", "fq.b", "fq.c"];
/// How long the load runs.
const LOAD: Duration = Duration::from_secs(10);
/// Waiters per Tenure replica.
const WAITERS_PER_REPLICA: usize = 3;
/// Lanes of probes (each on its own two names).
const PROBE_LANES: usize = 2;
/// Slack between a ticket's write (NATS's clock) and a plain grant's send
/// (the test's clock): a ticket written this long before a first try was
/// sent had certainly been applied (and was visible) when it read the
/// queue.
const PLAIN_SLACK_MS: u64 = 1000;

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One message of a queue slot, as the watch saw it.
#[derive(Debug, Clone)]
struct SlotMsg {
    /// The slot's key.
    key: String,
    /// Its revision.
    revision: u64,
    /// For a ticket write: its place (0 in a first write) and holder.
    ticket: Option<(u64, String)>,
    /// NATS's time of the write, ms.
    time_ms: u64,
}

/// The value of a ticket (the fields this test reads).
#[derive(serde::Deserialize)]
struct TicketValue {
    /// Its place (0 in its first write).
    place: u64,
    /// The waiter.
    holder: String,
}

/// One ticket from its first write to the message that ended it.
#[derive(Debug, Clone)]
struct Ticket {
    /// The name queued for.
    name: String,
    /// The waiter.
    holder: String,
    /// Its place.
    place: u64,
    /// The revision of the message that ended it (`None`: still live).
    end: Option<u64>,
    /// NATS's time of its first write, ms.
    time_ms: u64,
}

impl Ticket {
    /// Whether it was live at `revision` (written before, not yet ended).
    fn live_at(&self, revision: u64) -> bool {
        self.place < revision && self.end.is_none_or(|e| e > revision)
    }
}

/// One grant.
#[derive(Debug, Clone)]
struct Grant {
    /// The holder (unique per call).
    holder: String,
    /// (name, fencing token) per member; one for a single lease.
    members: Vec<(String, u64)>,
    /// Whether it was an AcquireGroup.
    group: bool,
    /// When the call was sent, ms.
    sent_ms: u64,
}

/// The queue slot's lease name of a key `_tenure.q.<name>.ticket.<slot>`.
fn slot_name(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("_tenure.q.")?;
    let (name, slot) = rest.rsplit_once('.')?;
    let name = name.strip_suffix(".ticket")?;
    slot.parse::<usize>().ok().map(|_| name)
}

/// The tickets from the slots' messages, in revision order.
fn tickets(msgs: &[SlotMsg]) -> Vec<Ticket> {
    let mut by_key: BTreeMap<&str, Vec<&SlotMsg>> = BTreeMap::new();
    for m in msgs {
        by_key.entry(&m.key).or_default().push(m);
    }
    let mut out = Vec::new();
    for (key, mut list) in by_key {
        let Some(name) = slot_name(key) else { continue };
        list.sort_by_key(|m| m.revision);
        let mut open: Option<Ticket> = None;
        for m in list {
            match &m.ticket {
                // A refresh keeps the place: the same ticket.
                Some((place, _))
                    if *place != 0 && open.as_ref().is_some_and(|t| t.place == *place) => {}
                Some((place, holder)) => {
                    if let Some(mut t) = open.take() {
                        t.end = Some(m.revision);
                        out.push(t);
                    }
                    open = Some(Ticket {
                        name: name.to_string(),
                        holder: holder.clone(),
                        place: if *place == 0 { m.revision } else { *place },
                        end: None,
                        time_ms: m.time_ms,
                    });
                }
                None => {
                    if let Some(mut t) = open.take() {
                        t.end = Some(m.revision);
                        out.push(t);
                    }
                }
            }
        }
        out.extend(open);
    }
    out
}

/// The overtakings in `grants` given the queues' `tickets`, explained.
fn overtakings(grants: &[Grant], tickets: &[Ticket]) -> Vec<String> {
    let mut own: HashMap<(&str, &str), u64> = HashMap::new();
    for t in tickets {
        let p = own.entry((&t.name, &t.holder)).or_insert(t.place);
        *p = (*p).min(t.place);
    }
    // A waiter granted stops waiting there, whenever its ticket's delete
    // lands.
    let mut granted: HashMap<(&str, &str), u64> = HashMap::new();
    for g in grants {
        for (name, token) in &g.members {
            granted.insert((name, &g.holder), *token);
        }
    }
    let mut out = Vec::new();
    for g in grants {
        for (name, token) in &g.members {
            let mine = own.get(&(name.as_str(), g.holder.as_str())).copied();
            for t in tickets
                .iter()
                .filter(|t| t.name == *name && t.holder != g.holder && t.live_at(*token))
                .filter(|t| {
                    granted
                        .get(&(t.name.as_str(), t.holder.as_str()))
                        .is_none_or(|at| at > token)
                })
            {
                let why = if g.group {
                    Some("a group was granted while a waiter was queued (its queue guard passed)")
                } else {
                    match mine {
                        Some(place) if t.place < place => {
                            Some("a waiter was granted ahead of one queued before it")
                        }
                        Some(_) => None,
                        None if t.time_ms + PLAIN_SLACK_MS < g.sent_ms => {
                            Some("an Acquire without a ticket was granted ahead of a queued waiter")
                        }
                        None => None,
                    }
                };
                if let Some(why) = why {
                    out.push(format!(
                        "{name}: {why}: {} got token {token} ({}), while {} (place {}, ended at {:?}) waited",
                        g.holder,
                        match mine {
                            Some(p) => format!("its place {p}"),
                            None => "no ticket".into(),
                        },
                        t.holder,
                        t.place,
                        t.end
                    ));
                }
            }
        }
    }
    out
}

/// One waiting Acquire of `name` by `holder`, held `hold` ms once granted,
/// then released.
async fn one_waiter(
    mut client: LeaseServiceClient<Channel>,
    name: &str,
    holder: String,
    hold: u64,
    grants: Arc<Mutex<Vec<Grant>>>,
) {
    let sent_ms = now_ms();
    let req = AcquireRequest {
        wait: Some(secs(20)),
        ..acquire_req(name, &holder, 10)
    };
    let resp = match client.acquire(req).await {
        Ok(resp) => resp.into_inner(),
        Err(status) => panic!("{holder}: Acquire {name}: {status:?}"),
    };
    let lease = resp.lease.expect("a lease");
    grants.lock().unwrap().push(Grant {
        holder: holder.clone(),
        members: vec![(name.to_string(), lease.fencing_token)],
        group: false,
        sent_ms,
    });
    tokio::time::sleep(Duration::from_millis(hold)).await;
    client
        .release(release_req(name, lease.revision, resp.lease_key))
        .await
        .expect("release");
}

/// One waiting AcquireGroup of `names` by `holder`, held `hold` ms once
/// granted, then released.
async fn one_group(
    mut client: LeaseServiceClient<Channel>,
    names: Vec<String>,
    holder: String,
    hold: u64,
    grants: Arc<Mutex<Vec<Grant>>>,
) {
    let sent_ms = now_ms();
    let req = AcquireGroupRequest {
        names: names.clone(),
        holder: holder.clone(),
        ttl: Some(secs(10)),
        wait: Some(secs(20)),
        ..Default::default()
    };
    let resp = match client.acquire_group(req).await {
        Ok(resp) => resp.into_inner(),
        Err(status) => panic!("{holder}: AcquireGroup {names:?}: {status:?}"),
    };
    grants.lock().unwrap().push(Grant {
        holder: holder.clone(),
        members: resp
            .leases
            .iter()
            .map(|l| (l.name.clone(), l.fencing_token))
            .collect(),
        group: true,
        sent_ms,
    });
    tokio::time::sleep(Duration::from_millis(hold)).await;
    client
        .release_group(ReleaseGroupRequest {
            members: resp
                .leases
                .iter()
                .map(|l| GroupMember {
                    name: l.name.clone(),
                    expected_revision: l.revision,
                })
                .collect(),
            lease_key: resp.lease_key,
        })
        .await
        .expect("release the group");
}

/// A waiter: Acquires random names with a long wait under a new holder
/// name each time, holds each grant a few ms, releases it.
async fn waiter(
    client: LeaseServiceClient<Channel>,
    id: String,
    until: tokio::time::Instant,
    grants: Arc<Mutex<Vec<Grant>>>,
) {
    let mut n = 0;
    while tokio::time::Instant::now() < until {
        n += 1;
        let (name, hold, pause) = {
            let mut rng = rand::rng();
            (
                NAMES[rng.random_range(0..NAMES.len())],
                rng.random_range(0..15),
                rng.random_range(0..40),
            )
        };
        one_waiter(
            client.clone(),
            name,
            format!("{id}-{n}"),
            hold,
            grants.clone(),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// A group: AcquireGroups two random names with a long wait, holds the
/// group a few ms, releases it.
async fn grouper(
    client: LeaseServiceClient<Channel>,
    id: String,
    until: tokio::time::Instant,
    grants: Arc<Mutex<Vec<Grant>>>,
) {
    let mut n = 0;
    while tokio::time::Instant::now() < until {
        n += 1;
        let (names, hold, pause) = {
            let mut rng = rand::rng();
            let skip = rng.random_range(0..NAMES.len());
            let names: Vec<String> = NAMES
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .map(|(_, n)| n.to_string())
                .collect();
            (names, rng.random_range(0..15), rng.random_range(0..20))
        };
        one_group(
            client.clone(),
            names,
            format!("{id}-{n}"),
            hold,
            grants.clone(),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// Probes, round after round, on `fq.d<lane>` and `fq.e<lane>`: a holder
/// takes `fq.d<lane>` through one replica while a group waits for both
/// names through another; the holder releases, the woken group reads the
/// queues and sends its batch, whose first message (the record of
/// `fq.d<lane>`, a request: the rest, its guard among them, follows its
/// reply) this probe sees on a plain NATS subscription, told from the
/// holder's own writes of the record by its `Nats-Batch-Id` header. At once, or a millisecond
/// later, it writes a ticket straight into that queue (a slot no replica
/// uses, through the stream leader's node, as a waiter's replica would):
/// the ticket reaches the leader while the batch is open, and is proposed
/// before the batch's commit is checked. Whether that check sees the
/// ticket in flight is the question: the group must then fail its guard
/// and wait for the ticket, or have been granted before it. The ticket
/// stays until the group is granted (or 100 ms), then is deleted.
async fn probes(
    lane: usize,
    clients: Vec<LeaseServiceClient<Channel>>,
    (nats, bucket): (async_nats::Client, String),
    until: tokio::time::Instant,
    grants: Arc<Mutex<Vec<Grant>>>,
) {
    let kv = async_nats::jetstream::new(nats.clone())
        .get_key_value(&bucket)
        .await
        .expect("the bucket");
    let (d, e) = (format!("fq.d{lane}"), format!("fq.e{lane}"));
    let slot = format!("_tenure.q.{d}.ticket.{}", 900 + lane);
    // The queue's last revision, as a watch of its keys shows it: what the
    // probe's ticket names, as a waiter's does.
    let last = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut queue = kv
        .watch(format!("_tenure.q.{d}.ticket.*"))
        .await
        .expect("watch the queue");
    let follower = {
        let last = last.clone();
        tokio::spawn(async move {
            while let Some(Ok(entry)) = queue.next().await {
                last.fetch_max(entry.revision, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    let records = nats
        .subscribe(format!("$KV.{bucket}._tenure.q.{d}.lease.holder"))
        .await
        .expect("subscribe to the record");
    let mut batches = records
        .filter(|msg| {
            let batched = msg
                .headers
                .as_ref()
                .is_some_and(|h| h.get("Nats-Batch-Id").is_some());
            std::future::ready(batched)
        })
        .boxed();
    let mut n = 0;
    while tokio::time::Instant::now() < until {
        n += 1;
        let delay = rand::rng().random_range(0..3u64);
        let mut x = clients[lane % 3].clone();
        let holder = format!("x{lane}-{n}");
        let sent_ms = now_ms();
        let resp = x
            .acquire(AcquireRequest {
                wait: Some(secs(20)),
                ..acquire_req(&d, &holder, 10)
            })
            .await
            .expect("the holder's Acquire")
            .into_inner();
        let lease = resp.lease.expect("a lease");
        grants.lock().unwrap().push(Grant {
            holder,
            members: vec![(d.clone(), lease.fencing_token)],
            group: false,
            sent_ms,
        });
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let g = {
            let (client, grants) = (clients[(lane + 1) % 3].clone(), grants.clone());
            let names = vec![d.clone(), e.clone()];
            tokio::spawn(async move {
                one_group(client, names, format!("pg{lane}-{n}"), 0, grants).await;
                let _ = done_tx.send(());
            })
        };
        // The group is waiting by now (its first try was refused).
        tokio::time::sleep(Duration::from_millis(15)).await;
        // Batches of earlier rounds.
        while let Ok(Some(_)) = tokio::time::timeout(Duration::ZERO, batches.next()).await {}
        x.release(release_req(&d, lease.revision, resp.lease_key))
            .await
            .expect("the holder's release");
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(2), batches.next()).await {
            match delay {
                0 => {}
                1 => tokio::task::yield_now().await,
                _ => tokio::time::sleep(Duration::from_millis(1)).await,
            }
            let value = format!(r#"{{"place":0,"holder":"raw{lane}-{n}"}}"#);
            let expected = last.load(std::sync::atomic::Ordering::SeqCst);
            write_ticket(&nats, &bucket, &d, &slot, value, expected).await;
            let _ = tokio::time::timeout(Duration::from_millis(100), done_rx).await;
            kv.delete(&slot).await.expect("delete the ticket");
        }
        // One waiting Acquire after each round, so that its grants are
        // judged beside the group's.
        let kick = format!("k{lane}-{n}");
        one_waiter(x.clone(), &d, kick, 0, grants.clone()).await;
        g.await.expect("the probe's group");
    }
    follower.abort();
}

/// Writes a ticket into `slot` of `name`'s queue the way a waiting Acquire
/// does: one put conditional on the queue's last revision being `expected`
/// (`Nats-Expected-Last-Subject-Sequence-Subject` over the queue's keys).
/// A queue changed since (the group's batch landed first) refuses it.
async fn write_ticket(
    nats: &async_nats::Client,
    bucket: &str,
    name: &str,
    slot: &str,
    value: String,
    expected: u64,
) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        "Nats-Expected-Last-Subject-Sequence",
        expected.to_string().as_str(),
    );
    headers.insert(
        "Nats-Expected-Last-Subject-Sequence-Subject",
        format!("$KV.{bucket}._tenure.q.{name}.ticket.*").as_str(),
    );
    headers.insert("Nats-TTL", "5");
    let reply = nats
        .request_with_headers(format!("$KV.{bucket}.{slot}"), headers, value.into())
        .await
        .expect("the ticket's write");
    let ack: serde_json::Value =
        serde_json::from_slice(&reply.payload).expect("an acknowledgement");
    // Stored, or refused as a lost race; nothing else.
    let code = ack["error"]["err_code"].as_u64();
    assert!(
        ack.get("seq").is_some() || matches!(code, Some(10071 | 10164)),
        "the ticket write failed: {ack}"
    );
}

/// One run at a time, and never beside a test that counts CAS conflicts:
/// a 3-node cluster and three replicas load the 2-core machine enough, and
/// the races they run add to the process-wide conflict counter that
/// `semaphore.rs` and `fifo.rs` assert does not move (their runs beside
/// these failed with 15-36 conflicts).
use crate::common::CAS_SERIAL as ONE_AT_A_TIME;

/// What one run found.
struct Judged {
    /// The overtakings, explained.
    overtakings: Vec<String>,
    /// Waiters granted through the queue (their ticket).
    queued_grants: usize,
    /// Groups granted.
    groups: usize,
    /// Probe rounds whose ticket reached the bucket before the group's
    /// grant (the group waited for it, or the race hit).
    probes_before: usize,
}

/// NATS under the run: one node, or a 3-node cluster.
enum Backend {
    /// One nats-server; the bucket at 1 replica.
    One(Nats),
    /// A 3-node cluster; the bucket at 3 replicas.
    Three(NatsCluster),
}

impl Backend {
    /// The URL of node `i` (every replica's own node on the cluster).
    fn url(&self, i: usize) -> String {
        match self {
            Backend::One(n) => n.url(),
            Backend::Three(c) => c.url(i % c.len()),
        }
    }
}

/// Runs the load (waiters and groups on three names, probes on two lanes
/// of their own) through three replicas for [`LOAD`], and judges it.
async fn race(backend: &Backend) -> Judged {
    let mut config = Config::for_nats(&backend.url(0));
    config.replicas = match backend {
        Backend::One(_) => 1,
        Backend::Three(_) => 3,
    };
    config.metrics_listen = None;
    let urls: Vec<String> = (0..3).map(|node| backend.url(node)).collect();
    let (running, clients) = replicas_on(&config, &urls).await;

    // Every message of the queues, from the first revision on.
    let stream_name = format!("KV_{}", config.bucket);
    let (js, leader) = match backend {
        Backend::One(n) => (n.jetstream().await, 0),
        Backend::Three(c) => {
            let js = c.jetstream().await;
            let leader = c
                .leader(&js, &stream_name)
                .await
                .and_then(|l| c.index_of(&l))
                .expect("the bucket's leader");
            (js, leader)
        }
    };
    let kv = js.get_key_value(&config.bucket).await.unwrap();
    let mut watch = kv.watch_from_revision("_tenure.q.>", 1).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::<SlotMsg>::new()));
    let last_seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watcher = {
        let (seen, last_seen) = (seen.clone(), last_seen.clone());
        tokio::spawn(async move {
            while let Some(Ok(entry)) = watch.next().await {
                last_seen.store(entry.revision, std::sync::atomic::Ordering::SeqCst);
                let ticket = match entry.operation {
                    Operation::Put => serde_json::from_slice::<TicketValue>(&entry.value)
                        .ok()
                        .map(|t| (t.place, t.holder)),
                    _ => None,
                };
                let time_ms = (entry.created.unix_timestamp_nanos() / 1_000_000) as u64;
                seen.lock().unwrap().push(SlotMsg {
                    key: entry.key,
                    revision: entry.revision,
                    ticket,
                    time_ms,
                });
            }
        })
    };

    let grants = Arc::new(Mutex::new(Vec::new()));
    let until = tokio::time::Instant::now() + LOAD;
    let mut tasks = Vec::new();
    for (r, client) in clients.iter().enumerate() {
        for w in 0..WAITERS_PER_REPLICA {
            tasks.push(tokio::spawn(waiter(
                client.clone(),
                format!("w{r}.{w}"),
                until,
                grants.clone(),
            )));
        }
        tasks.push(tokio::spawn(grouper(
            client.clone(),
            format!("g{r}"),
            until,
            grants.clone(),
        )));
    }
    // The probes write through the stream leader's node.
    let at_leader = async_nats::connect(backend.url(leader))
        .await
        .expect("connect to the leader's node");
    for lane in 0..PROBE_LANES {
        tasks.push(tokio::spawn(probes(
            lane,
            clients.clone(),
            (at_leader.clone(), config.bucket.clone()),
            until,
            grants.clone(),
        )));
    }
    within("the load to finish", async {
        for t in tasks {
            t.await.expect("a client task");
        }
    })
    .await;

    // Every queue message up to now: a marker under the watched keys (no
    // slot, so no ticket) written after the load, seen by the watch.
    let marker = kv
        .put("_tenure.q.end.marker", "end".into())
        .await
        .expect("write the marker");
    within("the watch to catch up", async {
        while last_seen.load(std::sync::atomic::Ordering::SeqCst) < marker {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    watcher.abort();
    drop(running);

    let grants = grants.lock().unwrap().clone();
    let msgs = seen.lock().unwrap().clone();
    let tickets = tickets(&msgs);
    let groups = grants.iter().filter(|g| g.group).count();
    let queued_grants = grants
        .iter()
        .filter(|g| {
            !g.group
                && tickets
                    .iter()
                    .any(|t| t.holder == g.holder && t.name == g.members[0].0)
        })
        .count();
    // The probes' outcomes: the ticket reached the bucket before the
    // group's grant (the group waited for it, or the race hit), or after
    // (by how many revisions).
    let (mut before, mut after) = (0, BTreeMap::<u64, usize>::new());
    for g in grants.iter().filter(|g| g.holder.starts_with("pg")) {
        let (lane, n) = g.holder[2..].split_once('-').unwrap();
        let token = g
            .members
            .iter()
            .find(|(m, _)| m.starts_with("fq.d"))
            .map_or(0, |m| m.1);
        let raw = format!("raw{lane}-{n}");
        if let Some(t) = tickets.iter().find(|t| t.holder == raw) {
            if t.place < token {
                before += 1;
            } else {
                *after.entry((t.place - token).min(10)).or_default() += 1;
            }
        }
    }
    let overtakings = overtakings(&grants, &tickets);
    eprintln!(
        "fifo_r3 ({} node(s)): {} grants ({queued_grants} through a ticket, {groups} groups), {} tickets, {} overtaken; probes: ticket before the group's grant {before}, after it {after:?} (revisions after; 10: 10 or more)",
        config.replicas,
        grants.len(),
        tickets.len(),
        overtakings.len()
    );
    Judged {
        overtakings,
        queued_grants,
        groups,
        probes_before: before,
    }
}

/// Asserts that `j` found no overtaking and judged enough.
fn assert_fair(j: &Judged) {
    assert!(
        j.overtakings.is_empty(),
        "{} overtakings:\n{}",
        j.overtakings.len(),
        j.overtakings.join("\n")
    );
    // Enough was judged for the verdict to mean something.
    assert!(
        j.queued_grants >= 50,
        "only {} waiters were granted through the queue",
        j.queued_grants
    );
    assert!(j.groups >= 20, "only {} groups were granted", j.groups);
    assert!(
        j.probes_before >= 10,
        "only {} probe tickets reached the queue before the group's grant",
        j.probes_before
    );
}

/// The control: on one node (the stream applies each write before it
/// checks the next) the same load and probes never overtake a waiter, so
/// what the replicated run finds is the replication's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_waiter_is_overtaken_on_one_node() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let backend = Backend::One(Nats::start().await);
    assert_fair(&race(&backend).await);
}

/// Waiting Acquires and AcquireGroups on three overlapping names, and the
/// probes, through three replicas on three nodes of an R3 bucket: no
/// waiter is overtaken, by ticket place, and no group is granted while a
/// member has a queued waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_keep_their_place_on_a_replicated_bucket() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let backend = Backend::Three(NatsCluster::start(3).await);
    assert_fair(&race(&backend).await);
}

#[test]
fn the_judge_reports_each_kind_of_overtaking() {
    let slot = |key: &str, revision, ticket: Option<(u64, &str)>, time_ms| SlotMsg {
        key: key.into(),
        revision,
        ticket: ticket.map(|(p, h)| (p, h.to_string())),
        time_ms,
    };
    // a queued at 10 (refreshed at 14, deleted at 30); b queued at 12,
    // deleted at 21.
    let msgs = vec![
        slot("_tenure.q.n.ticket.0", 10, Some((0, "a")), 1000),
        slot("_tenure.q.n.ticket.1", 12, Some((0, "b")), 1001),
        slot("_tenure.q.n.ticket.0", 14, Some((10, "a")), 3000),
        slot("_tenure.q.n.ticket.1", 21, None, 3100),
        slot("_tenure.q.n.ticket.0", 30, None, 3200),
    ];
    let ts = tickets(&msgs);
    assert_eq!(ts.len(), 2, "{ts:?}");
    let grant = |holder: &str, token, group, sent_ms| Grant {
        holder: holder.into(),
        members: vec![("n".into(), token)],
        group,
        sent_ms,
    };
    // a first (its ticket live at 20, b's too), then b: in order.
    assert!(overtakings(
        &[grant("a", 20, false, 900), grant("b", 25, false, 950)],
        &ts
    )
    .is_empty());
    // b granted at 20 while a (place 10) still waited: overtaken.
    assert_eq!(overtakings(&[grant("b", 20, false, 950)], &ts).len(), 1);
    // A group at 31 (every ticket gone) is fine; at 20 it jumped both.
    assert!(overtakings(&[grant("g", 31, true, 3000)], &ts).is_empty());
    assert_eq!(overtakings(&[grant("g", 20, true, 3000)], &ts).len(), 2);
    // A grant without a ticket at 25 (a live): sent just after a queued,
    // it may have read the queue first; sent seconds later, it skipped it.
    assert!(overtakings(&[grant("p", 25, false, 1100)], &ts).is_empty());
    assert_eq!(overtakings(&[grant("p", 25, false, 2500)], &ts).len(), 1);
}
