//! Test-only hooks: ways for a test to put one replica into a state that
//! production reaches only by bad luck (a watcher far behind the stream),
//! so that the guarantee that must hold there can be checked on purpose.
//!
//! A hook is set on [`Config`](super::Config) from Rust code only (it has no
//! flag, no environment variable and no config-file key), so the `tenure`
//! binary can never turn one on; the tests that start replicas in process
//! do.

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
