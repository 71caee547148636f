//! Workloads 1 to 5 of issue 5 (3 made fair-aware for issue 12), 7 and 9
//! (renewals over the KeepAlive stream, issue 14) and 8 (semaphores, issue
//! 13). Each function does one run against one system and returns its
//! figures; `main` runs them alternating between systems and over several
//! runs.
//!
//! Latency is measured on this process's monotonic clock around each call.
//! Where two events happen in different tasks (a release and the next
//! acquire, a write and its watch event) both instants come from the same
//! clock, so no cross-machine skew enters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{
    keep_alive_result::Outcome, EventType, KeepAliveEntry, KeepAliveRequest, RenewRequest,
    WatchLeaseRequest,
};
use tonic::transport::Channel;

use crate::procs::{cpu_time, rss_bytes, R};
use crate::stats::pct_ms;
use crate::systems::{Held, Session, Sys, Tenure};

/// TTL of holdings that must not expire during a measurement.
const LONG_TTL: u64 = 60;

/// TTL of workload 9's Tenure leases: long enough for all 10,000 to be
/// taken before the first is renewed.
const SWEEP_TTL: u64 = 900;

/// Throughput and latency of one run.
pub struct Throughput {
    /// Operations per second over the run.
    pub per_s: f64,
    /// Median latency, ms.
    pub p50: f64,
    /// 99th percentile latency, ms.
    pub p99: f64,
    /// CPU time per 1,000 operations, ms, of each process the caller
    /// named (same order); empty when it named none.
    pub cpu_ms_per_1k: Vec<f64>,
}

/// CPU time of some processes (from `/proc/<pid>/stat`) since it started.
pub(crate) struct CpuMeter {
    /// The processes and their CPU time at the start.
    start: Vec<(u32, Duration)>,
}

impl CpuMeter {
    /// Starts measuring `pids`.
    pub(crate) fn start(pids: &[u32]) -> CpuMeter {
        CpuMeter {
            start: pids.iter().map(|&p| (p, cpu_time(p))).collect(),
        }
    }

    /// Each process's CPU time since the start per 1,000 of `ops`, in ms.
    pub(crate) fn per_1k(&self, ops: usize) -> Vec<f64> {
        self.start
            .iter()
            .map(|&(pid, t0)| {
                let used = cpu_time(pid).saturating_sub(t0).as_secs_f64() * 1000.0;
                used * 1000.0 / ops.max(1) as f64
            })
            .collect()
    }
}

