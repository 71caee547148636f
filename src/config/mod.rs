//! Settings: the `tenure serve` flags with their `TENURE_*` environment
//! equivalents, their validation, and the plain data other layers are
//! configured with (bucket, request limits, grants, log format). A leaf:
//! it depends on nothing else in the crate. [`file`](mod@file) adds the TOML config
//! file and its precedence.
//!
//! Every flag has an environment equivalent; a flag wins over the variable,
//! and both win over the config file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, FromArgMatches};
use serde::Deserialize;

mod fence_keys;
mod file;
mod test_hooks;

pub use fence_keys::FenceKeyFiles;
pub use file::{resolve, ResolveError};
pub use test_hooks::{
    check_test_faults, TestFault, TestFaults, WatcherHold, REPLAY_REPEATS, TEST_FAULTS_ENV,
};

/// Most shards a bucket can be split into.
pub const MAX_SHARDS: u32 = 64;

/// The longest any duration setting may be, 8760h (365 days): far beyond
/// any sensible TTL, wait or timeout, and far below where adding one to a
/// clock reading, or counting it in nanoseconds, could overflow. The
/// `tenure` client caps its own duration flags, and the TTLs it trusts, at
/// the same value.
pub const MAX_DURATION: Duration = Duration::from_secs(8760 * 3600);

