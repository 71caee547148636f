//! `tenure lock NAME -- CMD ARGS...`: run a command only while holding a
//! lease, and stop it as soon as the lease is no longer certainly held.
//!
//! What makes this correct where `consul lock` and `etcdctl lock` are not:
//!
//! - **A local safe deadline.** The lease is ours until the time the last
//!   successful Acquire/Renew was *sent* plus the granted TTL, on this
//!   machine's monotonic clock; the safe deadline is that minus a margin
//!   (TTL/10, at most 1 s). If no renewal gets through before it, the
//!   command is stopped then, whatever the server or network is doing.
//! - **Following the lease.** A `WatchLease` on the name reports a revoke,
//!   an expiry or another holder the moment it happens, so the command is
//!   signalled within milliseconds instead of at the next renewal.
//! - **The whole process group.** The command runs in its own process group;
//!   SIGTERM goes to the group at once and SIGKILL after `--kill-grace`, so
//!   children the command started stop too.
//!
//! The command's environment carries the fencing token to pass downstream
//! with every write, which is what keeps a command that was paused past the
//! deadline from doing damage.

use std::process::ExitStatus;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep, sleep_until, Instant};

use super::args::{Connection, LockArgs, MAX_DURATION, MAX_DURATION_TEXT};
use super::commands::{acquire_waiting, default_holder, to_proto};
use super::connect::{connect, request, Client};
use super::error::{
    permanent, CliError, EXIT_BAD_RESPONSE, EXIT_CANNOT_EXECUTE, EXIT_LEASE_LOST, EXIT_NOT_FOUND,
    EXIT_USAGE,
};
use super::output::{event_name, proto_duration, secs};
use crate::proto::{
    AcquireRequest, EventType, Lease, ReleaseRequest, RenewRequest, WatchLeaseRequest,
};

/// The signals forwarded to the command's process group.
const FORWARDED: [(SignalKind, i32); 4] = [
    (SignalKind::interrupt(), libc::SIGINT),
    (SignalKind::terminate(), libc::SIGTERM),
    (SignalKind::hangup(), libc::SIGHUP),
    (SignalKind::quit(), libc::SIGQUIT),
];

/// What we know of our holding; shared by the renewer and the main loop.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// The revision of the last successful Acquire/Renew.
    revision: u64,
    /// The safe deadline: send time of that call + granted TTL − margin.
    deadline: Instant,
    /// The granted TTL.
    ttl: Duration,
}

/// The margin kept before the lease's end: a tenth of the TTL, at most 1 s.
pub fn margin(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_secs(1))
}

/// The safe deadline of a grant sent at `sent` for `ttl`; `sent` itself
/// (the lease counts as lost at once) if the clock cannot represent it.
fn safe_deadline(sent: Instant, ttl: Duration) -> Instant {
    sent.checked_add(ttl - margin(ttl)).unwrap_or(sent)
}

/// The TTL an Acquire or Renew granted (`fallback` when it names none),
/// refused when no Tenure server grants it: longer than [`MAX_DURATION`].
/// A deadline is never computed from a TTL the server could not mean.
fn granted_ttl(lease: &Lease, fallback: Duration) -> Result<Duration, String> {
    let ttl = lease.ttl.map(proto_duration).unwrap_or(fallback);
    if ttl > MAX_DURATION {
        return Err(format!(
            "a TTL of {}s, longer than the {MAX_DURATION_TEXT} any Tenure server grants",
            ttl.as_secs()
        ));
    }
    Ok(ttl)
}

/// How often to renew: every third of the TTL.
fn renew_every(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(100))
}

