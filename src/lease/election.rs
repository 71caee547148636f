//! Leader election on the lease protocol: an election is a lease.
//!
//! The election named `db.primary` is the lease named `db.primary`: its
//! leader is the lease's holder, the leader's value is the record's metadata
//! entry [`VALUE_KEY`], and a term's fencing token is the holding's token.
//! Sharing the key space (rather than a reserved `_tenure.e.<name>`) is on
//! purpose: a leadership is renewed with `LeaseService.Renew`, read with
//! `GetLease`, watched with `WatchLease`, revoked with `RevokeLease` and
//! covered by the grants on its name, with no second set of rules. The
//! price is that a lock and an election of the same name are the same
//! thing: a plain `Acquire` of `db.primary` makes its holder the leader
//! (with an empty value), which `docs/design.md` states.
//!
//! Campaign is a waiting Acquire; Resign is a Release. Proclaim is the one
//! new write: a renewal that also replaces the value, conditional on the
//! revision it replaces, after the key and revision were checked against
//! that same record (so a deposed leader can never proclaim). Observe turns
//! the shared watcher's events of one name into leadership changes:
//! renewals that change nothing are dropped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::event::{Event, EventKind, Filter};
use super::record::{Holding, KeyHash};
pub use super::watch::Candidate;
use super::watch::Subscription;
use super::{now_ms, AcquireArgs, Leases, MAX_CAS_ATTEMPTS};
use crate::error::{Error, Reason, Result};
use crate::nats::CasError;

/// The metadata key of a lease record that holds the leader's value.
pub const VALUE_KEY: &str = "value";

/// What Campaign asks for, already validated.
#[derive(Debug, Clone)]
pub struct CampaignArgs {
    /// The election (a lease name).
    pub name: String,
    /// Who campaigns.
    pub holder: String,
    /// The value to publish while leading.
    pub value: String,
    /// Granted TTL, whole seconds.
    pub ttl_s: u64,
    /// The ownership secret.
    pub key: String,
    /// How long to wait for the election to have no leader; `None`: fail
    /// at once.
    pub wait: Option<Duration>,
    /// Asks a leader of lower preference to hand over while this candidate
    /// waits (0: nothing); see [`Candidate`].
    pub preference: u32,
}

/// What kind of leadership change an [`Change`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// The state when observing started (with or without a leader).
    Current,
    /// A new leader (a new fencing token).
    Elected,
    /// The same leader with a new value.
    Proclaimed,
    /// No leader: the leader resigned (released the lease).
    Resigned,
    /// No leader: the leadership expired.
    Expired,
    /// No leader: an operator revoked the leadership.
    Revoked,
    /// No leader known: the watcher missed changes (see
    /// [`EventKind::Missed`]); the next change says who leads.
    Missed,
    /// The same leader; the preferred waiting candidate changed (see
    /// [`Change::preferred`]).
    Preferred,
}

/// One leadership change of an election.
#[derive(Debug, Clone)]
pub struct Change {
    /// What changed.
    pub kind: ChangeKind,
    /// The leadership after the change; `None`: no leader.
    pub leader: Option<Arc<Holding>>,
    /// For the "no leader" kinds, the holder whose term ended (empty when
    /// unknown).
    pub ended_holder: String,
    /// For the "no leader" kinds, the token of the term that ended (0 when
    /// unknown).
    pub ended_token: u64,
    /// The bucket revision of the change (0 for a `Current` without leader).
    pub revision: u64,
    /// The waiting candidate of the highest preference above 0 (the
    /// earliest of equals) when the change was reported: a leader of lower
    /// preference hands over to it.
    pub preferred: Option<Candidate>,
}

/// The leader's value in a holding's record (empty when the holding was
/// taken by a plain Acquire).
pub fn value_of(holding: &Holding) -> &str {
    holding
        .record
        .metadata
        .get(VALUE_KEY)
        .map_or("", String::as_str)
}

/// How long `holding` lasts without another write, by the server's clock
/// now: its last write's time plus its TTL, minus now (never negative).
pub fn ttl_left(holding: &Holding) -> Duration {
    let ends = holding
        .record
        .renewed_ms
        .saturating_add(holding.record.ttl_s.saturating_mul(1000));
    Duration::from_millis(ends.saturating_sub(now_ms()))
}

