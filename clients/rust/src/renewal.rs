//! The renewal loop shared by a lease [`Session`](crate::Session) and a
//! [`GroupSession`](crate::GroupSession): renew every `ttl × renew_fraction`,
//! retry retryable failures with backoff, give up at the safe deadline.
//!
//! Written once so that both kinds of session keep exactly the same rule:
//! a session whose safe deadline passes without a successful renewal is lost
//! ([`LossCause::Deadline`]), and a final refusal loses it at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Reason};
use crate::session::LossCause;

/// First pause before retrying a renewal that failed with a retryable error;
/// it doubles up to the renew interval and never runs past the safe deadline.
pub(crate) const FIRST_RETRY: Duration = Duration::from_millis(50);

/// When a session must renew and when it stops believing it holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    /// The safe deadline.
    pub(crate) safe_deadline: Instant,
    /// When the next renewal is due.
    pub(crate) next_renew_at: Instant,
    /// The renew interval (`ttl × renew_fraction`), the longest backoff.
    pub(crate) interval: Duration,
}

/// What the loop needs from a kind of session.
pub(crate) trait Renewable: Send + Sync + 'static {
    /// Cancelled once the session is lost or released.
    fn lost(&self) -> &CancellationToken;
    /// Cancelled to stop the loop.
    fn stop(&self) -> &CancellationToken;
    /// True while renewals are paused.
    fn paused(&self) -> &watch::Sender<bool>;
    /// Held by whoever sends a renewal or release.
    fn calls(&self) -> &tokio::sync::Mutex<()>;
    /// The schedule; `None` once lost or released.
    fn schedule(&self) -> Option<Schedule>;
    /// Records a retryable failure: the next try is at `at`.
    fn failed(&self, err: Error, at: Instant);
    /// Takes the last failed renewal's error.
    fn take_last_error(&self) -> Option<Error>;
    /// Marks the session lost (once) and cancels `lost`.
    fn lose(&self, cause: LossCause, error: Option<Error>);
    /// Sends one renewal, cut off at `deadline`; the caller holds `calls`.
    fn renew_once(&self, deadline: Instant) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The renewal task of one session.
pub(crate) async fn run<R: Renewable>(session: Arc<R>) {
    let mut paused = session.paused().subscribe();
    let mut retry = FIRST_RETRY;
    loop {
        let Some(schedule) = session.schedule() else {
            return;
        };
        let is_paused = *paused.borrow_and_update();
        tokio::select! {
            biased;
            _ = session.stop().cancelled() => return,
            _ = session.lost().cancelled() => return,
            _ = tokio::time::sleep_until(schedule.safe_deadline) => {
                // A manual renewal may have moved the deadline meanwhile.
                match session.schedule() {
                    Some(now) if Instant::now() >= now.safe_deadline => {
                        let last_error = session.take_last_error();
                        session.lose(LossCause::Deadline, last_error);
                        return;
                    }
                    _ => continue,
                }
            }
            _ = paused.changed() => continue,
            _ = tokio::time::sleep_until(schedule.next_renew_at), if !is_paused => {}
        }
        let _calls = tokio::select! {
            biased;
            _ = session.stop().cancelled() => return,
            calls = session.calls().lock() => calls,
        };
        let Some(schedule) = session.schedule() else {
            return;
        };
        let now = Instant::now();
        if session.stop().is_cancelled()
            || *paused.borrow()
            || now < schedule.next_renew_at
            || now >= schedule.safe_deadline
        {
            continue; // stopped, paused or renewed meanwhile, or too late: see above
        }
        match session.renew_once(schedule.safe_deadline).await {
            Ok(()) => retry = FIRST_RETRY,
            Err(err) if err.is_retryable() => {
                session.failed(err, Instant::now() + retry);
                retry = (retry * 2).min(schedule.interval.max(FIRST_RETRY));
            }
            Err(err) => {
                session.lose(cause_of(&err), Some(err));
                return;
            }
        }
    }
}

/// The loss cause of a renewal refused with a final error.
pub(crate) fn cause_of(err: &Error) -> LossCause {
    match err.reason() {
        Reason::LeaseNotHeld | Reason::LeaseNotFound => LossCause::NotHeld,
        _ => LossCause::RenewFailed,
    }
}