/// Everything `tenure serve` needs. Precedence: flag, then `TENURE_*`
/// variable, then the `--config` file, then the default.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// TOML configuration file: settings named like the flags (`max_ttl =
    /// "1h"`) and `[[grant]]` tables. Flags and TENURE_* variables override it.
    #[arg(long, env = "TENURE_CONFIG")]
    pub config: Option<PathBuf>,

    /// Address the gRPC API listens on.
    #[arg(long, env = "TENURE_LISTEN", default_value = "127.0.0.1:7419")]
    pub listen: SocketAddr,

    /// NATS server or cluster URL(s), comma-separated. Absent: start and
    /// supervise a local nats-server (data under --data-dir).
    #[arg(long, env = "TENURE_NATS_URL")]
    pub nats_url: Option<String>,

    /// NATS user name (with --nats-password).
    #[arg(long, env = "TENURE_NATS_USER", requires = "nats_password")]
    pub nats_user: Option<String>,

    /// NATS password (with --nats-user).
    #[arg(
        long,
        env = "TENURE_NATS_PASSWORD",
        hide_env_values = true,
        requires = "nats_user"
    )]
    pub nats_password: Option<String>,

    /// NATS authentication token.
    #[arg(long, env = "TENURE_NATS_TOKEN", hide_env_values = true)]
    pub nats_token: Option<String>,

    /// NATS credentials file (JWT and nkey seed).
    #[arg(long, env = "TENURE_NATS_CREDS")]
    pub nats_creds: Option<PathBuf>,

    /// CA certificate (PEM) to verify the NATS server's TLS certificate;
    /// setting it requires TLS.
    #[arg(long, env = "TENURE_NATS_TLS_CA")]
    pub nats_tls_ca: Option<PathBuf>,

    /// File holding a NATS nkey seed (`SU...`) to authenticate with.
    #[arg(long, env = "TENURE_NATS_NKEY_FILE")]
    pub nats_nkey_file: Option<PathBuf>,

    /// Server certificate chain (PEM) for gRPC over TLS (with --tls-key).
    #[arg(long, env = "TENURE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert.
    #[arg(long, env = "TENURE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// CA (PEM) that client certificates must chain to: turns on mTLS.
    /// Clients without a valid certificate are refused in the handshake.
    #[arg(long, env = "TENURE_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// With --tls-client-ca: also accept clients without a certificate
    /// (they must then send a bearer token).
    #[arg(
        long,
        env = "TENURE_TLS_CLIENT_CERT_OPTIONAL",
        requires = "tls_client_ca"
    )]
    pub tls_client_cert_optional: bool,

    /// Static bearer token file: one `IDENTITY TOKEN` pair per line.
    #[arg(long, env = "TENURE_AUTH_TOKENS")]
    pub auth_tokens: Option<PathBuf>,

    /// Ed25519 private key (PKCS#8 PEM, as `openssl genpkey -algorithm
    /// ed25519` or `tenure fence-keys --generate` writes it) that signs the
    /// fence proof of every grant (docs/fencing.md). Re-read on SIGHUP.
    /// Absent: grants carry no proof.
    #[arg(long, env = "TENURE_FENCE_SIGNING_KEY")]
    pub fence_signing_key: Option<PathBuf>,

    /// Files of further fence public keys that GetFenceKeys serves beside
    /// the signing key's, so that stores accept them during a rotation (the
    /// next key before it signs, the previous one after): keyset files (one
    /// base64url key per line, as `tenure fence-keys` prints) or PEM public
    /// keys, comma-separated. Re-read on SIGHUP.
    #[arg(long, env = "TENURE_FENCE_VERIFY_KEYS", value_delimiter = ',')]
    pub fence_verify_keys: Vec<PathBuf>,

    /// Address of the Prometheus `/metrics` HTTP listener (off when unset).
    #[arg(long, env = "TENURE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// OTLP/gRPC endpoint for traces, e.g. http://127.0.0.1:4317 (off when
    /// unset).
    #[arg(long, env = "TENURE_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// Most short calls (everything but waiting Acquires) running at once on
    /// this replica, counted after authentication and once the request has
    /// been read; more get RESOURCE_EXHAUSTED.
    #[arg(long, env = "TENURE_MAX_CONCURRENT_REQUESTS", default_value_t = 1000)]
    pub max_concurrent_requests: usize,

    /// Most short calls one authenticated identity may have running at once
    /// on this replica (not applied without authentication).
    #[arg(
        long,
        env = "TENURE_MAX_CONCURRENT_REQUESTS_PER_IDENTITY",
        default_value_t = 500
    )]
    pub max_concurrent_requests_per_identity: usize,

    /// Renew and Release calls admitted beyond --max-concurrent-requests (and
    /// the per-identity share), so holders keep their leases while new work
    /// is shed.
    #[arg(long, env = "TENURE_RESERVED_RENEWALS", default_value_t = 200)]
    pub reserved_renewals: usize,

    /// Most of --reserved-renewals one authenticated identity may use at
    /// once (each KeepAlive entry counts as one renewal), so that one
    /// identity's renewals cannot use up the reserve that keeps every other
    /// holder's leases (not applied without authentication).
    #[arg(
        long,
        env = "TENURE_RESERVED_RENEWALS_PER_IDENTITY",
        default_value_t = 50
    )]
    pub reserved_renewals_per_identity: usize,

    /// Most Acquires waiting (`wait` > 0) at once on this replica; they do
    /// not count against --max-concurrent-requests.
    #[arg(long, env = "TENURE_MAX_WAITING_ACQUIRES", default_value_t = 10_000)]
    pub max_waiting_acquires: usize,

    /// Most waiting Acquires one authenticated identity may have on this
    /// replica (not applied without authentication).
    #[arg(
        long,
        env = "TENURE_MAX_WAITING_ACQUIRES_PER_IDENTITY",
        default_value_t = 1000
    )]
    pub max_waiting_acquires_per_identity: usize,

    /// How long a request's message may take to arrive after its headers;
    /// a slower one is refused and its stream ended.
    #[arg(long, env = "TENURE_REQUEST_BODY_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub request_body_timeout: Duration,

    /// Most calls open at once on one connection (HTTP/2
    /// SETTINGS_MAX_CONCURRENT_STREAMS); clients queue beyond it.
    #[arg(
        long,
        env = "TENURE_MAX_STREAMS_PER_CONNECTION",
        default_value_t = 1000
    )]
    pub max_streams_per_connection: u32,

    /// Most client connections open at once; further ones are closed at
    /// once. Lowered to fit the open-file limit (RLIMIT_NOFILE) at start.
    #[arg(long, env = "TENURE_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,

    /// A connection with no call running for this long is closed.
    #[arg(long, env = "TENURE_IDLE_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// A new connection must send its first bytes (and finish its TLS
    /// handshake) within this long, or it is closed.
    #[arg(long, env = "TENURE_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,

    /// Most open health `Watch` streams on this replica (they need no
    /// credentials); they end at shutdown.
    #[arg(long, env = "TENURE_MAX_HEALTH_WATCHES", default_value_t = 100)]
    pub max_health_watches: usize,

    /// Most watch streams open at once on this replica.
    #[arg(long, env = "TENURE_MAX_WATCH_STREAMS", default_value_t = 20_000)]
    pub max_watch_streams: usize,

    /// Most watch streams one identity may have open on this replica.
    #[arg(
        long,
        env = "TENURE_MAX_WATCH_STREAMS_PER_IDENTITY",
        default_value_t = 10_000
    )]
    pub max_watch_streams_per_identity: usize,

    /// Most KeepAlive streams open at once on this replica. (A client's
    /// session helpers share one stream per connection; a stream whose
    /// client stops reading holds up to ~0.7 MiB, measured, so this bounds
    /// that memory too.)
    #[arg(long, env = "TENURE_MAX_KEEPALIVE_STREAMS", default_value_t = 2_000)]
    pub max_keepalive_streams: usize,

    /// Most KeepAlive streams one identity may have open on this replica.
    #[arg(
        long,
        env = "TENURE_MAX_KEEPALIVE_STREAMS_PER_IDENTITY",
        default_value_t = 100
    )]
    pub max_keepalive_streams_per_identity: usize,

    /// Most entries in one KeepAlive request message; a larger message ends
    /// the stream with REQUEST_TOO_LARGE. (--max-request-bytes applies too.)
    #[arg(long, env = "TENURE_MAX_KEEPALIVE_ENTRIES", default_value_t = 1_000)]
    pub max_keepalive_entries: usize,

    /// Most renewals one KeepAlive stream may have in flight (written but
    /// not yet answered); past it the server stops reading the stream until
    /// results are sent. At least --max-keepalive-entries.
    #[arg(long, env = "TENURE_MAX_KEEPALIVE_IN_FLIGHT", default_value_t = 4_096)]
    pub max_keepalive_in_flight: usize,

    /// Most bytes of replies one KeepAlive stream may owe its client (being
    /// computed, or not yet read by it); past it the server stops reading
    /// the stream until the client reads. A stream that owes nothing is
    /// always read.
    #[arg(long, env = "TENURE_MAX_KEEPALIVE_REPLY_BYTES", default_value_t = 1 << 20)]
    pub max_keepalive_reply_bytes: usize,

    /// Most bytes of replies all KeepAlive streams of this replica may owe
    /// together; past it, streams whose clients left replies unread are not
    /// read (streams whose clients read everything still are).
    #[arg(long, env = "TENURE_MAX_KEEPALIVE_REPLY_TOTAL_BYTES", default_value_t = 64 << 20)]
    pub max_keepalive_reply_total_bytes: usize,

    /// A KeepAlive stream with no request message and nothing pending for
    /// this long is ended (INVALID_ARGUMENT); the client reopens it.
    #[arg(long, env = "TENURE_KEEPALIVE_IDLE_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub keepalive_idle_timeout: Duration,

    /// The shared bucket watcher (one NATS consumer per replica that feeds
    /// watches, waiting Acquires and elections) starts when the first of
    /// them needs it and stops after this long without any, so a replica
    /// that only serves Acquire/Renew/Release does not receive and decode
    /// every bucket write. 0 keeps it on from start to shutdown.
    #[arg(long, env = "TENURE_WATCHER_IDLE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub watcher_idle_timeout: Duration,

    /// Most bytes of events one watch stream may have waiting for its
    /// client to read; a stream that falls further behind is ended with
    /// WATCH_LAGGED and its buffer freed.
    #[arg(long, env = "TENURE_MAX_WATCH_BUFFER_BYTES", default_value_t = 1 << 20)]
    pub max_watch_buffer_bytes: usize,

    /// Most bytes of events all watch streams of this replica may have
    /// waiting together; past it, the stream furthest behind is ended.
    #[arg(long, env = "TENURE_MAX_WATCH_BUFFER_TOTAL_BYTES", default_value_t = 256 << 20)]
    pub max_watch_buffer_total_bytes: usize,

    /// Largest request message, in bytes.
    #[arg(long, env = "TENURE_MAX_REQUEST_BYTES", default_value_t = 16384)]
    pub max_request_bytes: usize,

    /// Largest request metadata (gRPC headers), in bytes.
    #[arg(long, env = "TENURE_MAX_METADATA_BYTES", default_value_t = 8192)]
    pub max_metadata_bytes: usize,

    /// Authorization grants, from the `[[grant]]` tables of --config.
    #[arg(skip)]
    pub grants: Vec<Grant>,

    /// Test-only: holds back the shared watcher of this replica (see
    /// [`WatcherHold`]). Set from Rust code only.
    #[arg(skip)]
    pub watcher_hold: Option<WatcherHold>,

    /// Test-only: break the server on purpose (see [`TestFault`]), for the
    /// safety checker's negative controls. Hidden; refused unless
    /// TENURE_TEST_FAULTS=1 is set.
    #[arg(long = "test-fault", value_enum, value_delimiter = ',', hide = true)]
    pub test_fault: Vec<TestFault>,

    /// KV bucket holding the leases.
    #[arg(long, env = "TENURE_BUCKET", default_value = "tenure")]
    pub bucket: String,

    /// Replicas of the bucket's stream when Tenure creates it (1, 3 or 5).
    #[arg(long, env = "TENURE_REPLICAS", default_value_t = 1)]
    pub replicas: usize,

    /// Most bytes the bucket's stream (each shard's) may store, set when
    /// Tenure creates it (0: no limit). When it is full, writes of new keys
    /// (an Acquire of a free name, a ticket, a semaphore definition) are
    /// refused BUCKET_FULL; renewals and releases, which replace a key's
    /// message, still succeed.
    #[arg(long, env = "TENURE_BUCKET_MAX_BYTES", default_value_t = 1 << 30)]
    pub bucket_max_bytes: u64,

    /// Streams the bucket is split into, fixed when Tenure creates it: a
    /// name always lives in the same shard, and shards are separate streams
    /// whose leaders can sit on different cluster nodes. 0 adopts the
    /// bucket's count (1 for a new bucket); a count the bucket disagrees
    /// with stops the server.
    #[arg(long, env = "TENURE_SHARDS", default_value_t = 0)]
    pub shards: u32,

    /// Shortest TTL granted (whole seconds, at least 1s).
    #[arg(long, env = "TENURE_MIN_TTL", default_value = "1s", value_parser = parse_duration)]
    pub min_ttl: Duration,

    /// Longest TTL accepted.
    #[arg(long, env = "TENURE_MAX_TTL", default_value = "1h", value_parser = parse_duration)]
    pub max_ttl: Duration,

    /// TTL granted when a request gives none.
    #[arg(long, env = "TENURE_DEFAULT_TTL", default_value = "10s", value_parser = parse_duration)]
    pub default_ttl: Duration,

    /// How long expiry markers and release tombstones stay in the bucket.
    #[arg(long, env = "TENURE_MARKER_TTL", default_value = "15m", value_parser = parse_duration)]
    pub marker_ttl: Duration,

    /// How long the history stream (TENURE_HISTORY_<bucket>, a mirror of
    /// the bucket NATS keeps) keeps every lease write, for LeaseHistory and
    /// `tenure history`; 0: no history (an existing stream is left alone).
    #[arg(long, env = "TENURE_HISTORY_RETENTION", default_value = "168h", value_parser = parse_duration)]
    pub history_retention: Duration,

    /// Longest wait an Acquire may ask for.
    #[arg(long, env = "TENURE_MAX_WAIT", default_value = "5m", value_parser = parse_duration)]
    pub max_wait: Duration,

    /// Longest lock delay an Acquire may ask for (at most --marker-ttl).
    #[arg(long, env = "TENURE_MAX_LOCK_DELAY", default_value = "60s", value_parser = parse_duration)]
    pub max_lock_delay: Duration,

    /// Most Acquires that may wait (queue) for one name at a time; the next
    /// gets TOO_MANY_WAITERS. Each waiter is a ticket key in the bucket.
    #[arg(long, env = "TENURE_MAX_WAITERS", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub max_waiters: u16,
    /// Largest semaphore limit an Acquire may ask for, 1 to 999 (each slot
    /// is a key an Acquire reads, and defining a semaphore writes every slot
    /// in one atomic batch of at most 1,000 messages).
    #[arg(long, env = "TENURE_MAX_SEMAPHORE_LIMIT", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=999))]
    pub max_semaphore_limit: u32,
    /// Most shared holders of one read-write lock at once, 1 to 999 (a
    /// read-write lock's Acquire reads every key of the lock, one leader
    /// read each, so this bounds its reads). Set the same on every replica.
    #[arg(long, env = "TENURE_MAX_SHARED_HOLDERS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=999))]
    pub max_shared_holders: u32,
    /// Most names one AcquireGroup may take, 2 to 64 (the group is read one
    /// leader read per name and written in one atomic batch of up to three
    /// messages per name).
    #[arg(long, env = "TENURE_MAX_GROUP_SIZE", default_value_t = 16, value_parser = clap::value_parser!(u8).range(2..=64))]
    pub max_group_size: u8,

    /// Folder for the local nats-server's store (only without --nats-url).
    #[arg(long, env = "TENURE_DATA_DIR", default_value = "tenure-data")]
    pub data_dir: PathBuf,

    /// nats-server binary for the local server. Default: .tools/bin/nats-server,
    /// then the PATH.
    #[arg(long, env = "TENURE_NATS_SERVER")]
    pub nats_server: Option<PathBuf>,

    /// Log line format.
    #[arg(long, env = "TENURE_LOG_FORMAT", value_enum, default_value = "human")]
    pub log_format: LogFormat,

    /// How long in-flight calls may take to finish after SIGTERM/SIGINT.
    #[arg(long, env = "TENURE_SHUTDOWN_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
}

