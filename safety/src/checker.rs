//! The history checker: turns the clients' histories, the store's log of
//! accepted writes and the expiry events into verdicts on four properties.
//!
//! 1. **Tokens increase.** Per name, holdings ordered by when their holder
//!    learned of them carry strictly increasing fencing tokens, and no two
//!    holdings share a token.
//! 2. **The store is fenced.** Per resource, in the store's commit order,
//!    no accepted write carries a token lower than one accepted before it.
//! 3. **No overlap.** Per name, no two holdings' intervals overlap. A
//!    holding's interval runs from the Acquire reply to its safe deadline
//!    (send time of its last successful Acquire/Renew + TTL − margin), cut
//!    short only by the holder's own Release; all on the shared monotonic
//!    clock. A holding whose Acquire reply came after its deadline (a holder
//!    paused mid-call) has an empty interval and never acted.
//! 4. **Leases end.** A holding that was not released expires no later than
//!    its due time (server write time of its last Acquire/Renew, or send time
//!    plus RPC timeout when the outcome was unknown, plus the TTL) plus the
//!    allowed lag. Measured from the EXPIRED event's server time; where the
//!    event was not seen, a `LEASE_HELD` refusal after due + lag (and before
//!    the next holder took the name) proves the lease outlived it. Holdings
//!    whose due time falls inside an infrastructure fault (NATS or Tenure
//!    down or stopped, plus a grace period) are excused: expiry there waits
//!    for the store to come back, by design.

use std::collections::{BTreeMap, HashMap};

use crate::fenced::Accepted;
use crate::history::{Op, OpKind, Phase};

/// One observed lease event (from `WatchLease`).
#[derive(Debug, Clone)]
pub struct Event {
    /// `EXPIRED`, `RELEASED`, ...
    pub kind: String,
    /// Lease name.
    pub name: String,
    /// Fencing token of the holding concerned.
    pub token: u64,
    /// Server wall-clock time of the change, ms.
    pub time_ms: u64,
}

/// A span of wall-clock time during which a fault was in force.
#[derive(Debug, Clone)]
pub struct Window {
    /// Start, Unix ms.
    pub start_ms: u64,
    /// End, Unix ms (fault lifted).
    pub end_ms: u64,
}

/// Everything the checker reads.
pub struct Input<'a> {
    /// Client histories.
    pub ops: &'a [Op],
    /// The store's accepted writes (resource prefix stripped or not).
    pub accepted: &'a [Accepted],
    /// Lease events seen by the runner's watcher.
    pub events: &'a [Event],
    /// Infrastructure fault windows (expiry may wait for recovery there).
    pub faults: &'a [Window],
    /// Allowed expiry lag beyond the TTL, ms.
    pub allowed_lag_ms: u64,
    /// Grace after a fault ends before expiry must be on time again, ms.
    pub fault_grace_ms: u64,
    /// Names still held at the final check (after every due time + lag).
    pub leftover: &'a [String],
}

/// The verdicts of one run.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Completed lease calls and writes.
    pub operations: usize,
    /// Holdings that acted (non-empty interval).
    pub holdings: usize,
    /// Changes of holder per name, summed.
    pub handoffs: usize,
    /// Property 1 violations.
    pub p1_tokens: usize,
    /// Property 2 violations.
    pub p2_store: usize,
    /// Property 3 violations.
    pub p3_overlap: usize,
    /// Property 4 violations.
    pub p4_expiry: usize,
    /// Longest overlap, ms.
    pub max_overlap_ms: f64,
    /// Writes the store refused (stale tokens).
    pub stale_refused: usize,
    /// Writes accepted by the store.
    pub writes_accepted: usize,
    /// Renewals refused before the holder's deadline (an early loss).
    pub early_losses: usize,
    /// Expiries measured (EXPIRED events matched to a holding).
    pub expiries_measured: usize,
    /// Longest measured expiry lag outside fault windows, ms.
    pub max_expiry_lag_ms: i64,
    /// Holdings excused from property 4 by a fault window.
    pub expiry_excused: usize,
    /// Smallest time between a holder's deadline and the next holder's
    /// start where the first did not release (the lease expired), ms
    /// (negative: an overlap); `None` without such handoffs. This is where
    /// the client margin, RPC time and expiry lag keep holders apart.
    pub closest_expiry_handoff_ms: Option<f64>,
    /// Longest time a name had no acting holder, ms.
    pub longest_unavailable_ms: f64,
    /// The first few violations, explained.
    pub examples: Vec<String>,
}

