//! `tenure-bench --hostile`: the attacks of issue 30 ("Every new door has a
//! bound"), run against a release build to measure what its fixes bound,
//! for the issue's closing note.
//!
//! Each attack gets a fresh nats-server and `tenure` (pinned like the
//! benchmark's servers with `--server-cpus`; this process with
//! `--load-cpus`), with bearer tokens for four identities: `attacker`
//! (every action on `att.`), `viewer` (watch on every name), `nogrant` (no
//! grant at all) and `honest` (every action on `hon.`); attack 2 runs a
//! Tenure without authentication. While an attack runs, the honest client,
//! on connections of its own, renews its lease `hon.a` every 10 ms and
//! takes (then releases) a fresh `hon.acq.<n>` every 100 ms, each call with
//! a 10 s timeout; its latencies include failed and timed-out calls (a
//! timeout counts 10 s). Tenure's RSS comes from `/proc/<pid>/status`
//! (sampled every 100 ms), CPU seconds from `/proc/<pid>/stat`, Tenure's
//! own counts from its `/metrics`.
//!
//! The attacks, numbered as `--only` selects them (0 is the baseline):
//! 1. KeepAlive without grants: 100 streams of the `nogrant` token, each
//!    on its own connection with 64 KiB receive windows, sending 40
//!    messages of 1,000 empty entries (2 KB) and never reading; then the
//!    same from `attacker`, whose streams are admitted (its empty entries
//!    are denied one by one); then that again with
//!    `--max-keepalive-streams 100`. Each time the clients then leave (their
//!    runtime stops, closing every connection) and an identical second
//!    wave follows: whether the first wave's slots and memory were freed.
//! 2. KeepAlive without auth: 300 such streams against a Tenure without
//!    authentication.
//! 3. KeepAlive load: `attacker` holds 250 leases and renews them over 10
//!    (then 200) streams, 4 messages of 250 entries in flight on each,
//!    sending the next as each answer arrives.
//! 4. Semaphore waiters: 300 waiting Acquires (30 s) on a full 8-slot
//!    semaphore.
//! 5. Semaphore reads: 8 `viewer` clients looping GetLease on a 256-slot
//!    semaphore with 3 holders.
//! 6. Semaphore definitions: stream bytes per Acquire of 100 fresh 256-slot
//!    semaphores.
//! 7. Groups: 1,000 waiting AcquireGroups (60 s) of 2 to 4 held names, with
//!    the default waiting budget and with
//!    `--max-waiting-acquires-per-identity 4000` (all of them wait).
//!
//! The output is one Markdown table: attack, the bound in force, the
//! issue's figure before the fixes, and what this run measured.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tenure::proto::keep_alive_result::Outcome;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{
    AcquireGroupRequest, AcquireRequest, GetLeaseRequest, KeepAliveEntry, KeepAliveRequest,
    KeepAliveResponse, ReleaseRequest, RenewRequest,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::procs::{cpu_time, find_program, free_port, rss_bytes, Launcher, Server, R};
use crate::stats::pct_ms;

/// The identities and their bearer tokens.
const TOKENS: [(&str, &str); 4] = [
    ("attacker", "attacker-token-0123456789abcdef"),
    ("viewer", "viewer-token-0123456789abcdef"),
    ("nogrant", "nogrant-token-0123456789abcdef"),
    ("honest", "honest-token-0123456789abcdef"),
];

/// The grants (`nogrant` has none).
const GRANTS: &str = r#"[[grant]]
identity = "attacker"
prefixes = ["att."]
actions = ["*"]

[[grant]]
identity = "viewer"
prefixes = [""]
actions = ["watch"]

[[grant]]
identity = "honest"
prefixes = ["hon."]
actions = ["*"]
"#;

/// The longest any one call of the honest client may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Adds `authorization: Bearer <token>` to every call, when there is one.
#[derive(Clone)]
struct Bearer(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A client of one identity on one connection of its own.
type Client = LeaseServiceClient<InterceptedService<Channel, Bearer>>;

/// The token of `who`.
fn token(who: &str) -> &'static str {
    TOKENS
        .iter()
        .find(|(id, _)| *id == who)
        .map(|(_, t)| *t)
        .unwrap_or("unknown-identity-token")
}

/// What every attack is run with.
struct Ctx {
    /// nats-server.
    nats_bin: PathBuf,
    /// The tenure release binary.
    tenure_bin: PathBuf,
    /// Where each attack's servers keep their files.
    dir: PathBuf,
    /// Pins the servers.
    launcher: Launcher,
    /// How long each measurement window lasts (groups: twice this).
    window: Duration,
}

/// One attack's nats-server and Tenure.
struct Rig {
    /// The nats-server process.
    nats: Server,
    /// The tenure process.
    tenure: Server,
    /// Tenure's gRPC address.
    addr: String,
    /// Tenure's metrics port.
    metrics: u16,
    /// nats-server's URL.
    nats_url: String,
    /// Whether Tenure checks tokens.
    auth: bool,
}

