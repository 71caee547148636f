//! One workload client process: a holder that follows the rules a Tenure
//! client must follow, and records everything it does.
//!
//! The session loop: Acquire a random name (with a wait) under a fresh lease
//! key; while holding, Renew every TTL/3, and do "work" (a fenced write to
//! the store carrying the token) only while `now + work time < deadline`,
//! where the deadline is the send time of the last successful Acquire/Renew
//! plus the granted TTL minus the margin, on the shared monotonic clock.
//! After a random hold time the holder either releases or *abandons* the
//! lease: stops renewing but keeps working right up to its deadline, which
//! is the tightest case for the next holder. A call whose outcome is unknown
//! (timeout, unavailable) is retried on the next Tenure address, and an
//! Acquire is retried with the same lease key so a lost reply cannot make
//! two holdings.
//!
//! With a negative margin (the negative control) the deadline lies past the
//! lease's expiry, so holders act after losing the lease: the checker must
//! report it and the store must refuse their writes.
//!
//! Every write goes the way the fence kits' README asks of an application:
//! the grant's fence proof is verified against the keyset pinned from
//! `GetFenceKeys` and checked to be for the lease name (and slot) written
//! (`admit`), and only then does the store's kit see the token (`store`).
//! With `--late-writes` a holder also sends one more write with its old
//! token and proof a TTL after each holding ended (a zombie write, as a
//! holder that slept through the end of its lease would): the kit must
//! refuse it once a newer holder has written. With `--forge` it is also a
//! hostile client (`hostile`).
//!
//! With `--keepalive` single leases (and semaphore slots) are renewed on a
//! KeepAlive stream instead of unary Renew calls; with `--lock-delay-s`
//! they are acquired with a lock delay; with `--wait-ms` and
//! `--hold-max-ms` the client queues (a fixed wait, short holds, always
//! released), which makes long, fast-moving queues. With `--mode` it takes
//! a read-write lock (each Acquire exclusive or shared; `mixed`: either,
//! at random), each holding in a slot of its own like a semaphore's, and
//! records the mode on its Acquire lines (property 10).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use rand::distr::Alphanumeric;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tenure::proto::election_service_client::ElectionServiceClient;
use tenure::proto::keep_alive_result::Outcome as KeepAliveOutcome;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{
    AcquireGroupRequest, AcquireRequest, CampaignRequest, GroupMember, KeepAliveEntry,
    KeepAliveRequest, KeepAliveResponse, Lease, LockMode, ProclaimRequest, ReleaseGroupRequest,
    ReleaseRequest, RenewGroupRequest, RenewRequest, ResignRequest,
};
use tenure_fence::Keyset;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;
use tonic_types::StatusExt;

use crate::admit::{self, Admitted};
use crate::checker::{HANDOVER, KEEPALIVE, PROOF_REFUSED, STALE};
use crate::clock::{mono_ns, ms_to_ns, real_ms};
use crate::forge::{Book, Genuine};
use crate::history::{Mode, Op, OpKind, Phase, Recorder};
use crate::hostile;
use crate::store::{self, Store, Written};

/// Settings of one client process (passed by the runner).
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// Client id, also the lease holder name (e.g. `c3.1`).
    #[arg(long)]
    pub id: String,
    /// Tenure addresses (host:port), comma-separated; failover in order.
    #[arg(long, value_delimiter = ',', required = true)]
    pub tenure: Vec<String>,
    /// Lease names to contend for, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub names: Vec<String>,
    /// Shortest TTL to ask for, seconds.
    #[arg(long, default_value_t = 1)]
    pub ttl_min: u64,
    /// Longest TTL to ask for, seconds.
    #[arg(long, default_value_t = 3)]
    pub ttl_max: u64,
    /// Safety margin subtracted from the deadline, ms (negative: act late).
    #[arg(long, default_value_t = 50, allow_hyphen_values = true)]
    pub margin_ms: i64,
    /// Simulated work before each write, ms (a pause here makes a stale write).
    #[arg(long, default_value_t = 20)]
    pub work_ms: u64,
    /// Stop at this monotonic time (ns, see `clock`).
    #[arg(long)]
    pub until_ns: u64,
    /// The store written to.
    #[arg(long, value_enum, default_value = "postgres")]
    pub store: store::Kind,
    /// PostgreSQL connection string (the PostgreSQL store).
    #[arg(long)]
    pub pg: Option<String>,
    /// Redis URL (the Redis store).
    #[arg(long)]
    pub redis: Option<String>,
    /// The keyset fence proofs are verified against (the text form, as
    /// GetFenceKeys and `tenure fence-keys` give it).
    #[arg(long)]
    pub keyset: PathBuf,
    /// Prefix of the store resources (one resource per lease name).
    #[arg(long)]
    pub prefix: String,
    /// Write without the kit's fence call (negative control only).
    #[arg(long)]
    pub unfenced: bool,
    /// After each holding, one more write with its old token and proof, a
    /// TTL after it ended (a zombie write the kit must refuse).
    #[arg(long)]
    pub late_writes: bool,
    /// Also send forged writes (the hostile client of
    /// `negative-forged-tokens`).
    #[arg(long)]
    pub forge: bool,
    /// Test fault: admit every token without checking its proof (needs
    /// TENURE_TEST_FAULTS=1; see `admit`).
    #[arg(long, hide = true)]
    pub no_proof_check: bool,
    /// History file to append to.
    #[arg(long)]
    pub out: PathBuf,
    /// Take part in elections instead of taking leases: Campaign instead of
    /// Acquire, every other renewal a Proclaim, Resign instead of Release.
    #[arg(long)]
    pub election: bool,
    /// Take a counting semaphore of this limit instead of a lock (0: a
    /// lock). Each holding gets a slot; the store keeps one fence per slot.
    #[arg(long, default_value_t = 0)]
    pub limit: u32,
    /// Take groups of this many names with AcquireGroup (renewed and
    /// released with RenewGroup/ReleaseGroup) instead of single leases
    /// (0: single leases). Each member is recorded as its own holding
    /// (`<holding>@<name>`) with the group's holding id beside it.
    #[arg(long, default_value_t = 0)]
    pub group: usize,
    /// Negative control of groups: take the group's members one by one
    /// with single Acquires and still record them as one group.
    #[arg(long)]
    pub fake_group: bool,
    /// Poll instead of waiting: Acquire without a wait, and after a
    /// refusal try again within 2 ms (a client that polls for a name).
    #[arg(long)]
    pub poll: bool,
    /// Renew single leases (and semaphore slots) on a KeepAlive stream,
    /// one entry per renewal, instead of with unary Renew calls.
    #[arg(long)]
    pub keepalive: bool,
    /// Acquire single leases with this lock delay, seconds (0: none):
    /// after such a holding expires or is revoked, nobody may take the
    /// name for this long.
    #[arg(long, default_value_t = 0)]
    pub lock_delay_s: u64,
    /// Wait this long in every Acquire, ms, instead of half the TTL (a
    /// queueing client: the TTL must exceed it by the hold time).
    #[arg(long)]
    pub wait_ms: Option<u64>,
    /// Hold each lease at most this long, ms, and always release it (a
    /// queueing client: short holds, many handoffs, long queues).
    #[arg(long)]
    pub hold_max_ms: Option<u64>,
    /// Take a read-write lock instead of a lock: every Acquire
    /// `exclusive`, `shared`, or `mixed` (each exclusive or shared at
    /// random, half and half). Each holding gets a slot (renewed and
    /// released with it, as a semaphore's); the store keeps one fence per
    /// slot.
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
}

