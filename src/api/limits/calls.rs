//! The budgets of lease calls: [`CallLimits`], taken in the RPC wrapper
//! after authentication, validation and authorization, with the request
//! in hand.
//!
//! Short calls have a budget per replica and a share per identity;
//! waiting Acquires have a budget of their own, so a crowd of waiters
//! cannot starve short calls; Renew and Release get past a full short
//! budget through a reserve, so holders keep their leases while new work
//! is shed (the reserve has a share per identity too, so one identity
//! cannot use it all up); KeepAlive streams hold a permit of their own
//! budget for their lifetime, and each of their entries a renewal permit
//! while it runs.
//! A refusal is RESOURCE_EXHAUSTED / TOO_MANY_REQUESTS naming the flag of
//! the limit, with a RetryInfo of [`BUSY_RETRY`].
//!
//! A KeepAlive entry refused only by its identity's share waits instead
//! ([`CallLimits::admit_renewal_waiting`]): its identity's next permit to
//! end wakes it. A flood of entries from one identity is then held back at
//! the rate its share's renewals finish (its streams stop being read)
//! rather than refused as fast as it can send them, which cost the replica
//! its CPU; other identities' calls never wait on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::Config;
use crate::error::{Error, Reason};
use crate::observe::METRICS;

/// How long a caller refused for load should back off.
pub const BUSY_RETRY: Duration = Duration::from_millis(250);

/// Which budget a call takes its permit from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Every call but the two below.
    Short,
    /// Renew and Release: the short budget, else the reserve.
    Renewal,
    /// An Acquire with a `wait`.
    Waiting,
    /// A KeepAlive stream, for its lifetime (each of its entries also
    /// takes a [`Class::Renewal`] permit while it runs).
    KeepAliveStream,
}

/// The in-flight budgets of lease calls, taken after authentication and
/// once the request has been read.
pub struct CallLimits {
    /// Short calls.
    short: Arc<PermitBudget>,
    /// Renew and Release beyond the short budget.
    reserve: Arc<PermitBudget>,
    /// Waiting Acquires.
    waiting: Arc<PermitBudget>,
    /// Open KeepAlive streams.
    keepalive_streams: Arc<PermitBudget>,
    /// Renewals waiting for their identity's share, by identity.
    waiters: Arc<Waiters>,
}

/// Wakes the renewals of an identity waiting for its share.
#[derive(Default)]
struct Waiters {
    /// Identity → what its waiting renewals wait on; present only while
    /// one waits.
    by_identity: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Waiters {
    /// The identity's notify, created for a new waiter.
    fn join(&self, identity: &str) -> Arc<Notify> {
        let mut map = self.by_identity.lock().expect("waiters lock");
        map.entry(identity.to_string()).or_default().clone()
    }

    /// A waiter is done with `notify`: the last one removes it.
    fn leave(&self, identity: &str, notify: Arc<Notify>) {
        let mut map = self.by_identity.lock().expect("waiters lock");
        drop(notify);
        if map.get(identity).is_some_and(|n| Arc::strong_count(n) == 1) {
            map.remove(identity);
        }
    }

    /// One of the identity's places was freed: one waiter may take it.
    fn wake(&self, identity: &str) {
        let map = self.by_identity.lock().expect("waiters lock");
        if let Some(n) = map.get(identity) {
            n.notify_one();
        }
    }
}

impl CallLimits {
    /// The budgets of `config`; the per-identity shares apply only when
    /// callers are authenticated (`per_identity`): without auth every
    /// caller is `anonymous`.
    pub fn new(config: &Config, per_identity: bool) -> Arc<CallLimits> {
        let share = |n: usize| per_identity.then_some(n);
        Arc::new(CallLimits {
            short: PermitBudget::new(
                "concurrent_requests",
                "--max-concurrent-requests",
                config.max_concurrent_requests,
                share(config.max_concurrent_requests_per_identity),
                "--max-concurrent-requests-per-identity",
            ),
            reserve: PermitBudget::new(
                "reserved_renewals",
                "--reserved-renewals",
                config.reserved_renewals,
                share(config.reserved_renewals_per_identity),
                "--reserved-renewals-per-identity",
            ),
            waiting: PermitBudget::new(
                "waiting_acquires",
                "--max-waiting-acquires",
                config.max_waiting_acquires,
                share(config.max_waiting_acquires_per_identity),
                "--max-waiting-acquires-per-identity",
            ),
            keepalive_streams: PermitBudget::new(
                "keepalive_streams",
                "--max-keepalive-streams",
                config.max_keepalive_streams,
                share(config.max_keepalive_streams_per_identity),
                "--max-keepalive-streams-per-identity",
            ),
            waiters: Arc::default(),
        })
    }