impl Rig {
    /// Starts nats-server and Tenure for attack `name`, with tokens and
    /// grants when `auth`, and `extra` flags.
    async fn start(ctx: &Ctx, name: &str, auth: bool, extra: &[&str]) -> R<Rig> {
        let dir = ctx.dir.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let nats = ctx.launcher.nats(&ctx.nats_bin, &dir, false).await?;
        let nats_url = format!("nats://127.0.0.1:{}", nats.port);
        let metrics = free_port()?;
        // The shared watcher's idle timeout at its default (the bench
        // launcher otherwise sets 2 s).
        let mut args: Vec<String> = [
            "--metrics-listen",
            &format!("127.0.0.1:{metrics}"),
            "--watcher-idle-timeout",
            "30s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if auth {
            let tokens = dir.join("tokens");
            let lines: String = TOKENS.iter().map(|(i, t)| format!("{i} {t}\n")).collect();
            std::fs::write(&tokens, lines).map_err(|e| format!("{}: {e}", tokens.display()))?;
            let config = dir.join("tenure.toml");
            std::fs::write(&config, GRANTS).map_err(|e| format!("{}: {e}", config.display()))?;
            args.extend([
                "--auth-tokens".to_string(),
                tokens.display().to_string(),
                "--config".to_string(),
                config.display().to_string(),
            ]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let tenure = ctx
            .launcher
            .tenure_with(&ctx.tenure_bin, &dir, &nats_url, "tenure", &args)
            .await?;
        let rig = Rig {
            addr: format!("127.0.0.1:{}", tenure.port),
            nats,
            tenure,
            metrics,
            nats_url,
            auth,
        };
        rig.ready().await?;
        Ok(rig)
    }

    /// Waits until Tenure answers the honest client, up to 30 s.
    async fn ready(&self) -> R<()> {
        let mut c = self.client("honest", false).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let probe = c
                .get_lease(GetLeaseRequest {
                    name: "hon.probe".into(),
                })
                .await;
            match probe {
                Ok(_) => return Ok(()),
                Err(s) if s.code() == tonic::Code::NotFound => return Ok(()),
                Err(s) if Instant::now() > deadline => {
                    return Err(format!(
                        "tenure is not ready: {:?} {}",
                        s.code(),
                        s.message()
                    ))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// A client of `who` on a new connection (see [`connect`]).
    async fn client(&self, who: &str, small_windows: bool) -> R<Client> {
        connect(&self.addr, self.auth, who, small_windows).await
    }

    /// Tenure's RSS, MiB.
    fn rss_mib(&self) -> f64 {
        rss_bytes(self.tenure.pid()) as f64 / 1_048_576.0
    }

    /// Tenure's `/metrics` text (empty when unreachable).
    async fn metrics(&self) -> String {
        let get = async {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics)).await?;
            s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
                .await?;
            let mut body = String::new();
            s.read_to_string(&mut body).await?;
            Ok::<_, std::io::Error>(body)
        };
        tokio::time::timeout(Duration::from_secs(5), get)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    }

    /// Stops Tenure, then nats-server.
    async fn stop(mut self) {
        if let Err(e) = self.tenure.check_alive() {
            eprintln!("hostile: {e}");
        }
        self.tenure.stop().await;
        self.nats.stop().await;
    }
}

/// A client of `who` (its token when `auth`) on a new connection to
/// `addr`; `small_windows` gives it 64 KiB HTTP/2 receive windows, as a
/// client that wants the server to hold its replies would.
async fn connect(addr: &str, auth: bool, who: &str, small_windows: bool) -> R<Client> {
    let mut endpoint = Channel::from_shared(format!("http://{addr}")).map_err(|e| e.to_string())?;
    if small_windows {
        endpoint = endpoint
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535);
    }
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("connect to tenure at {addr}: {e}"))?;
    let bearer = if auth {
        Some(
            format!("Bearer {}", token(who))
                .parse()
                .map_err(|_| "bad token".to_string())?,
        )
    } else {
        None
    };
    Ok(LeaseServiceClient::with_interceptor(
        channel,
        Bearer(bearer),
    ))
}

/// The sum of the samples of metric `name` whose labels contain every one
/// of `labels` (`key="value"`).
fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = match series.split_once('{') {
                Some((m, r)) => (m, r),
                None => (series, ""),
            };
            (metric == name && labels.iter().all(|want| rest.contains(want)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// The per-label-value counts of `name` (label `key`) in `text`.
fn metric_by(text: &str, name: &str, filter: &str, key: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with(&format!("{name}{{"))) {
        let Some((series, value)) = l.rsplit_once(' ') else {
            continue;
        };
        if !series.contains(filter) {
            continue;
        }
        let pat = format!("{key}=\"");
        let Some(at) = series.find(&pat) else {
            continue;
        };
        let rest = &series[at + pat.len()..];
        let label = rest.split('"').next().unwrap_or_default().to_string();
        *out.entry(label).or_default() += value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// `after - before`, per key, leaving out keys that did not change.
fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d != 0.0)
        .collect()
}

/// Reads a protobuf varint at `*at`.
fn varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The fields of a protobuf message: (number, bytes) for length-delimited
/// ones; varints and fixed fields are skipped.
fn fields(buf: &[u8]) -> Vec<(u64, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let Some(key) = varint(buf, &mut at) else {
            break;
        };
        match key & 7 {
            0 => {
                if varint(buf, &mut at).is_none() {
                    break;
                }
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let Some(len) = varint(buf, &mut at) else {
                    break;
                };
                let end = at + len as usize;
                if end > buf.len() {
                    break;
                }
                out.push((key >> 3, &buf[at..end]));
                at = end;
            }
            _ => break,
        }
    }
    out
}

/// The ErrorInfo reason of a status and its `limit` metadata, if any
/// (decoded by hand: google.rpc.Status -> Any -> ErrorInfo).
fn reason(s: &Status) -> String {
    for (n, any) in fields(s.details()) {
        if n != 3 {
            continue;
        }
        let parts = fields(any);
        let is_info = parts
            .iter()
            .any(|(f, v)| *f == 1 && v.ends_with(b"google.rpc.ErrorInfo"));
        let Some((_, info)) = parts.iter().find(|(f, _)| *f == 2) else {
            continue;
        };
        if !is_info {
            continue;
        }
        let info = fields(info);
        let why = info
            .iter()
            .find(|(f, _)| *f == 1)
            .map(|(_, v)| String::from_utf8_lossy(v).to_string())
            .unwrap_or_default();
        let limit = info.iter().filter(|(f, _)| *f == 3).find_map(|(_, e)| {
            let kv = fields(e);
            let k = kv.iter().find(|(f, _)| *f == 1)?.1;
            let v = kv.iter().find(|(f, _)| *f == 2)?.1;
            (k == b"limit").then(|| String::from_utf8_lossy(v).to_string())
        });
        return match limit {
            Some(l) => format!("{why} ({l})"),
            None => why,
        };
    }
    format!("{:?}", s.code())
}

/// `count reason, ...` of a tally.
fn tally(t: &BTreeMap<String, usize>) -> String {
    if t.is_empty() {
        return "none".into();
    }
    t.iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A protobuf duration of whole seconds.
fn secs(s: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: s,
        nanos: 0,
    }
}

/// The honest client's calls during a window.
#[derive(Default)]
struct Honest {
    /// Renew latencies (failures and timeouts included).
    renew: Vec<Duration>,
    /// Failed Renews by reason.
    renew_errors: BTreeMap<String, usize>,
    /// Acquire latencies (failures and timeouts included).
    acquire: Vec<Duration>,
    /// Failed Acquires by reason.
    acquire_errors: BTreeMap<String, usize>,
}

impl Honest {
    /// `p50/p99 ms` of the renewals, with the failures.
    fn renew_text(&self) -> String {
        latency_text(&self.renew, &self.renew_errors)
    }