/// Takes one holding per task: `c` names `<tag>.<i>`, each with its own
/// session of `ttl_s`, 64 at a time. This is setup, not measured: an
/// Acquire refused as unavailable (Tenure under load: JetStream's bound on
/// open atomic batches) is asked again, up to 5 times, as a client would.
async fn hold_many(sys: &Arc<Sys>, tag: &str, c: usize, ttl_s: u64) -> R<Vec<(Held, Session)>> {
    futures::stream::iter(0..c)
        .map(|i| {
            let sys = sys.clone();
            let name = format!("{tag}.{i}");
            async move {
                let s = sys.session(ttl_s).await?;
                let mut tries = 0;
                loop {
                    match sys.acquire(&name, &s, false).await {
                        Ok(h) => return Ok((h, s)),
                        Err(e) if e.contains("Unavailable") && tries < 5 => {
                            tries += 1;
                            tokio::time::sleep(Duration::from_millis(100 * tries)).await;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<R<_>>>()
        .await
        .into_iter()
        .collect()
}

/// Releases holdings and ends their sessions (not timed).
async fn let_go(sys: &Arc<Sys>, held: Vec<(Held, Session)>) {
    futures::stream::iter(held)
        .map(|(h, s)| {
            let sys = sys.clone();
            async move {
                let _ = sys.release(&h).await;
                let _ = sys.end_session(s).await;
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
}

/// Sums per-task latencies into a throughput figure.
pub(crate) fn throughput(mut lat: Vec<Duration>, elapsed: Duration) -> Throughput {
    Throughput {
        per_s: lat.len() as f64 / elapsed.as_secs_f64(),
        p50: pct_ms(&mut lat, 50.0),
        p99: pct_ms(&mut lat, 99.0),
        cpu_ms_per_1k: Vec::new(),
    }
}

/// Joins the tasks, failing on the first error.
pub(crate) async fn join<T>(tasks: Vec<tokio::task::JoinHandle<R<T>>>) -> R<Vec<T>> {
    let mut out = Vec::with_capacity(tasks.len());
    let mut first_err = None;
    for t in tasks {
        match t.await {
            Ok(Ok(v)) => out.push(v),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(format!("task failed: {e}"));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Workload 1: `c` tasks, one lease each, renewing back to back for `dur`.
/// The CPU time of `pids` (the system's server processes) is measured
/// over the timed phase.
pub async fn renew(
    sys: &Arc<Sys>,
    tag: &str,
    c: usize,
    dur: Duration,
    pids: &[u32],
) -> R<Throughput> {
    let held = hold_many(sys, tag, c, LONG_TTL).await?;
    let cpu = CpuMeter::start(pids);
    let start = Instant::now();
    let end = start + dur;
    let tasks: Vec<_> = held
        .into_iter()
        .map(|(mut h, s)| {
            let sys = sys.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < end {
                    let t = Instant::now();
                    if let Err(e) = sys.renew(&mut h, &s).await {
                        let_go(&sys, vec![(h, s)]).await;
                        return Err(e);
                    }
                    lat.push(t.elapsed());
                }
                Ok((h, s, lat))
            })
        })
        .collect();
    let done = join(tasks).await?;
    let elapsed = start.elapsed();
    let mut lat = Vec::new();
    let mut held = Vec::new();
    for (h, s, l) in done {
        lat.extend(l);
        held.push((h, s));
    }
    let cpu_ms_per_1k = cpu.per_1k(lat.len());
    let_go(sys, held).await;
    Ok(Throughput {
        cpu_ms_per_1k,
        ..throughput(lat, elapsed)
    })
}

/// Workload 7 (Tenure): `c` clients, each with its own KeepAlive stream
/// (over the shared connections) and `per` leases, each sending one message
/// renewing all of its leases and awaiting its response, back to back for
/// `dur`. The rate counts renewals; the latency is one message's round
/// trip. (The other systems run [`renew`] with `c * per` tasks instead.)
/// The CPU time of `pids` is measured over the timed phase.
pub async fn keepalive(
    sys: &Arc<Sys>,
    t: &Tenure,
    tag: &str,
    (c, per): (usize, usize),
    dur: Duration,
    pids: &[u32],
) -> R<Throughput> {
    let mut held = hold_many(sys, tag, c * per, LONG_TTL).await?;
    let mut groups = Vec::new();
    while !held.is_empty() {
        let rest = held.split_off(per.min(held.len()));
        groups.push(std::mem::replace(&mut held, rest));
    }
    let mut streams = Vec::new();
    for _ in 0..groups.len() {
        let (tx, rx) = tokio::sync::mpsc::channel::<KeepAliveRequest>(1);
        let requests =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        let responses = t
            .client()
            .keep_alive(requests)
            .await
            .map_err(|s| format!("KeepAlive: {:?} {}", s.code(), s.message()))?
            .into_inner();
        streams.push((tx, responses));
    }
    let cpu = CpuMeter::start(pids);
    let start = Instant::now();
    let end = start + dur;
    let tasks: Vec<_> = groups
        .into_iter()
        .zip(streams)
        .map(|(mut group, (tx, mut responses))| {
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut renewed = 0usize;
                let mut failure = None;
                while Instant::now() < end && failure.is_none() {
                    let entries = group
                        .iter()
                        .enumerate()
                        .map(|(i, (h, _))| KeepAliveEntry {
                            id: i as u64,
                            name: h.name.clone(),
                            expected_revision: h.rev,
                            lease_key: h.key.clone(),
                            ttl: None,
                            slot: 0,
                        })
                        .collect();
                    let t0 = Instant::now();
                    if tx.send(KeepAliveRequest { entries }).await.is_err() {
                        failure = Some("KeepAlive: the stream closed".to_string());
                        break;
                    }
                    let response = match responses.message().await {
                        Ok(Some(r)) => r,
                        Ok(None) => {
                            failure = Some("KeepAlive: the stream ended".into());
                            break;
                        }
                        Err(s) => {
                            failure = Some(format!("KeepAlive: {:?} {}", s.code(), s.message()));
                            break;
                        }
                    };
                    lat.push(t0.elapsed());
                    for r in response.results {
                        match r.outcome {
                            Some(Outcome::Lease(l)) => {
                                group[r.id as usize].0.rev = l.revision;
                                renewed += 1;
                            }
                            other => {
                                failure = Some(format!("KeepAlive entry: {other:?}"));
                            }
                        }
                    }
                }
                drop(tx);
                Ok((group, lat, renewed, failure))
            })
        })
        .collect();
    let done = join(tasks).await?;
    let elapsed = start.elapsed();
    let mut lat = Vec::new();
    let mut renewed = 0;
    let mut held = Vec::new();
    let mut failure = None;
    for (group, l, n, f) in done {
        lat.extend(l);
        renewed += n;
        held.extend(group);
        failure = failure.or(f);
    }
    let cpu_ms_per_1k = cpu.per_1k(renewed);
    let_go(sys, held).await;
    if let Some(f) = failure {
        return Err(f);
    }
    Ok(Throughput {
        per_s: renewed as f64 / elapsed.as_secs_f64(),
        p50: pct_ms(&mut lat, 50.0),
        p99: pct_ms(&mut lat, 99.0),
        cpu_ms_per_1k,
    })
}

/// Figures of one run of workload 9.
pub struct Sweeps {
    /// Renewals per second, latency of one message's round trip, and CPU
    /// per 1,000 renewals of each named process.
    pub t: Throughput,
    /// Median time to renew every lease once (one sweep), ms.
    pub sweep_ms: f64,
}

/// Workload 9 (Tenure): ONE client holds `leases` leases and renews all of
/// them over one KeepAlive stream, `per` entries a message, back to back
/// for `dur`: a sweep sends every message of the round at once (pipelined;
/// the server reads while its in-flight bound allows) and then reads the
/// responses, which come in order. The latency is one message's send ->
/// its response (queueing behind the earlier messages of the sweep
/// included); the sweep time is the first send -> the last response.
pub async fn keepalive_sweeps(
    sys: &Arc<Sys>,
    t: &Tenure,
    tag: &str,
    (leases, per): (usize, usize),
    dur: Duration,
    pids: &[u32],
) -> R<Sweeps> {
    // Taking 10,000 leases can take longer than a minute on a loaded
    // machine: the first must not expire before the clock starts.
    let mut held = hold_many(sys, tag, leases, SWEEP_TTL).await?;
    let messages = leases.div_ceil(per.max(1));
    let (tx, rx) = tokio::sync::mpsc::channel::<KeepAliveRequest>(messages.max(1));
    let requests =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let opened = t.client().keep_alive(requests).await;
    let mut responses = match opened {
        Ok(r) => r.into_inner(),
        Err(s) => {
            let_go(sys, held).await;
            return Err(format!("KeepAlive: {:?} {}", s.code(), s.message()));
        }
    };
    let cpu = CpuMeter::start(pids);
    let start = Instant::now();
    let end = start + dur;
    let (mut lat, mut sweeps) = (Vec::new(), Vec::new());
    let mut renewed = 0usize;
    let mut failure = None;
    'run: while Instant::now() < end {
        let sweep = Instant::now();
        let mut sent = Vec::with_capacity(messages);
        for chunk in held.chunks(per.max(1)).enumerate() {
            let (k, chunk) = chunk;
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, (h, _))| KeepAliveEntry {
                    id: (k * per + i) as u64,
                    name: h.name.clone(),
                    expected_revision: h.rev,
                    lease_key: h.key.clone(),
                    ttl: None,
                    slot: 0,
                })
                .collect();
            sent.push(Instant::now());
            if tx.send(KeepAliveRequest { entries }).await.is_err() {
                failure = Some("KeepAlive: the stream closed".to_string());
                break 'run;
            }
        }
        for at in sent {
            let response = match responses.message().await {
                Ok(Some(r)) => r,
                Ok(None) => {
                    failure = Some("KeepAlive: the stream ended".into());
                    break 'run;
                }
                Err(s) => {
                    failure = Some(format!("KeepAlive: {:?} {}", s.code(), s.message()));
                    break 'run;
                }
            };
            lat.push(at.elapsed());
            for r in response.results {
                match (r.outcome, held.get_mut(r.id as usize)) {
                    (Some(Outcome::Lease(l)), Some((h, _))) => {
                        h.rev = l.revision;
                        renewed += 1;
                    }
                    (other, _) => {
                        failure.get_or_insert(format!("KeepAlive entry {}: {other:?}", r.id));
                    }
                }
            }
        }
        sweeps.push(sweep.elapsed());
        if failure.is_some() {
            break;
        }
    }
    let elapsed = start.elapsed();
    let cpu_ms_per_1k = cpu.per_1k(renewed);
    drop(tx);
    let_go(sys, held).await;
    if let Some(f) = failure {
        return Err(f);
    }
    Ok(Sweeps {
        t: Throughput {
            per_s: renewed as f64 / elapsed.as_secs_f64(),
            p50: pct_ms(&mut lat, 50.0),
            p99: pct_ms(&mut lat, 99.0),
            cpu_ms_per_1k,
        },
        sweep_ms: pct_ms(&mut sweeps, 50.0),
    })
}

/// Workload 2: `c` tasks, each acquiring and releasing its own name back to
/// back for `dur`. Latency is one whole cycle.
pub async fn cycles(sys: &Arc<Sys>, tag: &str, c: usize, dur: Duration) -> R<Throughput> {
    let mut sessions = Vec::new();
    for _ in 0..c {
        sessions.push(sys.session(LONG_TTL).await?);
    }
    let start = Instant::now();
    let end = start + dur;
    let tasks: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let sys = sys.clone();
            let s = s.clone();
            let name = format!("{tag}.{i}");
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < end {
                    let t = Instant::now();
                    let h = sys.acquire(&name, &s, false).await?;
                    sys.release(&h).await?;
                    lat.push(t.elapsed());
                }
                Ok(lat)
            })
        })
        .collect();
    let done = join(tasks).await;
    let elapsed = start.elapsed();
    for s in sessions {
        let _ = sys.end_session(s).await;
    }
    Ok(throughput(done?.into_iter().flatten().collect(), elapsed))
}

/// Handoff figures of one run.
pub struct Handoff {
    /// Release reply -> next holder's acquire reply, per handoff to a
    /// different holder.
    pub lat: Vec<Duration>,
    /// Handoffs to a different holder per second.
    pub per_s: f64,
    /// Holdings granted while a waiter that had sent its request more than
    /// [`OVERTAKE_MARGIN`] earlier was still waiting (0 for a
    /// first-come-first-served lock).
    pub overtakes: usize,
    /// The same with no margin (requests sent any time earlier).
    pub strict_overtakes: usize,
    /// The largest overtake: how much earlier than the overtaking request
    /// the overtaken waiter had sent its own (zero when none).
    pub max_overtake: Duration,
    /// Holdings taken straight back by the holder that had just released
    /// (not handoffs).
    pub same_holder: usize,
    /// Tenure: overtakes by queue place (the bench follows the queue's
    /// tickets); `None` for systems without tickets.
    pub by_place: Option<ByPlace>,
}

/// Workload 3's order by queue place ([`overtakes_by_place`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct ByPlace {
    /// Holdings granted while a holding with an earlier ticket place was
    /// still to come.
    pub overtakes: usize,
    /// Holdings granted without a ticket.
    pub without_ticket: usize,
}

