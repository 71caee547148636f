//! The command line of the client subcommands: what each one takes, the
//! connection flags they all share, and the small parsers (durations,
//! `key=value` metadata) they need.
//!
//! Kept apart from the server's `config` module on purpose: the client
//! subcommands share nothing with `tenure serve` but the binary, and their
//! environment variables are named so that a shell exporting the server's
//! `TENURE_TLS_CERT` does not turn the client's TLS on by accident.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

/// The client subcommands of `tenure`: for people at a terminal and for
/// scripts. Flattened into the binary's top-level subcommands.
#[derive(Debug, Subcommand)]
// Parsed once per process: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum ClientCommand {
    /// Run a command while holding a lease; stop it when the lease is lost.
    ///
    /// The command gets TENURE_LEASE_NAME, TENURE_FENCING_TOKEN, TENURE_FENCE
    /// (the fence proof's text form, empty when the server signs none),
    /// TENURE_HOLDER and TENURE_DEADLINE_UNIX_MS in its environment. The lease is renewed in
    /// the background; when it is lost (revoked, expired, taken) or renewals
    /// cannot get through before the safe deadline, the command's process
    /// group gets SIGTERM at once and SIGKILL after --kill-grace. Exit codes:
    /// the command's own; 128+N when it died of signal N; 75 when the lease
    /// was not acquired; 76 when it was lost while the command ran; 69 when
    /// the server cannot be reached; 77 when access is refused; 70 when the
    /// server granted a TTL no Tenure server grants; 2 for usage errors;
    /// 126/127 when the command cannot be run.
    Lock(LockArgs),
    /// Show the current holding of a lease.
    Get(GetArgs),
    /// List the live leases whose names start with a prefix (admin).
    List(ListArgs),
    /// Stream a lease's events (or a subtree's, with NAME.>) until interrupted.
    Watch(WatchArgs),
    /// Acquire a lease and print it with its lease key (for scripts and tests;
    /// `tenure lock` is what keeps a lease while a command runs).
    Acquire(AcquireArgs),
    /// Renew a holding acquired with `tenure acquire`.
    Renew(RenewArgs),
    /// Release a holding acquired with `tenure acquire`.
    Release(ReleaseArgs),
    /// End someone's holding as an operator (admin).
    Revoke(RevokeArgs),
    /// Hand a holding acquired with `tenure acquire` to a waiting Acquire
    /// (the holder given with --to, or the first in line), with no moment
    /// in which the lease is free.
    Transfer(TransferArgs),
    /// A live view of the leases under a prefix and their events.
    Top(TopArgs),
    /// Ask a server whether it serves (gRPC health Check), for probes and
    /// container health checks.
    ///
    /// Prints the status the server answered. Exit codes: 0 SERVING; 1 any
    /// other answer (NOT_SERVING: it cannot reach NATS or is shutting down)
    /// or a --service the server does not know; 69 when the server cannot be
    /// reached; 2 for usage errors.
    Health(HealthArgs),
    /// Who held a lease, when, with which token, and how each holding ended
    /// (from the history NATS keeps for the server's --history-retention).
    History(HistoryArgs),
    /// Print the public keys fence proofs are signed with (the keyset a
    /// store pins: docs/fencing.md), or, with --generate FILE, write a new
    /// signing key for `tenure serve --fence-signing-key`.
    FenceKeys(FenceKeysArgs),
    /// Print a shell completion script: `tenure completions bash > ...`.
    Completions(CompletionsArgs),
    /// Write the manual pages (roff), for packagers: tenure(1) to stdout,
    /// or every page into --dir.
    #[command(hide = true)]
    Man(ManArgs),
}