/// The wall-clock time of a monotonic instant, in Unix milliseconds.
fn unix_ms(at: Instant) -> u128 {
    let now = Instant::now();
    let wall = if at >= now {
        SystemTime::now().checked_add(at - now)
    } else {
        SystemTime::now().checked_sub(now - at)
    };
    wall.unwrap_or_else(SystemTime::now)
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

/// Prints a progress line on stderr unless `--quiet`.
fn say(quiet: bool, msg: impl AsRef<str>) {
    if !quiet {
        super::output::write_err(&format!("tenure: {}", msg.as_ref()));
    }
}

/// Runs `tenure lock`; returns the exit code.
pub async fn lock(a: LockArgs) -> u8 {
    // --limit 1 (or none) is a plain lease; N > 1 one of N semaphore slots.
    let limit = a.limit.filter(|n| *n > 1).unwrap_or(0);
    if a.ttl < Duration::from_secs(1) {
        CliError::usage("--ttl must be at least 1s (the server counts TTLs in whole seconds)")
            .print();
        return EXIT_USAGE;
    }
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            CliError::usage(format!("cannot handle signals: {e}")).print();
            return EXIT_USAGE;
        }
    };
    let holder = a
        .holder
        .clone()
        .unwrap_or_else(|| format!("{}:{}", default_holder(), std::process::id()));

    // Connect and acquire (interruptible: Ctrl-C while waiting exits 130).
    let req = AcquireRequest {
        name: a.name.clone(),
        holder: holder.clone(),
        ttl: Some(to_proto(a.ttl)),
        lease_key: String::new(),
        wait: None,
        metadata: a.metadata.iter().cloned().collect(),
        lock_delay: None,
        limit,
        preference: 0,
        mode: super::args::LockMode::proto(a.mode),
    };
    let acquiring = async {
        let mut client = connect(&a.conn).await?;
        let got = acquire_waiting(&mut client, &a.conn, req, a.wait).await?;
        Ok::<_, CliError>((client, got))
    };
    let acquired = tokio::select! {
        r = acquiring => r,
        sig = signals.recv() => {
            say(a.quiet, format!("interrupted by signal {sig} before the lease was acquired"));
            return 128 + sig as u8;
        }
    };
    let (client, (lease, key, sent)) = match acquired {
        Ok(v) => v,
        Err(e) => {
            e.print();
            return e.code;
        }
    };
    let ttl = match granted_ttl(&lease, a.ttl) {
        Ok(ttl) => ttl,
        Err(why) => {
            // Whatever the server thinks it granted is handed back first.
            release(
                client,
                &a.conn,
                (&a.name, lease.slot),
                lease.revision,
                &key,
                true,
            )
            .await;
            CliError {
                code: EXIT_BAD_RESPONSE,
                reason: "BAD_RESPONSE".into(),
                message: format!(
                    "the server granted {} with {why}; the command did not run",
                    a.name
                ),
                hint: Some("the server is broken or not Tenure: check --server".into()),
            }
            .print();
            return EXIT_BAD_RESPONSE;
        }
    };
    let sent = Instant::from_std(sent);
    let held = Held {
        revision: lease.revision,
        deadline: safe_deadline(sent, ttl),
        ttl,
    };
    let token = lease.fencing_token;
    let fence = super::output::fence_text(&lease.fence_proof);
    let slot = lease.slot;
    say(
        a.quiet,
        format!(
            "acquired {} as {holder} (fencing token {token}, ttl {})",
            a.name,
            secs(ttl)
        ),
    );

    // Follow the lease before the command starts, so nothing is missed.
    let (lost_tx, mut lost_rx) = mpsc::channel::<String>(4);
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let follower = tokio::spawn(follow(
        client.clone(),
        a.name.clone(),
        slot,
        token,
        lost_tx.clone(),
        ready_tx,
    ));
    let (state_tx, mut state_rx) = watch::channel(held);
    let (stop_tx, stop_rx) = watch::channel(false);
    let renewer = tokio::spawn(keep(
        client.clone(),
        a.conn.clone(),
        a.name.clone(),
        slot,
        key.clone(),
        state_tx,
        stop_rx,
        lost_tx.clone(),
        sent + renew_every(ttl),
    ));
    // Renewals run meanwhile; the wait is bounded by the deadline too.
    let patience = a
        .conn
        .timeout
        .min(held.deadline.saturating_duration_since(Instant::now()));
    match tokio::time::timeout(patience, ready_rx).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => say(
            false,
            format!("cannot follow the lease with WatchLease ({e}); relying on renewals alone"),
        ),
        _ => say(
            false,
            "WatchLease did not answer in time; relying on renewals alone until it does",
        ),
    }

    drop(lost_tx);
    let finish = |client: Client, revision: Option<u64>| {
        let conn = a.conn.clone();
        let name = a.name.clone();
        let key = key.clone();
        let quiet = a.quiet;
        async move {
            follower.abort();
            let _ = stop_tx.send(true);
            let _ = renewer.await;
            if let Some(rev) = revision {
                release(client, &conn, (&name, slot), rev, &key, quiet).await;
            }
        }
    };

    // The snapshot may already say the holding is gone, or the deadline
    // may have passed while WatchLease kept us waiting: then the command
    // never starts.
    let early = lost_rx.try_recv().ok().or_else(|| {
        (state_rx.borrow().deadline <= Instant::now())
            .then(|| "no renewal got through before the safe deadline".to_string())
    });
    if let Some(reason) = early {
        say(
            false,
            format!("lease {} lost before the command started: {reason}", a.name),
        );
        finish(client, None).await;
        return EXIT_LEASE_LOST;
    }

    // Start the command.
    let mut command = tokio::process::Command::new(&a.command[0]);
    command
        .args(&a.command[1..])
        .env("TENURE_LEASE_NAME", &a.name)
        .env("TENURE_FENCING_TOKEN", token.to_string())
        .env("TENURE_FENCE", &fence)
        .env("TENURE_HOLDER", &holder)
        .env(
            "TENURE_DEADLINE_UNIX_MS",
            unix_ms(held.deadline).to_string(),
        )
        .process_group(0);
    let terminal = Terminal::detect();
    if terminal.is_some() {
        // SAFETY: only async-signal-safe calls (setpgid, signal, tcsetpgrp,
        // getpid) between fork and exec.
        unsafe {
            command.pre_exec(|| {
                libc::setpgid(0, 0);
                give_terminal(libc::getpid());
                Ok(())
            });
        }
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                EXIT_NOT_FOUND
            } else {
                EXIT_CANNOT_EXECUTE
            };
            CliError {
                code,
                reason: "CANNOT_RUN".into(),
                message: format!("cannot run {:?}: {e}", a.command[0]),
                hint: Some("check the command's name, PATH and permissions".into()),
            }
            .print();
            let rev = state_rx.borrow().revision;
            finish(client, Some(rev)).await;
            return code;
        }
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    // Also from this side, whichever runs first (as shells do); the guard
    // takes the terminal back however this function returns.
    let _terminal = terminal.map(|t| t.hand_to(pgid));

    // Hold the lease while the command runs.
    // False once the renewer has ended (after reporting a refusal): its
    // state no longer changes, and `changed()` would fail at once forever.
    let mut renewing = true;
    let lost = loop {
        let deadline = state_rx.borrow().deadline;
        tokio::select! {
            status = child.wait() => {
                let code = exit_code(status);
                reap_group(pgid, a.kill_grace).await;
                let rev = state_rx.borrow().revision;
                finish(client, Some(rev)).await;
                return code;
            }
            Some(reason) = lost_rx.recv() => break reason,
            _ = sleep_until(deadline) => {
                if state_rx.borrow().deadline <= Instant::now() {
                    break format!(
                        "no renewal got through before the safe deadline (unix ms {})",
                        unix_ms(deadline)
                    );
                }
            }
            changed = state_rx.changed(), if renewing => renewing = changed.is_ok(),
            sig = signals.recv() => {
                say(a.quiet, format!("forwarding signal {sig} to the command"));
                kill_group(pgid, sig);
            }
        }
    };

    // The lease is lost: stop the command now.
    kill_group(pgid, libc::SIGTERM);
    say(
        false,
        format!(
            "lease {} lost: {lost}; sent SIGTERM to the command's process group {pgid}, SIGKILL in {}",
            a.name,
            secs(a.kill_grace)
        ),
    );
    let grace_end = Instant::now() + a.kill_grace;
    loop {
        tokio::select! {
            _ = child.wait() => break,
            _ = sleep_until(grace_end) => {
                kill_group(pgid, libc::SIGKILL);
                let _ = child.wait().await;
                break;
            }
            sig = signals.recv() => kill_group(pgid, sig),
        }
    }
    reap_group(pgid, grace_end.saturating_duration_since(Instant::now())).await;
    // When renewals failed the server may still think we hold it: release
    // (best effort) so the next holder need not wait for the expiry.
    let rev = lost
        .starts_with("no renewal")
        .then(|| state_rx.borrow().revision);
    finish(client, rev).await;
    EXIT_LEASE_LOST
}