impl Report {
    /// Total violations of all properties.
    pub fn violations(&self) -> usize {
        self.p1_tokens + self.p2_store + self.p3_overlap + self.p4_expiry
    }

    /// Keeps an explanation (the first 12).
    fn example(&mut self, text: String) {
        if self.examples.len() < 12 {
            self.examples.push(text);
        }
    }
}

/// One holding reconstructed from the history.
#[derive(Debug, Default)]
struct Holding {
    /// Holding id.
    id: String,
    /// Lease name.
    name: String,
    /// Fencing token (0: never learned).
    token: u64,
    /// Acquire reply, mono ns (0: never acquired).
    start: u64,
    /// Latest safe deadline, mono ns.
    deadline: u64,
    /// Release send time, mono ns.
    release_t0: Option<u64>,
    /// Whether a Release may have taken effect (ok, unknown, or unanswered).
    maybe_released: bool,
    /// Granted TTL, ms.
    ttl_ms: u64,
    /// Latest time the last write of this holding may have been stored, ms.
    due_base_ms: u64,
    /// Server time of the Acquire, ms.
    acquired_ms: u64,
}

impl Holding {
    /// The acting interval `[start, end)`, if non-empty.
    fn interval(&self) -> Option<(u64, u64)> {
        let end = self
            .release_t0
            .map_or(self.deadline, |r| r.min(self.deadline));
        (self.start > 0 && end > self.start).then_some((self.start, end))
    }
}

/// Rebuilds holdings from the history.
fn holdings(ops: &[Op]) -> Vec<Holding> {
    // Completion of each invoke, by (holding, kind, send time).
    let mut completion: HashMap<(&str, OpKind, u64), Phase> = HashMap::new();
    for op in ops.iter().filter(|o| o.phase != Phase::Invoke) {
        completion.insert((&op.holding, op.op, op.t0), op.phase);
    }
    let mut by_id: BTreeMap<&str, Holding> = BTreeMap::new();
    for op in ops {
        let h = by_id.entry(&op.holding).or_insert_with(|| Holding {
            id: op.holding.clone(),
            name: op.name.clone(),
            ..Default::default()
        });
        match (op.op, op.phase) {
            (OpKind::Acquire, Phase::Ok) => {
                h.token = op.token;
                h.start = op.t1;
                h.ttl_ms = op.ttl_ms;
                h.deadline = h.deadline.max(op.deadline);
                h.acquired_ms = op.server_ms;
                h.due_base_ms = h.due_base_ms.max(op.server_ms);
            }
            (OpKind::Renew, Phase::Ok) => {
                h.deadline = h.deadline.max(op.deadline);
                h.ttl_ms = op.ttl_ms.max(h.ttl_ms);
                h.due_base_ms = h.due_base_ms.max(op.server_ms);
            }
            (OpKind::Renew, Phase::Invoke) => {
                let done = completion.get(&(op.holding.as_str(), OpKind::Renew, op.t0));
                if !matches!(done, Some(Phase::Ok) | Some(Phase::Fail)) {
                    // Unknown outcome: it may have been stored as late as
                    // the moment the call timed out.
                    h.due_base_ms = h.due_base_ms.max(op.w0 + op.timeout_ms);
                }
            }
            (OpKind::Release, Phase::Invoke) => {
                h.release_t0 = Some(h.release_t0.map_or(op.t0, |r| r.min(op.t0)));
                let done = completion.get(&(op.holding.as_str(), OpKind::Release, op.t0));
                if !matches!(done, Some(Phase::Fail)) {
                    h.maybe_released = true;
                }
            }
            _ => {}
        }
    }
    by_id.into_values().collect()
}

/// Whether `t_ms` falls in a fault window (extended by the grace period).
fn in_fault(faults: &[Window], grace_ms: u64, t_ms: u64) -> bool {
    faults
        .iter()
        .any(|w| t_ms + grace_ms >= w.start_ms && t_ms <= w.end_ms + grace_ms)
}