/// One holding in the handoff workload.
#[derive(Clone, Debug)]
struct Holding {
    /// Which task held it.
    holder: usize,
    /// Its fencing token (grant order).
    token: u64,
    /// Tenure: the hex SHA-256 of its lease key, which its queue ticket
    /// names.
    key: Option<String>,
    /// When its acquire request was sent.
    asked: Instant,
    /// Its acquire reply.
    acquired: Instant,
    /// Its release reply.
    released: Instant,
}

/// Workload 3: `waiters` tasks contend for one name with waiting acquires;
/// each releases as soon as it holds and asks again at once. Holdings are
/// ordered by fencing token (grant order). A handoff is a holding followed
/// by one of a DIFFERENT holder; its latency runs from the holder's release
/// reply to the next holder's acquire reply. A holding taken by a task
/// while another task that had sent its acquire earlier was still waiting
/// is an overtake. The tasks start 2 ms apart, so their first requests do
/// not race each other.
pub async fn handoff(sys: &Arc<Sys>, tag: &str, waiters: usize, dur: Duration) -> R<Handoff> {
    let name = format!("{tag}.lock");
    let tickets = sys.follow_tickets(&name).await?;
    let start = Instant::now();
    let end = start + dur;
    let tasks: Vec<_> = (0..waiters)
        .map(|holder| {
            let sys = sys.clone();
            let name = name.clone();
            tokio::spawn(async move {
                let s = sys.session(LONG_TTL).await?;
                tokio::time::sleep(Duration::from_millis(2 * holder as u64)).await;
                let mut holdings = Vec::new();
                let result = async {
                    while Instant::now() < end {
                        let asked = Instant::now();
                        let h = sys.acquire(&name, &s, true).await?;
                        let acquired = Instant::now();
                        sys.release(&h).await?;
                        holdings.push(Holding {
                            holder,
                            token: h.token,
                            key: (!h.key.is_empty()).then(|| tenure::KeyHash::of(&h.key).to_hex()),
                            asked,
                            acquired,
                            released: Instant::now(),
                        });
                    }
                    Ok::<_, String>(())
                }
                .await;
                let _ = sys.end_session(s).await;
                result.map(|()| holdings)
            })
        })
        .collect();
    let holdings: Vec<Holding> = join(tasks).await?.into_iter().flatten().collect();
    let elapsed = start.elapsed();
    // Every ticket of these holdings was written before its grant, and the
    // last grant's ticket delete after it: delivered through the last token.
    let through = holdings.iter().map(|h| h.token).max().unwrap_or(0);
    let places = match tickets {
        Some(log) => Some(log.stop_after(through).await),
        None => None,
    };
    Ok(handoff_figures(holdings, places.as_ref(), elapsed))
}