/// The exit code that reports a command's status: its own code, or 128+N
/// when signal N ended it.
pub fn exit_code(status: std::io::Result<ExitStatus>) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => (c & 0xff) as u8,
            (None, Some(sig)) => (128 + sig).min(255) as u8,
            (None, None) => 1,
        },
        Err(_) => 1,
    }
}

/// Sends a signal to a process group (nothing for pgid 0).
fn kill_group(pgid: i32, sig: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals the group; no memory
        // is involved.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// Whether any process is left in the group.
fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    pgid > 0 && unsafe { libc::kill(-pgid, 0) } == 0
}

/// After the command exited: what it left running in its group works
/// without the lease, so it gets SIGTERM, then SIGKILL after `grace`.
async fn reap_group(pgid: i32, grace: Duration) {
    if !group_alive(pgid) {
        return;
    }
    kill_group(pgid, libc::SIGTERM);
    let end = Instant::now() + grace;
    // No event tells when the last member of a group we are not the parent
    // of has gone: look every 20 ms, within the grace.
    while group_alive(pgid) && Instant::now() < end {
        sleep(Duration::from_millis(20)).await;
    }
    kill_group(pgid, libc::SIGKILL);
}

/// Releases the lease (or the semaphore slot `slot`, when not 0); a
/// failure is reported, not fatal: the command's work is done, and the
/// lease ends at its TTL anyway.
async fn release(
    mut client: Client,
    conn: &Connection,
    (name, slot): (&str, u32),
    rev: u64,
    key: &str,
    quiet: bool,
) {
    let req = request(
        ReleaseRequest {
            name: name.to_string(),
            expected_revision: rev,
            lease_key: key.to_string(),
            slot,
        },
        conn,
        Duration::ZERO,
    );
    match client.release(req).await {
        Ok(_) => say(quiet, format!("released {name}")),
        Err(s) => say(
            false,
            format!("could not release {name}: {}", CliError::from_status(&s)),
        ),
    }
}