/// The modes a client takes read-write locks in (`--mode`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeArg {
    /// Every Acquire exclusive.
    Exclusive,
    /// Every Acquire shared.
    Shared,
    /// Each Acquire exclusive or shared at random, half and half.
    Mixed,
}

/// The `LockMode` of `mode` on the wire.
fn lock_mode(mode: Option<Mode>) -> LockMode {
    match mode {
        None => LockMode::Unspecified,
        Some(Mode::Exclusive) => LockMode::Exclusive,
        Some(Mode::Shared) => LockMode::Shared,
    }
}

/// Tenure replicas with failover.
struct Tenure {
    /// One lazily connected client per address.
    clients: Vec<LeaseServiceClient<Channel>>,
    /// The election service over the same connections.
    elections: Vec<ElectionServiceClient<Channel>>,
    /// The one in use.
    current: usize,
    /// The KeepAlive stream open on the replica in use, if any.
    keepalive: Option<KeepAliveStream>,
}

/// One KeepAlive stream: requests go in through `tx`, each answered in
/// order on `rx`.
struct KeepAliveStream {
    /// The request side.
    tx: futures::channel::mpsc::Sender<KeepAliveRequest>,
    /// The answers.
    rx: tonic::Streaming<KeepAliveResponse>,
}

impl Tenure {
    /// Clients for every address (connections are made on first use).
    fn new(addrs: &[String]) -> Result<Tenure, String> {
        let channels = addrs
            .iter()
            .map(|a| {
                Endpoint::from_shared(format!("http://{a}"))
                    .map(|e| e.connect_timeout(Duration::from_millis(300)).connect_lazy())
                    .map_err(|e| format!("bad Tenure address {a:?}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Tenure {
            clients: channels
                .iter()
                .cloned()
                .map(LeaseServiceClient::new)
                .collect(),
            elections: channels
                .into_iter()
                .map(ElectionServiceClient::new)
                .collect(),
            current: 0,
            keepalive: None,
        })
    }

    /// The client in use.
    fn client(&mut self) -> &mut LeaseServiceClient<Channel> {
        &mut self.clients[self.current]
    }

    /// The election client in use.
    fn elections(&mut self) -> &mut ElectionServiceClient<Channel> {
        &mut self.elections[self.current]
    }

    /// Moves to the next address after a call whose outcome is unknown.
    fn fail_over(&mut self) {
        self.current = (self.current + 1) % self.clients.len();
        self.keepalive = None;
    }

    /// Renews one holding on the KeepAlive stream (opened on the replica
    /// in use when there is none), within `timeout`. A stream that breaks
    /// or does not answer in time is dropped: the next renewal opens one.
    async fn keep_alive(
        &mut self,
        entry: KeepAliveEntry,
        timeout: Duration,
    ) -> Result<Option<Lease>, tonic::Status> {
        use futures::SinkExt;
        let res = tokio::time::timeout(timeout, async {
            if self.keepalive.is_none() {
                let (tx, requests) = futures::channel::mpsc::channel(4);
                let mut client = self.clients[self.current].clone();
                let rx = client.keep_alive(requests).await?.into_inner();
                self.keepalive = Some(KeepAliveStream { tx, rx });
            }
            let Some(stream) = self.keepalive.as_mut() else {
                return Err(tonic::Status::internal("no KeepAlive stream"));
            };
            let id = entry.id;
            let req = KeepAliveRequest {
                entries: vec![entry],
            };
            if stream.tx.send(req).await.is_err() {
                return Err(tonic::Status::unavailable("the KeepAlive stream closed"));
            }
            let resp = stream
                .rx
                .message()
                .await?
                .ok_or_else(|| tonic::Status::unavailable("the KeepAlive stream ended"))?;
            let result = resp
                .results
                .into_iter()
                .find(|r| r.id == id)
                .ok_or_else(|| tonic::Status::internal("no KeepAlive result for the entry"))?;
            match result.outcome {
                Some(KeepAliveOutcome::Lease(lease)) => Ok(Some(lease)),
                Some(KeepAliveOutcome::Error(err)) => {
                    // As the unary Renew's status would have been, so
                    // that `definite` and `describe` read it alike.
                    let details = tonic_types::ErrorDetails::with_error_info(
                        err.reason,
                        "tenure.v1",
                        err.metadata,
                    );
                    Err(tonic::Status::with_error_details(
                        Code::from_i32(err.code),
                        err.message,
                        details,
                    ))
                }
                None => Err(tonic::Status::internal("an empty KeepAlive result")),
            }
        })
        .await;
        let res = match res {
            Ok(res) => res,
            Err(_) => Err(tonic::Status::deadline_exceeded("client timeout")),
        };
        // A stream that failed as a whole (not one entry refused) is done.
        if let Err(status) = &res {
            if status.get_details_error_info().is_none() {
                self.keepalive = None;
            }
        }
        res
    }
}

/// A leadership as the lease it is (an election is the lease of its name),
/// so the history and the checker treat both alike.
fn lease_of(l: tenure::proto::Leadership) -> Lease {
    Lease {
        name: l.name,
        holder: l.holder,
        fencing_token: l.fencing_token,
        revision: l.revision,
        ttl: l.ttl,
        renew_time: l.renew_time,
        fence_proof: l.fence_proof,
        ..Default::default()
    }
}

/// A request with a deadline the server also sees (`grpc-timeout`).
fn with_timeout<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(timeout);
    req
}

/// Runs `call` bounded by `timeout`; a timeout becomes DEADLINE_EXCEEDED.
async fn bounded<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(timeout, call).await {
        Ok(res) => res.map(|r| r.into_inner()),
        Err(_) => Err(tonic::Status::deadline_exceeded("client timeout")),
    }
}