    /// A renewal permit for a KeepAlive entry of `identity`: as
    /// [`CallLimits::admit`], but when only the identity's share refuses
    /// it, it waits (up to `patience`) for one of the identity's permits to
    /// end, instead of being refused at once.
    pub async fn admit_renewal_waiting(
        &self,
        identity: &str,
        patience: Duration,
    ) -> Result<CallPermit, Error> {
        let deadline = Instant::now() + patience;
        let notify = self.waiters.join(identity);
        let result = loop {
            // Interest first: a permit that ends between the refusal and
            // the wait still wakes this one.
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.admit(Class::Renewal, identity) {
                Ok(permit) => break Ok(permit),
                Err(err) if share_refused(&err) && Instant::now() < deadline => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(deadline) => break Err(err),
                    }
                }
                Err(err) => break Err(err),
            }
        };
        self.waiters.leave(identity, notify);
        result
    }

    /// A permit for one call of `class` by `identity`, or
    /// RESOURCE_EXHAUSTED / TOO_MANY_REQUESTS naming the limit.
    pub fn admit(&self, class: Class, identity: &str) -> Result<CallPermit, Error> {
        self.admit_n(class, identity, 1)
    }

    /// A permit worth `n` places of `class`'s budget (a waiting
    /// AcquireGroup: one per member), all or none.
    pub fn admit_n(&self, class: Class, identity: &str, n: usize) -> Result<CallPermit, Error> {
        let taken = match class {
            Class::Short => self.short.take(identity, n),
            Class::Waiting => self.waiting.take(identity, n),
            Class::KeepAliveStream => self.keepalive_streams.take(identity, n),
            Class::Renewal => self
                .short
                .take(identity, n)
                .or_else(|_| self.reserve.take(identity, n)),
        };
        let taken = taken.map(|mut permit| {
            if permit.identity.is_some() {
                permit.waiters = Some(self.waiters.clone());
            }
            permit
        });
        taken.map_err(|(metric, flag, limit)| {
            METRICS.rejected(metric);
            Error::new(
                Reason::TooManyRequests,
                format!(
                    "this server is running as many such calls as {flag} ({limit}) allows; retry after the RetryInfo delay, or on another replica"
                ),
            )
            .with("limit", flag)
            .retry_after(BUSY_RETRY)
        })
    }
}

/// One budget of call permits: a total, and optionally a share per
/// identity.
struct PermitBudget {
    /// Metric label of a refusal for the total.
    metric: &'static str,
    /// The flag setting the total.
    flag: &'static str,
    /// The total.
    total: usize,
    /// The share per identity, when applied.
    per_identity: Option<usize>,
    /// The flag setting the share.
    per_identity_flag: &'static str,
    /// Calls running: in total, and per identity.
    open: Mutex<(usize, HashMap<String, usize>)>,
}

/// What a refusal reports: metric label, flag, limit.
type Refusal = (&'static str, &'static str, usize);

impl PermitBudget {
    fn new(
        metric: &'static str,
        flag: &'static str,
        total: usize,
        per_identity: Option<usize>,
        per_identity_flag: &'static str,
    ) -> Arc<PermitBudget> {
        Arc::new(PermitBudget {
            metric,
            flag,
            total,
            per_identity,
            per_identity_flag,
            open: Mutex::new((0, HashMap::new())),
        })
    }

