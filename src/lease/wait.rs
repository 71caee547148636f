//! Waiting for a name to become free: the one place a waiting call sleeps
//! and the one place it gives up.
//!
//! Every call that waits (a waiting Acquire, fair or not, a semaphore slot,
//! an AcquireGroup) sleeps in [`Wait::sleep`] until something may have
//! changed: an end of a holding it follows (release, expiry, revoke; and,
//! for a queued waiter, a turn), the poll tick (a safety net should the
//! event stream break), the end of a lock delay, or its deadline; a queued
//! waiter also wakes to refresh its ticket. Calls without a queue run the
//! whole loop of [`Leases::wait_for`]; the fair Acquire (`acquire.rs`) runs
//! its ticket logic around the same sleep.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::time::{Instant, Interval};
use tokio_util::sync::CancellationToken;

use super::watch::Dormant;
use super::Leases;
use crate::error::{Error, Reason, Result};

/// How often a waiting call re-checks even without a bucket event: a safety
/// net should the event stream break.
pub(super) const WAIT_POLL: Duration = Duration::from_secs(1);
/// How often a call without a queue (a semaphore slot, an AcquireGroup, a
/// plain Acquire on a bucket without atomic batches) re-checks while the
/// shared watcher follows its names: each check costs NATS reads (a group
/// one per member, a semaphore one per slot), and every end of a holding it
/// waits for wakes it anyway, so the tick is only a backstop.
pub(super) const EVENTED_POLL: Duration = Duration::from_secs(15);
/// How long a waiting call waits for the shared watcher to confirm that it
/// follows its names before it polls instead (the watcher confirms at once,
/// even while it loads the bucket after idling: this only bounds a watcher
/// task too busy to answer).
pub(super) const FOLLOW_PATIENCE: Duration = Duration::from_secs(2);

/// What wakes a waiter: the ends of holdings of the names it waits for;
/// `None` when the shared watcher cannot follow them (the waiter polls).
pub(super) type Wakeups = Option<BoxStream<'static, Result<()>>>;

/// One wait under way: which call waits and until when.
pub(super) struct Wait {
    /// The RPC that waits, named in the shutdown refusal.
    rpc: &'static str,
    /// How long the caller allowed.
    wait: Duration,
    /// When the wait runs out.
    deadline: Instant,
}

/// Why a sleep ended, when it did not end the wait.
pub(super) enum Woke {
    /// Something may have changed (an event, the poll tick, the end of a
    /// lock delay, a fresh ticket): try again.
    Retry,
    /// The waiter's ticket is due for its refresh.
    Refresh,
}

impl Wait {
    /// A wait of `wait` from now for `rpc`.
    pub(super) fn new(rpc: &'static str, wait: Duration) -> Wait {
        Wait {
            rpc,
            wait,
            deadline: Instant::now() + wait,
        }
    }

    /// When the wait runs out.
    pub(super) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The refusal of a wait that ran out: what held it last (`held`, a
    /// LEASE_HELD), saying how long the caller waited.
    pub(super) fn gave_up(&self, held: Error) -> Error {
        let message = format!("{} (gave up after waiting {:?})", held.message, self.wait);
        Error {
            message,
            retry_after: None,
            ..held
        }
        .with("waited_ms", self.wait.as_millis())
    }

    /// The refusal of a wait cut short by the server's shutdown.
    fn shutting_down(&self) -> Error {
        Error::new(
            Reason::ShuttingDown,
            format!(
                "the server is shutting down; {} again on another replica",
                self.rpc
            ),
        )
    }

    /// Sleeps until something may have changed since `held` refused the
    /// waiter: an event of `wakeups` (a broken stream is dropped and the
    /// waiter polls), its `dormant` registration firing (its ticket is
    /// first now), the `poll` tick or the end of `held`'s lock delay,
    /// whichever is sooner, a `refresh` tick, or at once when `at_once`.
    /// Ends the wait (an error) at the deadline, with what held it, or at
    /// shutdown.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn sleep(
        &self,
        shutdown: &CancellationToken,
        wakeups: &mut Wakeups,
        dormant: Option<&Dormant>,
        held: &Error,
        refresh: Option<&mut Interval>,
        at_once: bool,
        poll: Duration,
    ) -> Result<Woke> {
        let tick = held.retry_after.map_or(poll, |d| d.min(poll));
        let (refreshing, refresh) = match refresh {
            Some(interval) => (true, Some(interval)),
            None => (false, None),
        };
        let refresh_tick = async {
            match refresh {
                Some(interval) => interval.tick().await,
                None => std::future::pending().await,
            }
        };
        let event = async {
            match wakeups.as_mut() {
                Some(stream) => stream.next().await,
                None => std::future::pending().await,
            }
        };
        let first = async {
            match dormant {
                Some(dormant) => dormant.woken().await,
                None => std::future::pending().await,
            }
        };
        let broke = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Err(self.shutting_down()),
            _ = tokio::time::sleep_until(self.deadline) => return Err(self.gave_up(held.clone())),
            _ = refresh_tick, if refreshing => return Ok(Woke::Refresh),
            _ = std::future::ready(()), if at_once => false,
            _ = tokio::time::sleep(tick) => false,
            _ = first => false,
            event = event => !matches!(event, Some(Ok(()))),
        };
        if broke {
            *wakeups = None;
        }
        Ok(Woke::Retry)
    }
}