/// Whether a failed call certainly did not take effect.
fn definite(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        Code::FailedPrecondition | Code::InvalidArgument | Code::NotFound | Code::DataLoss
    )
}

/// A short description of a failure: the ErrorInfo reason, else the code.
///
/// A `LEASE_HELD` that names no holder (the name may be free, but queued
/// waiters or a lock delay come first) is `LEASE_HELD (queued)`: it is not
/// evidence that a holding still stood (the checker's P4 reads only a plain
/// `LEASE_HELD` as that).
fn describe(status: &tonic::Status) -> String {
    match status.get_details_error_info() {
        Some(info) if info.reason == "LEASE_HELD" && !info.metadata.contains_key("holder") => {
            "LEASE_HELD (queued)".to_string()
        }
        Some(info) => info.reason,
        None => format!("{:?}: {}", status.code(), status.message()),
    }
}

/// A failure's detail after the way the call went (`keepalive: ...`),
/// or the failure alone.
fn with_via(via: &str, failure: String) -> String {
    match via {
        KEEPALIVE => format!("{KEEPALIVE}: {failure}"),
        _ => failure,
    }
}

/// A granted TTL in ms.
fn ttl_ms(ttl: Option<prost_types::Duration>) -> u64 {
    ttl.map_or(0, |d| {
        d.seconds.max(0) as u64 * 1000 + d.nanos.max(0) as u64 / 1_000_000
    })
}

/// A protobuf timestamp in Unix ms.
fn stamp_ms(t: Option<prost_types::Timestamp>) -> u64 {
    t.map_or(0, |t| {
        t.seconds.max(0) as u64 * 1000 + t.nanos.max(0) as u64 / 1_000_000
    })
}

/// The current holding of this client.
#[derive(Clone)]
struct Held {
    /// Holding id.
    holding: String,
    /// Lease name.
    name: String,
    /// Lease key.
    key: String,
    /// Fencing token.
    token: u64,
    /// Revision for the next Renew/Release.
    revision: u64,
    /// Granted TTL, ms.
    ttl_ms: u64,
    /// Safe deadline, monotonic ns.
    deadline: u64,
    /// Send time of the last successful Acquire/Renew, monotonic ns.
    last_ok_send: u64,
    /// Semaphore slot (0: a lock).
    slot: u32,
    /// The grant's fence proof (empty if Tenure sent none).
    proof: Vec<u8>,
}

/// A zombie write waiting to be sent (`--late-writes`).
struct LateWrite {
    /// The holding that ended.
    held: Held,
    /// When to send it, monotonic ns.
    due: u64,
}

/// The longest keyset file read (a keyset is a few lines).
const MAX_KEYSET_BYTES: u64 = 64 * 1024;

/// Reads the pinned keyset from `path`.
fn read_keyset(path: &Path) -> Result<Keyset, String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_KEYSET_BYTES).read_to_string(&mut text))
        .map_err(|e| format!("cannot read the keyset {}: {e}", path.display()))?;
    Keyset::parse(&text).map_err(|e| format!("keyset {}: {e}", path.display()))
}

/// The client process state.
struct Client {
    /// Settings.
    args: ClientArgs,
    /// History.
    rec: Recorder,
    /// Tenure replicas.
    tenure: Tenure,
    /// Downstream store.
    store: Store,
    /// The pinned keys proofs are verified against.
    keys: Keyset,
    /// The grants a hostile client forges from (`--forge`).
    book: Option<Arc<Mutex<Book>>>,
    /// Zombie writes still to send (`--late-writes`).
    late: Vec<LateWrite>,
    /// Randomness.
    rng: StdRng,
    /// Writes done, for write bodies.
    writes: u64,
    /// Renewals sent (in election mode every other one is a Proclaim).
    renewals: u64,
}

/// Runs one client until `until_ns`.
pub async fn run(args: ClientArgs) -> Result<(), String> {
    admit::check_test_fault(
        args.no_proof_check,
        std::env::var(admit::TEST_FAULTS_ENV).ok().as_deref(),
    )?;
    let rec = Recorder::open(&args.out)
        .map_err(|e| format!("cannot open {}: {e}", args.out.display()))?;
    let keys = read_keyset(&args.keyset)?;
    let store = Store::open(args.store, args.pg.as_deref(), args.redis.as_deref()).await?;
    let tenure = Tenure::new(&args.tenure)?;
    let book = args.forge.then(|| Arc::new(Mutex::new(Book::default())));
    let forger = match &book {
        Some(book) => Some(tokio::spawn(hostile::run(
            hostile::Settings {
                id: args.id.clone(),
                names: args.names.clone(),
                prefix: args.prefix.clone(),
                until_ns: args.until_ns,
                no_proof_check: args.no_proof_check,
                keys: keys.clone(),
            },
            Recorder::open(&args.out)
                .map_err(|e| format!("cannot open {}: {e}", args.out.display()))?,
            Store::open(args.store, args.pg.as_deref(), args.redis.as_deref()).await?,
            book.clone(),
        ))),
        None => None,
    };
    let mut client = Client {
        args,
        rec,
        tenure,
        store,
        keys,
        book,
        late: Vec::new(),
        rng: StdRng::from_os_rng(),
        writes: 0,
        renewals: 0,
    };
    client.run().await;
    if let Some(forger) = forger {
        forger
            .await
            .map_err(|e| format!("the forged writes stopped: {e}"))?;
    }
    Ok(())
}