    /// `p50/p99 ms` of the acquires, with the failures.
    fn acquire_text(&self) -> String {
        latency_text(&self.acquire, &self.acquire_errors)
    }
}

/// `p50 / p99 ms (n calls[, failures])`.
fn latency_text(lat: &[Duration], errors: &BTreeMap<String, usize>) -> String {
    let mut lat = lat.to_vec();
    let n = lat.len();
    let (p50, p99) = (pct_ms(&mut lat, 50.0), pct_ms(&mut lat, 99.0));
    let failed = if errors.is_empty() {
        String::new()
    } else {
        format!(", failed: {}", tally(errors))
    };
    format!("{} / {} ms ({n} calls{failed})", ms(p50), ms(p99))
}

/// A latency in ms with sensible precision.
fn ms(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else if x < 10.0 {
        format!("{x:.2}")
    } else if x < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// The honest client, set up before an attack starts.
struct HonestSetup {
    /// Renews `hon.a`.
    renewer: Client,
    /// Acquires and releases fresh names.
    acquirer: Client,
    /// `hon.a`'s revision.
    rev: u64,
}

/// The honest lease's key.
const HONEST_KEY: &str = "honest-lease-key-0123456789";

impl HonestSetup {
    /// Takes `hon.a` (TTL 60 s) on a connection of its own.
    async fn new(addr: &str, auth: bool) -> R<HonestSetup> {
        let mut renewer = connect(addr, auth, "honest", false).await?;
        let acquirer = connect(addr, auth, "honest", false).await?;
        let rev = take_honest(&mut renewer).await?;
        // A few calls to warm the connections up.
        let mut s = HonestSetup {
            renewer,
            acquirer,
            rev,
        };
        s.measure(Duration::from_millis(300)).await;
        Ok(s)
    }

    /// Renews every 10 ms and acquires every 100 ms for `dur`.
    async fn measure(&mut self, dur: Duration) -> Honest {
        let end = Instant::now() + dur;
        let mut out = Honest::default();
        let renewer = &mut self.renewer;
        let rev = &mut self.rev;
        let renew = async {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut lat, mut errors) = (Vec::new(), BTreeMap::new());
            while Instant::now() < end {
                tick.tick().await;
                let t = Instant::now();
                let call = renewer.renew(RenewRequest {
                    name: "hon.a".into(),
                    expected_revision: *rev,
                    lease_key: HONEST_KEY.into(),
                    ttl: None,
                    slot: 0,
                });
                let failed = match tokio::time::timeout(CALL_TIMEOUT, call).await {
                    Ok(Ok(r)) => {
                        *rev = r.into_inner().lease.map_or(*rev, |l| l.revision);
                        None
                    }
                    Ok(Err(s)) => Some(reason(&s)),
                    Err(_) => Some("timeout 10 s".to_string()),
                };
                lat.push(t.elapsed());
                if let Some(why) = failed {
                    *errors.entry(why).or_insert(0) += 1;
                    // Take the holding back with the same key (a retry
                    // returns it renewed) to learn its revision.
                    if let Ok(r) = take_honest(renewer).await {
                        *rev = r;
                    }
                }
            }
            (lat, errors)
        };
        let acquirer = &mut self.acquirer;
        let acquire = async {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut lat, mut errors) = (Vec::new(), BTreeMap::new());
            let mut n = 0u64;
            while Instant::now() < end {
                tick.tick().await;
                n += 1;
                let name = format!("hon.acq.{n}.{}", std::process::id());
                let t = Instant::now();
                let call = acquirer.acquire(AcquireRequest {
                    name: name.clone(),
                    holder: "honest".into(),
                    ttl: Some(secs(2)),
                    ..Default::default()
                });
                match tokio::time::timeout(CALL_TIMEOUT, call).await {
                    Ok(Ok(r)) => {
                        lat.push(t.elapsed());
                        let r = r.into_inner();
                        if let Some(l) = r.lease {
                            let release = acquirer.release(ReleaseRequest {
                                name,
                                expected_revision: l.revision,
                                lease_key: r.lease_key,
                                slot: 0,
                            });
                            let _ = tokio::time::timeout(CALL_TIMEOUT, release).await;
                        }
                    }
                    Ok(Err(s)) => {
                        lat.push(t.elapsed());
                        *errors.entry(reason(&s)).or_insert(0) += 1;
                    }
                    Err(_) => {
                        lat.push(t.elapsed());
                        *errors.entry("timeout 10 s".to_string()).or_insert(0) += 1;
                    }
                }
            }
            (lat, errors)
        };
        let ((rl, re), (al, ae)) = tokio::join!(renew, acquire);
        out.renew = rl;
        out.renew_errors = re;
        out.acquire = al;
        out.acquire_errors = ae;
        out
    }
}

/// Acquires (or re-takes, with the same key) `hon.a`; its revision.
async fn take_honest(c: &mut Client) -> R<u64> {
    let call = c.acquire(AcquireRequest {
        name: "hon.a".into(),
        holder: "honest".into(),
        ttl: Some(secs(60)),
        lease_key: HONEST_KEY.into(),
        ..Default::default()
    });
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(r)) => r
            .into_inner()
            .lease
            .map(|l| l.revision)
            .ok_or_else(|| "no lease".to_string()),
        Ok(Err(s)) => Err(format!("honest Acquire: {}", reason(&s))),
        Err(_) => Err("honest Acquire: timeout".into()),
    }
}

/// A measurement asked of the honest thread: its length, and where the
/// figures go.
type Ask = (Duration, tokio::sync::oneshot::Sender<Honest>);

/// The honest client on a thread and runtime of its own (on the load
/// CPUs too), so that its calls and timers do not queue behind the
/// attacker's tasks in this process's runtime: what it measures is the
/// server, and the OS's share of the load CPU, not a busy task queue.
struct HonestThread {
    /// Asks for a measurement; dropping it ends the thread.
    ask: tokio::sync::mpsc::Sender<Ask>,
}

impl HonestThread {
    /// Starts the thread, which connects and takes `hon.a`.
    async fn start(rig: &Rig) -> R<HonestThread> {
        let (addr, auth) = (rig.addr.clone(), rig.auth);
        let (ask, mut asked) = tokio::sync::mpsc::channel::<Ask>(1);
        let (ready_tx, ready) = tokio::sync::oneshot::channel::<R<()>>();
        std::thread::Builder::new()
            .name("honest".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("honest runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    let mut setup = match HonestSetup::new(&addr, auth).await {
                        Ok(s) => {
                            let _ = ready_tx.send(Ok(()));
                            s
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    while let Some((dur, reply)) = asked.recv().await {
                        let _ = reply.send(setup.measure(dur).await);
                    }
                });
            })
            .map_err(|e| format!("honest thread: {e}"))?;
        ready
            .await
            .map_err(|_| "the honest thread ended".to_string())??;
        Ok(HonestThread { ask })
    }

    /// The honest client's calls over the next `dur`.
    async fn measure(&self, dur: Duration) -> Honest {
        let (reply, figures) = tokio::sync::oneshot::channel();
        if self.ask.send((dur, reply)).await.is_err() {
            return Honest::default();
        }
        figures.await.unwrap_or_default()
    }
}

/// What one measurement window saw.
struct Window {
    /// The honest client's calls.
    honest: Honest,
    /// nats-server CPU seconds in the window.
    nats_cpu: f64,
    /// Tenure CPU seconds in the window.
    tenure_cpu: f64,
    /// Tenure's peak RSS in the window, MiB.
    rss_peak: f64,
    /// The window's length.
    secs: f64,
    /// Tenure's own p50 and p99 of the window's Renews (all of them the
    /// honest client's), as histogram bucket bounds, ms.
    server_renew: (f64, f64),
}

impl Window {
    /// `nats-server X s, tenure Y s CPU in Z s`.
    fn cpu_text(&self) -> String {
        format!(
            "CPU in {:.0} s: nats-server {:.2} s, tenure {:.2} s",
            self.secs, self.nats_cpu, self.tenure_cpu
        )
    }

    /// The honest Renews as the client and as Tenure saw them.
    fn renew_text(&self) -> String {
        format!(
            "{} (Tenure's own histogram: p50 <= {}, p99 <= {} ms)",
            self.honest.renew_text(),
            ms(self.server_renew.0),
            ms(self.server_renew.1)
        )
    }
}