/// The figures of workload 3 from its holdings, in any order, and (Tenure)
/// the places of the queue tickets by lease key hash.
fn handoff_figures(
    mut holdings: Vec<Holding>,
    places: Option<&HashMap<String, Vec<u64>>>,
    elapsed: Duration,
) -> Handoff {
    holdings.sort_by_key(|h| h.token);
    let mut lat = Vec::new();
    let mut same_holder = 0;
    for w in holdings.windows(2) {
        if w[0].holder == w[1].holder {
            same_holder += 1;
        } else {
            lat.push(w[1].acquired.saturating_duration_since(w[0].released));
        }
    }
    let strict_overtakes = count_overtakes(&holdings, Duration::ZERO);
    let overtakes = count_overtakes(&holdings, OVERTAKE_MARGIN);
    let mut max_overtake = Duration::ZERO;
    let mut earliest_later: Option<Instant> = None;
    for h in holdings.iter().rev() {
        if let Some(e) = earliest_later {
            max_overtake = max_overtake.max(h.asked.saturating_duration_since(e));
        }
        earliest_later = Some(earliest_later.map_or(h.asked, |e| e.min(h.asked)));
    }
    let by_place = places.map(|places| overtakes_by_place(&holdings, places));
    Handoff {
        per_s: lat.len() as f64 / elapsed.as_secs_f64(),
        lat,
        overtakes,
        strict_overtakes,
        max_overtake,
        same_holder,
        by_place,
    }
}