/// How to reach and authenticate to the Tenure server; shared by every
/// client subcommand.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection")]
pub struct Connection {
    /// The Tenure server: http://HOST:PORT, or https://HOST:PORT for TLS (a
    /// bare HOST:PORT is TLS when a TLS flag is given). Other schemes are
    /// refused.
    #[arg(
        long,
        env = "TENURE_SERVER",
        default_value = "http://127.0.0.1:7419",
        value_name = "URL"
    )]
    pub server: String,

    /// Bearer token sent as `authorization: Bearer TOKEN`.
    #[arg(
        long,
        env = "TENURE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,

    /// File whose first line is the bearer token (keeps it out of `ps`); at
    /// most 64 KiB.
    #[arg(
        long,
        env = "TENURE_TOKEN_FILE",
        conflicts_with = "token",
        value_name = "FILE"
    )]
    pub token_file: Option<PathBuf>,

    /// CA certificate (PEM, at most 1 MiB) that the server's TLS certificate
    /// must chain to. Needed for https:// servers; refused with http://.
    #[arg(long, env = "TENURE_CLIENT_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for mutual TLS (with --tls-key).
    #[arg(
        long,
        env = "TENURE_CLIENT_TLS_CERT",
        requires = "tls_key",
        value_name = "FILE"
    )]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert.
    #[arg(
        long,
        env = "TENURE_CLIENT_TLS_KEY",
        requires = "tls_cert",
        value_name = "FILE"
    )]
    pub tls_key: Option<PathBuf>,

    /// TLS server name to verify, when it differs from the URL's host.
    #[arg(long, env = "TENURE_CLIENT_TLS_DOMAIN", value_name = "NAME")]
    pub tls_domain: Option<String>,

    /// Longest time one request may take (connecting included); waits asked
    /// for with --wait come on top.
    #[arg(
        long,
        env = "TENURE_TIMEOUT",
        default_value = "10s",
        value_parser = parse_duration,
        value_name = "DURATION"
    )]
    pub timeout: Duration,
}

/// How results are printed.
/// How `--mode` holds a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LockMode {
    /// Beside any other shared holders, while nobody holds it exclusively.
    Shared,
    /// Alone.
    Exclusive,
}

impl LockMode {
    /// The proto's `LockMode` value of `mode` (none: a plain lease).
    pub fn proto(mode: Option<LockMode>) -> i32 {
        use crate::proto::LockMode as P;
        let mode = match mode {
            None => P::Unspecified,
            Some(LockMode::Shared) => P::Shared,
            Some(LockMode::Exclusive) => P::Exclusive,
        };
        mode as i32
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    Table,
    /// JSON for scripts: one object per result (one per line for `watch`).
    Json,
}

/// The `--output` flag, shared by the subcommands that print results.
#[derive(Debug, Clone, Args)]
pub struct Output {
    /// Output format.
    #[arg(
        long,
        short = 'o',
        env = "TENURE_OUTPUT",
        value_enum,
        default_value = "table"
    )]
    pub output: OutputFormat,
}

/// `tenure lock`.
#[derive(Debug, Clone, Args)]
pub struct LockArgs {
    /// The lease name.
    pub name: String,

    /// The command to run and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,

    /// Time to live asked for; renewed every third of it.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Duration,

    /// How long to wait for a held lease: a duration, or `forever`. Without
    /// it, a held lease fails at once (exit 75).
    #[arg(long, value_parser = parse_wait, value_name = "DURATION|forever")]
    pub wait: Option<Wait>,

    /// Who holds the lease, as others see it. Default: USER@HOST:PID.
    #[arg(long)]
    pub holder: Option<String>,

    /// Hold one of N slots of a counting semaphore (N > 1); 1 is a plain
    /// lease.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub limit: Option<u32>,

    /// Hold a read-write lock: `shared` (beside other shared holders) or
    /// `exclusive` (alone). Without it, a plain lease.
    #[arg(long, value_enum, conflicts_with = "limit")]
    pub mode: Option<LockMode>,

    /// Time between SIGTERM and SIGKILL to the command's process group once
    /// the lease is lost.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub kill_grace: Duration,

    /// Metadata stored with the lease, KEY=VALUE (repeatable).
    #[arg(long = "meta", value_parser = parse_key_value, value_name = "KEY=VALUE")]
    pub metadata: Vec<(String, String)>,

    /// Say less: no "acquired" and "released" lines on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// How long `tenure lock` and `tenure acquire` wait for a held lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Up to this long.
    For(Duration),
    /// Until the lease is free, however long that takes.
    Forever,
}

/// `tenure get`.
#[derive(Debug, Clone, Args)]
pub struct GetArgs {
    /// The lease name.
    pub name: String,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure list`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Plain string prefix of the names to list (`jobs.`); none lists all.
    #[arg(default_value = "")]
    pub prefix: String,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure watch`.
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// A lease name, or a subtree: `jobs.>` for every name under `jobs.`,
    /// `>` for all.
    pub name: String,
    /// Leave out the snapshot of current holdings; print live events only.
    #[arg(long)]
    pub no_snapshot: bool,
    /// Resume after this revision (the last event seen) instead of starting
    /// with a snapshot: print the changes after it (the latest of each
    /// name), SNAPSHOT_COMPLETE, then live events. Refused with
    /// WATCH_HISTORY_COMPACTED when it is too old.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        conflicts_with = "no_snapshot"
    )]
    pub from_revision: u64,
    /// Stop after this many events (snapshot entries included).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure acquire`.