impl Config {
    /// Checks the settings against each other; the message says what to fix.
    /// A `--test-fault` is refused unless `TENURE_TEST_FAULTS=1` is set.
    pub fn validate(&self) -> Result<(), String> {
        check_test_faults(
            &self.test_fault,
            std::env::var(TEST_FAULTS_ENV).ok().as_deref(),
        )?;
        let whole = |d: Duration| d.subsec_nanos() == 0;
        if self.bucket.is_empty()
            || !self
                .bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "--bucket {:?} is invalid: use letters, digits, '-' and '_'",
                self.bucket
            ));
        }
        if !matches!(self.replicas, 1..=5) {
            return Err(format!(
                "--replicas {} is invalid: use 1 to 5 (3 on a 3-node cluster)",
                self.replicas
            ));
        }
        for (flag, d) in [
            ("--min-ttl", self.min_ttl),
            ("--max-ttl", self.max_ttl),
            ("--default-ttl", self.default_ttl),
            ("--marker-ttl", self.marker_ttl),
            ("--max-wait", self.max_wait),
            ("--max-lock-delay", self.max_lock_delay),
            ("--request-body-timeout", self.request_body_timeout),
            ("--idle-timeout", self.idle_timeout),
            ("--handshake-timeout", self.handshake_timeout),
            ("--keepalive-idle-timeout", self.keepalive_idle_timeout),
            ("--watcher-idle-timeout", self.watcher_idle_timeout),
            ("--shutdown-grace", self.shutdown_grace),
        ] {
            if d > MAX_DURATION {
                return Err(format!(
                    "{flag} {}s is too long: durations go up to 8760h (365 days)",
                    d.as_secs()
                ));
            }
        }
        if self.shards > MAX_SHARDS {
            return Err(format!(
                "--shards {} is invalid: use 1 to {MAX_SHARDS} (0 adopts the bucket's count)",
                self.shards
            ));
        }
        for (flag, d) in [
            ("--min-ttl", self.min_ttl),
            ("--max-ttl", self.max_ttl),
            ("--default-ttl", self.default_ttl),
            ("--marker-ttl", self.marker_ttl),
        ] {
            if d < Duration::from_secs(1) || !whole(d) {
                return Err(format!(
                    "{flag} {d:?} is invalid: NATS counts TTLs in whole seconds, at least 1s"
                ));
            }
        }
        if self.max_ttl < self.min_ttl {
            return Err(format!(
                "--max-ttl {:?} is below --min-ttl {:?}",
                self.max_ttl, self.min_ttl
            ));
        }
        if self.default_ttl < self.min_ttl || self.default_ttl > self.max_ttl {
            return Err(format!(
                "--default-ttl {:?} must lie between --min-ttl and --max-ttl",
                self.default_ttl
            ));
        }
        for (flag, n) in [
            ("--max-concurrent-requests", self.max_concurrent_requests),
            ("--max-watch-streams", self.max_watch_streams),
            (
                "--max-watch-streams-per-identity",
                self.max_watch_streams_per_identity,
            ),
            ("--max-request-bytes", self.max_request_bytes),
            ("--max-watch-buffer-bytes", self.max_watch_buffer_bytes),
            (
                "--max-watch-buffer-total-bytes",
                self.max_watch_buffer_total_bytes,
            ),
            ("--max-metadata-bytes", self.max_metadata_bytes),
            (
                "--max-concurrent-requests-per-identity",
                self.max_concurrent_requests_per_identity,
            ),
            ("--max-waiting-acquires", self.max_waiting_acquires),
            (
                "--max-waiting-acquires-per-identity",
                self.max_waiting_acquires_per_identity,
            ),
            (
                "--max-streams-per-connection",
                self.max_streams_per_connection as usize,
            ),
            ("--max-connections", self.max_connections),
            ("--max-health-watches", self.max_health_watches),
            ("--max-keepalive-streams", self.max_keepalive_streams),
            (
                "--max-keepalive-streams-per-identity",
                self.max_keepalive_streams_per_identity,
            ),
            ("--max-keepalive-entries", self.max_keepalive_entries),
            ("--max-keepalive-in-flight", self.max_keepalive_in_flight),
        ] {
            if n == 0 {
                return Err(format!("{flag} 0 is invalid: give at least 1"));
            }
        }
        for (flag, d) in [
            ("--request-body-timeout", self.request_body_timeout),
            ("--idle-timeout", self.idle_timeout),
            ("--handshake-timeout", self.handshake_timeout),
            ("--keepalive-idle-timeout", self.keepalive_idle_timeout),
        ] {
            if d < Duration::from_millis(100) {
                return Err(format!("{flag} {d:?} is too short: give at least 100ms"));
            }
        }
        if !self.watcher_idle_timeout.is_zero()
            && self.watcher_idle_timeout < Duration::from_millis(100)
        {
            return Err(format!(
                "--watcher-idle-timeout {:?} is too short: give 0 (always on) or at least 100ms",
                self.watcher_idle_timeout
            ));
        }
        if self.max_lock_delay > self.marker_ttl {
            return Err(format!(
                "--max-lock-delay {:?} is longer than --marker-ttl {:?}: a delay is read from the expiry marker or revoke, \
                 which must still be there when the delay ends",
                self.max_lock_delay, self.marker_ttl
            ));
        }
        if self.max_keepalive_in_flight < self.max_keepalive_entries {
            return Err(format!(
                "--max-keepalive-in-flight {} is below --max-keepalive-entries {}: one full message must fit",
                self.max_keepalive_in_flight, self.max_keepalive_entries
            ));
        }
        if self.max_request_bytes < 1024 {
            return Err(format!(
                "--max-request-bytes {} is too small: a valid request can take ~1.8 KiB; give at least 1024",
                self.max_request_bytes
            ));
        }
        Ok(())
    }

    /// The bounds of each KeepAlive stream.
    pub fn keepalive(&self) -> KeepAliveBounds {
        KeepAliveBounds {
            max_entries: self.max_keepalive_entries,
            max_in_flight: self.max_keepalive_in_flight,
            idle_timeout: self.keepalive_idle_timeout,
            reply_bytes: self.max_keepalive_reply_bytes,
            reply_total_bytes: self.max_keepalive_reply_total_bytes,
        }
    }

    /// The TTL and wait limits requests are checked against.
    pub fn limits(&self) -> Limits {
        Limits {
            min_ttl_s: self.min_ttl.as_secs(),
            max_ttl_s: self.max_ttl.as_secs(),
            default_ttl_s: self.default_ttl.as_secs(),
            max_wait: self.max_wait,
            max_lock_delay_s: self.max_lock_delay.as_secs(),
            max_semaphore_limit: self.max_semaphore_limit,
            max_shared_holders: self.max_shared_holders,
            max_group_size: self.max_group_size.into(),
        }
    }

    /// The test faults in force (none unless `--test-fault`).
    pub fn test_faults(&self) -> TestFaults {
        TestFaults::of(&self.test_fault)
    }

    /// The bucket settings.
    pub fn bucket_config(&self) -> BucketConfig {
        BucketConfig {
            bucket: self.bucket.clone(),
            replicas: self.replicas,
            marker_ttl: self.marker_ttl,
            shards: self.shards,
            max_bytes: self.bucket_max_bytes,
        }
    }

    /// Settings for tests and embedding: defaults, with this NATS URL.
    pub fn for_nats(url: &str) -> Config {
        let matches = serve_command().get_matches_from([
            "serve",
            "--nats-url",
            url,
            "--listen",
            "127.0.0.1:0",
        ]);
        Config::from_arg_matches(&matches).expect("defaults parse")
    }
}