impl Client {
    /// A history line for `holding` with the common fields filled in.
    fn op(&self, holding: &str, name: &str, op: OpKind, phase: Phase, t0: u64, w0: u64) -> Op {
        Op {
            client: self.args.id.clone(),
            holding: holding.to_string(),
            name: name.to_string(),
            op,
            phase,
            t0,
            t1: 0,
            w0,
            token: 0,
            revision: 0,
            ttl_ms: 0,
            deadline: 0,
            server_ms: 0,
            timeout_ms: 0,
            slot: 0,
            wait_ms: 0,
            lock_delay_ms: 0,
            group: String::new(),
            detail: String::new(),
            mode: None,
            replaced: None,
        }
    }

    /// `t0 + ttl - margin`, saturating.
    fn deadline(&self, t0: u64, ttl_ms: u64) -> u64 {
        let d = t0 as i64 + ms_to_ns(ttl_ms as i64) - ms_to_ns(self.args.margin_ms);
        d.max(0) as u64
    }

    /// The session loop.
    async fn run(&mut self) {
        let mut n = 0u64;
        while mono_ns() < self.args.until_ns {
            n += 1;
            let holding = format!("{}#{n}", self.args.id);
            let name = self
                .args
                .names
                .choose(&mut self.rng)
                .cloned()
                .unwrap_or_default();
            let ttl_s = self.rng.random_range(self.args.ttl_min..=self.args.ttl_max);
            let got = if self.args.group > 1 {
                let names: Vec<String> = self
                    .args
                    .names
                    .choose_multiple(&mut self.rng, self.args.group)
                    .cloned()
                    .collect();
                if self.args.fake_group {
                    self.acquire_one_by_one(&holding, &names, ttl_s).await
                } else {
                    self.acquire_group(&holding, &names, ttl_s).await
                }
            } else {
                self.acquire(&holding, &name, ttl_s, "")
                    .await
                    .map(|h| vec![h])
            };
            self.send_late_writes().await;
            if let Some(held) = got {
                // A zombie write per single lease held (`--late-writes`).
                let zombies = match self.args.late_writes && held.len() == 1 {
                    true => held.clone(),
                    false => Vec::new(),
                };
                self.hold(held).await;
                for h in zombies {
                    let due = mono_ns() + h.ttl_ms * 1_000_000;
                    self.late.push(LateWrite { held: h, due });
                }
            } else {
                let pause = match self.args.poll {
                    true => self.rng.random_range(0..2),
                    false => self.rng.random_range(5..40),
                };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
    }

    /// Acquires `name` with a wait of half the TTL (so a granted lease has at
    /// least half its TTL left); retries unknown outcomes with the same key.
    async fn acquire(
        &mut self,
        holding: &str,
        name: &str,
        ttl_s: u64,
        group: &str,
    ) -> Option<Held> {
        let key: String = (&mut self.rng)
            .sample_iter(Alphanumeric)
            .take(32)
            .map(char::from)
            .collect();
        // A read-write lock's mode, for this holding (all its attempts).
        let mode = match self.args.mode {
            None => None,
            Some(ModeArg::Exclusive) => Some(Mode::Exclusive),
            Some(ModeArg::Shared) => Some(Mode::Shared),
            Some(ModeArg::Mixed) if self.rng.random_bool(0.5) => Some(Mode::Exclusive),
            Some(ModeArg::Mixed) => Some(Mode::Shared),
        };
        // Half the TTL, and never past the end of the run (a poller: none).
        let left_ms = self.args.until_ns.saturating_sub(mono_ns()) / 1_000_000;
        let wait = match self.args.poll {
            true => Duration::ZERO,
            false => Duration::from_millis(self.args.wait_ms.unwrap_or(ttl_s * 500).min(left_ms)),
        };
        // A lock delay on plain leases only (not semaphores, read-write
        // locks, elections).
        let lock_delay_s = match self.args.limit == 0 && !self.args.election && mode.is_none() {
            true => self.args.lock_delay_s,
            false => 0,
        };
        let timeout = wait + Duration::from_millis(1500);
        let give_up = mono_ns() + 3_000_000_000;
        loop {
            let req = AcquireRequest {
                name: name.to_string(),
                limit: self.args.limit,
                preference: 0,
                holder: self.args.id.clone(),
                ttl: Some(prost_types::Duration {
                    seconds: ttl_s as i64,
                    nanos: 0,
                }),
                lease_key: key.clone(),
                wait: (!wait.is_zero()).then(|| prost_types::Duration {
                    seconds: wait.as_secs() as i64,
                    nanos: wait.subsec_nanos() as i32,
                }),
                metadata: Default::default(),
                lock_delay: (lock_delay_s > 0).then_some(prost_types::Duration {
                    seconds: lock_delay_s as i64,
                    nanos: 0,
                }),
                mode: lock_mode(mode) as i32,
            };
            let (t0, w0) = (mono_ns(), real_ms());
            let mut op = self.op(holding, name, OpKind::Acquire, Phase::Invoke, t0, w0);
            op.timeout_ms = timeout.as_millis() as u64;
            op.wait_ms = wait.as_millis() as u64;
            op.lock_delay_ms = lock_delay_s * 1000;
            op.group = group.to_string();
            op.mode = mode;
            self.rec.record(&op);
            let res = if self.args.election {
                let campaign = CampaignRequest {
                    name: req.name,
                    holder: req.holder,
                    value: format!("{holding} at acquire"),
                    ttl: req.ttl,
                    lease_key: req.lease_key,
                    wait: req.wait,
                    preference: 0,
                };
                bounded(
                    timeout,
                    self.tenure
                        .elections()
                        .campaign(with_timeout(campaign, timeout)),
                )
                .await
                .map(|resp| resp.leadership.map(lease_of))
            } else {
                bounded(
                    timeout,
                    self.tenure.client().acquire(with_timeout(req, timeout)),
                )
                .await
                .map(|resp| resp.lease)
            };
            op.t1 = mono_ns();
            match res {
                Ok(lease) => {
                    let lease = lease.unwrap_or_default();
                    op.phase = Phase::Ok;
                    op.token = lease.fencing_token;
                    op.revision = lease.revision;
                    op.ttl_ms = ttl_ms(lease.ttl);
                    op.deadline = self.deadline(t0, op.ttl_ms);
                    // renew_time: a retried Acquire renews the holding it took.
                    op.server_ms = stamp_ms(lease.renew_time);
                    op.slot = lease.slot;
                    if mode.is_some() && lease.mode != lock_mode(mode) as i32 {
                        let granted = LockMode::try_from(lease.mode)
                            .map_or("an unknown mode", |m| m.as_str_name());
                        op.detail = format!("granted in {granted}");
                    }
                    self.rec.record(&op);
                    self.keep(name, lease.slot, lease.fencing_token, &lease.fence_proof);
                    return Some(Held {
                        slot: lease.slot,
                        proof: lease.fence_proof,
                        holding: holding.to_string(),
                        name: name.to_string(),
                        key,
                        token: lease.fencing_token,
                        revision: lease.revision,
                        ttl_ms: op.ttl_ms,
                        deadline: op.deadline,
                        last_ok_send: t0,
                    });
                }
                Err(status) => {
                    op.phase = if definite(&status) {
                        Phase::Fail
                    } else {
                        Phase::Info
                    };
                    op.detail = describe(&status);
                    self.rec.record(&op);
                    if op.phase == Phase::Fail {
                        return None;
                    }
                    self.tenure.fail_over();
                    if op.t1 > give_up || op.t1 > self.args.until_ns {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Holds a lease, or every member of a group: renew, work, then
    /// release or abandon. A group's members share one send time and
    /// deadline; the work writes to one member's resource at a time.
    async fn hold(&mut self, mut held: Vec<Held>) {
        let ttl_ns = held.iter().map(|h| h.ttl_ms).min().unwrap_or(0) * 1_000_000;
        let renew_every = ttl_ns / 3;
        let (hold_for, release_at_end) = match self.args.hold_max_ms {
            Some(max) => {
                let max = max.max(5) * 1_000_000;
                (self.rng.random_range(max / 5..max), true)
            }
            // A read-write lock's holdings are brief, from the grant (its
            // wait may have used half the TTL), and seldom abandoned: a
            // holding kept until it expires keeps the lock's whole queue
            // waiting (behind a writer, readers too), and its waiters give
            // up one after the other.
            None if self.args.mode.is_some() => (
                self.rng.random_range(ttl_ns / 8..ttl_ns / 2),
                self.rng.random_bool(0.85),
            ),
            None => (
                self.rng.random_range(ttl_ns / 4..ttl_ns * 3 / 2),
                self.rng.random_bool(0.6),
            ),
        };
        // (From the grant: a long wait may have used much of the TTL.)
        let sent = held.iter().map(|h| h.last_ok_send).min().unwrap_or(0);
        let plan_end = match (self.args.hold_max_ms, self.args.mode) {
            (Some(_), _) | (None, Some(_)) => mono_ns() + hold_for,
            (None, None) => sent + hold_for,
        }
        .min(self.args.until_ns);
        let work_ns = self.args.work_ms * 1_000_000;
        let mut renewing = true;
        let mut next_renew = sent + renew_every;
        loop {
            let now = mono_ns();
            let deadline = held.iter().map(|h| h.deadline).min().unwrap_or(0);
            if now >= deadline {
                for h in &held {
                    self.lost(h, "deadline passed");
                }
                return;
            }
            if now >= plan_end && renewing {
                if release_at_end || now >= self.args.until_ns {
                    self.release_all(&held).await;
                    return;
                }
                renewing = false;
                for h in &held {
                    let op = self.op(
                        &h.holding,
                        &h.name,
                        OpKind::Abandon,
                        Phase::Ok,
                        now,
                        real_ms(),
                    );
                    self.rec.record(&op);
                }
            }
            if renewing && now >= next_renew {
                match self.renew_all(&mut held).await {
                    Some(true) => {
                        let sent = held.iter().map(|h| h.last_ok_send).min().unwrap_or(0);
                        next_renew = sent + renew_every;
                    }
                    Some(false) => return,
                    None => next_renew = mono_ns() + 100_000_000,
                }
                continue;
            }
            if mono_ns() + work_ns < deadline {
                // The work between the deadline check and the write: a pause
                // here is what makes a write arrive after the lease is gone.
                // Logged as the write's `invoke`, so the runner can pause a
                // holder exactly here (holder-sigstop).
                let i = self.rng.random_range(0..held.len());
                let mut op = self.op(
                    &held[i].holding,
                    &held[i].name,
                    OpKind::Write,
                    Phase::Invoke,
                    mono_ns(),
                    real_ms(),
                );
                op.token = held[i].token;
                self.rec.record(&op);
                tokio::time::sleep(Duration::from_nanos(work_ns)).await;
                if !self.write(&held[i]).await {
                    for (j, h) in held.iter().enumerate() {
                        if j != i {
                            self.lost(h, "another member's token was refused");
                        }
                    }
                    return;
                }
            }
            self.send_late_writes().await;
            let nap = Duration::from_millis(self.rng.random_range(10..40));
            let until_renew = Duration::from_nanos(next_renew.saturating_sub(mono_ns()));
            let nap = if renewing { nap.min(until_renew) } else { nap };
            tokio::time::sleep(nap).await;
        }
    }

    /// Takes a group with one AcquireGroup (a wait like a single Acquire's;
    /// unknown outcomes retried with the same key). Every member is
    /// recorded as its own holding `<holding>@<name>` with the group's id.
    async fn acquire_group(
        &mut self,
        holding: &str,
        names: &[String],
        ttl_s: u64,
    ) -> Option<Vec<Held>> {
        let key: String = (&mut self.rng)
            .sample_iter(Alphanumeric)
            .take(32)
            .map(char::from)
            .collect();
        let left_ms = self.args.until_ns.saturating_sub(mono_ns()) / 1_000_000;
        let wait = Duration::from_millis((ttl_s * 500).min(left_ms));
        let timeout = wait + Duration::from_millis(1500);
        let give_up = mono_ns() + 3_000_000_000;
        let member = |name: &str| format!("{holding}@{name}");
        loop {
            let req = AcquireGroupRequest {
                names: names.to_vec(),
                holder: self.args.id.clone(),
                ttl: Some(prost_types::Duration {
                    seconds: ttl_s as i64,
                    nanos: 0,
                }),
                lease_key: key.clone(),
                wait: Some(prost_types::Duration {
                    seconds: wait.as_secs() as i64,
                    nanos: wait.subsec_nanos() as i32,
                }),
                ..Default::default()
            };
            let (t0, w0) = (mono_ns(), real_ms());
            let mut ops: Vec<Op> = names
                .iter()
                .map(|n| {
                    let mut op = self.op(&member(n), n, OpKind::Acquire, Phase::Invoke, t0, w0);
                    op.timeout_ms = timeout.as_millis() as u64;
                    op.wait_ms = wait.as_millis() as u64;
                    op.group = holding.to_string();
                    op
                })
                .collect();
            for op in &ops {
                self.rec.record(op);
            }
            let res = bounded(
                timeout,
                self.tenure
                    .client()
                    .acquire_group(with_timeout(req, timeout)),
            )
            .await;
            let t1 = mono_ns();
            match res {
                Ok(resp) if resp.leases.len() == names.len() => {
                    let ttl = resp.leases.iter().map(|l| ttl_ms(l.ttl)).min().unwrap_or(0);
                    let deadline = self.deadline(t0, ttl);
                    let mut held = Vec::new();
                    for (op, lease) in ops.iter_mut().zip(resp.leases) {
                        op.t1 = t1;
                        op.phase = Phase::Ok;
                        op.token = lease.fencing_token;
                        op.revision = lease.revision;
                        op.ttl_ms = ttl_ms(lease.ttl);
                        op.deadline = deadline;
                        op.server_ms = stamp_ms(lease.renew_time);
                        self.rec.record(op);
                        let (name, proof) = (op.name.clone(), lease.fence_proof);
                        self.keep(&name, 0, lease.fencing_token, &proof);
                        held.push(Held {
                            proof,
                            holding: op.holding.clone(),
                            name: op.name.clone(),
                            key: key.clone(),
                            token: lease.fencing_token,
                            revision: lease.revision,
                            ttl_ms: op.ttl_ms,
                            deadline,
                            last_ok_send: t0,
                            slot: 0,
                        });
                    }
                    return Some(held);
                }
                res => {
                    // A group's LEASE_HELD proves only the member it names
                    // (metadata `name`, with its `holder`) held; the others
                    // may be free (or only queued for), so their refusal
                    // is recorded under another detail, which the checker
                    // does not take as evidence that they were held.
                    let mut held_member = None;
                    let (phase, detail) = match res {
                        Ok(resp) => (
                            Phase::Info,
                            format!("{} leases for {} names", resp.leases.len(), names.len()),
                        ),
                        Err(status) if definite(&status) => {
                            if let Some(info) = status.get_details_error_info() {
                                if info.metadata.contains_key("holder") {
                                    held_member = info.metadata.get("name").cloned();
                                }
                            }
                            (Phase::Fail, describe(&status))
                        }
                        Err(status) => (Phase::Info, describe(&status)),
                    };
                    for op in &mut ops {
                        op.t1 = t1;
                        op.phase = phase;
                        op.detail = match detail.as_str() {
                            "LEASE_HELD" if held_member.as_deref() != Some(op.name.as_str()) => {
                                "LEASE_HELD (for another member, or queued)".to_string()
                            }
                            _ => detail.clone(),
                        };
                        self.rec.record(op);
                    }
                    if phase == Phase::Fail {
                        return None;
                    }
                    self.tenure.fail_over();
                    if t1 > give_up || t1 > self.args.until_ns {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// The negative control of groups: the members taken one by one with
    /// single Acquires, recorded as one group all the same (and given up
    /// if one of them cannot be had).
    async fn acquire_one_by_one(
        &mut self,
        holding: &str,
        names: &[String],
        ttl_s: u64,
    ) -> Option<Vec<Held>> {
        let mut held: Vec<Held> = Vec::new();
        for name in names {
            let member = format!("{holding}@{name}");
            match self.acquire(&member, name, ttl_s, holding).await {
                Some(h) => held.push(h),
                None => {
                    self.release_all(&held).await;
                    return None;
                }
            }
        }
        // The group acts until its first member's deadline.
        let deadline = held.iter().map(|h| h.deadline).min().unwrap_or(0);
        for h in &mut held {
            h.deadline = deadline;
        }
        Some(held)
    }

    /// Renews a lease, or every member of a group (one RenewGroup; the
    /// control's fake group member by member). `Some(false)`: lost.
    async fn renew_all(&mut self, held: &mut [Held]) -> Option<bool> {
        if held.len() == 1 || self.args.fake_group {
            for i in 0..held.len() {
                match self.renew(&mut held[i]).await {
                    Some(true) => {}
                    Some(false) => {
                        for (j, h) in held.iter().enumerate() {
                            if j != i {
                                self.lost(h, "another member was lost");
                            }
                        }
                        return Some(false);
                    }
                    None => return None,
                }
            }
            return Some(true);
        }
        let ttl_ns = held[0].ttl_ms * 1_000_000;
        let timeout = Duration::from_nanos((ttl_ns / 3).clamp(200_000_000, 1_000_000_000));
        let req = RenewGroupRequest {
            members: held
                .iter()
                .map(|h| GroupMember {
                    name: h.name.clone(),
                    expected_revision: h.revision,
                })
                .collect(),
            lease_key: held[0].key.clone(),
            ttl: None,
        };
        let (t0, w0) = (mono_ns(), real_ms());
        let mut ops: Vec<Op> = held
            .iter()
            .map(|h| {
                let mut op = self.op(&h.holding, &h.name, OpKind::Renew, Phase::Invoke, t0, w0);
                op.token = h.token;
                op.timeout_ms = timeout.as_millis() as u64;
                op
            })
            .collect();
        for op in &ops {
            self.rec.record(op);
        }
        let res = bounded(
            timeout,
            self.tenure.client().renew_group(with_timeout(req, timeout)),
        )
        .await;
        let t1 = mono_ns();
        match res {
            Ok(resp) if resp.leases.len() == held.len() => {
                let ttl = resp.leases.iter().map(|l| ttl_ms(l.ttl)).min().unwrap_or(0);
                let deadline = self.deadline(t0, ttl);
                for ((op, h), lease) in ops.iter_mut().zip(held.iter_mut()).zip(resp.leases) {
                    op.t1 = t1;
                    op.phase = Phase::Ok;
                    op.revision = lease.revision;
                    op.ttl_ms = ttl_ms(lease.ttl);
                    op.deadline = deadline;
                    op.server_ms = stamp_ms(lease.renew_time);
                    if lease.fencing_token != h.token {
                        op.detail = format!("token changed to {}", lease.fencing_token);
                    }
                    self.rec.record(op);
                    h.revision = lease.revision;
                    h.ttl_ms = op.ttl_ms;
                    h.last_ok_send = t0;
                    h.deadline = h.deadline.max(deadline);
                }
                Some(true)
            }
            Err(status) if definite(&status) => {
                for (op, h) in ops.iter_mut().zip(held.iter()) {
                    op.t1 = t1;
                    op.phase = Phase::Fail;
                    op.detail = describe(&status);
                    self.rec.record(op);
                    self.lost(h, "group renew refused");
                }
                Some(false)
            }
            res => {
                let detail = match res {
                    Err(status) => describe(&status),
                    Ok(_) => "a reply without every member".into(),
                };
                for op in &mut ops {
                    op.t1 = t1;
                    op.phase = Phase::Info;
                    op.detail = detail.clone();
                    self.rec.record(op);
                }
                self.tenure.fail_over();
                None
            }
        }
    }

    /// Stops acting, then releases a lease or every member of a group (one
    /// ReleaseGroup, one retry on another replica; the control's fake
    /// group member by member).
    async fn release_all(&mut self, held: &[Held]) {
        if held.len() == 1 || self.args.fake_group {
            for h in held {
                self.release(h).await;
            }
            return;
        }
        for _ in 0..2 {
            let timeout = Duration::from_secs(1);
            let req = ReleaseGroupRequest {
                members: held
                    .iter()
                    .map(|h| GroupMember {
                        name: h.name.clone(),
                        expected_revision: h.revision,
                    })
                    .collect(),
                lease_key: held[0].key.clone(),
            };
            let (t0, w0) = (mono_ns(), real_ms());
            let mut ops: Vec<Op> = held
                .iter()
                .map(|h| {
                    let mut op =
                        self.op(&h.holding, &h.name, OpKind::Release, Phase::Invoke, t0, w0);
                    op.token = h.token;
                    op.timeout_ms = 1000;
                    op
                })
                .collect();
            for op in &ops {
                self.rec.record(op);
            }
            let res = bounded(
                timeout,
                self.tenure
                    .client()
                    .release_group(with_timeout(req, timeout)),
            )
            .await;
            let t1 = mono_ns();
            let (phase, revision, detail) = match &res {
                Ok(resp) => (Phase::Ok, resp.revision, String::new()),
                Err(status) if definite(status) => (Phase::Fail, 0, describe(status)),
                Err(status) => (Phase::Info, 0, describe(status)),
            };
            for op in &mut ops {
                op.t1 = t1;
                op.phase = phase;
                op.revision = revision;
                op.detail = detail.clone();
                self.rec.record(op);
            }
            if phase != Phase::Info {
                return;
            }
            self.tenure.fail_over();
        }
    }

    /// One Renew: `Some(true)` renewed, `Some(false)` lost, `None` unknown.
    async fn renew(&mut self, held: &mut Held) -> Option<bool> {
        let ttl_ns = held.ttl_ms * 1_000_000;
        let timeout = Duration::from_nanos((ttl_ns / 3).clamp(200_000_000, 1_000_000_000));
        let req = RenewRequest {
            name: held.name.clone(),
            expected_revision: held.revision,
            lease_key: held.key.clone(),
            ttl: None,
            slot: held.slot,
        };
        let (t0, w0) = (mono_ns(), real_ms());
        let mut op = self.op(
            &held.holding,
            &held.name,
            OpKind::Renew,
            Phase::Invoke,
            t0,
            w0,
        );
        op.token = held.token;
        op.slot = held.slot;
        op.timeout_ms = timeout.as_millis() as u64;
        self.rec.record(&op);
        self.renewals += 1;
        let res = if self.args.election && self.renewals.is_multiple_of(2) {
            let proclaim = ProclaimRequest {
                name: req.name,
                expected_revision: req.expected_revision,
                lease_key: req.lease_key,
                value: format!("{} renewal {}", held.holding, self.renewals),
            };
            op.detail = "proclaim".into();
            bounded(
                timeout,
                self.tenure
                    .elections()
                    .proclaim(with_timeout(proclaim, timeout)),
            )
            .await
            .map(|resp| resp.leadership.map(lease_of))
        } else if self.args.keepalive {
            op.detail = KEEPALIVE.into();
            let entry = KeepAliveEntry {
                id: self.renewals,
                name: req.name,
                expected_revision: req.expected_revision,
                lease_key: req.lease_key,
                ttl: None,
                slot: req.slot,
            };
            self.tenure.keep_alive(entry, timeout).await
        } else {
            bounded(
                timeout,
                self.tenure.client().renew(with_timeout(req, timeout)),
            )
            .await
            .map(|resp| resp.lease)
        };
        op.t1 = mono_ns();
        match res {
            Ok(lease) => {
                let lease = lease.unwrap_or_default();
                op.phase = Phase::Ok;
                op.revision = lease.revision;
                op.ttl_ms = ttl_ms(lease.ttl);
                op.deadline = self.deadline(t0, op.ttl_ms);
                op.server_ms = stamp_ms(lease.renew_time);
                if lease.fencing_token != held.token {
                    op.detail = format!("token changed to {}", lease.fencing_token);
                }
                self.rec.record(&op);
                held.revision = lease.revision;
                held.ttl_ms = op.ttl_ms;
                held.last_ok_send = t0;
                held.deadline = held.deadline.max(op.deadline);
                Some(true)
            }
            Err(status) if definite(&status) => {
                op.phase = Phase::Fail;
                op.detail = with_via(&op.detail, describe(&status));
                self.rec.record(&op);
                self.lost(held, "renew refused");
                Some(false)
            }
            Err(status) => {
                op.phase = Phase::Info;
                op.detail = with_via(&op.detail, describe(&status));
                self.rec.record(&op);
                self.tenure.fail_over();
                None
            }
        }
    }

    /// Stops acting, then releases (one retry on another replica). An
    /// election's leader resigns to the next waiting candidate every other
    /// time (a handover: the candidate leads from the resignation's own
    /// write), and plainly when none waits.
    async fn release(&mut self, held: &Held) {
        let mut handover = self.args.election && self.rng.random_bool(0.5);
        let mut attempts = 0;
        while attempts < 2 {
            attempts += 1;
            let timeout = Duration::from_secs(1);
            let req = ReleaseRequest {
                name: held.name.clone(),
                expected_revision: held.revision,
                lease_key: held.key.clone(),
                slot: held.slot,
            };
            let (t0, w0) = (mono_ns(), real_ms());
            let mut op = self.op(
                &held.holding,
                &held.name,
                OpKind::Release,
                Phase::Invoke,
                t0,
                w0,
            );
            op.token = held.token;
            op.slot = held.slot;
            op.timeout_ms = 1000;
            self.rec.record(&op);
            let res = if self.args.election {
                let resign = ResignRequest {
                    name: req.name,
                    expected_revision: req.expected_revision,
                    lease_key: req.lease_key,
                    to_next_candidate: handover,
                    ..Default::default()
                };
                bounded(
                    timeout,
                    self.tenure
                        .elections()
                        .resign(with_timeout(resign, timeout)),
                )
                .await
                .map(|resp| resp.revision)
            } else {
                bounded(
                    timeout,
                    self.tenure.client().release(with_timeout(req, timeout)),
                )
                .await
                .map(|resp| resp.revision)
            };
            op.t1 = mono_ns();
            match res {
                Ok(revision) => {
                    op.phase = Phase::Ok;
                    op.revision = revision;
                    if handover {
                        op.detail = HANDOVER.to_string();
                    }
                    self.rec.record(&op);
                    return;
                }
                Err(status) => {
                    op.phase = if definite(&status) {
                        Phase::Fail
                    } else {
                        Phase::Info
                    };
                    op.detail = describe(&status);
                    self.rec.record(&op);
                    if handover && op.detail == "NO_WAITER" {
                        // Nobody to hand over to: resign plainly.
                        handover = false;
                        attempts -= 1;
                        continue;
                    }
                    if op.phase == Phase::Fail {
                        return;
                    }
                    self.tenure.fail_over();
                }
            }
        }
    }

    /// Keeps a grant in the hostile client's book (`--forge`).
    fn keep(&mut self, name: &str, slot: u32, token: u64, proof: &[u8]) {
        if let Some(book) = &self.book {
            if let Ok(mut book) = book.lock() {
                book.add(Genuine {
                    name: name.to_string(),
                    slot,
                    token,
                    proof: proof.to_vec(),
                });
            }
        }
    }

    /// One fenced write; false when the store refused the token (a newer
    /// holder exists, so stop acting).
    async fn write(&mut self, held: &Held) -> bool {
        let phase = self.send_write(held, held.deadline, "").await;
        if phase == Phase::Fail {
            self.lost(held, "store refused the token");
        }
        phase != Phase::Fail
    }

    /// Sends the zombie writes that are due (`--late-writes`).
    async fn send_late_writes(&mut self) {
        let now = mono_ns();
        let due: Vec<LateWrite> = {
            let (due, later) = std::mem::take(&mut self.late)
                .into_iter()
                .partition(|l| l.due <= now);
            self.late = later;
            due
        };
        for l in due {
            if mono_ns() >= self.args.until_ns {
                return;
            }
            self.send_write(&l.held, 0, "late write, after the holding ended")
                .await;
        }
    }

    /// One write of `held` to the store, recorded with `deadline` and, if
    /// accepted, `note`: the proof check, then the kit (or, in the
    /// unfenced control, no kit). Its phase: `Ok` accepted, `Fail` refused
    /// (stale, or its proof refused), `Info` unknown.
    async fn send_write(&mut self, held: &Held, deadline: u64, note: &str) -> Phase {
        self.writes += 1;
        let body = format!("{} write {}", held.holding, self.writes);
        let (t0, w0) = (mono_ns(), real_ms());
        let mut op = self.op(&held.holding, &held.name, OpKind::Write, Phase::Ok, t0, w0);
        op.token = held.token;
        op.slot = held.slot;
        op.deadline = deadline;
        op.revision = self.writes;
        let admitted = if self.args.no_proof_check {
            Ok(admit::unchecked(&held.name, held.slot, held.token))
        } else {
            admit::admit(
                &self.keys,
                Some(&held.proof),
                &held.name,
                held.slot,
                held.token,
            )
        };
        let outcome = match admitted {
            Err(refusal) => Err(format!("{PROOF_REFUSED}: {refusal}")),
            Ok(fence) => Ok(self.store_write(&fence, &body).await),
        };
        op.t1 = mono_ns();
        match outcome {
            Ok(Ok(Written::Accepted { seq, replaced })) => {
                if let Some(seq) = seq {
                    op.revision = seq as u64;
                }
                op.replaced = replaced;
                op.detail = note.to_string();
            }
            Ok(Ok(Written::Stale)) => {
                op.phase = Phase::Fail;
                op.detail = STALE.into();
            }
            // A genuine grant's proof refused: Tenure's bug, a violation.
            Err(refused) => {
                op.phase = Phase::Fail;
                op.detail = refused;
            }
            Ok(Err(err)) => {
                op.phase = Phase::Info;
                op.detail = err;
            }
        }
        self.rec.record(&op);
        op.phase
    }

    /// The store write of an admitted fence: through the kit, or around it
    /// in the unfenced control.
    async fn store_write(&mut self, fence: &Admitted, body: &str) -> Result<Written, String> {
        let (prefix, id) = (&self.args.prefix, &self.args.id);
        if self.args.unfenced {
            let resource = fence.resource(prefix);
            self.store
                .write_unfenced(&resource, fence.token, id, body)
                .await
        } else {
            self.store.write(fence, prefix, id, self.writes, body).await
        }
    }

    /// Records that the holder stopped acting.
    fn lost(&mut self, held: &Held, why: &str) {
        let mut op = self.op(
            &held.holding,
            &held.name,
            OpKind::Lost,
            Phase::Ok,
            mono_ns(),
            real_ms(),
        );
        op.token = held.token;
        op.deadline = held.deadline;
        op.detail = why.to_string();
        self.rec.record(&op);
    }
}