impl Leases {
    /// The whole wait of a call without a queue: `attempt` until it is
    /// anything but LEASE_HELD; after the first refusal, follow `wakeups`
    /// (bounded by [`FOLLOW_PATIENCE`]) and try once more before sleeping,
    /// so that an end between the first try and the subscription is not
    /// missed; then sleep and try again until the wait runs out. While the
    /// wakeups flow the poll is only the [`EVENTED_POLL`] backstop: an
    /// attempt costs NATS reads, and the events say when one can succeed.
    pub(super) async fn wait_for<T, A, F>(
        &self,
        wait: Wait,
        wakeups: impl Future<Output = Wakeups>,
        mut attempt: A,
    ) -> Result<T>
    where
        A: FnMut() -> F,
        F: Future<Output = Result<T>>,
    {
        match attempt().await {
            Err(err) if err.reason == Reason::LeaseHeld => {}
            other => return other,
        }
        self.wait_after(wait, wakeups, attempt).await
    }

    /// [`Leases::wait_for`] once the first attempt was refused LEASE_HELD.
    pub(super) async fn wait_after<T, A, F>(
        &self,
        wait: Wait,
        wakeups: impl Future<Output = Wakeups>,
        mut attempt: A,
    ) -> Result<T>
    where
        A: FnMut() -> F,
        F: Future<Output = Result<T>>,
    {
        let mut wakeups = tokio::time::timeout(FOLLOW_PATIENCE, wakeups)
            .await
            .ok()
            .flatten();
        loop {
            let held = match attempt().await {
                Err(err) if err.reason == Reason::LeaseHeld => err,
                other => return other,
            };
            let poll = match wakeups {
                Some(_) => EVENTED_POLL,
                None => WAIT_POLL,
            };
            wait.sleep(&self.shutdown, &mut wakeups, None, &held, None, false, poll)
                .await?;
        }
    }
}

/// Waiters that hold no queue ticket (semaphore slots), counted per name
/// on this replica, so that `--max-waiters` bounds them as a name's queue
/// bounds its waiters (a queue bounds them across replicas; this, per
/// replica).
#[derive(Default)]
pub(super) struct Unqueued {
    /// name → waiters now.
    names: Mutex<HashMap<String, usize>>,
}

impl Unqueued {
    /// A place among the waiters of `name`, or `None` when it has `max`
    /// already (with the count).
    pub(super) fn join(self: &Arc<Self>, name: &str, max: usize) -> Result<Place, usize> {
        let mut names = self.names.lock().expect("waiters lock");
        let n = names.entry(name.to_string()).or_default();
        if *n >= max {
            return Err(*n);
        }
        *n += 1;
        Ok(Place {
            of: self.clone(),
            name: name.to_string(),
        })
    }
}

/// One waiter's place in [`Unqueued`]; dropping it leaves.
pub(super) struct Place {
    /// The counts.
    of: Arc<Unqueued>,
    /// The name waited for.
    name: String,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut names = self.of.names.lock().expect("waiters lock");
        if let Some(n) = names.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                names.remove(&self.name);
            }
        }
    }
}