/// The `serve` command line alone: what the config file's keys are checked
/// against, and what [`resolve`] parses.
pub fn serve_command() -> clap::Command {
    Config::augment_args(clap::Command::new("serve"))
}

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    Human,
    /// One JSON object per event, for log pipelines.
    Json,
}

/// The bounds of one KeepAlive stream.
#[derive(Debug, Clone, Copy)]
pub struct KeepAliveBounds {
    /// Most entries per request message.
    pub max_entries: usize,
    /// Most renewals in flight per stream (at least `max_entries`).
    pub max_in_flight: usize,
    /// How long a stream with nothing pending may stay silent.
    pub idle_timeout: Duration,
    /// Most reply bytes one stream may owe its client.
    pub reply_bytes: usize,
    /// Most reply bytes all streams of the replica may owe together.
    pub reply_total_bytes: usize,
}

/// The server's TTL and wait bounds that requests are checked against.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Shortest TTL granted, whole seconds (at least 1: NATS's precision).
    pub min_ttl_s: u64,
    /// Longest TTL accepted, whole seconds.
    pub max_ttl_s: u64,
    /// TTL granted when a request gives none, whole seconds.
    pub default_ttl_s: u64,
    /// Longest `wait` an Acquire may ask for.
    pub max_wait: Duration,
    /// Longest `lock_delay` an Acquire may ask for, whole seconds.
    pub max_lock_delay_s: u64,
    /// Largest semaphore `limit` an Acquire may ask for.
    pub max_semaphore_limit: u32,
    /// Most shared holders of one read-write lock.
    pub max_shared_holders: u32,
    /// Most names in one AcquireGroup (and members in a RenewGroup or
    /// ReleaseGroup).
    pub max_group_size: usize,
}