/// Checks the four properties.
pub fn check(input: &Input) -> Report {
    let mut r = Report::default();
    let ops = input.ops;
    r.operations = ops
        .iter()
        .filter(|o| {
            o.phase != Phase::Invoke
                && matches!(
                    o.op,
                    OpKind::Acquire | OpKind::Renew | OpKind::Release | OpKind::Write
                )
        })
        .count();
    r.stale_refused = ops
        .iter()
        .filter(|o| o.op == OpKind::Write && o.phase == Phase::Fail)
        .count();
    r.writes_accepted = ops
        .iter()
        .filter(|o| o.op == OpKind::Write && o.phase == Phase::Ok)
        .count();
    r.early_losses = ops
        .iter()
        .filter(|o| o.op == OpKind::Renew && o.phase == Phase::Fail && o.t1 < o_deadline(ops, o))
        .count();

    // A renewal must keep the holding's token.
    for o in ops.iter().filter(|o| {
        o.op == OpKind::Renew && o.phase == Phase::Ok && o.detail.starts_with("token changed")
    }) {
        r.p1_tokens += 1;
        r.example(format!(
            "P1 {}: renewal of {} {}",
            o.name, o.holding, o.detail
        ));
    }

    let all = holdings(ops);
    let mut per_name: BTreeMap<&str, Vec<&Holding>> = BTreeMap::new();
    for h in all.iter().filter(|h| h.token > 0) {
        per_name.entry(&h.name).or_default().push(h);
    }

    for (name, hs) in &per_name {
        // Property 1: tokens strictly increase in the order holders learned
        // of their holdings; one token, one holding.
        let mut acting: Vec<(&Holding, (u64, u64))> = hs
            .iter()
            .filter_map(|h| h.interval().map(|iv| (*h, iv)))
            .collect();
        acting.sort_by_key(|(_, (start, _))| *start);
        r.holdings += acting.len();
        r.handoffs += acting.len().saturating_sub(1);
        for pair in acting.windows(2) {
            let ((a, _), (b, _)) = (&pair[0], &pair[1]);
            if b.token <= a.token {
                r.p1_tokens += 1;
                r.example(format!(
                    "P1 {name}: {} (token {}) began after {} (token {})",
                    b.id, b.token, a.id, a.token
                ));
            }
        }
        let mut by_token: HashMap<u64, &str> = HashMap::new();
        for h in hs {
            if let Some(other) = by_token.insert(h.token, &h.id) {
                if other != h.id {
                    r.p1_tokens += 1;
                    r.example(format!(
                        "P1 {name}: {} and {other} share token {}",
                        h.id, h.token
                    ));
                }
            }
        }

        // Property 3: no overlapping intervals.
        let mut reach: Option<(u64, &str, bool)> = None;
        for (h, (start, end)) in &acting {
            if let Some((until, who, released)) = reach {
                if !released {
                    let gap = (*start as f64 - until as f64) / 1e6;
                    r.closest_expiry_handoff_ms =
                        Some(r.closest_expiry_handoff_ms.map_or(gap, |g| g.min(gap)));
                }
                if *start < until {
                    r.p3_overlap += 1;
                    let ms = (until - start) as f64 / 1e6;
                    r.max_overlap_ms = r.max_overlap_ms.max(ms);
                    r.example(format!(
                        "P3 {name}: {} (token {}) began {ms:.1} ms before {who}'s deadline",
                        h.id, h.token
                    ));
                }
            }
            if reach.is_none_or(|(until, _, _)| *end > until) {
                reach = Some((*end, &h.id, h.release_t0.is_some_and(|t| t <= h.deadline)));
            }
        }

        // Unavailability: the longest gap with no acting holder.
        let mut covered: Option<u64> = None;
        for (_, (start, end)) in &acting {
            if let Some(c) = covered {
                if *start > c {
                    let gap = (start - c) as f64 / 1e6;
                    r.longest_unavailable_ms = r.longest_unavailable_ms.max(gap);
                }
            }
            covered = Some(covered.map_or(*end, |c| c.max(*end)));
        }

        // Property 4: unreleased holdings end on time.
        let mut sorted: Vec<&Holding> = hs.clone();
        sorted.sort_by_key(|h| h.token);
        for (i, h) in sorted.iter().enumerate() {
            if h.maybe_released || h.acquired_ms == 0 {
                continue;
            }
            let due = h.due_base_ms + h.ttl_ms;
            let excused = in_fault(input.faults, input.fault_grace_ms, due);
            let next_acquire = sorted.get(i + 1).map(|n| n.acquired_ms).filter(|t| *t > 0);
            let expired = input
                .events
                .iter()
                .find(|e| e.kind == "EXPIRED" && e.name == *name && e.token == h.token);
            if let Some(e) = expired {
                let lag = e.time_ms as i64 - due as i64;
                if excused {
                    r.expiry_excused += 1;
                    continue;
                }
                r.expiries_measured += 1;
                r.max_expiry_lag_ms = r.max_expiry_lag_ms.max(lag);
                if lag > input.allowed_lag_ms as i64 {
                    r.p4_expiry += 1;
                    r.example(format!(
                        "P4 {name}: {} (token {}) expired {lag} ms after its due time",
                        h.id, h.token
                    ));
                }
                continue;
            }
            // No event seen: was anyone refused the name after due + lag,
            // before the next holder took it?
            let limit = due + input.allowed_lag_ms;
            let refused = ops.iter().find(|o| {
                o.op == OpKind::Acquire
                    && o.phase == Phase::Fail
                    && o.name == *name
                    && o.detail == "LEASE_HELD"
                    && {
                        let w1 = o.w0 + (o.t1.saturating_sub(o.t0)) / 1_000_000;
                        w1 > limit + 50 && next_acquire.is_none_or(|n| w1 < n)
                    }
            });
            if let Some(o) = refused {
                if excused {
                    r.expiry_excused += 1;
                } else {
                    r.p4_expiry += 1;
                    r.example(format!(
                        "P4 {name}: {} (token {}) still held {} ms after due: {} was refused",
                        h.id,
                        h.token,
                        o.w0 + (o.t1 - o.t0) / 1_000_000 - due,
                        o.client
                    ));
                }
            }
        }
    }

    // Property 2: the store's log never goes back in tokens per resource.
    let mut highest: HashMap<&str, i64> = HashMap::new();
    for a in input.accepted {
        let top = highest.entry(&a.resource).or_insert(a.fence);
        if a.fence < *top {
            r.p2_store += 1;
            r.example(format!(
                "P2 {}: store accepted token {} (seq {}) after token {}",
                a.resource, a.fence, a.seq, top
            ));
        } else {
            *top = a.fence;
        }
    }

    for name in input.leftover {
        r.p4_expiry += 1;
        r.example(format!(
            "P4 {name}: still held at the end, past every due time"
        ));
    }
    r
}