/// Overtakes by queue place (holdings in grant order): a holding whose
/// ticket's place is later than the place of a holding granted after it.
/// A holding's place is that of the last ticket of its lease key written
/// before its grant (a waiter whose ticket expired queues again, at a new
/// place); a holding with no ticket (the name was free with nobody queued)
/// is counted apart.
fn overtakes_by_place(holdings: &[Holding], places: &HashMap<String, Vec<u64>>) -> ByPlace {
    let place = |h: &Holding| {
        let key = h.key.as_ref()?;
        places
            .get(key)?
            .iter()
            .copied()
            .filter(|p| *p < h.token)
            .max()
    };
    let mut by = ByPlace::default();
    let mut earliest_later: Option<u64> = None;
    for h in holdings.iter().rev() {
        let Some(p) = place(h) else {
            by.without_ticket += 1;
            continue;
        };
        if earliest_later.is_some_and(|e| e < p) {
            by.overtakes += 1;
        }
        earliest_later = Some(earliest_later.map_or(p, |e| e.min(p)));
    }
    by
}

/// How much earlier a waiter must have sent its request for a grant to
/// another waiter to count as overtaking it. The bench sees only send
/// times; FIFO order is the order the server stored the requests in, and
/// two requests sent within this margin over different connections may
/// reach it either way round without anyone being overtaken.
pub const OVERTAKE_MARGIN: Duration = Duration::from_millis(1);

/// Holdings (in grant order) granted while a waiter that had asked more
/// than `margin` earlier was still waiting: i.e. a holding granted later
/// was asked for more than `margin` before this one.
fn count_overtakes(holdings: &[Holding], margin: Duration) -> usize {
    let mut count = 0;
    let mut earliest_later: Option<Instant> = None;
    for h in holdings.iter().rev() {
        if earliest_later.is_some_and(|e| e + margin < h.asked) {
            count += 1;
        }
        earliest_later = Some(earliest_later.map_or(h.asked, |e| e.min(h.asked)));
    }
    count
}

/// Workload 8: `clients` tasks share a semaphore of `slots`, each taking a
/// slot (waiting while all are taken) and releasing it, back to back for
/// `dur`; latency is one whole cycle, wait included. Tenure: `Acquire` with
/// `limit` = `slots` and a wait, `Release` with the granted slot. The
/// others have no server-side semaphore; the closest is `slots` lock names,
/// client `i` always on name `i % slots` (etcd: v3lock; raw: its lock),
/// which bounds holders the same way but cannot hand a free slot to a
/// waiter of another name.
pub async fn semaphore(
    sys: &Arc<Sys>,
    tag: &str,
    clients: usize,
    slots: u32,
    dur: Duration,
) -> R<Throughput> {
    let mut sessions = Vec::new();
    for _ in 0..clients {
        sessions.push(sys.session(LONG_TTL).await?);
    }
    let start = Instant::now();
    let end = start + dur;
    let tasks: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let sys = sys.clone();
            let s = s.clone();
            let sem = format!("{tag}.sem");
            let lock = format!("{tag}.sem.{}", i % slots.max(1) as usize);
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < end {
                    let t = Instant::now();
                    let h = match sys.acquire_slot(&sem, &s, slots).await {
                        Some(h) => h?,
                        None => sys.acquire(&lock, &s, true).await?,
                    };
                    sys.release(&h).await?;
                    lat.push(t.elapsed());
                }
                Ok(lat)
            })
        })
        .collect();
    let done = join(tasks).await;
    let elapsed = start.elapsed();
    for s in sessions {
        let _ = sys.end_session(s).await;
    }
    Ok(throughput(done?.into_iter().flatten().collect(), elapsed))
}