/// Runs the honest client for `dur` while measuring the servers.
async fn window(rig: &Rig, honest: &HonestThread, dur: Duration) -> Window {
    let (nats_pid, tenure_pid) = (rig.nats.pid(), rig.tenure.pid());
    let m0 = rig.metrics().await;
    let (n0, t0) = (cpu_time(nats_pid), cpu_time(tenure_pid));
    let start = Instant::now();
    let peak = AtomicU64::new(rss_bytes(tenure_pid));
    let sample = async {
        while start.elapsed() < dur {
            peak.fetch_max(rss_bytes(tenure_pid), Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (h, ()) = tokio::join!(honest.measure(dur), sample);
    peak.fetch_max(rss_bytes(tenure_pid), Ordering::Relaxed);
    let (nats_cpu, tenure_cpu) = (cpu_time(nats_pid), cpu_time(tenure_pid));
    let secs = start.elapsed().as_secs_f64();
    let m1 = rig.metrics().await;
    let renews = |m: &str| histogram(m, "tenure_rpc_duration_seconds", "method=\"Renew\"");
    let (b0, b1) = (renews(&m0), renews(&m1));
    let buckets: Vec<(f64, f64)> = b1
        .iter()
        .map(|(le, n)| {
            (
                *le,
                n - b0.iter().find(|(l, _)| l == le).map_or(0.0, |b| b.1),
            )
        })
        .collect();
    Window {
        server_renew: (quantile(&buckets, 0.5), quantile(&buckets, 0.99)),
        honest: h,
        nats_cpu: nats_cpu.saturating_sub(n0).as_secs_f64(),
        tenure_cpu: tenure_cpu.saturating_sub(t0).as_secs_f64(),
        rss_peak: peak.load(Ordering::Relaxed) as f64 / 1_048_576.0,
        secs,
    }
}

/// The cumulative buckets `(le seconds, count)` of histogram `name`, summed
/// over the series whose labels contain `filter`, by bound.
fn histogram(text: &str, name: &str, filter: &str) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    let prefix = format!("{name}_bucket{{");
    for l in text.lines().filter(|l| l.starts_with(&prefix)) {
        let Some((series, value)) = l.rsplit_once(' ') else {
            continue;
        };
        if !series.contains(filter) {
            continue;
        }
        let Some(le) = series
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(|le| le.parse::<f64>().unwrap_or(f64::INFINITY))
        else {
            continue;
        };
        let n = value.parse::<f64>().unwrap_or(0.0);
        match out.iter_mut().find(|(l, _)| *l == le) {
            Some(b) => b.1 += n,
            None => out.push((le, n)),
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The upper bound, in ms, of the bucket holding quantile `q` of
/// cumulative buckets; NaN when they are empty.
fn quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let total = buckets.last().map_or(0.0, |b| b.1);
    if total <= 0.0 {
        return f64::NAN;
    }
    buckets
        .iter()
        .find(|(_, n)| *n >= q * total)
        .map_or(f64::NAN, |(le, _)| le * 1000.0)
}

/// One line of the table.
struct Row {
    /// What the attack is.
    attack: String,
    /// The bound now in force (flag, default).
    bound: String,
    /// The issue's figure before the fixes.
    before: String,
    /// What this run measured.
    now: String,
}

/// Runs the attacks `--only` selects (all by default) and prints the table.
pub async fn run(args: &crate::Args) -> R<()> {
    let began = Instant::now();
    let load_at_start = loadavg();
    let root = crate::repo_root();
    let nats_bin = find_program(
        "nats-server",
        args.nats_server.as_deref(),
        &[root.join(".tools/bin/nats-server")],
    )
    .ok_or("nats-server not found: run scripts/tools.sh or pass --nats-server")?;
    let tenure_bin = crate::tenure_bin(args)?;
    let tmp = tempfile::Builder::new()
        .prefix("tenure-hostile-")
        .tempdir_in(root.join("target"))
        .or_else(|_| tempfile::tempdir())
        .map_err(|e| format!("temp dir: {e}"))?;
    let ctx = Ctx {
        nats_bin,
        tenure_bin,
        dir: tmp.path().to_path_buf(),
        launcher: Launcher {
            cpus: args.server_cpus.clone(),
        },
        window: Duration::from_millis(args.duration_ms.unwrap_or(10_000)),
    };
    let want = |w: u32| args.only.is_empty() || args.only.contains(&w);
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mut add = |name: &str, r: R<Vec<Row>>| match r {
        Ok(mut v) => rows.append(&mut v),
        Err(e) => {
            eprintln!("hostile: {name}: {e}");
            notes.push(format!("{name}: {e}"));
        }
    };
    if want(0) {
        add("baseline", baseline(&ctx).await);
    }
    if want(1) {
        add("1. KeepAlive, no grants", keepalive_unread(&ctx, 1).await);
        add(
            "1. KeepAlive, denied entries",
            keepalive_unread(&ctx, 11).await,
        );
        add(
            "1. KeepAlive, slots freed",
            keepalive_unread(&ctx, 12).await,
        );
    }
    if want(2) {
        add("2. KeepAlive, no auth", keepalive_unread(&ctx, 2).await);
    }
    if want(3) {
        add("3. KeepAlive load, 10", keepalive_load(&ctx, 10).await);
        add("3. KeepAlive load, 200", keepalive_load(&ctx, 200).await);
    }
    if want(4) {
        add("4. semaphore waiters", semaphore_waiters(&ctx).await);
    }
    if want(5) {
        add("5. semaphore reads", semaphore_reads(&ctx).await);
    }
    if want(6) {
        add(
            "6. semaphore definitions",
            semaphore_definitions(&ctx).await,
        );
    }
    if want(7) {
        add("7. groups", groups(&ctx, None).await);
        add("7. groups, budget 4000", groups(&ctx, Some(4000)).await);
    }
    let mut text = String::from(
        "| attack | bound now in force (flag, default) | issue's before | measured now |\n|---|---|---|---|\n",
    );
    for r in &rows {
        text.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.attack, r.bound, r.before, r.now
        ));
    }
    if !notes.is_empty() {
        text.push_str("\nFailed:\n");
        for n in &notes {
            text.push_str(&format!("- {n}\n"));
        }
    }
    text.push_str(&format!(
        "\n{} (release build), nats-server {}; servers on CPUs {}, load on CPUs {}; {:.0} s windows ({:.0} s for groups); took {:.0} s; load average at start {load_at_start}, at end {}\n",
        ctx.tenure_bin.display(),
        ctx.nats_bin.display(),
        args.server_cpus.as_deref().unwrap_or("(any)"),
        args.load_cpus.as_deref().unwrap_or("(any)"),
        ctx.window.as_secs_f64(),
        2.0 * ctx.window.as_secs_f64(),
        began.elapsed().as_secs_f64(),
        loadavg()
    ));
    println!("{text}");
    if let Some(out) = &args.out {
        std::fs::write(out, &text).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    if notes.is_empty() {
        Ok(())
    } else {
        Err(format!("{} attack(s) failed", notes.len()))
    }
}

/// The 1-minute, 5-minute and 15-minute load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The honest client alone.
async fn baseline(ctx: &Ctx) -> R<Vec<Row>> {
    let rig = Rig::start(ctx, "baseline", true, &[]).await?;
    let honest = HonestThread::start(&rig).await?;
    let w = window(&rig, &honest, ctx.window).await;
    let now = format!(
        "honest Renew p50/p99 {}; Acquire {}; RSS {:.0} MiB; {}",
        w.renew_text(),
        w.honest.acquire_text(),
        rig.rss_mib(),
        w.cpu_text()
    );
    eprintln!("baseline: {now}");
    rig.stop().await;
    Ok(vec![Row {
        attack: "baseline: no attack".into(),
        bound: "-".into(),
        before: "honest Renew p50 2.7 ms, p99 5.7-6 ms; RSS 16 MB".into(),
        now,
    }])
}

/// One stream that never reads: its client (which owns the connection)
/// and its responses.
type Unread = (Client, tonic::Streaming<KeepAliveResponse>);

/// Attacks 1 (`which` 1: `nogrant`; 11: `attacker`, whose empty entries
/// are denied one by one) and 2 (no auth): streams sending 40 messages of
/// 1,000 empty entries each and never reading a reply.
async fn keepalive_unread(ctx: &Ctx, which: u32) -> R<Vec<Row>> {
    let (name, auth, who, streams) = match which {
        1 => ("ka-nogrant", true, "nogrant", 100),
        11 | 12 => ("ka-denied", true, "attacker", 100),
        _ => ("ka-noauth", false, "anonymous", 300),
    };
    // 12: 1b with room for the first wave's streams only, to see whether
    // the second wave finds their slots freed.
    let (name, extra): (&str, &[&str]) = if which == 12 {
        ("ka-slots", &["--max-keepalive-streams", "100"])
    } else {
        (name, &[])
    };
    let messages = 40;
    let rig = Rig::start(ctx, name, auth, extra).await?;
    let honest = HonestThread::start(&rig).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss0 = rig.rss_mib();
    let m0 = rig.metrics().await;
    let wave = Wave::open(&rig, who, streams, messages).await?;
    let (refused, open_s) = (wave.refused.clone(), wave.open_s);
    let w = window(&rig, &honest, ctx.window).await;
    let rss_end = rig.rss_mib();
    let m1 = rig.metrics().await;
    let codes = delta(
        &metric_by(&m0, "tenure_rpc_requests_total", "KeepAlive", "code"),
        &metric_by(&m1, "tenure_rpc_requests_total", "KeepAlive", "code"),
    );
    let answered: f64 = codes.values().sum::<f64>() + 0.0;
    let limits = delta(
        &metric_by(&m0, "tenure_limit_rejections_total", "", "limit"),
        &metric_by(&m1, "tenure_limit_rejections_total", "", "limit"),
    );
    let open = wave.kept.len();
    wave.leave();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_closed = rig.rss_mib();
    // A second wave, the same again: whether the memory kept after the
    // first is reused (allocator) or added to (held).
    let again = Wave::open(&rig, who, streams, messages).await?;
    let mut rss_again = rig.rss_mib();
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        rss_again = rss_again.max(rig.rss_mib());
    }
    let (again_len, again_refused) = (again.kept.len(), again.refused.clone());
    again.leave();
    let sent = streams * messages * 1000;
    let now = format!(
        "{open} of {streams} streams open (refused: {}; {open_s:.1} s to open); KeepAlive entries answered: {answered:.0} of {sent} sent ({}); limit refusals: {}; RSS {rss0:.0} MiB -> peak {:.0} MiB, {rss_end:.0} MiB at the end, {rss_closed:.0} MiB 2 s after the clients left, peak {rss_again:.0} MiB in 3 s of a second identical wave ({} open, refused: {}); honest Renew p50/p99 {}; Acquire {}",
        tally(&refused),
        fmt_map(&codes),
        fmt_map(&limits),
        w.rss_peak,
        again_len,
        tally(&again_refused),
        w.renew_text(),
        w.honest.acquire_text(),
    );
    eprintln!("{name}: {now}");
    rig.stop().await;
    let row = match which {
        1 => Row {
            attack: format!("1. KeepAlive, no grants: {streams} streams of `nogrant`, {messages} msgs x 1,000 empty entries (2 KB), never read"),
            bound: "no KeepAlive stream for an identity without a renew grant (PERMISSION_DENIED at open); reply bytes `--max-keepalive-reply-bytes` 1 MiB per stream, `--max-keepalive-reply-total-bytes` 64 MiB per replica".into(),
            before: "RSS 16 MB -> 550 MB".into(),
            now,
        },
        12 => Row {
            attack: "1c. 1b with `--max-keepalive-streams 100`: do the second wave's 100 streams find the first wave's slots freed?".into(),
            bound: "a stream's slot and state are freed when its client goes (`tx.closed()`)".into(),
            before: "-".into(),
            now,
        },
        11 => Row {
            attack: "1b. same, from `attacker` (a renew grant on `att.`; each empty entry denied)".into(),
            bound: "`--max-keepalive-reply-bytes` 1 MiB, `--max-keepalive-reply-total-bytes` 64 MiB (past them the stream is not read); errors repeated as `same_as`; 64 KiB HTTP/2 stream window".into(),
            before: "(the issue's attack 1 with a token that may open streams)".into(),
            now,
        },
        _ => Row {
            attack: format!("2. KeepAlive, no auth: {streams} streams x {messages} msgs of 1,000 empty entries, never read"),
            bound: "`--max-keepalive-reply-bytes` 1 MiB, `--max-keepalive-reply-total-bytes` 64 MiB; `--max-keepalive-streams` 10000".into(),
            before: "RSS -> 1.24 GB".into(),
            now,
        },
    };
    Ok(vec![row])
}

/// A wave of KeepAlive streams that never read, on a runtime of their own
/// (its connections' tasks run there), so that the wave can leave as a
/// client process would: every connection closed at once.
struct Wave {
    /// Runs the wave's connections.
    rt: tokio::runtime::Runtime,
    /// The streams open.
    kept: Vec<Unread>,
    /// The streams refused, by reason.
    refused: BTreeMap<String, usize>,
    /// Seconds it took to open them.
    open_s: f64,
}

impl Wave {
    /// Opens `streams` KeepAlive streams of `who`, each on its own
    /// connection with 64 KiB receive windows, sending `messages` messages
    /// of 1,000 empty entries (2 KB each) and never reading.
    async fn open(rig: &Rig, who: &str, streams: usize, messages: usize) -> R<Wave> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| format!("attacker runtime: {e}"))?;
        let (addr, auth, who) = (rig.addr.clone(), rig.auth, who.to_string());
        let opened_at = Instant::now();
        let results: Vec<R<Unread>> = rt
            .spawn(async move {
                let message = KeepAliveRequest {
                    entries: vec![KeepAliveEntry::default(); 1000],
                };
                futures::stream::iter(0..streams)
                    .map(|_| {
                        let (message, addr, who) = (message.clone(), &addr, &who);
                        async move {
                            let mut c = connect(addr, auth, who, true).await?;
                            let requests = futures::stream::iter(vec![message; messages])
                                .chain(futures::stream::pending());
                            match tokio::time::timeout(CALL_TIMEOUT, c.keep_alive(requests)).await {
                                Ok(Ok(r)) => Ok((c, r.into_inner())),
                                Ok(Err(s)) => Err(reason(&s)),
                                Err(_) => Err("open timed out (10 s)".into()),
                            }
                        }
                    })
                    .buffer_unordered(32)
                    .collect()
                    .await
            })
            .await
            .map_err(|e| format!("attacker task: {e}"))?;
        let mut kept = Vec::new();
        let mut refused = BTreeMap::new();
        for r in results {
            match r {
                Ok(u) => kept.push(u),
                Err(e) => *refused.entry(e).or_insert(0) += 1,
            }
        }
        Ok(Wave {
            rt,
            kept,
            refused,
            open_s: opened_at.elapsed().as_secs_f64(),
        })
    }

    /// The clients go: their runtime stops, closing every connection.
    fn leave(self) {
        drop(self.kept);
        self.rt.shutdown_background();
    }
}