/// Where the bucket lives and how it is made.
#[derive(Debug, Clone)]
pub struct BucketConfig {
    /// The KV bucket name (the stream is `KV_<bucket>`).
    pub bucket: String,
    /// Stream replicas: 1 on one server, 3 on a cluster.
    pub replicas: usize,
    /// How long NATS keeps an expiry marker (and Tenure a release tombstone).
    pub marker_ttl: Duration,
    /// Shards asked for (0: whatever the bucket has, 1 for a new one).
    pub shards: u32,
    /// Most bytes each shard's stream stores, set at creation (0: none).
    pub max_bytes: u64,
}

/// What a call does, for authorization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// `Acquire`.
    Acquire,
    /// `Renew`.
    Renew,
    /// `Release`.
    Release,
    /// `GetLease` and `WatchLease`: reading leases.
    Watch,
    /// `ListLeases` and `RevokeLease`.
    Admin,
    /// Every action (written `"*"` or `"all"` in a grant).
    #[serde(alias = "*")]
    All,
}

impl Action {
    /// The lowercase name used in grants and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Acquire => "acquire",
            Action::Renew => "renew",
            Action::Release => "release",
            Action::Watch => "watch",
            Action::Admin => "admin",
            Action::All => "all",
        }
    }
}

/// One `[[grant]]` table of the config file: an identity may take these
/// actions on names starting with these prefixes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The identity: a token's identity, a certificate's CN or SAN, or `"*"`
    /// for every authenticated caller.
    pub identity: String,
    /// Lease-name prefixes (plain string prefixes; end them with `.` to
    /// mean a subtree); `""` means every name.
    pub prefixes: Vec<String>,
    /// The actions granted.
    pub actions: Vec<Action>,
}