/// Leader election over the lease operations. Cheap to clone.
#[derive(Clone)]
pub struct Elections {
    /// The lease protocol the elections are built on.
    leases: Leases,
}

impl Elections {
    /// Elections over `leases`.
    pub fn new(leases: Leases) -> Elections {
        Elections { leases }
    }

    /// Makes the caller the leader, waiting as `args.wait` says: an Acquire
    /// of the election's lease with the value in its metadata.
    pub async fn campaign(&self, args: &CampaignArgs) -> Result<Holding> {
        let acquire = AcquireArgs {
            name: args.name.clone(),
            holder: args.holder.clone(),
            ttl_s: args.ttl_s,
            key: args.key.clone(),
            wait: args.wait,
            metadata: BTreeMap::from([(VALUE_KEY.to_string(), args.value.clone())]),
            lock_delay_s: 0,
            limit: 0,
            mode: None,
            preference: args.preference,
        };
        self.leases
            .acquire(&acquire)
            .await
            .map_err(|e| election_error(&args.name, e))
    }

    /// Replaces the leader's value, renewing the leadership: verifies key
    /// and revision against the current record, then writes over exactly
    /// that record's revision.
    pub async fn proclaim(
        &self,
        name: &str,
        expected: u64,
        key: &str,
        value: &str,
    ) -> Result<Holding> {
        let hash = KeyHash::of(key);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (revision, rec) = self
                .leases
                .verify_holding(name, expected, &hash)
                .await
                .map_err(|e| election_error(name, e))?;
            let mut record = rec.renewal(revision, None, now_ms());
            record
                .metadata
                .insert(VALUE_KEY.to_string(), value.to_string());
            let ttl = self.leases.nats_ttl(record.ttl_s);
            match self
                .leases
                .store
                .put(&super::keys::lease(name), record.encode(), revision, ttl)
                .await
            {
                Ok(written) => {
                    tracing::debug!(name, holder = %record.holder, token = record.token, "proclaimed");
                    self.leases.cache.insert(name, written, &record);
                    return Ok(Holding::at(name, written, record));
                }
                Err(CasError::Conflict) => self.leases.cache.remove(name),
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(Error::new(
            Reason::LeaseHeld,
            format!("election {name:?} is changing hands too fast to settle; retry with backoff"),
        ))
    }

    /// Ends a leadership (a Release of the election's lease); returns the
    /// resignation's revision.
    pub async fn resign(&self, name: &str, expected: u64, key: &str) -> Result<u64> {
        self.leases
            .release(name, expected, key)
            .await
            .map_err(|e| election_error(name, e))
    }

    /// Resigns by handing the leadership to the waiting candidate whose
    /// holder is `to` (or the earliest waiting one), with no leaderless
    /// moment; returns the successor's term.
    pub async fn hand_over(
        &self,
        name: &str,
        expected: u64,
        key: &str,
        to: Option<&str>,
    ) -> Result<Holding> {
        self.leases
            .transfer(name, expected, key, to)
            .await
            .map_err(|e| election_error(name, e))
    }

    /// The current leader.
    pub async fn leader(&self, name: &str) -> Result<Holding> {
        self.leases
            .get(name)
            .await
            .map_err(|e| election_error(name, e))
    }

    /// Observes one election: its state now, then every leadership change.
    pub async fn observe(&self, name: &str) -> Result<Observation> {
        // Every change of the lease, and the internal signal that the
        // preferred candidate changed.
        let kinds = vec![
            EventKind::Current,
            EventKind::SnapshotComplete,
            EventKind::Acquired,
            EventKind::Renewed,
            EventKind::Released,
            EventKind::Expired,
            EventKind::Revoked,
            EventKind::Missed,
            EventKind::Candidate,
        ];
        let subscription = self
            .leases
            .watch(Filter::Name(name.to_string()), kinds)
            .await?;
        Ok(Observation {
            subscription,
            tracker: Tracker::default(),
            leases: self.leases.clone(),
            name: name.to_string(),
        })
    }
}

/// A stream of leadership changes of one election, read from a lease
/// watch of its name.
pub struct Observation {
    /// The watch of the election's lease.
    subscription: Subscription,
    /// What was reported so far.
    tracker: Tracker,
    /// Where the preferred candidate is read (the shared watcher's view).
    leases: Leases,
    /// The election.
    name: String,
}

/// What an observation has reported so far, to tell which lease events
/// are leadership changes.
#[derive(Default)]
struct Tracker {
    /// The leader found by the snapshot, until it is reported.
    initial: Option<Arc<Holding>>,
    /// The token and value last reported; `None`: no leader.
    last: Option<(u64, String)>,
    /// Whether the current state was reported.
    started: bool,
    /// The leader's latest holding, for a change of candidate only.
    leader: Option<Arc<Holding>>,
    /// The preferred candidate last reported.
    preferred: Option<Candidate>,
}

impl Observation {
    /// The next change; `Err` once the watch has ended (shutdown, or it fell
    /// behind).
    pub async fn next(&mut self) -> Result<Change> {
        loop {
            let event = self.subscription.next().await?;
            // A candidate signal names the preferred candidate as of its
            // revision; any other event, as the view has it now.
            let preferred = match event.kind {
                EventKind::Candidate => (!event.holder.is_empty()).then(|| Candidate {
                    holder: event.holder.clone(),
                    preference: u32::try_from(event.token).unwrap_or(u32::MAX),
                }),
                _ => self.leases.preferred(&self.name),
            };
            if let Some(change) = self.tracker.apply(&event, preferred) {
                return Ok(change);
            }
        }
    }