/// `k v, ...` of a metric delta.
fn fmt_map(m: &BTreeMap<String, f64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A lease the attacker renews over KeepAlive: name, key, last revision.
type Renewable = (String, String, AtomicU64);

/// What the attacker's KeepAlive streams got.
#[derive(Default)]
struct KaTally {
    /// Entries renewed.
    renewed: AtomicUsize,
    /// Entries that failed.
    failed: AtomicUsize,
    /// Entry errors by reason.
    reasons: Mutex<BTreeMap<String, usize>>,
    /// Streams refused or ended, by reason.
    streams: Mutex<BTreeMap<String, usize>>,
}

impl KaTally {
    /// Counts `why` in `map`.
    fn note(map: &Mutex<BTreeMap<String, usize>>, why: String) {
        *map.lock().expect("not poisoned").entry(why).or_insert(0) += 1;
    }
}

/// One attacking KeepAlive stream: 4 messages of every lease in flight,
/// the next sent as each answer arrives, until `stop`.
async fn renewing_stream(
    mut c: Client,
    leases: Arc<Vec<Renewable>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    tally: Arc<KaTally>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<KeepAliveRequest>(8);
    let requests =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut responses = match c.keep_alive(requests).await {
        Ok(r) => r.into_inner(),
        Err(s) => {
            KaTally::note(&tally.streams, format!("refused: {}", reason(&s)));
            return;
        }
    };
    let message = || KeepAliveRequest {
        entries: leases
            .iter()
            .enumerate()
            .map(|(i, (name, key, rev))| KeepAliveEntry {
                id: i as u64,
                name: name.clone(),
                expected_revision: rev.load(Ordering::Relaxed),
                lease_key: key.clone(),
                ttl: None,
                slot: 0,
            })
            .collect(),
    };
    for _ in 0..4 {
        if tx.send(message()).await.is_err() {
            return;
        }
    }
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            m = responses.message() => match m {
                Ok(Some(r)) => {
                    for res in r.results {
                        match res.outcome {
                            Some(Outcome::Lease(l)) => {
                                if let Some((_, _, rev)) = leases.get(res.id as usize) {
                                    rev.fetch_max(l.revision, Ordering::Relaxed);
                                }
                                tally.renewed.fetch_add(1, Ordering::Relaxed);
                            }
                            Some(Outcome::Error(e)) => {
                                tally.failed.fetch_add(1, Ordering::Relaxed);
                                KaTally::note(&tally.reasons, e.reason);
                            }
                            None => KaTally::note(&tally.reasons, "no outcome".into()),
                        }
                    }
                    if tx.send(message()).await.is_err() {
                        KaTally::note(&tally.streams, "closed".into());
                        break;
                    }
                }
                Ok(None) => {
                    KaTally::note(&tally.streams, "ended".into());
                    break;
                }
                Err(s) => {
                    KaTally::note(&tally.streams, format!("ended: {}", reason(&s)));
                    break;
                }
            },
        }
    }
}

