//! The limit of lease watch streams: [`WatchLimits`] counts them, in
//! total and per identity, for their lifetime.
//!
//! A watch holds a consumer on the bucket and memory for as long as it is
//! open, not just while a call runs, so it is counted apart from the call
//! budgets; a refusal clears when another watch ends, and carries a
//! RetryInfo of [`WATCH_RETRY`] (which the health `Watch` refusal uses
//! too).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Config;
use crate::error::{Error, Reason};
use crate::observe::METRICS;

/// How long a caller refused a watch should back off.
pub const WATCH_RETRY: Duration = Duration::from_secs(5);

/// Counts open watch streams per identity and in total.
pub struct WatchLimits {
    /// One permit per open stream.
    total: Arc<Semaphore>,
    /// The configured total, for messages.
    max_total: usize,
    /// Most streams per identity.
    max_per_identity: usize,
    /// identity → open streams.
    open: Mutex<HashMap<String, usize>>,
}

impl WatchLimits {
    /// The limits of `config`.
    pub fn new(config: &Config) -> Arc<WatchLimits> {
        Arc::new(WatchLimits {
            total: Arc::new(Semaphore::new(config.max_watch_streams)),
            max_total: config.max_watch_streams,
            max_per_identity: config.max_watch_streams_per_identity,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A permit for one more stream of `identity`, or RESOURCE_EXHAUSTED.
    pub fn acquire(self: &Arc<Self>, identity: &str) -> Result<WatchPermit, Error> {
        let mut open = self.open.lock().expect("watch limits lock");
        let mine = open.get(identity).copied().unwrap_or(0);
        if mine >= self.max_per_identity {
            METRICS.rejected("watch_streams_per_identity");
            return Err(Error::new(
                Reason::TooManyWatches,
                format!(
                    "identity {identity:?} already has {mine} watch streams open on this replica, its limit; close one or watch a wider prefix"
                ),
            )
            .with("limit", self.max_per_identity)
            .retry_after(WATCH_RETRY));
        }
        let Ok(permit) = self.total.clone().try_acquire_owned() else {
            METRICS.rejected("watch_streams");
            return Err(Error::new(
                Reason::TooManyWatches,
                format!(
                    "this replica has {} watch streams open, its limit; retry later or on another replica",
                    self.max_total
                ),
            )
            .with("limit", self.max_total)
            .retry_after(WATCH_RETRY));
        };
        *open.entry(identity.to_string()).or_default() += 1;
        METRICS.watch_streams.inc();
        Ok(WatchPermit {
            limits: self.clone(),
            identity: identity.to_string(),
            _permit: permit,
        })
    }
}

/// One open watch stream; dropping it (when the stream ends) frees it.
pub struct WatchPermit {
    /// The limits it counts against.
    limits: Arc<WatchLimits>,
    /// Whose stream it is.
    identity: String,
    /// The slot in the total.
    _permit: OwnedSemaphorePermit,
}

impl Drop for WatchPermit {
    fn drop(&mut self) {
        METRICS.watch_streams.dec();
        let mut open = self.limits.open.lock().expect("watch limits lock");
        if let Some(n) = open.get_mut(&self.identity) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.identity);
            }
        }
    }
}