    /// Keeps `guard` (the stream's watch slot) until the watch ends.
    pub fn hold(&self, guard: impl Send + 'static) {
        self.subscription.hold(guard);
    }

    /// Turns the observation into a stream that ends after its first error.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<Change>> + Send {
        futures::stream::unfold(Some(self), |state| async move {
            let mut obs = state?;
            match obs.next().await {
                Ok(change) => Some((Ok(change), Some(obs))),
                Err(err) => Some((Err(err), None)),
            }
        })
    }
}

impl Tracker {
    /// The change `event` stands for, if any, with `preferred` (the
    /// preferred candidate now): the first is always the current state;
    /// renewals that change neither leader nor value, endings when there is
    /// already no leader, and candidate signals that change no candidate
    /// are dropped.
    fn apply(&mut self, event: &Event, preferred: Option<Candidate>) -> Option<Change> {
        match event.kind {
            EventKind::Acquired | EventKind::Renewed => self.leader = event.holding.clone(),
            EventKind::Released | EventKind::Expired | EventKind::Revoked | EventKind::Missed => {
                self.leader = None
            }
            _ => {}
        }
        if event.kind == EventKind::Candidate {
            if preferred == self.preferred || self.initial_pending() {
                return None;
            }
            self.preferred = preferred.clone();
            return Some(Change {
                kind: ChangeKind::Preferred,
                leader: self.leader.clone(),
                ended_holder: String::new(),
                ended_token: 0,
                revision: event.revision,
                preferred,
            });
        }
        let mut change = self.leadership(event)?;
        self.preferred = preferred.clone();
        change.preferred = preferred;
        Some(change)
    }

    /// Whether the snapshot has not been reported yet (the first change
    /// reported is always the current state).
    fn initial_pending(&self) -> bool {
        !self.started
    }