/// Workload 4: holders take a name and stop (as if killed); a waiter blocks
/// on each name. The lag is the waiter's acquire reply minus the holder's
/// deadline (its acquire reply + granted TTL; etcd: its lease grant reply +
/// granted TTL).
///
/// With `background` = 0, `pairs` run one after the other with a 1 s TTL
/// (etcd grants at least 2 s), so one lease is pending at a time. Otherwise
/// `pairs` holders take 5 s TTLs at once, their waiters block, and then
/// `background` other leases are written so that they all fall due in the
/// second before the holders' deadlines: the holders' expiry sits behind
/// that many others (a fleet of clients dying together).
pub async fn expiry(
    sys: &Arc<Sys>,
    tag: &str,
    pairs: usize,
    background: usize,
) -> R<Vec<Duration>> {
    let hold_ttl = if background > 0 { 5 } else { 1 };
    let pair_holders = |range: std::ops::Range<usize>| {
        let sys = sys.clone();
        async move {
            let mut holders = Vec::new();
            for i in range {
                let s = sys.session(hold_ttl).await?;
                let h = sys.acquire(&format!("{tag}.{i}"), &s, false).await?;
                holders.push(h);
            }
            Ok::<_, String>(holders)
        }
    };
    let wait_for = |held: Held| {
        let sys = sys.clone();
        tokio::spawn(async move {
            let ws = sys.session(LONG_TTL).await?;
            let waiter = sys.acquire(&held.name, &ws, true).await?;
            let lag = Instant::now().saturating_duration_since(held.deadline);
            let _ = sys.release(&waiter).await;
            let _ = sys.end_session(ws).await;
            Ok::<_, String>(lag)
        })
    };
    if background == 0 {
        let mut lags = Vec::new();
        for i in 0..pairs {
            // The holder is "killed": it never renews or releases.
            let held = pair_holders(i..i + 1).await?.pop().ok_or("no holder")?;
            lags.extend(join(vec![wait_for(held)]).await?);
        }
        return Ok(lags);
    }
    let holders = pair_holders(0..pairs).await?;
    let due = holders
        .iter()
        .map(|h| h.deadline)
        .min()
        .ok_or("no holders")?;
    let waiters: Vec<_> = holders.into_iter().map(wait_for).collect();
    let t = Instant::now();
    sys.background_leases(&format!("{tag}.bg"), background, due)
        .await?;
    if Instant::now() > due {
        return Err(format!(
            "writing {background} background leases took {:?}, past the holders' deadline",
            t.elapsed()
        ));
    }
    join(waiters).await
}

/// Figures of one watch fan-out run.
pub struct Fanout {
    /// Seconds until every stream had its snapshot.
    pub open_s: f64,
    /// Write reply -> event receipt, ms (0 when the event came first).
    pub p50: f64,
    /// Write reply -> event receipt, ms (0 when the event came first).
    pub p99: f64,
    /// Write request sent -> event receipt, ms.
    pub p99_from_send: f64,
    /// Events received / events due, percent.
    pub delivered_pct: f64,
    /// Peak Tenure RSS during the event phase, MiB.
    pub rss_mb: f64,
    /// Tenure CPU during the event phase, percent of one core.
    pub cpu_pct: f64,
    /// Peak nats-server RSS during the event phase, MiB.
    pub nats_rss_mb: f64,
}