/// The renewer: renews every TTL/3 with the last revision, publishes each
/// new safe deadline, retries transient failures until the deadline, and
/// reports a refusal (LEASE_NOT_HELD...) on `lost`. Ends when `stop` is set,
/// never in the middle of a Renew (so the last revision is known).
#[allow(clippy::too_many_arguments)]
async fn keep(
    mut client: Client,
    conn: Connection,
    name: String,
    slot: u32,
    key: String,
    state: watch::Sender<Held>,
    mut stop: watch::Receiver<bool>,
    lost: mpsc::Sender<String>,
    mut next: Instant,
) {
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = sleep_until(next) => {}
        }
        let held = *state.borrow();
        let sent = Instant::now();
        let budget = held
            .deadline
            .saturating_duration_since(sent)
            .min(conn.timeout)
            .max(Duration::from_millis(100));
        let mut req = tonic::Request::new(RenewRequest {
            name: name.clone(),
            expected_revision: held.revision,
            lease_key: key.clone(),
            ttl: None,
            slot,
        });
        req.set_timeout(budget);
        match tokio::time::timeout(budget, client.renew(req)).await {
            Ok(Ok(resp)) => {
                let lease = resp.into_inner().lease.unwrap_or_default();
                let ttl = match granted_ttl(&lease, held.ttl) {
                    Ok(ttl) => ttl,
                    Err(why) => {
                        let _ = lost.send(format!("a renewal granted {why}")).await;
                        return;
                    }
                };
                state.send_replace(Held {
                    revision: lease.revision,
                    deadline: safe_deadline(sent, ttl),
                    ttl,
                });
                next = sent + renew_every(ttl);
            }
            Ok(Err(status)) if permanent(&status) => {
                let _ = lost
                    .send(format!("renew refused: {}", CliError::from_status(&status)))
                    .await;
                return;
            }
            _ => {
                // Transient: try again soon, until the deadline decides.
                next = Instant::now() + margin(held.ttl).max(Duration::from_millis(100));
            }
        }
    }
}