    /// The leadership change `event` stands for, if any.
    fn leadership(&mut self, event: &Event) -> Option<Change> {
        let change = |kind, leader: Option<Arc<Holding>>| Change {
            kind,
            revision: leader.as_ref().map_or(event.revision, |h| h.revision),
            leader,
            ended_holder: String::new(),
            ended_token: 0,
            preferred: None,
        };
        match event.kind {
            // Never delivered to an observer (it does not ask for turns);
            // candidates are handled by `apply`.
            EventKind::Turn | EventKind::Candidate => None,
            EventKind::Current => {
                self.initial = event.holding.clone();
                None
            }
            EventKind::SnapshotComplete => {
                self.started = true;
                let leader = self.initial.take();
                self.leader = leader.clone();
                self.last = leader.as_ref().map(|h| (h.token, value_of(h).to_string()));
                Some(Change {
                    revision: leader.as_ref().map_or(0, |h| h.revision),
                    ..change(ChangeKind::Current, leader)
                })
            }
            EventKind::Acquired | EventKind::Renewed => {
                let holding = event.holding.clone()?;
                let now = (holding.token, value_of(&holding).to_string());
                let kind = match &self.last {
                    Some(last) if *last == now => return None,
                    Some((token, _)) if *token == holding.token => ChangeKind::Proclaimed,
                    _ => ChangeKind::Elected,
                };
                self.last = Some(now);
                Some(change(kind, Some(holding)))
            }
            EventKind::Missed => {
                self.last = None;
                Some(Change {
                    ended_holder: event.holder.clone(),
                    ended_token: event.token,
                    ..change(ChangeKind::Missed, None)
                })
            }
            EventKind::Released | EventKind::Expired | EventKind::Revoked => {
                self.last.take()?;
                let kind = match event.kind {
                    EventKind::Released => ChangeKind::Resigned,
                    EventKind::Expired => ChangeKind::Expired,
                    _ => ChangeKind::Revoked,
                };
                Some(Change {
                    ended_holder: event.holder.clone(),
                    ended_token: event.token,
                    ..change(kind, None)
                })
            }
        }
    }
}

