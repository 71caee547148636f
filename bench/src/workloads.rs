//! Workloads 1 to 5 of issue 5, and 7 (renewals over the KeepAlive
//! stream, issue 14). Each function does one run against one
//! system and returns its figures; `main` runs them alternating between
//! systems and over several runs.
//!
//! Latency is measured on this process's monotonic clock around each call.
//! Where two events happen in different tasks (a release and the next
//! acquire, a write and its watch event) both instants come from the same
//! clock, so no cross-machine skew enters.

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

/// Throughput and latency of one run.
pub struct Throughput {
    /// Operations per second over the run.
    pub per_s: f64,
    /// Median latency, ms.
    pub p50: f64,
    /// 99th percentile latency, ms.
    pub p99: f64,
}

/// Takes one holding per task: `c` names `<tag>.<i>`, each with its own
/// session, 64 at a time.
async fn hold_many(sys: &Arc<Sys>, tag: &str, c: usize) -> R<Vec<(Held, Session)>> {
    futures::stream::iter(0..c)
        .map(|i| {
            let sys = sys.clone();
            let name = format!("{tag}.{i}");
            async move {
                let s = sys.session(LONG_TTL).await?;
                let h = sys.acquire(&name, &s, false).await?;
                Ok((h, s))
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
fn throughput(mut lat: Vec<Duration>, elapsed: Duration) -> Throughput {
    Throughput {
        per_s: lat.len() as f64 / elapsed.as_secs_f64(),
        p50: pct_ms(&mut lat, 50.0),
        p99: pct_ms(&mut lat, 99.0),
    }
}

/// Joins the tasks, failing on the first error.
async fn join<T>(tasks: Vec<tokio::task::JoinHandle<R<T>>>) -> R<Vec<T>> {
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
pub async fn renew(sys: &Arc<Sys>, tag: &str, c: usize, dur: Duration) -> R<Throughput> {
    let held = hold_many(sys, tag, c).await?;
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
    let_go(sys, held).await;
    Ok(throughput(lat, elapsed))
}

/// Workload 7 (Tenure): `c` clients, each with its own KeepAlive stream
/// (over the shared connections) and `per` leases, each sending one message
/// renewing all of its leases and awaiting its response, back to back for
/// `dur`. The rate counts renewals; the latency is one message's round
/// trip. (The other systems run [`renew`] with `c * per` tasks instead.)
pub async fn keepalive(
    sys: &Arc<Sys>,
    t: &Tenure,
    tag: &str,
    c: usize,
    per: usize,
    dur: Duration,
) -> R<Throughput> {
    let mut held = hold_many(sys, tag, c * per).await?;
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
    let_go(sys, held).await;
    if let Some(f) = failure {
        return Err(f);
    }
    Ok(Throughput {
        per_s: renewed as f64 / elapsed.as_secs_f64(),
        p50: pct_ms(&mut lat, 50.0),
        p99: pct_ms(&mut lat, 99.0),
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
    /// Release reply -> next holder's acquire reply, per handoff.
    pub lat: Vec<Duration>,
    /// Handoffs per second.
    pub per_s: f64,
}

/// Workload 3: 16 tasks contend for one name with waiting acquires; each
/// releases as soon as it holds. A handoff's latency runs from the
/// holder's release reply to the next holder's acquire reply; holdings are
/// ordered by fencing token, so each release pairs with the next acquire.
pub async fn handoff(sys: &Arc<Sys>, tag: &str, waiters: usize, dur: Duration) -> R<Handoff> {
    let name = format!("{tag}.lock");
    let start = Instant::now();
    let end = start + dur;
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let sys = sys.clone();
            let name = name.clone();
            tokio::spawn(async move {
                let s = sys.session(LONG_TTL).await?;
                // (token, acquire reply, release reply)
                let mut holdings = Vec::new();
                let result = async {
                    while Instant::now() < end {
                        let h = sys.acquire(&name, &s, true).await?;
                        let acquired = Instant::now();
                        sys.release(&h).await?;
                        holdings.push((h.token, acquired, Instant::now()));
                    }
                    Ok::<_, String>(())
                }
                .await;
                let _ = sys.end_session(s).await;
                result.map(|()| holdings)
            })
        })
        .collect();
    let mut holdings: Vec<(u64, Instant, Instant)> =
        join(tasks).await?.into_iter().flatten().collect();
    let elapsed = start.elapsed();
    holdings.sort_by_key(|h| h.0);
    let lat: Vec<Duration> = holdings
        .windows(2)
        .map(|w| w[1].1.saturating_duration_since(w[0].2))
        .collect();
    Ok(Handoff {
        per_s: lat.len() as f64 / elapsed.as_secs_f64(),
        lat,
    })
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