/// Follows the lease with WatchLease and reports on `lost` the first sign
/// that the holding with `token` has ended or passed on. Reconnects when
/// the stream breaks; the renewer's deadline covers the gaps. Sends on
/// `ready` once the first snapshot is in (or the first open failed).
async fn follow(
    mut client: Client,
    name: String,
    slot: u32,
    token: u64,
    lost: mpsc::Sender<String>,
    ready: tokio::sync::oneshot::Sender<Result<(), CliError>>,
) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(100);
    loop {
        let opened = client
            .watch_lease(WatchLeaseRequest {
                name: name.clone(),
                event_types: vec![],
                start_revision: 0,
                shard_revisions: Vec::new(),
            })
            .await;
        let mut stream = match opened {
            Ok(s) => s.into_inner(),
            Err(s) => {
                let e = CliError::from_status(&s);
                if let Some(r) = ready.take() {
                    let _ = r.send(Err(e.clone()));
                }
                if permanent(&s) {
                    return;
                }
                sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        let mut current: Option<u64> = None;
        let mut live = false;
        while let Some(Ok(msg)) = stream.next().await {
            backoff = Duration::from_millis(100);
            let Some(ev) = msg.event else { continue };
            // A semaphore's other holders are not ours to follow.
            if ev.r#type != EventType::SnapshotComplete as i32 && ev.slot != slot {
                continue;
            }
            let ours = ev.fencing_token == token || ev.fencing_token == 0;
            let verdict = match EventType::try_from(ev.r#type) {
                Ok(EventType::Current) if ev.name == name => {
                    current = Some(ev.fencing_token);
                    None
                }
                Ok(EventType::SnapshotComplete) => {
                    live = true;
                    if let Some(r) = ready.take() {
                        let _ = r.send(Ok(()));
                    }
                    match current {
                        Some(t) if t == token => None,
                        Some(t) => Some(format!("the lease passed to fencing token {t}")),
                        None => Some("the lease is no longer held".to_string()),
                    }
                }
                Ok(EventType::Acquired | EventType::Renewed)
                    if live && ev.name == name && ev.fencing_token != token =>
                {
                    Some(format!(
                        "{} by {} (fencing token {})",
                        event_name(ev.r#type),
                        ev.holder,
                        ev.fencing_token
                    ))
                }
                Ok(EventType::Released | EventType::Expired | EventType::Revoked)
                    if live && ev.name == name && ours =>
                {
                    Some(format!("{} (watch)", event_name(ev.r#type)))
                }
                _ => None,
            };
            if let Some(v) = verdict {
                let _ = lost.send(v).await;
                return;
            }
        }
        sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// The terminal on stdin, when `tenure lock` runs in its foreground.
///
/// The command runs in a process group of its own (so that it and its
/// children can be signalled together), which a terminal would treat as a
/// background job: reading from the terminal would stop it (SIGTTIN). So
/// the command's group is made the terminal's foreground group: it can be
/// interactive, and Ctrl-C at the terminal reaches it directly, once. The
/// terminal is handed back when the command is done.
struct Terminal {
    /// The process group to give the terminal back to (ours).
    ours: i32,
}

impl Terminal {
    /// Some when stdin is a terminal whose foreground group is ours.
    fn detect() -> Option<Terminal> {
        // SAFETY: plain queries of file descriptor 0 and our own group.
        unsafe {
            let ours = libc::getpgrp();
            (libc::isatty(0) == 1 && libc::tcgetpgrp(0) == ours).then_some(Terminal { ours })
        }
    }

    /// Makes `pgid` the foreground group; the returned guard gives the
    /// terminal back on drop.
    fn hand_to(self, pgid: i32) -> Terminal {
        if pgid > 0 {
            give_terminal(pgid);
        }
        self
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        give_terminal(self.ours);
    }
}

/// Makes `pgid` the foreground process group of the terminal on stdin.
/// SIGTTOU is ignored around the call: a background group asking for the
/// terminal would otherwise be stopped by it. Async-signal-safe.
fn give_terminal(pgid: i32) {
    // SAFETY: signal and tcsetpgrp are async-signal-safe and touch no
    // memory of ours; the previous SIGTTOU disposition is restored.
    unsafe {
        let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(0, pgid);
        libc::signal(libc::SIGTTOU, old);
    }
}

/// The forwarded signals, as one stream.
struct Signals {
    /// One tokio signal listener per forwarded signal, with its number.
    listeners: Vec<(Signal, i32)>,
}

impl Signals {
    /// Installs the handlers (from then on these signals no longer kill
    /// `tenure lock` itself).
    fn new() -> std::io::Result<Signals> {
        let mut listeners = Vec::new();
        for (kind, num) in FORWARDED {
            listeners.push((signal(kind)?, num));
        }
        Ok(Signals { listeners })
    }

    /// The next signal received.
    async fn recv(&mut self) -> i32 {
        let waits = self.listeners.iter_mut().map(|(s, n)| {
            let n = *n;
            Box::pin(async move {
                s.recv().await;
                n
            })
        });
        futures::future::select_all(waits).await.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Margin is a tenth of the TTL, capped at one second; renewals come
    /// every third.
    #[test]
    fn timing() {
        assert_eq!(margin(Duration::from_secs(5)), Duration::from_millis(500));
        assert_eq!(margin(Duration::from_secs(60)), Duration::from_secs(1));
        assert_eq!(renew_every(Duration::from_secs(9)), Duration::from_secs(3));
        let t = Instant::now();
        assert_eq!(
            safe_deadline(t, Duration::from_secs(10)),
            t + Duration::from_secs(9)
        );
    }

    /// Exit statuses map to the shell's convention.
    #[test]
    fn exit_codes() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_code(Ok(ExitStatus::from_raw(3 << 8))), 3);
        assert_eq!(exit_code(Ok(ExitStatus::from_raw(libc::SIGKILL))), 137);
        assert_eq!(exit_code(Err(std::io::Error::other("x"))), 1);
    }
}