/// A lease error in an election's words: who leads, or that the caller does
/// not, and what to do; reason and metadata unchanged.
fn election_error(name: &str, err: Error) -> Error {
    let meta = |key: &str| {
        err.metadata
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    };
    let state = meta("state").unwrap_or_else(|| "ABSENT".into());
    let message = match (err.reason, meta("holder")) {
        (Reason::LeaseHeld, Some(holder)) => {
            let token = meta("fencing_token").unwrap_or_default();
            let waited = meta("waited_ms")
                .map(|ms| format!(" (gave up after waiting {ms} ms)"))
                .unwrap_or_default();
            format!(
                "election {name:?} is led by {holder:?} (token {token}){waited}; Campaign with a wait \
                 to lead when it resigns or expires, or Observe the election"
            )
        }
        (Reason::LeaseNotHeld, _) => format!(
            "you are not the leader of election {name:?} (its lease is {state} under another \
             term or key); stop acting as leader and Campaign again"
        ),
        (Reason::LeaseNotFound, _) => format!(
            "election {name:?} has no leader ({state}); Campaign to lead it, or Observe it to \
             learn of the next leader"
        ),
        _ => return err,
    };
    Error { message, ..err }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::record::fixtures::record;

    /// A holding of `holder` with `token`, written at `revision`, leading
    /// with `value`.
    fn leading(holder: &str, token: u64, revision: u64, value: &str) -> Arc<Holding> {
        let mut rec = record(holder, "fixture-lease-key", token);
        rec.metadata.insert(VALUE_KEY.into(), value.into());
        Arc::new(Holding::at("e", revision, rec))
    }

    /// An event of `kind` for `holding`, or an ending of `holder`/`token`.
    fn event(kind: EventKind, holding: Option<Arc<Holding>>, holder: &str, token: u64) -> Event {
        Event {
            kind,
            name: "e".into(),
            revision: holding.as_ref().map_or(99, |h| h.revision),
            holder: holder.into(),
            token,
            holding,
            time_ms: 0,
            slot: 0,
            missed_after: 0,
        }
    }

    /// The snapshot becomes one CURRENT; a new token is ELECTED, a new
    /// value PROCLAIMED, a plain renewal nothing; an ending is "no leader"
    /// once.
    #[test]
    fn events_become_leadership_changes() {
        let step = |obs: &mut Tracker, e: Event| obs.apply(&e, None);
        let mut obs = Tracker::default();
        let a = leading("a", 5, 5, "addr-a");
        assert!(step(&mut obs, Event::current(&a)).is_none());
        let c = step(&mut obs, Event::snapshot_complete()).unwrap();
        assert_eq!(c.kind, ChangeKind::Current);
        assert_eq!(c.leader.unwrap().token, 5);
        let renewed = leading("a", 5, 6, "addr-a");
        assert!(step(&mut obs, event(EventKind::Renewed, Some(renewed), "a", 5)).is_none());
        let proclaimed = leading("a", 5, 7, "addr-a2");
        let c = step(
            &mut obs,
            event(EventKind::Renewed, Some(proclaimed), "a", 5),
        )
        .unwrap();
        assert_eq!(c.kind, ChangeKind::Proclaimed);
        assert_eq!(value_of(c.leader.as_ref().unwrap()), "addr-a2");
        let c = step(&mut obs, event(EventKind::Expired, None, "a", 5)).unwrap();
        assert_eq!(
            (c.kind, c.ended_holder.as_str(), c.ended_token),
            (ChangeKind::Expired, "a", 5)
        );
        assert!(c.leader.is_none());
        // A second ending while there is no leader says nothing new.
        assert!(step(&mut obs, event(EventKind::Released, None, "a", 5)).is_none());
        let b = leading("b", 9, 9, "addr-b");
        let c = step(&mut obs, event(EventKind::Acquired, Some(b), "b", 9)).unwrap();
        assert_eq!(c.kind, ChangeKind::Elected);
    }

    /// An empty snapshot is a CURRENT without leader.
    #[test]
    fn no_leader_at_start() {
        let mut obs = Tracker::default();
        let c = obs.apply(&Event::snapshot_complete(), None).unwrap();
        assert_eq!((c.kind, c.revision), (ChangeKind::Current, 0));
        assert!(c.leader.is_none());
    }

    /// Every change carries the preferred candidate; a candidate signal is
    /// a PREFERRED change only when the candidate changed, and never comes
    /// before the current state.
    #[test]
    fn candidates_become_preferred_changes() {
        let mut obs = Tracker::default();
        let v2 = || {
            Some(Candidate {
                holder: "v2".into(),
                preference: 2,
            })
        };
        let signal = || event(EventKind::Candidate, None, "", 0);
        let a = leading("a", 5, 5, "addr-a");
        assert!(obs.apply(&Event::current(&a), v2()).is_none());
        assert!(obs.apply(&signal(), v2()).is_none(), "before CURRENT");
        let c = obs.apply(&Event::snapshot_complete(), v2()).unwrap();
        assert_eq!((c.kind, c.preferred), (ChangeKind::Current, v2()));
        assert!(obs.apply(&signal(), v2()).is_none(), "no change");
        let c = obs.apply(&signal(), None).unwrap();
        assert_eq!((c.kind, c.preferred), (ChangeKind::Preferred, None));
        assert_eq!(c.leader.unwrap().token, 5, "the leader is unchanged");
        let c = obs.apply(&signal(), v2()).unwrap();
        assert_eq!((c.kind, c.preferred), (ChangeKind::Preferred, v2()));
        // v2 is handed the leadership: its ticket leaves with the grant.
        let b = leading("v2", 9, 9, "addr-v2");
        let c = obs
            .apply(&event(EventKind::Acquired, Some(b), "v2", 9), None)
            .unwrap();
        assert_eq!((c.kind, c.preferred), (ChangeKind::Elected, None));
        assert!(obs.apply(&signal(), None).is_none(), "already reported");
    }

    /// Lease errors read as election errors, keeping reason and metadata.
    #[test]
    fn errors_speak_of_elections() {
        let err = Error::new(Reason::LeaseHeld, "lease")
            .with("holder", "a")
            .with("fencing_token", 5);
        let e = election_error("e", err);
        assert_eq!(e.reason, Reason::LeaseHeld);
        assert!(
            e.message.contains("is led by \"a\" (token 5)"),
            "{}",
            e.message
        );
        assert_eq!(e.metadata.len(), 2);
        let e = election_error("e", Error::new(Reason::LeaseNotFound, "x"));
        assert!(e.message.contains("has no leader"), "{}", e.message);
        let e = election_error("e", Error::new(Reason::InvalidName, "x"));
        assert_eq!(e.message, "x");
    }
}