/// Attack 3: the attacker holds 250 leases and renews them over `streams`
/// KeepAlive streams, each with 4 messages of 250 entries in flight.
async fn keepalive_load(ctx: &Ctx, streams: usize) -> R<Vec<Row>> {
    let rig = Rig::start(ctx, &format!("ka-load-{streams}"), true, &[]).await?;
    let honest = HonestThread::start(&rig).await?;
    let setup = rig.client("attacker", false).await?;
    let held: Vec<R<Renewable>> = futures::stream::iter(0..250)
        .map(|i| {
            let mut c = setup.clone();
            async move {
                let name = format!("att.k.{i}");
                let key = format!("att-key-{i:012}");
                let r = c
                    .acquire(AcquireRequest {
                        name: name.clone(),
                        holder: "attacker".into(),
                        ttl: Some(secs(120)),
                        lease_key: key.clone(),
                        ..Default::default()
                    })
                    .await
                    .map_err(|s| format!("attacker Acquire {name}: {}", reason(&s)))?;
                let rev = r.into_inner().lease.ok_or("no lease")?.revision;
                Ok((name, key, AtomicU64::new(rev)))
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let leases: Arc<Vec<Renewable>> = Arc::new(held.into_iter().collect::<R<_>>()?);
    let kat = Arc::new(KaTally::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let c = rig.client("attacker", false).await?;
        tasks.push(tokio::spawn(renewing_stream(
            c,
            leases.clone(),
            stop_rx.clone(),
            kat.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let m0 = rig.metrics().await;
    let (r0, f0) = (
        kat.renewed.load(Ordering::Relaxed),
        kat.failed.load(Ordering::Relaxed),
    );
    let w = window(&rig, &honest, ctx.window).await;
    let (r1, f1) = (
        kat.renewed.load(Ordering::Relaxed),
        kat.failed.load(Ordering::Relaxed),
    );
    let m1 = rig.metrics().await;
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    let limits = delta(
        &metric_by(&m0, "tenure_limit_rejections_total", "", "limit"),
        &metric_by(&m1, "tenure_limit_rejections_total", "", "limit"),
    );
    let reasons = kat.reasons.lock().expect("not poisoned").clone();
    let stream_ends = kat.streams.lock().expect("not poisoned").clone();
    let now = format!(
        "attacker entries in the window: {:.0}/s renewed, {:.0}/s failed (all run: {}); streams refused/ended: {}; limit refusals: {}; honest Renew p50/p99 {}; Acquire {}; {}",
        (r1 - r0) as f64 / w.secs,
        (f1 - f0) as f64 / w.secs,
        tally(&reasons),
        tally(&stream_ends),
        fmt_map(&limits),
        w.renew_text(),
        w.honest.acquire_text(),
        w.cpu_text(),
    );
    eprintln!("ka-load-{streams}: {now}");
    rig.stop().await;
    Ok(vec![Row {
        attack: format!("3. KeepAlive load: {streams} `attacker` streams x 4 msgs in flight x 250 entries over 250 held leases, resent as answered"),
        bound: "a renewal permit per entry that reaches NATS: `--max-concurrent-requests-per-identity` 500 (`--max-concurrent-requests` 1000), then `--reserved-renewals-per-identity` 50 of `--reserved-renewals` 200; `--max-keepalive-in-flight` 4096".into(),
        before: if streams <= 10 {
            "honest Renew p50 2.7 ms -> 671 ms".into()
        } else {
            "honest Acquire times out at 10 s".into()
        },
        now,
    }])
}

/// How each of many calls ended, as they end.
#[derive(Default)]
struct Outcomes {
    /// Calls that ended, by outcome.
    ended: Mutex<BTreeMap<String, usize>>,
}

impl Outcomes {
    /// Counts one ended call.
    fn end(&self, what: String) {
        KaTally::note(&self.ended, what);
    }

    /// Calls ended so far, by outcome, and their number.
    fn snapshot(&self) -> (BTreeMap<String, usize>, usize) {
        let m = self.ended.lock().expect("not poisoned").clone();
        let n = m.values().sum();
        (m, n)
    }
}

/// Attack 4: 300 waiting Acquires (30 s) of the attacker on a full 8-slot
/// semaphore.
async fn semaphore_waiters(ctx: &Ctx) -> R<Vec<Row>> {
    let waiters = 300;
    let rig = Rig::start(ctx, "sem-waiters", true, &[]).await?;
    let honest = HonestThread::start(&rig).await?;
    let mut setup = rig.client("attacker", false).await?;
    for i in 0..8 {
        setup
            .acquire(AcquireRequest {
                name: "att.sem".into(),
                holder: format!("h{i}"),
                ttl: Some(secs(120)),
                limit: 8,
                ..Default::default()
            })
            .await
            .map_err(|s| format!("attacker slot {i}: {}", reason(&s)))?;
    }
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(rig.client("attacker", false).await?);
    }
    let outcomes = Arc::new(Outcomes::default());
    let m0 = rig.metrics().await;
    let tasks: Vec<_> = (0..waiters)
        .map(|i| {
            let mut c = conns[i % conns.len()].clone();
            let outcomes = outcomes.clone();
            tokio::spawn(async move {
                let r = c
                    .acquire(AcquireRequest {
                        name: "att.sem".into(),
                        holder: format!("w{i}"),
                        ttl: Some(secs(30)),
                        limit: 8,
                        wait: Some(secs(30)),
                        ..Default::default()
                    })
                    .await;
                outcomes.end(match r {
                    Ok(_) => "granted".into(),
                    Err(s) => reason(&s),
                });
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (early, _) = outcomes.snapshot();
    let w = window(&rig, &honest, ctx.window).await;
    let (ended, n_ended) = outcomes.snapshot();
    let m1 = rig.metrics().await;
    for t in &tasks {
        t.abort();
    }
    let limits = delta(
        &metric_by(&m0, "tenure_limit_rejections_total", "", "limit"),
        &metric_by(&m1, "tenure_limit_rejections_total", "", "limit"),
    );
    let now = format!(
        "{} of {waiters} still waiting at the end of the window; ended: {} (2 s after sending: {}); limit refusals: {}; honest Renew p50/p99 {}; Acquire {}; {}",
        waiters - n_ended,
        tally(&ended),
        tally(&early),
        fmt_map(&limits),
        w.renew_text(),
        w.honest.acquire_text(),
        w.cpu_text(),
    );
    eprintln!("sem-waiters: {now}");
    rig.stop().await;
    Ok(vec![Row {
        attack: format!("4. semaphore waiters: {waiters} waiting Acquires (wait 30 s) on a full 8-slot semaphore"),
        bound: "`--max-waiters` 64 per semaphore and replica (TOO_MANY_WAITERS); waiters wake on the watcher's events, 15 s backstop poll (was 1 s)".into(),
        before: "all 300 admitted; honest Renew p99 6 ms -> 2.75 s, Acquire 2.4-8.1 s".into(),
        now,
    }])
}

/// Attack 5: 8 `viewer` clients looping GetLease on a 256-slot semaphore
/// with 3 holders.
async fn semaphore_reads(ctx: &Ctx) -> R<Vec<Row>> {
    let rig = Rig::start(ctx, "sem-reads", true, &[]).await?;
    let honest = HonestThread::start(&rig).await?;
    let mut setup = rig.client("attacker", false).await?;
    for i in 0..3 {
        setup
            .acquire(AcquireRequest {
                name: "att.sem256".into(),
                holder: format!("h{i}"),
                ttl: Some(secs(120)),
                limit: 256,
                ..Default::default()
            })
            .await
            .map_err(|s| format!("attacker slot {i}: {}", reason(&s)))?;
    }
    let ok = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(Outcomes::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut c = rig.client("viewer", false).await?;
        let (ok, errors, stop) = (ok.clone(), errors.clone(), stop_rx.clone());
        tasks.push(tokio::spawn(async move {
            while !*stop.borrow() {
                match c
                    .get_lease(GetLeaseRequest {
                        name: "att.sem256".into(),
                    })
                    .await
                {
                    Ok(r) => {
                        let r = r.into_inner();
                        if r.limit == 256 && r.holders.len() == 3 {
                            ok.fetch_add(1, Ordering::Relaxed);
                        } else {
                            errors.end(format!(
                                "limit {} with {} holders",
                                r.limit,
                                r.holders.len()
                            ));
                        }
                    }
                    Err(s) => errors.end(reason(&s)),
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let g0 = ok.load(Ordering::Relaxed);
    let w = window(&rig, &honest, ctx.window).await;
    let g1 = ok.load(Ordering::Relaxed);
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    let (errs, _) = errors.snapshot();
    let now = format!(
        "{:.0} GetLease/s (each 256 slots, 3 holders; wrong or failed: {}); honest Renew p50/p99 {}; Acquire {}; {}",
        (g1 - g0) as f64 / w.secs,
        tally(&errs),
        w.renew_text(),
        w.honest.acquire_text(),
        w.cpu_text(),
    );
    eprintln!("sem-reads: {now}");
    rig.stop().await;
    Ok(vec![Row {
        attack: "5. semaphore reads: 8 `viewer` clients looping GetLease on a 256-slot semaphore with 3 holders".into(),
        bound: "GetLease of a semaphore reads the definition and takes holders from the shared watcher's snapshot (not 257 reads); leader slot reads at most 256 in flight per replica".into(),
        before: "honest Renew p50 2.7 -> 42 ms".into(),
        now,
    }])
}

/// Attack 6: stream bytes per Acquire of a fresh 256-slot semaphore.
async fn semaphore_definitions(ctx: &Ctx) -> R<Vec<Row>> {
    let count = 100u64;
    let rig = Rig::start(ctx, "sem-defs", true, &[]).await?;
    let nats = async_nats::connect(&rig.nats_url)
        .await
        .map_err(|e| format!("NATS: {e}"))?;
    let js = async_nats::jetstream::new(nats);
    let state = || async {
        let mut s = js
            .get_stream("KV_tenure")
            .await
            .map_err(|e| format!("stream KV_tenure: {e}"))?;
        let info = s.info().await.map_err(|e| format!("stream info: {e}"))?;
        Ok::<_, String>((info.state.bytes, info.state.messages))
    };
    let mut c = rig.client("attacker", false).await?;
    let (b0, n0) = state().await?;
    let started = Instant::now();
    for i in 0..count {
        c.acquire(AcquireRequest {
            name: format!("att.def.{i}"),
            holder: "attacker".into(),
            ttl: Some(secs(120)),
            limit: 256,
            ..Default::default()
        })
        .await
        .map_err(|s| format!("attacker Acquire att.def.{i}: {}", reason(&s)))?;
    }
    let took = started.elapsed();
    let (b1, n1) = state().await?;
    let now = format!(
        "{:.0} bytes and {:.1} messages of stream growth per Acquire ({count} fresh 256-slot semaphores: {} -> {} bytes, {} -> {} messages; {:.1} ms per Acquire)",
        (b1 - b0) as f64 / count as f64,
        (n1 - n0) as f64 / count as f64,
        b0,
        b1,
        n0,
        n1,
        took.as_secs_f64() * 1000.0 / count as f64,
    );
    eprintln!("sem-defs: {now}");
    rig.stop().await;
    Ok(vec![Row {
        attack: "6. semaphore definitions: Acquire of 100 fresh 256-slot semaphores".into(),
        bound: "a first definition is one atomic batch of 2 messages (definition + slot), no tombstones; `--max-semaphore-limit` 256".into(),
        before: "58.6 KB of stream per Acquire".into(),
        now,
    }])
}

/// Attack 7: 1,000 waiting AcquireGroups (60 s) of the attacker, 2 to 4
/// members each over 100 held names; `budget` sets
/// `--max-waiting-acquires-per-identity`.
async fn groups(ctx: &Ctx, budget: Option<u32>) -> R<Vec<Row>> {
    let (count, names) = (1000usize, 100usize);
    let flag = budget.map(|b| b.to_string());
    let extra: Vec<&str> = match &flag {
        Some(b) => vec!["--max-waiting-acquires-per-identity", b.as_str()],
        None => vec![],
    };
    let tag = budget.map_or("groups".to_string(), |b| format!("groups-{b}"));
    let rig = Rig::start(ctx, &tag, true, &extra).await?;
    let honest = HonestThread::start(&rig).await?;
    let setup = rig.client("attacker", false).await?;
    let held: Vec<R<()>> = futures::stream::iter(0..names)
        .map(|i| {
            let mut c = setup.clone();
            async move {
                c.acquire(AcquireRequest {
                    name: format!("att.g.{i}"),
                    holder: "attacker".into(),
                    ttl: Some(secs(180)),
                    ..Default::default()
                })
                .await
                .map(|_| ())
                .map_err(|s| format!("attacker Acquire att.g.{i}: {}", reason(&s)))
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    held.into_iter().collect::<R<Vec<()>>>()?;
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(rig.client("attacker", false).await?);
    }
    let outcomes = Arc::new(Outcomes::default());
    let m0 = rig.metrics().await;
    let members_total: usize = (0..count).map(|j| 2 + j % 3).sum();
    let tasks: Vec<_> = (0..count)
        .map(|j| {
            let mut c = conns[j % conns.len()].clone();
            let outcomes = outcomes.clone();
            // 2 to 4 distinct members: steps of 37 over 100 names.
            let members: Vec<String> = (0..2 + j % 3)
                .map(|k| format!("att.g.{}", (j + 37 * k) % names))
                .collect();
            tokio::spawn(async move {
                let r = c
                    .acquire_group(AcquireGroupRequest {
                        names: members,
                        holder: format!("g{j}"),
                        ttl: Some(secs(30)),
                        wait: Some(secs(60)),
                        ..Default::default()
                    })
                    .await;
                outcomes.end(match r {
                    Ok(_) => "granted".into(),
                    Err(s) => reason(&s),
                });
            })
        })
        .collect();
    // Let every group be admitted or refused and make its first tries.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (early, early_n) = outcomes.snapshot();
    let before = rig.metrics().await;
    let w = window(&rig, &honest, 2 * ctx.window).await;
    let after = rig.metrics().await;
    let (ended, n_ended) = outcomes.snapshot();
    for t in &tasks {
        t.abort();
    }
    let tries = metric(&after, "tenure_group_refusals_total", &[])
        - metric(&before, "tenure_group_refusals_total", &[]);
    let tries_setup = metric(&before, "tenure_group_refusals_total", &[])
        - metric(&m0, "tenure_group_refusals_total", &[]);
    let limits = delta(
        &metric_by(&m0, "tenure_limit_rejections_total", "", "limit"),
        &metric_by(&after, "tenure_limit_rejections_total", "", "limit"),
    );
    let now = format!(
        "{} of {count} groups waiting ({members_total} members asked for); refused: {} ({early_n} ended in the first 3 s: {}); group tries in the window: {tries:.0} (first 3 s: {tries_setup:.0}); limit refusals: {}; honest Renew p50/p99 {}; Acquire {}; {}",
        count - n_ended,
        tally(&ended),
        tally(&early),
        fmt_map(&limits),
        w.renew_text(),
        w.honest.acquire_text(),
        w.cpu_text(),
    );
    eprintln!("{tag}: {now}");
    rig.stop().await;
    Ok(vec![Row {
        attack: match budget {
            None => format!("7. groups: {count} waiting AcquireGroups (wait 60 s), 2-4 members over {names} held names"),
            Some(b) => format!("7b. same, `--max-waiting-acquires-per-identity {b}` (all wait: the polling fix alone)"),
        },
        bound: "a waiting group takes one place per member: `--max-waiting-acquires-per-identity` 1000, `--max-waiting-acquires` 10000; wake on member events and TURN, 15 s backstop poll (was 1 s)".into(),
        before: "nats-server 19.7 s CPU in 20 s; honest Renew p99 5.7 -> 776 ms".into(),
        now,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited protobuf field.
    fn ld(field: u8, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![(field << 3) | 2, bytes.len() as u8];
        v.extend_from_slice(bytes);
        v
    }

    /// The ErrorInfo reason and `limit` come out of a status's details.
    #[test]
    fn reasons_decode() {
        let entry = [ld(1, b"limit"), ld(2, b"--max-waiters")].concat();
        let info = [
            ld(1, b"TOO_MANY_WAITERS"),
            ld(2, b"tenure.v1"),
            ld(3, &entry),
        ]
        .concat();
        let any = [
            ld(1, b"type.googleapis.com/google.rpc.ErrorInfo"),
            ld(2, &info),
        ]
        .concat();
        let status = [vec![0x08, 8], ld(2, b"full"), ld(3, &any)].concat();
        let s = Status::with_details(tonic::Code::ResourceExhausted, "full", status.into());
        assert_eq!(reason(&s), "TOO_MANY_WAITERS (--max-waiters)");
        assert_eq!(
            reason(&Status::unavailable("x")),
            format!("{:?}", tonic::Code::Unavailable)
        );
    }

    /// Counters and histogram buckets are read from the Prometheus text.
    #[test]
    fn metrics_parse() {
        let text = "# HELP x\n\
            tenure_rpc_requests_total{code=\"OK\",method=\"KeepAlive\"} 3\n\
            tenure_rpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"KeepAlive\"} 5\n\
            tenure_rpc_requests_total{code=\"OK\",method=\"Renew\"} 7\n\
            tenure_rpc_duration_seconds_bucket{code=\"OK\",method=\"Renew\",le=\"0.001\"} 50\n\
            tenure_rpc_duration_seconds_bucket{code=\"OK\",method=\"Renew\",le=\"0.01\"} 99\n\
            tenure_rpc_duration_seconds_bucket{code=\"OK\",method=\"Renew\",le=\"+Inf\"} 100\n";
        let by = metric_by(text, "tenure_rpc_requests_total", "KeepAlive", "code");
        assert_eq!(by.get("OK"), Some(&3.0));
        assert_eq!(by.get("INVALID_ARGUMENT"), Some(&5.0));
        assert_eq!(
            metric(text, "tenure_rpc_requests_total", &["method=\"Renew\""]),
            7.0
        );
        let h = histogram(text, "tenure_rpc_duration_seconds", "method=\"Renew\"");
        assert_eq!(h.len(), 3);
        assert_eq!(quantile(&h, 0.5), 1.0);
        assert_eq!(quantile(&h, 0.99), 10.0);
        assert!(quantile(&h, 1.0).is_infinite());
    }
}
