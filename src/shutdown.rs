//! The shutdown signal shared by the server and its long-running tasks.
//!
//! One [`Trigger`] fires once; every [`Shutdown`] subscribed to it sees it.
//! Watch streams select on [`Shutdown::recv`] to end with `SHUTTING_DOWN`
//! instead of holding the server open.

use tokio::sync::watch;

/// Fires the shutdown signal.
#[derive(Debug)]
pub struct Trigger {
    /// `true` once shutdown has begun.
    sender: watch::Sender<bool>,
}

impl Default for Trigger {
    fn default() -> Self {
        Trigger {
            sender: watch::channel(false).0,
        }
    }
}

impl Trigger {
    /// A new, unfired trigger.
    pub fn new() -> Trigger {
        Trigger::default()
    }

    /// A listener for this trigger.
    pub fn subscribe(&self) -> Shutdown {
        Shutdown {
            receiver: self.sender.subscribe(),
        }
    }

    /// Starts shutdown; every listener wakes.
    pub fn fire(&self) {
        self.sender.send_replace(true);
    }
}

/// Listens for shutdown.
#[derive(Debug, Clone)]
pub struct Shutdown {
    /// Sees the trigger's state.
    receiver: watch::Receiver<bool>,
}

impl Shutdown {
    /// Whether shutdown has begun.
    pub fn is_shutdown(&self) -> bool {
        *self.receiver.borrow()
    }

    /// Waits until shutdown begins (or the trigger is gone, which means the
    /// same thing).
    pub async fn recv(&mut self) {
        let _ = self.receiver.wait_for(|fired| *fired).await;
    }
}