    fn take(self: &Arc<Self>, identity: &str, n: usize) -> Result<CallPermit, Refusal> {
        let mut open = self.open.lock().expect("call limits lock");
        if open.0 + n > self.total {
            return Err((self.metric, self.flag, self.total));
        }
        if let Some(share) = self.per_identity {
            let mine = open.1.get(identity).copied().unwrap_or(0);
            if mine + n > share {
                let metric = match self.metric {
                    "waiting_acquires" => "waiting_acquires_per_identity",
                    "keepalive_streams" => "keepalive_streams_per_identity",
                    "reserved_renewals" => "reserved_renewals_per_identity",
                    _ => "concurrent_requests_per_identity",
                };
                return Err((metric, self.per_identity_flag, share));
            }
            *open.1.entry(identity.to_string()).or_default() += n;
        }
        open.0 += n;
        Ok(CallPermit {
            budget: self.clone(),
            identity: self.per_identity.map(|_| identity.to_string()),
            places: n,
            waiters: None,
        })
    }
}

/// One running call's place in a budget; dropping it frees the place.
pub struct CallPermit {
    /// The budget.
    budget: Arc<PermitBudget>,
    /// The identity counted, when the budget has shares.
    identity: Option<String>,
    /// The places it takes.
    places: usize,
    /// Who to wake when it ends (its identity's waiting renewals).
    waiters: Option<Arc<Waiters>>,
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        let mut open = self.budget.open.lock().expect("call limits lock");
        open.0 -= self.places;
        if let Some(identity) = &self.identity {
            if let Some(n) = open.1.get_mut(identity) {
                *n -= self.places;
                if *n == 0 {
                    open.1.remove(identity);
                }
            }
        }
        drop(open);
        if let (Some(waiters), Some(identity)) = (&self.waiters, &self.identity) {
            waiters.wake(identity);
        }
    }
}

