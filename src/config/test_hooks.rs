//! Test-only hooks: ways for a test to put one replica into a state that
//! production reaches only by bad luck (a watcher far behind the stream),
//! so that the guarantee that must hold there can be checked on purpose;
//! and test faults, deliberate bugs that show the safety checker catches
//! what it claims to.
//!
//! A hook ([`WatcherHold`]) is set on [`Config`](super::Config) from Rust
//! code only (it has no flag, no environment variable and no config-file
//! key), so the `tenure` binary can never turn one on; the tests that start
//! replicas in process do. A test fault ([`TestFault`]) has a hidden flag,
//! `--test-fault`, for the safety checker's processes, and `tenure serve`
//! refuses to start with one unless `TENURE_TEST_FAULTS=1` is set.

use std::sync::Arc;

use tokio::sync::watch;

/// Holds back what one replica's shared watcher applies: while held after
/// revision R, the watcher keeps every later bucket message it receives
/// unapplied; when let through up to R', it applies the kept messages up to
/// R' as a reader that had fallen that far behind would have read them from
/// the stream (a key's message rewritten since is skipped for its newer
/// one, and each carries what was pending behind it).
#[derive(Debug, Clone)]
pub struct WatcherHold {
    /// The last revision the watcher may apply (`u64::MAX`: no hold).
    limit: Arc<watch::Sender<u64>>,
}

impl Default for WatcherHold {
    fn default() -> WatcherHold {
        WatcherHold {
            limit: Arc::new(watch::Sender::new(u64::MAX)),
        }
    }
}

impl WatcherHold {
    /// The watcher applies nothing after `revision` until let through.
    pub fn hold_after(&self, revision: u64) {
        self.limit.send_replace(revision);
    }

    /// Lets the watcher apply what it kept up to `revision`, and holds the
    /// rest.
    pub fn let_through(&self, revision: u64) {
        self.limit.send_replace(revision);
    }

    /// Ends the hold: the watcher applies everything it kept, and then
    /// follows the stream as usual.
    pub fn release(&self) {
        self.limit.send_replace(u64::MAX);
    }

    /// The limit as it changes, for the watcher.
    pub fn limit(&self) -> watch::Receiver<u64> {
        self.limit.subscribe()
    }
}

/// The environment variable that must be `1` for `tenure serve` to accept
/// any `--test-fault`: a fault breaks the server on purpose, so it can
/// never be turned on by a stray flag or config file alone.
pub const TEST_FAULTS_ENV: &str = "TENURE_TEST_FAULTS";

/// A deliberate bug, for the safety checker's negative controls
/// (`docs/safety.md`): each makes the server break one of the properties
/// the checker judges, for real, so that a run shows the checker catches
/// it. Set with the hidden `tenure serve --test-fault NAME`, refused unless
/// `TENURE_TEST_FAULTS=1` is set. Each is a branch or two in `lease/`,
/// marked `TEST FAULT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum TestFault {
    /// Every third grant reports a fencing token 1,000 below the real one
    /// (at least 1): tokens seen by holders go back (property 1).
    TokensGoBack,
    /// Records are stored with a NATS TTL 3 s longer than the TTL granted:
    /// names stay held past their due time (property 4).
    LateExpiry,
    /// Records are stored with half the TTL granted (whole seconds, at
    /// least 1): a name is granted again before the previous holding's
    /// TTL ran out (property 5).
    EarlyExpiry,
    /// An Acquire without a ticket does not look at the queue: a new
    /// arrival takes a free name ahead of queued waiters (property 6).
    Barging,
    /// AcquireGroup writes its members one by one, with a pause between
    /// them, instead of in one atomic batch: a watcher sees part of a
    /// group (property 8).
    SplitGroups,
    /// Semaphores have one slot more than their limit: more holders than
    /// the limit hold at once (property 7).
    SemaphoreOverLimit,
    /// Queued semaphore waiters take every wake as their turn and race
    /// for a free slot, as before semaphores queued: a later waiter takes a
    /// slot ahead of an earlier one (property 6).
    SemaphoreHerd,
    /// A resumed watch's replay starts [`REPLAY_REPEATS`] revisions before
    /// the resume point and delivers what it reads there: changes the
    /// client had already been sent are reported again (property 9).
    ReplayRepeats,
    /// A shared Acquire of a read-write lock takes an exclusive holder
    /// for a shared one: a reader holds while a writer does (property 10).
    SharedOverExclusive,
    /// A plain Acquire over this replica's own release is conditional on
    /// the lease record alone, not on its whole line (record and queue):
    /// it takes a free name ahead of a waiter that queued since the
    /// release (property 6).
    OneWriteExact,
}

/// How far before the resume point the `replay-repeats` fault starts.
pub const REPLAY_REPEATS: u64 = 20;

impl TestFault {
    /// Its bit in [`TestFaults`].
    fn bit(self) -> u16 {
        1 << self as u16
    }

    /// The flag value (`tokens-go-back`).
    pub fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .map(|v| v.get_name().to_string())
            .unwrap_or_default()
    }
}

/// The test faults in force (none in production).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestFaults(u16);

impl TestFaults {
    /// The set of `faults`.
    pub fn of(faults: &[TestFault]) -> TestFaults {
        TestFaults(faults.iter().fold(0, |bits, f| bits | f.bit()))
    }

    /// Whether `fault` is in force.
    pub fn contains(self, fault: TestFault) -> bool {
        self.0 & fault.bit() != 0
    }

    /// Whether none is.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// `Ok` when no fault is asked for, or `env` (the value of
/// [`TEST_FAULTS_ENV`]) is `1`; otherwise the message that refuses to start.
pub fn check_test_faults(faults: &[TestFault], env: Option<&str>) -> Result<(), String> {
    if faults.is_empty() || env == Some("1") {
        return Ok(());
    }
    let names: Vec<String> = faults.iter().map(|f| f.name()).collect();
    Err(format!(
        "--test-fault {} breaks the server on purpose (a negative control of the safety checker, docs/safety.md); \
         refused unless {TEST_FAULTS_ENV}=1 is set. Never use it outside a test",
        names.join(",")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_refused_without_the_environment_variable() {
        assert!(check_test_faults(&[], None).is_ok());
        let err = check_test_faults(&[TestFault::TokensGoBack], None).unwrap_err();
        assert!(err.contains("tokens-go-back") && err.contains("TENURE_TEST_FAULTS=1"));
        assert!(check_test_faults(&[TestFault::Barging], Some("0")).is_err());
        assert!(check_test_faults(&[TestFault::Barging], Some("1")).is_ok());
    }

    #[test]
    fn a_set_holds_what_it_was_given() {
        let set = TestFaults::of(&[TestFault::LateExpiry, TestFault::SplitGroups]);
        assert!(set.contains(TestFault::LateExpiry) && set.contains(TestFault::SplitGroups));
        assert!(!set.contains(TestFault::EarlyExpiry));
        assert!(TestFaults::default().is_empty());
    }
}
