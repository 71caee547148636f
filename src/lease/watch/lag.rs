//! Test-only: the shared watcher held back by a [`WatcherHold`], so that a
//! test can put one replica far behind the stream on purpose.
//!
//! Messages after the hold's limit are kept unapplied. When the limit
//! rises, the kept messages up to it are applied as a reader that had
//! fallen that far behind would have read them from a stream that keeps one
//! message per key: a message whose key was written again since is skipped
//! (the stream no longer has it), and each one carries as pending at least
//! what the stream holds after it.

use std::collections::VecDeque;

use tokio::sync::watch;

use crate::config::WatcherHold;
use crate::nats::Message;

/// The messages a held watcher received and has not applied.
pub(super) struct Held {
    /// The last revision the watcher may apply.
    limit: watch::Receiver<u64>,
    /// Received and kept, in revision order, with their pending counts.
    kept: VecDeque<(Message, u64)>,
}

impl Held {
    /// A buffer behind `hold`.
    pub(super) fn new(hold: &WatcherHold) -> Held {
        Held {
            limit: hold.limit(),
            kept: VecDeque::new(),
        }
    }

    /// The limit as it changes (for the hub task to wait on).
    pub(super) fn limit(&self) -> watch::Receiver<u64> {
        self.limit.clone()
    }

    /// Takes a message as received; returns what may be applied now.
    pub(super) fn admit(&mut self, message: Message, pending: u64) -> Vec<(Message, u64)> {
        self.kept.push_back((message, pending));
        self.ready()
    }

    /// What may be applied now, in order, with the pending count a reader
    /// this far behind would have been told.
    pub(super) fn ready(&mut self) -> Vec<(Message, u64)> {
        let limit = *self.limit.borrow();
        let mut out = Vec::new();
        while self.kept.front().is_some_and(|(m, _)| m.revision <= limit) {
            let Some((message, pending)) = self.kept.pop_front() else {
                break;
            };
            if self.kept.iter().any(|(m, _)| m.name == message.name) {
                continue; // written again since: gone from the stream
            }
            let behind = self
                .kept
                .iter()
                .enumerate()
                .filter(|(i, (m, _))| !self.kept.iter().skip(i + 1).any(|(n, _)| n.name == m.name))
                .count() as u64;
            out.push((message, pending.max(behind)));
        }
        out
    }
}