#[derive(Debug, Clone, Args)]
pub struct AcquireArgs {
    /// The lease name.
    pub name: String,
    /// More lease names: all are taken, or none (one AcquireGroup; each
    /// gets its own fencing token and they share the lease key).
    #[arg(value_name = "NAME")]
    pub more: Vec<String>,
    /// Who holds the lease. Default: USER@HOST.
    #[arg(long)]
    pub holder: Option<String>,
    /// Time to live asked for (the server's default when absent).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Option<Duration>,
    /// How long to wait for a held lease: a duration, or `forever`.
    #[arg(long, value_parser = parse_wait, value_name = "DURATION|forever")]
    pub wait: Option<Wait>,
    /// The lease key to use (16 to 256 printable ASCII characters); the
    /// server mints one when absent. Reusing it makes a retry safe.
    #[arg(long, env = "TENURE_LEASE_KEY", hide_env_values = true)]
    pub lease_key: Option<String>,
    /// Metadata stored with the lease, KEY=VALUE (repeatable).
    #[arg(long = "meta", value_parser = parse_key_value, value_name = "KEY=VALUE")]
    pub metadata: Vec<(String, String)>,
    /// Take a slot of a counting semaphore of N holders instead of an
    /// exclusive lease (0: a plain lease). Renew and release with the
    /// printed --slot.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub limit: u32,
    /// Hold a read-write lock: `shared` (beside other shared holders) or
    /// `exclusive` (alone); renew and release with the printed --slot.
    /// Without it, a plain lease.
    #[arg(long, value_enum, conflicts_with = "limit")]
    pub mode: Option<LockMode>,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure renew`.
#[derive(Debug, Clone, Args)]
pub struct RenewArgs {
    /// The lease name.
    pub name: String,
    /// The revision printed by the last acquire or renew.
    #[arg(long)]
    pub revision: u64,
    /// The lease key printed by `tenure acquire`.
    #[arg(long, env = "TENURE_LEASE_KEY", hide_env_values = true)]
    pub lease_key: String,
    /// The semaphore slot printed by `tenure acquire --limit` (0: a plain
    /// lease).
    #[arg(long, default_value_t = 0)]
    pub slot: u32,
    /// New time to live (the granted one is kept when absent).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Option<Duration>,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure release`.
#[derive(Debug, Clone, Args)]
pub struct ReleaseArgs {
    /// The lease name.
    pub name: String,
    /// The revision printed by the last acquire or renew.
    #[arg(long)]
    pub revision: u64,
    /// The lease key printed by `tenure acquire`.
    #[arg(long, env = "TENURE_LEASE_KEY", hide_env_values = true)]
    pub lease_key: String,
    /// The semaphore slot printed by `tenure acquire --limit` (0: a plain
    /// lease).
    #[arg(long, default_value_t = 0)]
    pub slot: u32,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure transfer`.
#[derive(Debug, Clone, Args)]
pub struct TransferArgs {
    /// The lease name.
    pub name: String,
    /// The revision printed by the last acquire or renew.
    #[arg(long)]
    pub revision: u64,
    /// The lease key printed by `tenure acquire`.
    #[arg(long, env = "TENURE_LEASE_KEY", hide_env_values = true)]
    pub lease_key: String,
    /// The waiting holder to hand it to (default: the first in line).
    #[arg(long, value_name = "HOLDER")]
    pub to: Option<String>,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure revoke`.
#[derive(Debug, Clone, Args)]
pub struct RevokeArgs {
    /// The lease name.
    pub name: String,
    /// Why, for the audit log. Default: "revoked by USER with tenure revoke".
    #[arg(long)]
    pub reason: Option<String>,
    /// Revoke only the holding with this fencing token (safe against
    /// revoking a newer holder by mistake).
    #[arg(long, value_name = "TOKEN")]
    pub fencing_token: Option<u64>,
    /// Revoke the holder of this slot of the semaphore NAME (the `slot`
    /// that `tenure list` and `tenure get` show).
    #[arg(long, value_name = "SLOT")]
    pub slot: Option<u32>,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure top`.
#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    /// Names to show: `jobs` or `jobs.` (every name under `jobs.`), `jobs.>`,
    /// or nothing for all.
    pub prefix: Option<String>,
    /// Screen refresh interval (TTL bars drain at this pace).
    #[arg(long, default_value = "250ms", value_parser = parse_duration, value_name = "DURATION")]
    pub refresh: Duration,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure health`.
#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// The service whose health to ask for: empty for the server as a whole,
    /// or tenure.v1.LeaseService, tenure.v1.ElectionService.
    #[arg(long, default_value = "", value_name = "NAME")]
    pub service: String,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure history`.
#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    /// The lease name.
    pub name: String,
    /// Only holdings that ended at or after this time, or are still held:
    /// an RFC 3339 time (2026-12-01T10:00:00Z) or a duration ago (1h).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub since: Option<std::time::SystemTime>,
    /// Only holdings held at this instant (RFC 3339 time or duration ago).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub at: Option<std::time::SystemTime>,
    /// Most holdings shown (1 to 1000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// A time: RFC 3339 (`2026-12-01T10:00:00Z`, an offset allowed) or a
/// duration before now (`90m`).
pub fn parse_time(text: &str) -> Result<std::time::SystemTime, String> {
    if let Ok(ago) = parse_duration(text) {
        return std::time::SystemTime::now()
            .checked_sub(ago)
            .ok_or_else(|| format!("{text:?} ago is before 1970"));
    }
    let t = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| format!("{text:?} is neither an RFC 3339 time (2026-12-01T10:00:00Z) nor a duration ago (1h)"))?;
    let nanos =
        u64::try_from(t.unix_timestamp_nanos()).map_err(|_| format!("{text:?} is before 1970"))?;
    Ok(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(nanos))
}

/// `tenure fence-keys`.
#[derive(Debug, Clone, Args)]
pub struct FenceKeysArgs {
    /// Write a new Ed25519 signing key (PKCS#8 PEM, mode 0600) to FILE and
    /// print its public key as a keyset line; asks no server. An existing
    /// FILE is never overwritten.
    #[arg(long, value_name = "FILE")]
    pub generate: Option<PathBuf>,
    /// Output format.
    #[command(flatten)]
    pub output: Output,
    /// Connection flags.
    #[command(flatten)]
    pub conn: Connection,
}

/// `tenure man`.
#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// Write tenure.1 and one page per subcommand (tenure-serve.1, ...) into
    /// this folder instead of tenure(1) to stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `tenure completions`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell to write a completion script for.
    pub shell: clap_complete::Shell,
}

/// The longest duration any flag takes, 8760h (365 days): the ceiling
/// `tenure serve` puts on its own duration settings, so no TTL a Tenure
/// server grants is longer. Far below where adding a duration to a clock
/// reading could overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(8760 * 3600);

/// [`MAX_DURATION`] as the messages and docs spell it.
pub const MAX_DURATION_TEXT: &str = "8760h (365 days)";

/// Parses "1500ms", "10s", "1.5s", "5m", "1h" (a bare number means
/// seconds), up to [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || format!("{text:?} is not a duration; use e.g. 500ms, 10s, 1.5s, 5m, 1h");
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
        return Err(bad());
    }
    let n: f64 = num.parse().map_err(|_| bad())?;
    let scale = match unit {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "{text:?} has unknown unit {unit:?}; use ms, s, m or h"
            ))
        }
    };
    let secs = n * scale;
    if secs > MAX_DURATION.as_secs_f64() {
        return Err(format!(
            "{text:?} is too long: durations go up to {MAX_DURATION_TEXT}"
        ));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

/// Parses a `--wait` value: a duration or `forever`.
pub fn parse_wait(text: &str) -> Result<Wait, String> {
    match text.trim() {
        "forever" | "inf" => Ok(Wait::Forever),
        other => parse_duration(other).map(Wait::For),
    }
}

/// Parses `KEY=VALUE`.
pub fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Durations parse in the documented units; junk is refused, not panicked on.
    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        for bad in [
            "",
            "s",
            "1x",
            ".5s",
            "1.s",
            "1..2s",
            "-1s",
            "99999999999999999999h",
            "8761h",
            "5000000000000000h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(parse_duration("8760h"), Ok(MAX_DURATION));
        assert!(parse_duration("8761h").unwrap_err().contains("8760h"));
    }

    /// `--wait forever` and `--wait 30s`.
    #[test]
    fn waits() {
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("30s"), Ok(Wait::For(Duration::from_secs(30))));
        assert!(parse_wait("sometime").is_err());
    }

    /// Metadata needs a key; the value may hold `=`.
    #[test]
    fn key_values() {
        assert_eq!(
            parse_key_value("a=b=c"),
            Ok(("a".to_string(), "b=c".to_string()))
        );
        assert!(parse_key_value("=b").is_err());
        assert!(parse_key_value("ab").is_err());
    }
}