/// The deadline the holder had when it sent this Renew (from the latest
/// earlier successful Acquire/Renew of the holding).
fn o_deadline(ops: &[Op], renew: &Op) -> u64 {
    ops.iter()
        .filter(|o| {
            o.holding == renew.holding
                && o.phase == Phase::Ok
                && matches!(o.op, OpKind::Acquire | OpKind::Renew)
                && o.t1 <= renew.t0
        })
        .map(|o| o.deadline)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A completed op of `holding` on name `n`, sent at `t0` ms and
    /// answered at `t1` ms (monotonic), `w0` = `t0` on the wall clock.
    fn op(holding: &str, kind: OpKind, phase: Phase, t0: u64, t1: u64) -> Op {
        Op {
            client: holding.split('#').next().unwrap_or_default().into(),
            holding: holding.into(),
            name: "n".into(),
            op: kind,
            phase,
            t0: t0 * MS,
            t1: t1 * MS,
            w0: t0,
            token: 0,
            revision: 0,
            ttl_ms: 0,
            deadline: 0,
            server_ms: 0,
            timeout_ms: 1000,
            detail: String::new(),
        }
    }

    /// A successful Acquire: token, TTL, sent at `t0`, reply at `t1` (ms),
    /// deadline `t0 + ttl - margin`, server write at `t0`.
    fn acquired(holding: &str, token: u64, t0: u64, t1: u64, ttl: u64, margin: i64) -> Op {
        Op {
            token,
            revision: token,
            ttl_ms: ttl,
            deadline: ((t0 + ttl) as i64 - margin) as u64 * MS,
            server_ms: t0,
            ..op(holding, OpKind::Acquire, Phase::Ok, t0, t1)
        }
    }

    fn check_ops(ops: &[Op], accepted: &[Accepted], events: &[Event], faults: &[Window]) -> Report {
        check(&Input {
            ops,
            accepted,
            events,
            faults,
            allowed_lag_ms: 1000,
            fault_grace_ms: 3000,
            leftover: &[],
        })
    }

    #[test]
    fn successive_holdings_after_expiry_are_safe() {
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 50),
            acquired("b#1", 3, 1500, 2010, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.violations(), 0, "{:?}", r.examples);
        assert_eq!(r.handoffs, 1);
        // a's deadline 1950, b's start 2010.
        assert_eq!(r.closest_expiry_handoff_ms, Some(60.0));
    }

    #[test]
    fn overlapping_holdings_are_reported() {
        // b starts at 1900, before a's deadline (1000 + 1000 + 500 = 2500:
        // a negative margin).
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, -500),
            acquired("b#1", 3, 1500, 1900, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.p3_overlap, 1, "{:?}", r.examples);
        assert_eq!(r.max_overlap_ms, 600.0);
    }

    #[test]
    fn a_release_ends_the_interval() {
        let mut release = op("a#1", OpKind::Release, Phase::Invoke, 1200, 0);
        release.token = 1;
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 50),
            release.clone(),
            Op {
                t1: 1205 * MS,
                ..op("a#1", OpKind::Release, Phase::Ok, 1200, 1205)
            },
            acquired("b#1", 3, 1201, 1206, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.violations(), 0, "{:?}", r.examples);
    }

    #[test]
    fn tokens_going_back_are_reported() {
        let ops = vec![
            acquired("a#1", 5, 1000, 1002, 1000, 50),
            acquired("b#1", 3, 2000, 2010, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.p1_tokens, 1, "{:?}", r.examples);
    }

    #[test]
    fn a_reply_after_the_deadline_never_acted() {
        // b's holder was paused between send (1000) and reply (2500): its
        // deadline (1950) passed before it learned of the lease, so its
        // lower token does not count as out of order.
        let ops = vec![
            acquired("a#1", 7, 2100, 2110, 1000, 50),
            acquired("b#1", 3, 1000, 2500, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.violations(), 0, "{:?}", r.examples);
        assert_eq!(r.holdings, 1);
    }

    #[test]
    fn the_store_going_back_in_tokens_is_reported() {
        let log = |seq, fence| Accepted {
            seq,
            resource: "r".into(),
            fence,
        };
        let r = check_ops(&[], &[log(1, 3), log(2, 5), log(3, 5), log(4, 3)], &[], &[]);
        assert_eq!(r.p2_store, 1, "{:?}", r.examples);
    }

    #[test]
    fn late_expiry_is_reported_unless_a_fault_explains_it() {
        let ops = vec![acquired("a#1", 1, 1000, 1002, 1000, 50)];
        let late = Event {
            kind: "EXPIRED".into(),
            name: "n".into(),
            token: 1,
            time_ms: 3500,
        };
        let r = check_ops(&ops, &[], std::slice::from_ref(&late), &[]);
        assert_eq!(r.p4_expiry, 1, "{:?}", r.examples);
        assert_eq!(r.max_expiry_lag_ms, 1500);

        let fault = Window {
            start_ms: 1500,
            end_ms: 3000,
        };
        let r = check_ops(&ops, &[], &[late], &[fault]);
        assert_eq!(r.p4_expiry, 0, "{:?}", r.examples);
        assert_eq!(r.expiry_excused, 1);
    }

    #[test]
    fn a_refusal_long_after_due_is_a_lease_that_outlived_its_ttl() {
        let refused = Op {
            detail: "LEASE_HELD".into(),
            ..op("b#1", OpKind::Acquire, Phase::Fail, 3000, 3500)
        };
        let ops = vec![acquired("a#1", 1, 1000, 1002, 1000, 50), refused];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.p4_expiry, 1, "{:?}", r.examples);
    }
}