/// Parses "1500ms", "10s", "5m", "1h" (or a bare number of seconds). A
/// number too large to count is refused here; [`MAX_DURATION`] is checked
/// by [`Config::validate`], whatever the source of the value.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let too_long = || format!("{text:?} is too long: durations go up to 8760h (365 days)");
    let n: u64 = num.parse().map_err(|e: std::num::ParseIntError| {
        if *e.kind() == std::num::IntErrorKind::PosOverflow {
            too_long()
        } else {
            format!("{text:?} is not a duration; use e.g. 500ms, 10s, 5m, 1h")
        }
    })?;
    let scaled = |per: u64| {
        n.checked_mul(per)
            .map(Duration::from_secs)
            .ok_or_else(too_long)
    };
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => scaled(60)?,
        "h" => scaled(3600)?,
        _ => {
            return Err(format!(
                "{text:?} has unknown unit {unit:?}; use ms, s, m or h"
            ))
        }
    };
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Durations parse in the units docs/operations.md documents.
    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("s").is_err());
        // Too large to count: refused, not a panic (or a wrapped value).
        for huge in [
            "6000000000000000h",
            "400000000000000000m",
            "99999999999999999999s",
        ] {
            let err = parse_duration(huge).unwrap_err();
            assert!(err.contains("8760h"), "{huge}: {err}");
        }
    }

    /// Every duration setting is capped at MAX_DURATION (8760h): the
    /// `--max-ttl 2562047788015h` that used to be accepted is refused.
    #[test]
    fn durations_have_a_ceiling() {
        let c = Config::for_nats("nats://127.0.0.1:4222");
        let huge = Duration::from_secs(2_562_047_788_015 * 3600);
        type Set = fn(&mut Config, Duration);
        let cases: [(&str, Set); 12] = [
            ("--min-ttl", |c, d| c.min_ttl = d),
            ("--max-ttl", |c, d| c.max_ttl = d),
            ("--default-ttl", |c, d| c.default_ttl = d),
            ("--marker-ttl", |c, d| c.marker_ttl = d),
            ("--max-wait", |c, d| c.max_wait = d),
            ("--max-lock-delay", |c, d| c.max_lock_delay = d),
            ("--request-body-timeout", |c, d| c.request_body_timeout = d),
            ("--idle-timeout", |c, d| c.idle_timeout = d),
            ("--handshake-timeout", |c, d| c.handshake_timeout = d),
            ("--keepalive-idle-timeout", |c, d| {
                c.keepalive_idle_timeout = d
            }),
            ("--watcher-idle-timeout", |c, d| c.watcher_idle_timeout = d),
            ("--shutdown-grace", |c, d| c.shutdown_grace = d),
        ];
        for (flag, set) in cases {
            for d in [huge, MAX_DURATION + Duration::from_secs(1)] {
                let mut bad = c.clone();
                set(&mut bad, d);
                let err = bad.validate().unwrap_err();
                assert!(err.starts_with(flag) && err.contains("8760h"), "{err}");
            }
        }
        // The ceiling itself is accepted.
        let at_ceiling = Config {
            max_ttl: MAX_DURATION,
            marker_ttl: MAX_DURATION,
            max_wait: MAX_DURATION,
            max_lock_delay: MAX_DURATION,
            ..c
        };
        assert!(at_ceiling.validate().is_ok());
    }

    /// Defaults are valid; sub-second and inverted TTL bounds are not.
    #[test]
    fn validation() {
        let c = Config::for_nats("nats://127.0.0.1:4222");
        assert!(c.validate().is_ok());
        assert!(Config {
            min_ttl: Duration::from_millis(500),
            ..c.clone()
        }
        .validate()
        .is_err());
        assert!(Config {
            max_ttl: Duration::from_secs(5),
            default_ttl: Duration::from_secs(10),
            ..c.clone()
        }
        .validate()
        .is_err());
        assert!(Config {
            bucket: "a.b".into(),
            ..c.clone()
        }
        .validate()
        .is_err());
        assert!(Config {
            replicas: 0,
            ..c.clone()
        }
        .validate()
        .is_err());
        assert!(Config {
            shards: MAX_SHARDS + 1,
            ..c
        }
        .validate()
        .is_err());
    }
}