/// Workload 5: `n` WatchLease streams over 100 names in 10 groups: every
/// 20th stream watches its group (`<tag>.g<k>.>`), the others one name
/// each. A writer renews the names round-robin at `rate` per second for
/// `dur`; each RENEWED event's latency runs from the renew reply to the
/// event's receipt. Streams share connections, 100 per connection.
#[allow(clippy::too_many_arguments)]
pub async fn watch(
    addr: &str,
    tenure: &Tenure,
    tenure_pid: u32,
    nats_pid: u32,
    tag: &str,
    n: usize,
    rate: u32,
    dur: Duration,
    open_timeout: Duration,
) -> R<Fanout> {
    let names: Vec<String> = (0..100)
        .map(|i| format!("{tag}.g{}.n{}", i % 10, i / 10))
        .collect();
    let mut held = Vec::new();
    for name in &names {
        let resp = tenure
            .client()
            .acquire(tenure::proto::AcquireRequest {
                name: name.clone(),
                holder: "writer".into(),
                ttl: Some(prost_types::Duration {
                    seconds: LONG_TTL as i64,
                    nanos: 0,
                }),
                ..Default::default()
            })
            .await
            .map_err(|s| format!("Acquire {name}: {}", s.message()))?
            .into_inner();
        let lease = resp.lease.ok_or("no lease")?;
        held.push((lease.revision, resp.lease_key));
    }
    // Which stream watches what; how many streams see each name.
    let targets: Vec<String> = (0..n)
        .map(|i| {
            let name = i % 100;
            if i % 20 == 19 {
                format!("{tag}.g{}.>", name % 10)
            } else {
                names[name].clone()
            }
        })
        .collect();
    let mut audience = vec![0usize; names.len()];
    for (i, t) in targets.iter().enumerate() {
        if t.ends_with('>') {
            for (j, a) in audience.iter_mut().enumerate() {
                if j % 10 == (i % 100) % 10 {
                    *a += 1;
                }
            }
        } else {
            audience[i % 100] += 1;
        }
    }
    let mut channels = Vec::new();
    for _ in 0..n.div_ceil(100) {
        channels.push(
            Channel::from_shared(format!("http://{addr}"))
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| format!("connect: {e}"))?,
        );
    }
    let ready = Arc::new(AtomicUsize::new(0));
    let received = Arc::new(AtomicUsize::new(0));
    let open_limit = Arc::new(tokio::sync::Semaphore::new(256));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let first_error: Arc<std::sync::Mutex<Option<String>>> = Default::default();
    let open_start = Instant::now();
    let tasks: Vec<_> = targets
        .iter()
        .enumerate()
        .map(|(i, target)| {
            let mut client = LeaseServiceClient::new(channels[i / 100].clone());
            let target = target.clone();
            let ready = ready.clone();
            let received = received.clone();
            let open_limit = open_limit.clone();
            let mut stop = stop_rx.clone();
            let first_error = first_error.clone();
            tokio::spawn(async move {
                let permit = open_limit.acquire_owned().await;
                let fail = |e: String| {
                    first_error
                        .lock()
                        .expect("not poisoned")
                        .get_or_insert(e.clone());
                    e
                };
                let mut stream = client
                    .watch_lease(WatchLeaseRequest {
                        name: target.clone(),
                        event_types: vec![],
                        start_revision: 0,
                        shard_revisions: Vec::new(),
                    })
                    .await
                    .map_err(|s| {
                        fail(format!(
                            "WatchLease {target}: {:?} {}",
                            s.code(),
                            s.message()
                        ))
                    })?
                    .into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(m)) => {
                            let t = m.event.map_or(0, |e| e.r#type);
                            if t == EventType::SnapshotComplete as i32 {
                                break;
                            }
                        }
                        Ok(None) => {
                            return Err(fail("watch ended during its snapshot".to_string()))
                        }
                        Err(s) => {
                            return Err(fail(format!(
                                "watch {target}: {:?} {}",
                                s.code(),
                                s.message()
                            )))
                        }
                    }
                }
                drop(permit);
                ready.fetch_add(1, Ordering::Relaxed);
                let mut got = Vec::new();
                loop {
                    tokio::select! {
                        _ = stop.changed() => break,
                        m = stream.message() => match m {
                            Ok(Some(m)) => {
                                if let Some(e) = m.event {
                                    if e.r#type == EventType::Renewed as i32 {
                                        got.push((e.revision, Instant::now()));
                                        received.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            }
                            Ok(None) => break,
                            Err(s) => return Err(format!("watch {target}: {}", s.message())),
                        },
                    }
                }
                Ok(got)
            })
        })
        .collect();
    let open_deadline = open_start + open_timeout;
    while ready.load(Ordering::Relaxed) < n && Instant::now() < open_deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let opened = ready.load(Ordering::Relaxed);
    let open_s = open_start.elapsed().as_secs_f64();
    if opened < n {
        let _ = stop_tx.send(true);
        for t in &tasks {
            t.abort();
        }
        let first = first_error.lock().expect("not poisoned").clone();
        return Err(format!(
            "only {opened} of {n} WatchLease streams had their snapshot within {open_timeout:?} (first error: {})",
            first.as_deref().unwrap_or("none; the rest were still waiting")
        ));
    }

    // The event phase: renew round-robin at `rate`, sample Tenure's RSS.
    let cpu0 = cpu_time(tenure_pid);
    let phase = Instant::now();
    // (revision, request sent, reply received)
    let mut writes: Vec<(u64, Instant, Instant)> = Vec::new();
    let mut due = 0usize;
    let (mut rss, mut nats_rss) = (0u64, 0u64);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let total = (rate as f64 * dur.as_secs_f64()) as usize;
    for k in 0..total {
        tick.tick().await;
        let j = k % names.len();
        let sent = Instant::now();
        let lease = tenure
            .client()
            .renew(RenewRequest {
                name: names[j].clone(),
                expected_revision: held[j].0,
                lease_key: held[j].1.clone(),
                ttl: None,
                slot: 0,
            })
            .await
            .map_err(|s| format!("Renew {}: {}", names[j], s.message()))?
            .into_inner()
            .lease
            .ok_or("no lease")?;
        writes.push((lease.revision, sent, Instant::now()));
        held[j].0 = lease.revision;
        due += audience[j];
        if k % 10 == 0 {
            rss = rss.max(rss_bytes(tenure_pid));
            nats_rss = nats_rss.max(rss_bytes(nats_pid));
        }
    }
    // Let the last events arrive (at most 5 s).
    let settle = Instant::now() + Duration::from_secs(5);
    while received.load(Ordering::Relaxed) < due && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rss = rss.max(rss_bytes(tenure_pid));
    nats_rss = nats_rss.max(rss_bytes(nats_pid));
    let cpu = cpu_time(tenure_pid).saturating_sub(cpu0);
    let wall = phase.elapsed();
    let _ = stop_tx.send(true);
    let got: Vec<(u64, Instant)> = join(tasks).await?.into_iter().flatten().collect();
    drop(channels);
    let written: std::collections::HashMap<u64, (Instant, Instant)> = writes
        .into_iter()
        .map(|(rev, s, r)| (rev, (s, r)))
        .collect();
    let (mut lat, mut from_send): (Vec<Duration>, Vec<Duration>) = got
        .iter()
        .filter_map(|(rev, at)| {
            written.get(rev).map(|(sent, replied)| {
                (
                    at.saturating_duration_since(*replied),
                    at.saturating_duration_since(*sent),
                )
            })
        })
        .unzip();
    Ok(Fanout {
        open_s,
        p50: pct_ms(&mut lat, 50.0),
        p99: pct_ms(&mut lat, 99.0),
        p99_from_send: pct_ms(&mut from_send, 99.0),
        delivered_pct: got.len() as f64 * 100.0 / due.max(1) as f64,
        rss_mb: rss as f64 / 1048576.0,
        cpu_pct: cpu.as_secs_f64() * 100.0 / wall.as_secs_f64(),
        nats_rss_mb: nats_rss as f64 / 1048576.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Handoffs count only grants to a different holder; an overtake is a
    /// grant while an earlier request was still waiting.
    #[test]
    fn handoff_counts_fair_and_unfair_grants() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let h = |holder, token, asked, acquired, released| Holding {
            holder,
            token,
            key: None,
            asked: ms(asked),
            acquired: ms(acquired),
            released: ms(released),
        };
        // FIFO: 0 holds, 1 and 2 wait (asked at 1, 2); 0 asks again at 11
        // and is served after them.
        let fair = vec![
            h(2, 30, 2, 20, 21),
            h(0, 10, 0, 0, 10),
            h(1, 20, 1, 12, 13),
            h(0, 40, 11, 23, 24),
        ];
        let f = handoff_figures(fair, None, Duration::from_secs(1));
        assert_eq!(f.overtakes, 0);
        assert_eq!(f.same_holder, 0);
        assert_eq!(f.lat.len(), 3);
        assert_eq!(f.lat[0], Duration::from_millis(2));
        // Unfair: 0 takes the name straight back (not a handoff) while 1,
        // waiting since 1 ms, is overtaken twice (by 0 and then by 2).
        let unfair = vec![
            h(0, 10, 0, 0, 10),
            h(0, 20, 10, 11, 12),
            h(2, 30, 5, 14, 15),
            h(1, 40, 1, 17, 18),
        ];
        let u = handoff_figures(unfair, None, Duration::from_secs(1));
        assert_eq!(u.overtakes, 2);
        assert_eq!(u.same_holder, 1);
        assert_eq!(u.lat.len(), 2);
        assert_eq!(u.per_s, 2.0);
        assert_eq!(u.max_overtake, Duration::from_millis(9));
        // Requests sent within the margin may be served either way round.
        let close = vec![h(1, 10, 1, 2, 3), h(0, 20, 0, 4, 5)];
        let c = handoff_figures(close, None, Duration::from_secs(1));
        assert_eq!((c.overtakes, c.strict_overtakes), (0, 1));
        assert!(c.by_place.is_none(), "no tickets followed");
    }

    /// By queue place: a holding's place is its key's last ticket before
    /// its grant; a grant ahead of an earlier place is an overtake, and a
    /// holding with no ticket is counted apart, whatever the send times.
    #[test]
    fn overtakes_are_counted_by_ticket_place() {
        let t0 = Instant::now();
        let h = |holder, token, key: &str| Holding {
            holder,
            token,
            key: Some(key.into()),
            asked: t0,
            acquired: t0,
            released: t0,
        };
        let places: HashMap<String, Vec<u64>> = [
            // k1 queued at 5 (refreshed: the place repeats), k2 at 6, k3
            // at 7; k4 has a ticket only after its grant (another call).
            ("k1", vec![5, 5]),
            ("k2", vec![6]),
            ("k3", vec![7]),
            ("k4", vec![50]),
        ]
        .into_iter()
        .map(|(k, p)| (k.to_string(), p))
        .collect();
        let fair = vec![
            h(0, 10, "k1"),
            h(1, 11, "k2"),
            h(2, 12, "k3"),
            h(3, 13, "k4"),
        ];
        let f = handoff_figures(fair, Some(&places), Duration::from_secs(1));
        let by = f.by_place.expect("followed");
        assert_eq!((by.overtakes, by.without_ticket), (0, 1));
        // k3 (place 7) granted before k2 (place 6): one overtake.
        let unfair = vec![h(0, 10, "k1"), h(2, 11, "k3"), h(1, 12, "k2")];
        let u = handoff_figures(unfair, Some(&places), Duration::from_secs(1));
        assert_eq!(u.by_place.map(|b| b.overtakes), Some(1));
    }
}