/// Whether a refusal is an identity's share (not the replica's total).
fn share_refused(err: &Error) -> bool {
    err.metadata
        .iter()
        .any(|(k, v)| *k == "limit" && v.ends_with("-per-identity"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(short: usize, per_identity: usize, reserve: usize) -> Config {
        Config {
            max_concurrent_requests: short,
            max_concurrent_requests_per_identity: per_identity,
            reserved_renewals: reserve,
            max_waiting_acquires: 1,
            max_waiting_acquires_per_identity: 1,
            ..Config::for_nats("nats://127.0.0.1:4222")
        }
    }

    fn limit(err: &Error) -> &str {
        &err.metadata.iter().find(|(k, _)| *k == "limit").unwrap().1
    }

    /// One identity at its share is refused; another still gets in; a
    /// dropped permit frees the share.
    #[test]
    fn short_calls_per_identity() {
        let calls = CallLimits::new(&config(3, 2, 0), true);
        let a1 = calls.admit(Class::Short, "a").unwrap();
        let _a2 = calls.admit(Class::Short, "a").unwrap();
        let err = calls.admit(Class::Short, "a").err().unwrap();
        assert_eq!(err.reason, Reason::TooManyRequests);
        assert_eq!(limit(&err), "--max-concurrent-requests-per-identity");
        let _b = calls.admit(Class::Short, "b").unwrap();
        let err = calls.admit(Class::Short, "c").err().unwrap();
        assert_eq!(limit(&err), "--max-concurrent-requests");
        drop(a1);
        calls.admit(Class::Short, "a").unwrap();
    }

    /// Without authentication there are no shares: everyone is anonymous.
    #[test]
    fn no_shares_without_auth() {
        let calls = CallLimits::new(&config(3, 1, 0), false);
        let _held: Vec<_> = (0..3)
            .map(|_| calls.admit(Class::Short, "anonymous").unwrap())
            .collect();
    }

    /// KeepAlive streams count against their own budget, per identity and
    /// per replica, whatever the short calls do; a dropped stream frees its
    /// slot.
    #[test]
    fn keepalive_streams_have_their_own_budget() {
        let config = Config {
            max_keepalive_streams: 2,
            max_keepalive_streams_per_identity: 1,
            ..config(1, 1, 0)
        };
        let calls = CallLimits::new(&config, true);
        let _short = calls.admit(Class::Short, "a").unwrap();
        let a = calls.admit(Class::KeepAliveStream, "a").unwrap();
        let err = calls.admit(Class::KeepAliveStream, "a").err().unwrap();
        assert_eq!(err.reason, Reason::TooManyRequests);
        assert!(err.retry_after.is_some());
        assert_eq!(limit(&err), "--max-keepalive-streams-per-identity");
        let _b = calls.admit(Class::KeepAliveStream, "b").unwrap();
        let err = calls.admit(Class::KeepAliveStream, "c").err().unwrap();
        assert_eq!(limit(&err), "--max-keepalive-streams");
        drop(a);
        calls.admit(Class::KeepAliveStream, "a").unwrap();
    }

    /// Renewals use the reserve once short calls are full; waiting Acquires
    /// count against neither.
    #[test]
    fn renewals_and_waiting_have_their_own_room() {
        let calls = CallLimits::new(&config(1, 1, 1), true);
        let _short = calls.admit(Class::Short, "a").unwrap();
        assert!(calls.admit(Class::Short, "b").is_err());
        let _renew = calls.admit(Class::Renewal, "b").unwrap();
        let err = calls.admit(Class::Renewal, "b").err().unwrap();
        assert_eq!(limit(&err), "--reserved-renewals");
        let _wait = calls.admit(Class::Waiting, "b").unwrap();
        let err = calls.admit(Class::Waiting, "c").err().unwrap();
        assert_eq!(limit(&err), "--max-waiting-acquires");
    }

    /// A renewal refused only by its identity's share waits until one of
    /// the identity's permits ends, and gives up after its patience; one
    /// refused by the replica's total is refused at once.
    #[tokio::test(start_paused = true)]
    async fn renewals_wait_for_their_share_not_the_total() {
        let shares = |short, reserve| Config {
            reserved_renewals_per_identity: 0,
            ..config(short, 1, reserve)
        };
        let calls = CallLimits::new(&shares(10, 10), true);
        let held = calls.admit(Class::Short, "a").unwrap();
        let waiting = {
            let calls = calls.clone();
            tokio::spawn(async move {
                calls
                    .admit_renewal_waiting("a", Duration::from_secs(60))
                    .await
            })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it waits for a's share");
        drop(held);
        let permit = waiting.await.unwrap().expect("woken by the ended permit");
        let err = calls
            .admit_renewal_waiting("a", Duration::from_millis(500))
            .await
            .err()
            .unwrap();
        assert_eq!(limit(&err), "--reserved-renewals-per-identity");
        drop(permit);
        // The total: refused without waiting.
        let full = CallLimits::new(&shares(1, 0), true);
        let _b = full.admit(Class::Short, "b").unwrap();
        let started = Instant::now();
        let err = full
            .admit_renewal_waiting("c", Duration::from_secs(60))
            .await
            .err()
            .unwrap();
        assert_eq!(limit(&err), "--reserved-renewals");
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert!(full.waiters.by_identity.lock().unwrap().is_empty());
    }

    /// A permit worth several places takes them all or none, and frees
    /// them all.
    #[test]
    fn weighted_permits_take_all_places_or_none() {
        let config = Config {
            max_waiting_acquires: 10,
            max_waiting_acquires_per_identity: 6,
            ..config(1, 1, 0)
        };
        let calls = CallLimits::new(&config, true);
        let group = calls.admit_n(Class::Waiting, "a", 4).unwrap();
        let err = calls.admit_n(Class::Waiting, "a", 3).err().unwrap();
        assert_eq!(limit(&err), "--max-waiting-acquires-per-identity");
        let _two = calls.admit_n(Class::Waiting, "a", 2).unwrap();
        let _b = calls.admit_n(Class::Waiting, "b", 4).unwrap();
        let err = calls.admit_n(Class::Waiting, "c", 1).err().unwrap();
        assert_eq!(limit(&err), "--max-waiting-acquires");
        drop(group);
        calls.admit_n(Class::Waiting, "c", 4).unwrap();
    }
}
