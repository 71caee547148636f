//! The history checker: turns the clients' histories (and the runner's
//! revokes), the store's log of accepted writes, the lease events, the
//! queue tickets and the bucket's messages into verdicts on ten
//! properties.
//!
//! 1. **Tokens increase.** Per name, holdings ordered by when their holder
//!    learned of them carry strictly increasing fencing tokens, and no two
//!    holdings share a token.
//! 2. **The store is fenced.** Per resource, in the store's commit order,
//!    no accepted write carries a token lower than one accepted before it.
//!    This checks the store (with the kit it cannot fail; it fails when
//!    writes bypass the kit), not Tenure. The store must also hold only
//!    tokens Tenure granted for each resource: every token in its log, and
//!    its highest (the kit's `tenure_fence` row or Redis fence key), must be
//!    the token of a grant of that name (and slot) in the histories; one
//!    that is not (a forged token, or a genuine one of another name) is a
//!    *foreign token*, a violation. Writes whose genuine proof the client's
//!    proof check refused (Tenure signed a wrong proof) are violations too,
//!    and so is a forged write (`negative-forged-tokens`) that was not
//!    refused. Beside it the run counts
//!    *stale writes accepted*: writes the store took although they were
//!    sent after their holding's lease deadline (send time of its last
//!    successful Acquire/Renew + TTL) and after a holding of the same name
//!    with a higher token had been granted (its Acquire answered). Fencing
//!    lets such a write in when the newer holder has not written yet; it
//!    is not a violation, and a correct client never sends one unless it
//!    pauses between its deadline check and its write.
//! 3. **No overlap.** Per name, no two holdings' intervals overlap. A
//!    holding's interval runs from the Acquire reply to its safe deadline
//!    (send time of its last successful Acquire/Renew + TTL − margin), cut
//!    short only by the holder's own Release; all on the shared monotonic
//!    clock. A holding whose Acquire reply came after its deadline (a holder
//!    paused mid-call) has an empty interval and never acted. A revoke (sent
//!    by the runner; or unanswered: it may have landed) ends the interval
//!    when sent: the holder acts on until it learns, kept apart from the
//!    next holder by fencing. A holder that writes after it knew its lease
//!    was gone (its `lost` line) breaks the property too.
//! 4. **Leases end, and not late.** A holding that was not released expires
//!    no later than its due time (server write time of its last
//!    Acquire/Renew, or send time plus RPC timeout when the outcome was
//!    unknown, plus the TTL) plus the allowed lag. The evidence, in order:
//!    the EXPIRED event's server time (*measured*); a `LEASE_HELD` refusal
//!    after the bound and before the next holder took the name (a
//!    violation); the next holder's Acquire within the bound (*ended by
//!    handoff*). A holding with none of these is *unverified*, and the run
//!    reports their share (a scenario fails above its stated share). A due
//!    time inside an infrastructure fault (NATS or Tenure down or stopped,
//!    plus a grace period) is *excused*, but still bounded: the expiry must
//!    come by the due time plus the durations of the faults around it plus
//!    the stated slack (allowed lag + grace). A revoked holding is not
//!    judged (an operator ended it, not time).
//! 5. **Leases do not end early.** The next holding of a name may not be
//!    granted before the previous, unreleased holding's server-side deadline:
//!    the send time of its last successful Acquire/Renew plus the TTL that
//!    call granted (the server wrote later than it was sent, so the real
//!    deadline is no earlier). Judged on the shared monotonic clock, with the
//!    next holder's Acquire *reply* as the latest moment it can have been
//!    granted, so only a certain violation counts. Nor inside the lock
//!    delay of a holding that expired or was revoked: the next grant's
//!    server time is at least the end (the `EXPIRED` event's time; the
//!    `REVOKED` event's, or the revoke's send) plus the delay.
//! 6. **FIFO order** (plain leases, semaphores and read-write locks). A
//!    waiter's arrival is the place NATS gave its queue ticket
//!    (`_tenure.q.<name>.ticket.<slot>` for a lease;
//!    `_tenure.q._tenure.sem.<name>.ticket.<slot>` for a semaphore, whose waiters
//!    queue under the reserved name `_tenure.sem.<name>`, and for a
//!    read-write lock, kept as a semaphore: its waiters, shared and
//!    exclusive alike, are judged as a semaphore's), the
//!    revision of the ticket's first write, read by the runner from a
//!    watch on the bucket and tied to the Acquire that was in flight from
//!    that holder when the ticket was written. Of two waiters A and B on a
//!    name (a lease's, or a semaphore's: each queue judged on its own) with
//!    A's ticket first, B may not be granted before A: a violation is A
//!    granted with a higher token than B, or A's wait ending without the
//!    lease although B's reply came before A's wait could have run out
//!    (A's send + its wait). For a semaphore the token is the revision of
//!    the slot's write, stream-wide, so tokens of different slots compare:
//!    only the head of the queue takes a free slot, and its ticket goes
//!    only after its slot is written, so the waiter behind it gets a
//!    higher token whichever slot it takes. A grant that took no ticket
//!    (an Acquire that found the name free, or a free slot with nobody
//!    queued; a group member) is a B too, arrived when it was sent: judged
//!    against every A whose ticket was written (its latest, should it have
//!    queued twice) before that send, on the one wall clock of the machine
//!    (a holder that releases and acquires again may take a slot without a
//!    ticket only while nobody is queued). Only pairs where B was sent
//!    before A was answered (contended) are judged; Acquires retried after
//!    an unknown outcome (a new ticket on another replica) are left out,
//!    and a pair with a fault window between A's send and B's reply is
//!    excused (a ticket may expire while NATS is down).
//! 7. **Semaphore limit.** Of the holdings of a semaphore (Acquire with a
//!    limit N), at no instant do more than N acting intervals (property 3's
//!    intervals, by client deadlines) overlap. Each slot of a semaphore is
//!    also checked like a plain lease (properties 1 and 3 to 5 per
//!    `name#slot`, and the store keeps one fence per slot).
//! 8. **Groups are all or nothing.** Every group a client took
//!    (AcquireGroup) was granted whole, in one step: every name it asked
//!    for, with fencing tokens that are consecutive revisions (the members
//!    of an atomic batch are stored at consecutive revisions, so nothing, no
//!    other grant or expiry, can come between them), and the client holds
//!    every member over the same interval; and in the runner's WatchLease stream every grant of a
//!    group member is part of a complete block: the ACQUIRED events of all
//!    the group's names, in its order, at consecutive revisions, for one
//!    holder. A block cut by a broken watch stream is not judged, nor one in
//!    a resumed stream's replay, nor one a `MISSED` event covers.
//! 9. **Watches resume without a gap or a duplicate.** The runner's watch,
//!    dropped and resumed after the last revision it processed, reports
//!    every change of a lease or semaphore slot the bucket held, once: at
//!    its revision, coalesced into a later change of its name in a replay
//!    (or, for a name changed again after the replay's seam, into that
//!    later change, judged where it falls: live, or in the next stream's
//!    replay when the stream ends first; live, into the same holding's
//!    next write), or inside a `MISSED` event (see [`watch_resume`]).
//! 10. **Read-write exclusion.** Of the holdings of a read-write lock
//!     (Acquire with a mode, recorded on its Acquire lines), no exclusive
//!     holding's acting interval (property 3's, by client deadlines)
//!     overlaps the acting interval of any other holding of the same lock,
//!     shared or exclusive, whatever their slots; shared holdings may
//!     overlap each other (the run counts the pairs that did: readers
//!     shared). Each slot of a lock is also checked like a plain lease
//!     (properties 1 and 3 to 5 per `name#slot`), as a semaphore's.

use std::collections::{BTreeMap, HashMap};

use crate::admit;
use crate::forge::Forgery;
use crate::history::{Mode, Op, OpKind, Phase};
use crate::store::Accepted;

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
    /// Semaphore slot of the holding concerned (0: a plain lease).
    pub slot: u32,
    /// Bucket revision of the change.
    pub revision: u64,
    /// The holder concerned.
    pub holder: String,
    /// Every name of the group the holding belongs to (empty: alone).
    pub group: Vec<String>,
    /// Which watch stream saw it (the runner reconnects after a break; a
    /// block of events is judged only inside one stream).
    pub stream: u32,
    /// The shard of the bucket it happened in (revisions are per shard).
    pub shard: u32,
    /// For `MISSED`: the last revision of the name the stream had seen
    /// (changes after it and before `revision` went unseen).
    pub missed_after: u64,
    /// Whether it came in a resumed stream's replay (before its
    /// `SNAPSHOT_COMPLETE`), where several changes of a name may arrive as
    /// the latest one only.
    pub replay: bool,
}

/// One connection of the runner's watch (`WatchLease` on every name),
/// which the runner drops now and then on purpose and resumes after the
/// last revision it processed.
#[derive(Debug, Clone, Default)]
pub struct WatchStream {
    /// Its number ([`Event::stream`]).
    pub no: u32,
    /// Where it asked to resume, per shard (empty: a fresh watch, with a
    /// snapshot of the leases held instead of the changes it missed).
    pub resume: Vec<u64>,
    /// Where its snapshot or replay was complete, per shard (its
    /// `SNAPSHOT_COMPLETE`; empty: it never got there).
    pub caught_up: Vec<u64>,
    /// Why it was refused or ended (`WATCH_HISTORY_COMPACTED`,
    /// `WATCH_LAGGED`, ...; empty: the runner dropped it, or it broke).
    pub ended: String,
}

/// One message of a lease key in the bucket, as the runner's NATS watch
/// saw it: the ground truth the resumed watch is judged against.
#[derive(Debug, Clone)]
pub struct Truth {
    /// The shard.
    pub shard: u32,
    /// Its revision.
    pub revision: u64,
    /// The lease name.
    pub name: String,
    /// The semaphore slot (0: a plain lease).
    pub slot: u32,
    /// Whether it is a change a watch must report (a write of a holding,
    /// or the end of one; not a marker over a free name).
    pub change: bool,
    /// Whether it ends what the key held (a tombstone, purge or marker).
    pub end: bool,
    /// Whether it is a tombstone (`KV-Operation: DEL`: a release).
    pub tombstone: bool,
    /// NATS's time of the message, ms.
    pub time_ms: u64,
}

/// The first write of one FIFO queue ticket, as the runner's bucket watch
/// saw it.
#[derive(Debug, Clone)]
pub struct Ticket {
    /// The lease or semaphore name queued for (a semaphore's waiters queue
    /// under the reserved queue name `_tenure.sem.<name>`; this is
    /// `<name>`, the Acquire's name).
    pub name: String,
    /// Whether it is a semaphore waiter's ticket (in the queue of
    /// `_tenure.sem.<name>`), not a lease waiter's (of `<name>`).
    pub semaphore: bool,
    /// The waiter (the holder name the Acquire carried).
    pub holder: String,
    /// Its place: the revision of the ticket's first write.
    pub place: u64,
    /// NATS's wall-clock time of that write, ms.
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
    /// The store's accepted writes, in its order.
    pub accepted: &'a [Accepted],
    /// The store's highest token per resource at the end (decimal
    /// strings, as the kit keeps them).
    pub highest: &'a [(String, String)],
    /// The prefix of the run's store resources (`<prefix><name>[#slot]`).
    pub prefix: &'a str,
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
    /// Queue tickets seen (property 6).
    pub tickets: &'a [Ticket],
    /// The semaphore limit the holders were promised (property 7); `None`
    /// for plain leases.
    pub limit: Option<u32>,
    /// The connections of the runner's watch (property 9).
    pub streams: &'a [WatchStream],
    /// Every message of a lease key the runner's NATS watch saw (property
    /// 9's ground truth).
    pub truth: &'a [Truth],
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
    /// Tokens the store accepted or holds as a resource's highest that
    /// Tenure never granted for that resource (property 2).
    pub foreign_tokens: usize,
    /// Genuine writes whose proof the client's check refused: Tenure
    /// signed a proof that does not verify or states another grant.
    pub bad_proofs: usize,
    /// Forged writes sent (`negative-forged-tokens`).
    pub forged_sent: usize,
    /// Of those, refused by the proof check or the kit.
    pub forged_refused: usize,
    /// Of those, accepted by the store.
    pub forged_accepted: usize,
    /// Forged writes sent of each kind, in `Forgery::ALL`'s order.
    pub forged_kinds: [usize; 4],
    /// Genuine writes the store accepted after the first forged write was
    /// sent (the genuine holders kept writing).
    pub writes_after_forgery: usize,
    /// Writes the store accepted after their holding's lease deadline once
    /// a higher token had been granted (property 2's limit: not a
    /// violation).
    pub stale_accepted: usize,
    /// Property 3 violations.
    pub p3_overlap: usize,
    /// Property 4 violations (late, or unbounded under a fault).
    pub p4_expiry: usize,
    /// Property 5 violations (a lease granted to another holder before the
    /// previous holding's server-side deadline).
    pub p5_early: usize,
    /// Property 6 violations (a waiter overtaken by a later arrival).
    pub p6_fifo: usize,
    /// Property 7 violations (more holders of a semaphore than its limit).
    pub p7_limit: usize,
    /// Property 10 violations (a holding of a read-write lock acting while
    /// an exclusive one did).
    pub p10_rw: usize,
    /// Exclusive read-write lock holdings that acted, judged by property
    /// 10.
    pub rw_exclusive: usize,
    /// Pairs of shared holdings of a read-write lock that acted at once
    /// (allowed; evidence that readers shared).
    pub rw_shared_pairs: usize,
    /// Waiting Acquires tied to a queue ticket (property 6's input).
    pub fifo_waiters: usize,
    /// Contended waiter pairs judged by property 6.
    pub fifo_pairs: usize,
    /// Contended waiter pairs excused by a fault window.
    pub fifo_excused: usize,
    /// Grants without a queue ticket judged as later arrivals (property 6).
    pub fifo_ticketless: usize,
    /// Property 8 violations (a group granted or held in part).
    pub p8_group: usize,
    /// Of those, group members granted outside a complete block of the
    /// watch stream (property 8's watch half).
    pub p8_watch: usize,
    /// Groups clients took, judged by property 8.
    pub groups_taken: usize,
    /// Complete group blocks seen in the watch stream.
    pub group_blocks: usize,
    /// Most holdings of one semaphore acting at once.
    pub max_concurrent: usize,
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
    /// Holdings whose due time fell in a fault window: checked against the
    /// wider bound (due + fault durations + slack) instead.
    pub expiry_excused: usize,
    /// Longest expiry lag of an excused holding beyond its due time, ms.
    pub max_excused_lag_ms: i64,
    /// Unreleased holdings without an EXPIRED event whose end is proven by
    /// the next holder's Acquire within the bound.
    pub expiry_by_handoff: usize,
    /// Unreleased holdings with no evidence of when they ended.
    pub expiry_unverified: usize,
    /// Smallest time between a holder's deadline and the next holder's
    /// start where the first did not release (the lease expired), ms
    /// (negative: an overlap); `None` without such handoffs. This is where
    /// the client margin, RPC time and expiry lag keep holders apart.
    pub closest_expiry_handoff_ms: Option<f64>,
    /// Longest time a name had no acting holder, ms.
    pub longest_unavailable_ms: f64,
    /// Pairs property 5 judged: an unreleased holding and the next
    /// holding of its name (or slot).
    pub p5_pairs: usize,
    /// Lock delays property 5 judged: a holding with a lock delay that
    /// expired or was revoked, and the next grant of its name.
    pub delays_judged: usize,
    /// Of property 5's violations, grants inside a lock delay.
    pub p5_delay: usize,
    /// Holdings the runner revoked (RevokeLease answered).
    pub revoked: usize,
    /// Writes of a revoked holding sent after the revoke that the store
    /// accepted (before the next holder wrote: fencing's window).
    pub revoked_writes_accepted: usize,
    /// Writes of a revoked holding sent after the revoke that the store
    /// refused (a newer token had been written).
    pub revoked_writes_refused: usize,
    /// Holdings that acted after they knew they had lost their lease
    /// (counted in property 3).
    pub acted_after_loss: usize,
    /// Releases answered `LEASE_NOT_HELD` although their own tombstone
    /// ended the holding while they were in flight (taken as released).
    pub released_though_refused: usize,
    /// Renewals sent on a KeepAlive stream.
    pub keepalive_renewals: usize,
    /// Leaderships handed over to the next waiting candidate (Resign with
    /// a successor, answered).
    pub handovers: usize,
    /// Property 9 violations: a change the resumed watch skipped without
    /// saying so, or delivered twice.
    pub p9_watch: usize,
    /// Watch connections resumed with a start revision.
    pub watch_resumes: usize,
    /// Changes of the bucket property 9 judged (each reported, coalesced
    /// into a later change of its name in a replay, or covered by a
    /// `MISSED`).
    pub watch_judged: usize,
    /// Of those, in a resumed stream's replay.
    pub watch_replayed: usize,
    /// Of those, coalesced into a later change of their name.
    pub watch_coalesced: usize,
    /// Of those, covered by a `MISSED` event.
    pub watch_missed: usize,
    /// Resumes refused with `WATCH_HISTORY_COMPACTED` (the watch started
    /// afresh: its gap is reported, not judged).
    pub watch_compacted: usize,
    /// Watch connections ended by the server with `WATCH_LAGGED`.
    pub watch_lagged: usize,
    /// The first few violations, explained.
    pub examples: Vec<String>,
}

impl Report {
    /// Total violations of all properties.
    pub fn violations(&self) -> usize {
        self.p1_tokens
            + self.p2_store
            + self.foreign_tokens
            + self.bad_proofs
            + (self.forged_sent - self.forged_refused.min(self.forged_sent))
            + self.p3_overlap
            + self.p4_expiry
            + self.p5_early
            + self.p6_fifo
            + self.p7_limit
            + self.p8_group
            + self.p9_watch
            + self.p10_rw
    }

    /// Unreleased holdings that property 4 looked at.
    pub fn expiries_judged(&self) -> usize {
        self.expiries_measured
            + self.expiry_excused
            + self.expiry_by_handoff
            + self.expiry_unverified
    }

    /// The share of judged holdings with no evidence of when they ended.
    pub fn unverified_share(&self) -> f64 {
        match self.expiries_judged() {
            0 => 0.0,
            n => self.expiry_unverified as f64 / n as f64,
        }
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
    /// Semaphore slot (0: a plain lease).
    slot: u32,
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
    /// Send time of the first Acquire of this holding (its lease key), mono
    /// ns: an Acquire retried with the same key may answer with the write
    /// of an earlier attempt.
    first_acquire_t0: Option<u64>,
    /// Send time of the last successful Acquire/Renew, mono ns (for an
    /// Acquire, of its first attempt).
    last_ok_t0: u64,
    /// TTL granted by that call, ms.
    last_ok_ttl_ms: u64,
    /// When the runner revoked it (or may have: its RevokeLease went
    /// unanswered): send time, mono ns and wall ms.
    revoked: Option<(u64, u64)>,
    /// Whether that revoke was answered (the holding surely ended then).
    surely_revoked: bool,
    /// Its lock delay, ms (0: none).
    lock_delay_ms: u64,
    /// When the holder first knew it had lost the lease (a `lost` line),
    /// mono ns.
    lost_t0: Option<u64>,
    /// Releases refused with `LEASE_NOT_HELD`: send and reply, wall ms.
    refused_releases: Vec<(u64, u64)>,
    /// A read-write lock holding's mode (`None`: not a read-write lock's).
    mode: Option<Mode>,
}

impl Holding {
    /// What properties 1 and 3 to 5 treat as one lease: the name, or for a
    /// semaphore holder the name and its slot (`name#slot`).
    fn key(&self) -> String {
        if self.slot > 0 {
            format!("{}#{}", self.name, self.slot)
        } else {
            self.name.clone()
        }
    }

    /// The earliest moment the server may end this holding unless it is
    /// released: send time of its last successful call + the TTL granted.
    fn server_deadline(&self) -> u64 {
        self.last_ok_t0 + self.last_ok_ttl_ms * 1_000_000
    }
}

impl Holding {
    /// The acting interval `[start, end)`, if non-empty. A revoke ends
    /// it when sent: the holder acts on until it learns (its next renewal
    /// or write is refused), but from then on the lease is another's to
    /// take, and fencing, not the deadline, keeps the two apart.
    fn interval(&self) -> Option<(u64, u64)> {
        let end = self
            .release_t0
            .map_or(self.deadline, |r| r.min(self.deadline));
        let end = self.revoked.map_or(end, |(t0, _)| end.min(t0));
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
        if op.op == OpKind::Revoke || op.holding.is_empty() {
            continue;
        }
        let h = by_id.entry(&op.holding).or_insert_with(|| Holding {
            id: op.holding.clone(),
            name: op.name.clone(),
            ..Default::default()
        });
        if op.op == OpKind::Acquire && op.mode.is_some() {
            h.mode = op.mode;
        }
        match (op.op, op.phase) {
            (OpKind::Acquire, Phase::Invoke) => {
                h.first_acquire_t0 = Some(h.first_acquire_t0.map_or(op.t0, |t| t.min(op.t0)));
            }
            (OpKind::Acquire, Phase::Ok) => {
                h.token = op.token;
                h.slot = op.slot;
                h.lock_delay_ms = op.lock_delay_ms;
                h.start = op.t1;
                h.ttl_ms = op.ttl_ms;
                h.deadline = h.deadline.max(op.deadline);
                h.acquired_ms = op.server_ms;
                h.due_base_ms = h.due_base_ms.max(op.server_ms);
                let sent = h.first_acquire_t0.map_or(op.t0, |t| t.min(op.t0));
                if sent >= h.last_ok_t0 {
                    h.last_ok_t0 = sent;
                    h.last_ok_ttl_ms = op.ttl_ms;
                }
            }
            (OpKind::Renew, Phase::Ok) => {
                if op.t0 >= h.last_ok_t0 {
                    h.last_ok_t0 = op.t0;
                    h.last_ok_ttl_ms = op.ttl_ms;
                }
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
            (OpKind::Lost, _) => {
                h.lost_t0 = Some(h.lost_t0.map_or(op.t0, |t| t.min(op.t0)));
            }
            (OpKind::Release, Phase::Fail) if op.detail == "LEASE_NOT_HELD" => {
                let w1 = op.w0 + op.t1.saturating_sub(op.t0) / 1_000_000;
                h.refused_releases.push((op.w0, w1));
            }
            _ => {}
        }
    }
    // The runner's revokes, by the holding they name (name, slot, token):
    // answered, or unanswered (it may have landed).
    let mut revokes: HashMap<(&str, u32, u64), (u64, u64, bool)> = HashMap::new();
    for op in ops.iter().filter(|o| o.op == OpKind::Revoke) {
        if matches!(op.phase, Phase::Ok | Phase::Info) {
            let e = revokes
                .entry((&op.name, op.slot, op.token))
                .or_insert((op.t0, op.w0, false));
            e.2 |= op.phase == Phase::Ok;
        }
    }
    let mut all: Vec<Holding> = by_id.into_values().collect();
    for h in &mut all {
        if let Some(&(t0, w0, sure)) = revokes.get(&(h.name.as_str(), h.slot, h.token)) {
            if h.token > 0 {
                h.revoked = Some((t0, w0));
                h.surely_revoked = sure;
            }
        }
    }
    all
}

/// Whether `t_ms` falls in a fault window (extended by the grace period).
fn in_fault(faults: &[Window], grace_ms: u64, t_ms: u64) -> bool {
    faults
        .iter()
        .any(|w| t_ms + grace_ms >= w.start_ms && t_ms <= w.end_ms + grace_ms)
}

/// How much longer than its due time a holding may take to expire because
/// of the faults around that time: the summed durations of the fault
/// windows the due time falls in (each extended by the grace period).
fn fault_extension_ms(faults: &[Window], grace_ms: u64, t_ms: u64) -> u64 {
    faults
        .iter()
        .filter(|w| t_ms + grace_ms >= w.start_ms && t_ms <= w.end_ms + grace_ms)
        .map(|w| w.end_ms.saturating_sub(w.start_ms))
        .sum()
}

/// Checks the ten properties.
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
        .filter(|o| o.op == OpKind::Write && o.phase == Phase::Fail && o.detail == STALE)
        .count();
    for o in ops.iter().filter(|o| {
        o.op == OpKind::Write && o.phase == Phase::Fail && o.detail.starts_with(PROOF_REFUSED)
    }) {
        r.bad_proofs += 1;
        r.example(format!(
            "P2 {}: the genuine write of {} (token {}) was refused: {}",
            o.name, o.holding, o.token, o.detail
        ));
    }
    forged(ops, &mut r);
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

    let mut all = holdings(ops);
    // A Release refused LEASE_NOT_HELD although the holding's end in the
    // bucket is a tombstone written while that Release was in flight: its
    // own write ended the holding (the answer came from a retry that found
    // it gone). It released.
    for h in &mut all {
        let Some(end) = first_end(input.truth, h) else {
            continue;
        };
        let in_flight = h.refused_releases.iter().any(|(w0, w1)| {
            end.time_ms + STAMP_SLACK_MS >= *w0 && end.time_ms <= w1 + STAMP_SLACK_MS
        });
        if end.tombstone && in_flight && !h.maybe_released {
            h.maybe_released = true;
            r.released_though_refused += 1;
        }
    }
    let mut per_name: BTreeMap<String, Vec<&Holding>> = BTreeMap::new();
    for h in all.iter().filter(|h| h.token > 0) {
        per_name.entry(h.key()).or_default().push(h);
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

        // Unavailability: the longest gap with no acting holder (a
        // read-write lock's over all its slots, in `rw_exclusion`: a slot
        // of a lock is one of many places to hold it, and the higher ones
        // stay unused while few hold it).
        let mut covered: Option<u64> = None;
        let lock_slot = hs.iter().any(|h| h.mode.is_some());
        for (_, (start, end)) in acting.iter().filter(|_| !lock_slot) {
            if let Some(c) = covered {
                if *start > c {
                    let gap = (start - c) as f64 / 1e6;
                    r.longest_unavailable_ms = r.longest_unavailable_ms.max(gap);
                }
            }
            covered = Some(covered.map_or(*end, |c| c.max(*end)));
        }

        // Property 4: unreleased holdings end, and not late; property 5:
        // nor early.
        let mut sorted: Vec<&Holding> = hs.clone();
        sorted.sort_by_key(|h| h.token);
        for (i, h) in sorted.iter().enumerate() {
            if h.maybe_released || h.acquired_ms == 0 {
                continue;
            }
            let next = sorted.get(i + 1);
            let expired = input.events.iter().find(|e| {
                e.kind == "EXPIRED" && e.name == h.name && e.slot == h.slot && e.token == h.token
            });
            if let Some(b) = sorted[i + 1..].iter().find(|b| b.start > 0) {
                // A holding with a lock delay that expired or was revoked
                // keeps its name refused for the delay after its end: the
                // expiry's time (its EXPIRED event, the marker's), or a
                // lower bound of the revoke's (its send, or its REVOKED
                // event). The next grant's server time must not be inside.
                let end = match (h.revoked, h.surely_revoked, expired) {
                    (Some((_, w0)), true, _) => Some(
                        input
                            .events
                            .iter()
                            .find(|e| e.kind == "REVOKED" && e.name == h.name && e.token == h.token)
                            .map_or(w0, |e| e.time_ms.max(w0)),
                    ),
                    (None, _, Some(e)) => Some(e.time_ms),
                    _ => None,
                };
                if let (true, Some(end)) = (h.lock_delay_ms > 0 && b.acquired_ms > 0, end) {
                    r.delays_judged += 1;
                    let free_at = end + h.lock_delay_ms;
                    if b.acquired_ms + DELAY_SLACK_MS < free_at {
                        r.p5_early += 1;
                        r.p5_delay += 1;
                        r.example(format!(
                            "P5 {name}: {} (token {}) was granted {} ms into the {} ms lock delay of {} (token {}), which {} at {end}",
                            b.id,
                            b.token,
                            b.acquired_ms as i64 - end as i64,
                            h.lock_delay_ms,
                            h.id,
                            h.token,
                            if h.revoked.is_some() { "was revoked" } else { "expired" }
                        ));
                    }
                }
                // A revoked holding (or one that may have been) may be
                // followed at once.
                if h.revoked.is_none() {
                    r.p5_pairs += 1;
                    if b.start < h.server_deadline() {
                        r.p5_early += 1;
                        let ms = (h.server_deadline() - b.start) as f64 / 1e6;
                        r.example(format!(
                            "P5 {name}: {} (token {}) was granted {ms:.1} ms before {} (token {}) could end (last successful send + TTL)",
                            b.id, b.token, h.id, h.token
                        ));
                    }
                }
            }
            // Ended by an operator, not by time: property 4 has nothing to
            // judge.
            if h.revoked.is_some() {
                continue;
            }
            let due = h.due_base_ms + h.ttl_ms;
            let extension = fault_extension_ms(input.faults, input.fault_grace_ms, due);
            let excused = in_fault(input.faults, input.fault_grace_ms, due);
            // The latest the lease may end: the allowed lag, and under a
            // fault the fault's duration and the grace period on top.
            let bound = if excused {
                due + extension + input.allowed_lag_ms + input.fault_grace_ms
            } else {
                due + input.allowed_lag_ms
            };
            let next_acquire = next.map(|n| n.acquired_ms).filter(|t| *t > 0);
            if let Some(e) = expired {
                let lag = e.time_ms as i64 - due as i64;
                if excused {
                    r.expiry_excused += 1;
                    r.max_excused_lag_ms = r.max_excused_lag_ms.max(lag);
                } else {
                    r.expiries_measured += 1;
                    r.max_expiry_lag_ms = r.max_expiry_lag_ms.max(lag);
                }
                if e.time_ms > bound {
                    r.p4_expiry += 1;
                    r.example(format!(
                        "P4 {name}: {} (token {}) expired {lag} ms after its due time (bound {} ms{})",
                        h.id,
                        h.token,
                        bound - due,
                        if excused { ", with the faults around it" } else { "" }
                    ));
                }
                continue;
            }
            // No event seen: was anyone refused the name after the bound,
            // before the next holder took it? The refusal's read happened
            // somewhere between its send and its reply: only one *sent*
            // after the bound proves the holding still stood then.
            let refused = ops.iter().find(|o| {
                o.op == OpKind::Acquire
                    && o.phase == Phase::Fail
                    && o.name == *name
                    && o.detail == "LEASE_HELD"
                    && {
                        let w1 = o.w0 + (o.t1.saturating_sub(o.t0)) / 1_000_000;
                        o.w0 > bound + 50 && next_acquire.is_none_or(|n| w1 < n)
                    }
            });
            if let Some(o) = refused {
                r.p4_expiry += 1;
                r.example(format!(
                    "P4 {name}: {} (token {}) still held {} ms after due: {} was refused (sent then)",
                    h.id,
                    h.token,
                    o.w0 - due,
                    o.client
                ));
            } else if next_acquire.is_some_and(|n| n <= bound)
                || bucket_end(input.truth, h).is_some_and(|t| t <= bound)
            {
                r.expiry_by_handoff += 1;
            } else {
                r.expiry_unverified += 1;
            }
        }
    }

    // Property 2's limit: writes accepted from a holding whose lease had
    // ended, after a higher token was granted.
    stale_accepted(ops, &all, &mut r);
    // A holder stops acting once it knows its lease is gone, and a revoked
    // holder's writes after the revoke are fencing's to stop.
    after_loss(ops, &all, &mut r);
    r.keepalive_renewals = ops
        .iter()
        .filter(|o| {
            o.op == OpKind::Renew && o.phase != Phase::Invoke && o.detail.starts_with(KEEPALIVE)
        })
        .count();
    r.handovers = ops
        .iter()
        .filter(|o| o.op == OpKind::Release && o.phase == Phase::Ok && o.detail == HANDOVER)
        .count();

    // Property 2: the store's log never goes back in tokens per resource.
    let mut highest: HashMap<(&str, u32), i64> = HashMap::new();
    for a in input.accepted {
        let top = highest.entry((&a.resource, a.segment)).or_insert(a.fence);
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

    foreign_tokens(input, &mut r);
    fifo(input, &mut r);
    groups(input, &mut r);
    watch_resume(input, &mut r);
    if let Some(limit) = input.limit {
        semaphore_limit(&all, limit, &mut r);
    }
    rw_exclusion(&all, &mut r);

    for name in input.leftover {
        r.p4_expiry += 1;
        r.example(format!(
            "P4 {name}: still held at the end, past every due time"
        ));
    }
    r
}

/// Slack between the server times of a lock delay's start and the next
/// grant, ms (both millisecond stamps).
const DELAY_SLACK_MS: u64 = 2;
/// How the detail of a renewal sent on a KeepAlive stream starts.
pub const KEEPALIVE: &str = "keepalive";

/// The time of the first end message (tombstone, purge, expiry marker) of
/// `h`'s key after its grant that the runner's NATS watch saw, ms: an
/// upper bound of when `h` ended (a message the watch skipped can only
/// have been earlier), so evidence that it ended by then, never that it
/// ended late.
fn bucket_end(truth: &[Truth], h: &Holding) -> Option<u64> {
    first_end(truth, h).map(|t| t.time_ms)
}

/// The first end message of `h`'s key after its grant that the runner's
/// NATS watch saw.
fn first_end<'a>(truth: &'a [Truth], h: &Holding) -> Option<&'a Truth> {
    truth
        .iter()
        .filter(|t| t.end && t.name == h.name && t.slot == h.slot && t.revision > h.token)
        .min_by_key(|t| t.revision)
}

/// Holdings that wrote after they knew their lease was gone (a `lost`
/// line: deadline passed, renewal refused, token refused by the store):
/// property 3 violations. And the writes a revoked holding sent after the
/// revoke: refused by the store once the next holder wrote, accepted
/// before (fencing's window, like a stale write accepted).
fn after_loss(ops: &[Op], all: &[Holding], r: &mut Report) {
    let by_id: HashMap<&str, &Holding> = all.iter().map(|h| (h.id.as_str(), h)).collect();
    let mut reported = std::collections::HashSet::new();
    // Completed writes of a holding (zombie writes, sent on purpose after
    // the holding ended, carry no deadline).
    for w in ops
        .iter()
        .filter(|o| o.op == OpKind::Write && o.phase != Phase::Invoke && o.deadline > 0)
    {
        let Some(h) = by_id.get(w.holding.as_str()) else {
            continue;
        };
        if h.lost_t0.is_some_and(|lost| w.t0 > lost) && reported.insert(h.id.as_str()) {
            r.acted_after_loss += 1;
            r.p3_overlap += 1;
            r.example(format!(
                "P3 {}: {} (token {}) wrote after it knew its lease was gone",
                h.name, h.id, h.token
            ));
        }
        if let (Some((t0, _)), true) = (h.revoked, h.surely_revoked) {
            if w.t0 > t0 {
                match w.phase {
                    Phase::Ok => r.revoked_writes_accepted += 1,
                    Phase::Fail if w.detail == STALE => r.revoked_writes_refused += 1,
                    _ => {}
                }
            }
        }
    }
    r.revoked = all
        .iter()
        .filter(|h| h.revoked.is_some() && h.surely_revoked)
        .count();
}

/// The detail of a write the store refused for its stale token.
pub const STALE: &str = "stale token refused by the store";
/// How the detail of a genuine write whose proof was refused starts.
pub const PROOF_REFUSED: &str = "proof refused";

/// Counts the forged writes (`negative-forged-tokens`): sent, refused,
/// accepted, by kind; and the genuine writes accepted after the first.
fn forged(ops: &[Op], r: &mut Report) {
    let mut first: Option<u64> = None;
    for o in ops.iter().filter(|o| o.op == OpKind::Forge) {
        r.forged_sent += 1;
        first = Some(first.map_or(o.t0, |f| f.min(o.t0)));
        if let Some(kind) = Forgery::of_detail(&o.detail) {
            if let Some(i) = Forgery::ALL.iter().position(|k| *k == kind) {
                r.forged_kinds[i] += 1;
            }
        }
        match o.phase {
            Phase::Fail => r.forged_refused += 1,
            Phase::Ok => {
                r.forged_accepted += 1;
                r.example(format!(
                    "P2 {}: the store accepted a forged write of {} claiming token {} ({})",
                    o.name, o.client, o.token, o.detail
                ));
            }
            _ => r.example(format!(
                "P2 {}: a forged write of {} claiming token {} was not refused ({})",
                o.name, o.client, o.token, o.detail
            )),
        }
    }
    if let Some(first) = first {
        r.writes_after_forgery = ops
            .iter()
            .filter(|o| o.op == OpKind::Write && o.phase == Phase::Ok && o.t0 > first)
            .count();
    }
}

/// Property 2's other half: every token the store accepted, and its
/// highest per resource, is one Tenure granted for that resource (a
/// forged token, or another name's, is foreign). Each foreign (resource,
/// token) is counted once.
fn foreign_tokens(input: &Input, r: &mut Report) {
    let mut granted: HashMap<String, std::collections::HashSet<u64>> = HashMap::new();
    for o in input
        .ops
        .iter()
        .filter(|o| o.op == OpKind::Acquire && o.phase == Phase::Ok && o.token > 0)
    {
        granted
            .entry(admit::resource(input.prefix, &o.name, o.slot))
            .or_default()
            .insert(o.token);
    }
    let mut seen = std::collections::HashSet::new();
    let logged = input
        .accepted
        .iter()
        .map(|a| (a.resource.as_str(), a.fence.to_string(), "accepted"));
    let highest = input
        .highest
        .iter()
        .map(|(res, t)| (res.as_str(), t.clone(), "holds as its highest"));
    for (resource, token, how) in logged.chain(highest) {
        let genuine = token
            .parse::<u64>()
            .is_ok_and(|t| granted.get(resource).is_some_and(|g| g.contains(&t)));
        if !genuine && seen.insert((resource.to_string(), token.clone())) {
            r.foreign_tokens += 1;
            r.example(format!(
                "P2 {resource}: the store {how} token {token}, which Tenure never granted for it"
            ));
        }
    }
}

/// Counts the writes the store accepted although they were sent after
/// their holding's lease deadline (last successful send + TTL) and after a
/// holding of the same lease (or slot) with a higher token was granted.
fn stale_accepted(ops: &[Op], all: &[Holding], r: &mut Report) {
    let by_id: HashMap<&str, &Holding> = all.iter().map(|h| (h.id.as_str(), h)).collect();
    let mut per_key: HashMap<String, Vec<&Holding>> = HashMap::new();
    for h in all.iter().filter(|h| h.token > 0 && h.start > 0) {
        per_key.entry(h.key()).or_default().push(h);
    }
    for w in ops
        .iter()
        .filter(|o| o.op == OpKind::Write && o.phase == Phase::Ok)
    {
        let Some(h) = by_id.get(w.holding.as_str()) else {
            continue;
        };
        if h.last_ok_t0 == 0 || w.t0 <= h.server_deadline() {
            continue;
        }
        let newer = per_key
            .get(&h.key())
            .is_some_and(|hs| hs.iter().any(|g| g.token > w.token && g.start < w.t0));
        if newer {
            r.stale_accepted += 1;
        }
    }
}

/// One waiting Acquire for property 6.
struct Waiter<'a> {
    /// Holding id.
    holding: &'a str,
    /// Its place in the queue (its first ticket's revision); `None`: a
    /// grant that took no ticket.
    place: Option<u64>,
    /// Its arrival on the wall clock, ms: its latest ticket's write (NATS's
    /// time), or the send of a grant without a ticket.
    arrived_ms: u64,
    /// Send time, mono ns.
    t0: u64,
    /// Reply time, mono ns.
    t1: u64,
    /// Send time, wall ms.
    w0: u64,
    /// The wait it asked for, ms.
    wait_ms: u64,
    /// The token it was granted (`None`: its wait ended without the lease).
    granted: Option<u64>,
}

/// Slack before a fault window's start within which a FIFO pair's end
/// (its later arrival's reply) still has it excused, ms.
const FIFO_FAULT_SLACK_MS: u64 = 250;

/// Slack when comparing a ticket's time (NATS's millisecond stamp) with a
/// client's wall-clock send time, ms.
const STAMP_SLACK_MS: u64 = 5;

/// Property 6: no waiter is overtaken by a later arrival.
fn fifo(input: &Input, r: &mut Report) {
    let ops = input.ops;
    // Acquires per holding: only holdings with one attempt are judged (a
    // retry after an unknown outcome queues a second ticket).
    let mut attempts: HashMap<&str, usize> = HashMap::new();
    for o in ops
        .iter()
        .filter(|o| o.op == OpKind::Acquire && o.phase == Phase::Invoke)
    {
        *attempts.entry(&o.holding).or_default() += 1;
    }
    // Per queue: a lease's name, or a semaphore's (`true`). A semaphore
    // Acquire is one granted a slot, or any of a run with a limit (a
    // refusal carries no slot), or a read-write lock's (with a mode): its
    // waiters, of either mode, queue in the semaphore's queue.
    let mut per_name: BTreeMap<(&str, bool), Vec<Waiter>> = BTreeMap::new();
    for o in ops.iter().filter(|o| {
        o.op == OpKind::Acquire
            && matches!(o.phase, Phase::Ok | Phase::Fail)
            && attempts.get(o.holding.as_str()) == Some(&1)
            && (o.phase == Phase::Ok || o.detail.starts_with("LEASE_HELD"))
    }) {
        let semaphore = o.slot > 0 || input.limit.is_some() || o.mode.is_some();
        // The tickets this holder wrote for this name while the call was
        // in flight (same machine, one wall clock; a few ms of slack for
        // NATS's millisecond stamps).
        let w1 = o.w0 + (o.t1.saturating_sub(o.t0)) / 1_000_000;
        let tied: Vec<&Ticket> = input
            .tickets
            .iter()
            .filter(|t| {
                t.name == o.name
                    && t.semaphore == semaphore
                    && t.holder == o.client
                    && t.time_ms + STAMP_SLACK_MS >= o.w0
                    && t.time_ms <= w1 + STAMP_SLACK_MS
            })
            .collect();
        let place = tied.iter().map(|t| t.place).min();
        let arrived_ms = match place {
            Some(_) => tied.iter().map(|t| t.time_ms).max().unwrap_or(o.w0),
            // No ticket: a grant is a later arrival from its send on; a
            // refusal waited for nothing anyone could take from it.
            None if o.phase == Phase::Ok => o.w0,
            None => continue,
        };
        if place.is_some() {
            r.fifo_waiters += 1;
        }
        per_name
            .entry((&o.name, semaphore))
            .or_default()
            .push(Waiter {
                holding: &o.holding,
                place,
                arrived_ms,
                t0: o.t0,
                t1: o.t1,
                w0: o.w0,
                wait_ms: o.wait_ms,
                granted: (o.phase == Phase::Ok).then_some(o.token),
            });
    }
    let mut ticketless_judged = std::collections::HashSet::new();
    for ((name, semaphore), ws) in &mut per_name {
        let kind = if *semaphore { " (semaphore)" } else { "" };
        let (mut queued, ticketless): (Vec<&Waiter>, Vec<&Waiter>) =
            ws.iter().partition(|w| w.place.is_some());
        queued.sort_by_key(|w| w.place);
        for (i, a) in queued.iter().enumerate() {
            // Later arrivals: waiters with a later place, and grants
            // without a ticket sent after A's (latest) ticket was written.
            let later = queued[i + 1..].iter().chain(
                ticketless
                    .iter()
                    .filter(|b| a.arrived_ms + STAMP_SLACK_MS < b.arrived_ms),
            );
            for b in later {
                let Some(b_token) = b.granted else { continue };
                // Contended: B was sent before A had its answer.
                if b.t0 >= a.t1 {
                    continue;
                }
                let overtaken = match a.granted {
                    Some(a_token) => a_token > b_token,
                    None => b.t1 < a.t0 + a.wait_ms * 1_000_000,
                };
                // Excused when the fault, or the grace after it, falls
                // between A's send and B's reply (a pair over before the
                // fault began is judged: nothing of it can have changed).
                let b_w1 = b.w0 + (b.t1.saturating_sub(b.t0)) / 1_000_000;
                let faulted = input.faults.iter().any(|w| {
                    a.w0 <= w.end_ms + input.fault_grace_ms
                        && b_w1 + FIFO_FAULT_SLACK_MS >= w.start_ms
                });
                if faulted {
                    r.fifo_excused += 1;
                    continue;
                }
                r.fifo_pairs += 1;
                if b.place.is_none() {
                    ticketless_judged.insert(b.holding);
                }
                if overtaken {
                    r.p6_fifo += 1;
                    r.example(format!(
                        "P6 {name}{kind}: {} ({}) was granted token {b_token} before {} (place {}) {}",
                        b.holding,
                        match b.place {
                            Some(p) => format!("place {p}"),
                            None => "no ticket, sent after the other's ticket".into(),
                        },
                        a.holding,
                        a.place.unwrap_or_default(),
                        match a.granted {
                            Some(t) => format!("got token {t}"),
                            None => "gave up while still within its wait".into(),
                        }
                    ));
                }
            }
        }
    }
    r.fifo_ticketless = ticketless_judged.len();
}

/// Property 8: groups are granted and held all together or not at all.
fn groups(input: &Input, r: &mut Report) {
    // What clients took: per group, the names asked for and the grants.
    let mut asked: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    let mut taken: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for o in input
        .ops
        .iter()
        .filter(|o| o.op == OpKind::Acquire && !o.group.is_empty())
    {
        asked.entry(&o.group).or_default().insert(&o.name);
        if o.phase == Phase::Ok {
            taken.entry(&o.group).or_default().push(o);
        }
    }
    for (group, members) in &taken {
        r.groups_taken += 1;
        let mut tokens: Vec<u64> = members.iter().map(|o| o.token).collect();
        tokens.sort_unstable();
        let names = asked.get(group).map_or(0, |a| a.len());
        let whole = members.len() == names;
        let consecutive = tokens.windows(2).all(|w| w[1] == w[0] + 1);
        let one_interval = members
            .iter()
            .all(|o| o.t1 == members[0].t1 && o.deadline == members[0].deadline);
        if !whole || !consecutive || !one_interval {
            r.p8_group += 1;
            r.example(format!(
                "P8 {group}: {} of {names} members {:?} granted at tokens {tokens:?}: {}",
                members.len(),
                members.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(),
                if !whole {
                    "the client held part of its group"
                } else if !consecutive {
                    "not one batch, other writes came between them"
                } else {
                    "held over different intervals"
                }
            ));
        }
    }
    // What the watch saw: each member's grant inside its group's block.
    // A resumed stream's replay may deliver a member's later change in
    // place of its grant (coalesced): its events are not judged.
    let ev = input.events;
    let mut in_block: Vec<bool> = ev.iter().map(|e| e.replay).collect();
    for (i, e) in ev.iter().enumerate() {
        if e.kind != "ACQUIRED" || e.group.is_empty() || e.name != e.group[0] || e.replay {
            continue;
        }
        let k = e.group.len();
        let rest: Vec<&Event> = ev[i + 1..]
            .iter()
            .take(k - 1)
            .filter(|n| n.stream == e.stream)
            .collect();
        if rest.len() < k - 1 {
            // The stream broke inside the block: not judged.
            in_block[i..(i + 1 + rest.len()).min(ev.len())].fill(true);
            continue;
        }
        let whole = rest.iter().enumerate().all(|(j, n)| {
            n.kind == "ACQUIRED"
                && n.name == e.group[j + 1]
                && n.holder == e.holder
                && n.revision == e.revision + j as u64 + 1
        });
        if whole {
            r.group_blocks += 1;
            in_block[i..i + k].fill(true);
        }
    }
    for (i, e) in ev.iter().enumerate() {
        if e.kind == "ACQUIRED" && !e.group.is_empty() && !in_block[i] {
            // A stream that says it missed changes of a member where the
            // group's block would be reported the part it did not see.
            let at = e.group.iter().position(|n| *n == e.name).unwrap_or(0) as u64;
            let start = e.revision.saturating_sub(at);
            let reported = ev.iter().any(|m| {
                m.kind == "MISSED"
                    && m.stream == e.stream
                    && e.group.iter().enumerate().any(|(j, n)| {
                        let rev = start + j as u64;
                        *n == m.name && m.missed_after < rev && rev < m.revision
                    })
            });
            if reported {
                continue;
            }
            r.p8_group += 1;
            r.p8_watch += 1;
            r.example(format!(
                "P8 {}: granted to {} (revision {}) outside a complete block of its group {:?}",
                e.name, e.holder, e.revision, e.group
            ));
        }
    }
}

/// The detail of a Release op that was an election's Resign handing the
/// leadership to the next waiting candidate.
pub const HANDOVER: &str = "handover";

/// The kinds of event that report one change of the bucket.
pub const CHANGES: [&str; 5] = ["ACQUIRED", "RENEWED", "RELEASED", "EXPIRED", "REVOKED"];

/// Property 9: the runner's watch, dropped and resumed after the last
/// revision it processed, neither skips a change without saying so nor
/// reports one twice. Every change of a lease key the runner's own NATS
/// watch saw (the ground truth) inside what a stream covered (from where
/// it resumed, or from its snapshot if it started afresh, to the last
/// revision it reached) must be reported by that stream: as an event at
/// its revision; in a resumed stream's replay, also as a later change of
/// the same name (the bucket keeps one message per name, so a replay
/// coalesces); live, a write (never an end) also as the same holding's next
/// reported write, before any end of the name (a watcher that lags reads
/// a holding first at a renewal: "a gap inside one holding's renewals
/// loses nothing", design section 9); or inside a `MISSED` event of its name (the stream says it
/// did not see it: changes after its `missed_after` up to its revision,
/// whose change it stands for when that ends a holding the stream never
/// saw begin). A resume refused with `WATCH_HISTORY_COMPACTED` is
/// followed by a fresh watch, whose gap is reported, not judged. No change
/// may be reported twice across the streams.
fn watch_resume(input: &Input, r: &mut Report) {
    let streams = input.streams;
    if streams.is_empty() {
        return;
    }
    r.watch_resumes = streams.iter().filter(|s| !s.resume.is_empty()).count();
    r.watch_compacted = streams
        .iter()
        .filter(|s| s.ended == "WATCH_HISTORY_COMPACTED")
        .count();
    r.watch_lagged = streams.iter().filter(|s| s.ended == "WATCH_LAGGED").count();
    let is_change = |e: &Event| CHANGES.contains(&e.kind.as_str());
    // Duplicates: a change is one event per revision and kind (a
    // Transfer's one write is the giver's RELEASED and the recipient's
    // ACQUIRED), and an end one per holding (its token), at whatever
    // revision a replay names it.
    let mut delivered: HashMap<(u32, &str, u32, &str, u64), u32> = HashMap::new();
    for e in input.events.iter().filter(|e| is_change(e)) {
        let key = match e.kind.as_str() {
            "RELEASED" | "EXPIRED" | "REVOKED" if e.token > 0 => {
                (e.shard, e.name.as_str(), e.slot, "end", e.token)
            }
            kind => (e.shard, e.name.as_str(), e.slot, kind, e.revision),
        };
        if let Some(first) = delivered.insert(key, e.stream) {
            r.p9_watch += 1;
            r.example(format!(
                "P9 {}: the change at revision {} (shard {}, {}) was reported twice, by watch streams {first} and {}",
                e.name, e.revision, e.shard, e.kind, e.stream
            ));
        }
    }
    // What each stream covered, per shard: (from, to].
    let shard_at = |v: &[u64], shard: u32| v.get(shard as usize).copied();
    let covered = |st: &WatchStream, shard: u32| -> Option<(u64, u64)> {
        let from = if st.resume.is_empty() {
            shard_at(&st.caught_up, shard)?
        } else {
            shard_at(&st.resume, shard)?
        };
        let reached = input
            .events
            .iter()
            .filter(|e| e.stream == st.no && e.shard == shard && is_change(e))
            .map(|e| e.revision)
            .max()
            .unwrap_or(0);
        let to = reached.max(shard_at(&st.caught_up, shard).unwrap_or(0));
        (to > from).then_some((from, to))
    };
    for m in input.truth.iter().filter(|m| m.change) {
        let Some(st) = streams.iter().find(|st| {
            covered(st, m.shard).is_some_and(|(from, to)| from < m.revision && m.revision <= to)
        }) else {
            continue;
        };
        r.watch_judged += 1;
        let replay_end = match st.resume.is_empty() {
            true => None,
            false => Some(shard_at(&st.caught_up, m.shard).unwrap_or(u64::MAX)),
        };
        let in_replay = replay_end.is_some_and(|end| m.revision <= end);
        if in_replay {
            r.watch_replayed += 1;
        }
        let of_stream = |e: &&Event| e.stream == st.no && e.shard == m.shard;
        if input
            .events
            .iter()
            .filter(of_stream)
            .any(|e| e.revision == m.revision && is_change(e))
        {
            continue;
        }
        // (A change written before the replay reached its name, and
        // superseded, shows as its name's next change: in the replay, or
        // live when the name changed again during the replay.)
        let later = |e: &&Event| {
            is_change(e) && e.name == m.name && e.slot == m.slot && e.revision > m.revision
        };
        // (Live, a write the watcher never read because the holding's
        // next write superseded it first shows in that next write: a
        // grant as the ACQUIRED of its first renewal, renewals as one.
        // Only within one holding: the stream's next event of the name
        // must come before any end of it in the bucket, and an end itself
        // never coalesces.)
        let within_holding = || {
            let Some(next) = input
                .events
                .iter()
                .filter(of_stream)
                .filter(later)
                .map(|e| e.revision)
                .min()
            else {
                return false;
            };
            !input.truth.iter().any(|t| {
                t.shard == m.shard
                    && t.name == m.name
                    && t.slot == m.slot
                    && t.end
                    && m.revision < t.revision
                    && t.revision < next
            })
        };
        // (In a replay, a name changed again after the seam P (the
        // stream's caught-up revision) is no longer replayed: its later
        // change is in the stream's live queue, and reaches the client
        // live, or, should the stream end before it arrives, in the replay
        // of the next stream, which resumes from P. That later change is
        // judged itself, wherever it falls.)
        let changed_after_seam = || {
            let seam = replay_end.unwrap_or(u64::MAX);
            input.truth.iter().any(|t| {
                t.change
                    && t.shard == m.shard
                    && t.name == m.name
                    && t.slot == m.slot
                    && t.revision > seam
            })
        };
        let coalesced = match in_replay {
            true => {
                input.events.iter().filter(of_stream).any(|e| later(&e)) || changed_after_seam()
            }
            false => !m.end && within_holding(),
        };
        if coalesced {
            r.watch_coalesced += 1;
            continue;
        }
        // (A MISSED stands for the change at its own revision too when
        // that change ends a holding the stream never saw begin.)
        let missed = input.events.iter().filter(of_stream).any(|e| {
            e.kind == "MISSED"
                && e.name == m.name
                && e.missed_after < m.revision
                && m.revision <= e.revision
        });
        if missed {
            r.watch_missed += 1;
            continue;
        }
        r.p9_watch += 1;
        r.example(format!(
            "P9 {}: the change at revision {} (shard {}{}) was not reported by watch stream {}, which covered it{}",
            m.name,
            m.revision,
            m.shard,
            if m.slot > 0 { format!(", slot {}", m.slot) } else { String::new() },
            st.no,
            if in_replay { " (in its replay)" } else { "" }
        ));
    }
}

/// Property 7: at no instant more acting holdings of a semaphore than its
/// limit.
fn semaphore_limit(all: &[Holding], limit: u32, r: &mut Report) {
    let mut per_name: BTreeMap<&str, Vec<(u64, i32, &str)>> = BTreeMap::new();
    for h in all.iter().filter(|h| h.token > 0) {
        if let Some((start, end)) = h.interval() {
            let edges = per_name.entry(&h.name).or_default();
            edges.push((start, 1, &h.id));
            edges.push((end, -1, &h.id));
        }
    }
    for (name, mut edges) in per_name {
        // Ends before starts at the same instant: a holding that ends when
        // another begins does not overlap it.
        edges.sort_by_key(|(t, d, _)| (*t, *d));
        let mut acting = 0usize;
        for (_, d, id) in edges {
            if d > 0 {
                acting += 1;
                r.max_concurrent = r.max_concurrent.max(acting);
                if acting > limit as usize {
                    r.p7_limit += 1;
                    r.example(format!(
                        "P7 {name}: {id} began while {} others held the semaphore (limit {limit})",
                        acting - 1
                    ));
                }
            } else {
                acting = acting.saturating_sub(1);
            }
        }
    }
}

/// Property 10: no holding of a read-write lock acts while an exclusive
/// holding of the same lock does (property 3's intervals, by client
/// deadlines, half-open: one that ends when another begins does not
/// overlap it); shared holdings may overlap each other.
fn rw_exclusion(all: &[Holding], r: &mut Report) {
    /// A holding of a lock, its mode and its acting interval.
    type Acting<'a> = (&'a Holding, Mode, (u64, u64));
    let mut per_name: BTreeMap<&str, Vec<Acting>> = BTreeMap::new();
    for h in all.iter().filter(|h| h.token > 0) {
        if let (Some(mode), Some(iv)) = (h.mode, h.interval()) {
            per_name.entry(&h.name).or_default().push((h, mode, iv));
        }
    }
    for (name, mut hs) in per_name {
        hs.sort_by_key(|(_, _, (start, _))| *start);
        // Unavailability of the lock: the longest gap with no holding of
        // any mode acting in any slot.
        let mut covered: Option<u64> = None;
        for (_, _, (start, end)) in &hs {
            if let Some(c) = covered.filter(|c| start > c) {
                let gap = (start - c) as f64 / 1e6;
                r.longest_unavailable_ms = r.longest_unavailable_ms.max(gap);
            }
            covered = Some(covered.map_or(*end, |c| c.max(*end)));
        }
        for (i, (a, a_mode, (_, a_end))) in hs.iter().enumerate() {
            if *a_mode == Mode::Exclusive {
                r.rw_exclusive += 1;
            }
            // Every later start before A's end overlaps A (sorted by start).
            let overlapping = hs[i + 1..]
                .iter()
                .take_while(|(_, _, (start, _))| start < a_end);
            for (b, b_mode, (b_start, b_end)) in overlapping {
                if (*a_mode, *b_mode) == (Mode::Shared, Mode::Shared) {
                    r.rw_shared_pairs += 1;
                    continue;
                }
                r.p10_rw += 1;
                let ms = ((*a_end).min(*b_end) - b_start) as f64 / 1e6;
                r.example(format!(
                    "P10 {name}: {} ({}, slot {}, token {}) acted for {ms:.1} ms while {} ({}, slot {}, token {}) did",
                    b.id,
                    b_mode.name(),
                    b.slot,
                    b.token,
                    a.id,
                    a_mode.name(),
                    a.slot,
                    a.token
                ));
            }
        }
    }
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

    /// A test's input: nothing seen, a 1 s expiry lag and a 3 s fault grace;
    /// each test sets what it judges.
    fn input<'a>() -> Input<'a> {
        Input {
            ops: &[],
            accepted: &[],
            highest: &[],
            prefix: "",
            events: &[],
            faults: &[],
            allowed_lag_ms: 1000,
            fault_grace_ms: 3000,
            leftover: &[],
            tickets: &[],
            limit: None,
            streams: &[],
            truth: &[],
        }
    }

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
            slot: 0,
            wait_ms: 0,
            lock_delay_ms: 0,
            group: String::new(),
            detail: String::new(),
            mode: None,
            replaced: None,
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

    /// An event with no group, slot or holder.
    fn plain_event() -> Event {
        Event {
            kind: String::new(),
            name: "n".into(),
            token: 0,
            time_ms: 0,
            slot: 0,
            revision: 0,
            holder: String::new(),
            group: Vec::new(),
            stream: 0,
            shard: 0,
            missed_after: 0,
            replay: false,
        }
    }

    /// A member of group `g` granted with `token` (one AcquireGroup reply
    /// at 1002 unless `t1` differs).
    fn member(g: &str, name: &str, token: u64, t1: u64) -> Op {
        Op {
            name: name.into(),
            group: g.into(),
            ..acquired(&format!("{g}@{name}"), token, 1000, t1, 1000, 50)
        }
    }

    /// The ACQUIRED event of `name` in group `group` at `revision`.
    fn granted(name: &str, group: &[&str], revision: u64, stream: u32) -> Event {
        Event {
            kind: "ACQUIRED".into(),
            name: name.into(),
            token: revision,
            revision,
            holder: "a".into(),
            group: group.iter().map(|g| g.to_string()).collect(),
            stream,
            ..plain_event()
        }
    }

    #[test]
    fn a_group_granted_in_one_batch_passes() {
        let ops = vec![member("a#1", "x", 7, 1002), member("a#1", "y", 8, 1002)];
        let events = vec![
            granted("x", &["x", "y"], 7, 0),
            granted("y", &["x", "y"], 8, 0),
        ];
        let r = check_ops(&ops, &[], &events, &[]);
        assert_eq!(r.p8_group, 0, "{:?}", r.examples);
        assert_eq!((r.groups_taken, r.group_blocks), (1, 1));
    }

    #[test]
    fn a_group_taken_member_by_member_is_reported() {
        // Tokens 7 and 9: something was written between the two grants.
        let ops = vec![member("a#1", "x", 7, 1002), member("a#1", "y", 9, 1010)];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.p8_group, 1, "{:?}", r.examples);

        // x granted, y asked for and refused: part of the group was held.
        let refused = Op {
            name: "y".into(),
            group: "a#1".into(),
            detail: "LEASE_HELD".into(),
            ..op("a#1@y", OpKind::Acquire, Phase::Fail, 1003, 1500)
        };
        let r = check_ops(&[member("a#1", "x", 7, 1002), refused], &[], &[], &[]);
        assert_eq!(r.p8_group, 1, "{:?}", r.examples);

        // The watch saw x granted, then another name, then y.
        let events = vec![
            granted("x", &["x", "y"], 7, 0),
            Event {
                kind: "ACQUIRED".into(),
                name: "z".into(),
                revision: 8,
                ..plain_event()
            },
            granted("y", &["x", "y"], 9, 0),
        ];
        let r = check_ops(&[], &[], &events, &[]);
        assert_eq!((r.p8_group, r.p8_watch), (2, 2), "{:?}", r.examples);

        // A block cut by a broken watch stream is not judged.
        let events = vec![granted("x", &["x", "y"], 7, 0)];
        let r = check_ops(&[], &[], &events, &[]);
        assert_eq!((r.p8_group, r.group_blocks), (0, 0), "{:?}", r.examples);
    }

    fn check_ops(ops: &[Op], accepted: &[Accepted], events: &[Event], faults: &[Window]) -> Report {
        check(&Input {
            ops,
            accepted,
            events,
            faults,
            ..input()
        })
    }

    /// A waiting Acquire of `holding` (one attempt: invoke and completion)
    /// sent at `t0` ms with a wait of `wait` ms, answered at `t1`: granted
    /// with `token`, or (token 0) refused with LEASE_HELD when its wait ran
    /// out.
    fn waited(holding: &str, t0: u64, t1: u64, wait: u64, token: u64) -> Vec<Op> {
        let invoke = Op {
            wait_ms: wait,
            ..op(holding, OpKind::Acquire, Phase::Invoke, t0, 0)
        };
        let done = if token > 0 {
            Op {
                wait_ms: wait,
                ..acquired(holding, token, t0, t1, 1000, 50)
            }
        } else {
            Op {
                wait_ms: wait,
                detail: "LEASE_HELD".into(),
                ..op(holding, OpKind::Acquire, Phase::Fail, t0, t1)
            }
        };
        vec![invoke, done]
    }

    /// The first write of `holder`'s ticket for name `n` at `time_ms`.
    fn ticket(holder: &str, place: u64, time_ms: u64) -> Ticket {
        Ticket {
            name: "n".into(),
            semaphore: false,
            holder: holder.into(),
            place,
            time_ms,
        }
    }

    fn check_fifo(ops: &[Op], tickets: &[Ticket], faults: &[Window]) -> Report {
        check(&Input {
            ops,
            faults,
            tickets,
            ..input()
        })
    }

    #[test]
    fn waiters_granted_in_ticket_order_pass_fifo() {
        // a queued first (place 10), b second (place 12): a gets token 20
        // at 1500, b token 30 at 2500.
        let ops = [
            waited("a#1", 1000, 1500, 1500, 20),
            waited("b#1", 1100, 2500, 1500, 30),
        ]
        .concat();
        let tickets = [ticket("a", 10, 1001), ticket("b", 12, 1102)];
        let r = check_fifo(&ops, &tickets, &[]);
        assert_eq!((r.p6_fifo, r.fifo_pairs), (0, 1), "{:?}", r.examples);
    }

    #[test]
    fn a_later_arrival_granted_first_breaks_fifo() {
        // b queued after a but got the lower token.
        let ops = [
            waited("a#1", 1000, 2500, 1500, 30),
            waited("b#1", 1100, 1500, 1500, 20),
        ]
        .concat();
        let tickets = [ticket("a", 10, 1001), ticket("b", 12, 1102)];
        let r = check_fifo(&ops, &tickets, &[]);
        assert_eq!(r.p6_fifo, 1, "{:?}", r.examples);

        // a gave up (LEASE_HELD at 2500) though b was granted at 1500,
        // inside a's wait (1000 + 1500): overtaken too.
        let ops = [
            waited("a#1", 1000, 2500, 1500, 0),
            waited("b#1", 1100, 1500, 1500, 20),
        ]
        .concat();
        let r = check_fifo(&ops, &tickets, &[]);
        assert_eq!(r.p6_fifo, 1, "{:?}", r.examples);

        // b granted at 2600, after a's wait ran out (2500): not overtaken.
        let ops = [
            waited("a#1", 1000, 2500, 1500, 0),
            waited("b#1", 1100, 2600, 1500, 20),
        ]
        .concat();
        let r = check_fifo(&ops, &tickets, &[]);
        assert_eq!((r.p6_fifo, r.fifo_pairs), (0, 1), "{:?}", r.examples);
    }

    #[test]
    fn fifo_overtaking_under_a_fault_or_without_a_ticket_is_not_judged() {
        let ops = [
            waited("a#1", 1000, 2500, 1500, 30),
            waited("b#1", 1100, 1500, 1500, 20),
        ]
        .concat();
        let tickets = [ticket("a", 10, 1001), ticket("b", 12, 1102)];
        let fault = Window {
            start_ms: 1200,
            end_ms: 1300,
        };
        let r = check_fifo(&ops, &tickets, &[fault]);
        assert_eq!((r.p6_fifo, r.fifo_excused), (0, 1), "{:?}", r.examples);
        // a ticket written outside the call's flight is not the call's.
        let r = check_fifo(&ops, &[ticket("a", 10, 900), ticket("b", 12, 1102)], &[]);
        assert_eq!((r.p6_fifo, r.fifo_pairs), (0, 0), "{:?}", r.examples);
    }

    #[test]
    fn a_grant_without_a_ticket_after_a_queued_waiter_breaks_fifo() {
        // a queued at 1001 (place 10); b sent at 1100 and granted at once,
        // without a ticket (a plain Acquire that skipped the queue), token
        // 20; a granted later with token 30.
        let ops = [
            waited("a#1", 1000, 2500, 1500, 30),
            waited("b#1", 1100, 1105, 500, 20),
        ]
        .concat();
        let tickets = [ticket("a", 10, 1001)];
        let r = check_fifo(&ops, &tickets, &[]);
        assert_eq!(
            (r.p6_fifo, r.fifo_pairs, r.fifo_ticketless),
            (1, 1, 1),
            "{:?}",
            r.examples
        );

        // a gave up (its wait ran out at 2500) though b was granted at
        // 1105: overtaken too.
        let ops = [
            waited("a#1", 1000, 2500, 1500, 0),
            waited("b#1", 1100, 1105, 500, 20),
        ]
        .concat();
        assert_eq!(check_fifo(&ops, &tickets, &[]).p6_fifo, 1);
    }

    #[test]
    fn a_grant_without_a_ticket_in_order_or_first_passes_fifo() {
        let tickets = [ticket("a", 10, 1001)];
        // b granted after a (higher token): in order, and judged.
        let ops = [
            waited("a#1", 1000, 1500, 1500, 20),
            waited("b#1", 1100, 1600, 500, 30),
        ]
        .concat();
        let r = check_fifo(&ops, &tickets, &[]);
        assert_eq!((r.p6_fifo, r.fifo_pairs), (0, 1), "{:?}", r.examples);

        // b sent (1003) before a's ticket was written (1001) + the slack:
        // not known to be a later arrival, not judged.
        let ops = [
            waited("a#1", 1000, 2500, 1500, 30),
            waited("b#1", 1003, 1008, 500, 20),
        ]
        .concat();
        let r = check_fifo(&ops, &tickets, &[]);
        assert_eq!((r.p6_fifo, r.fifo_pairs), (0, 0), "{:?}", r.examples);

        // b sent after a had its answer: not contended.
        let ops = [
            waited("a#1", 1000, 1500, 1500, 20),
            waited("b#1", 1600, 1605, 500, 30),
        ]
        .concat();
        assert_eq!(check_fifo(&ops, &tickets, &[]).fifo_pairs, 0);

        // A semaphore's grant (slot 1) is not judged against a lease's
        // queue: the semaphore's waiters have their own.
        let ops = [
            waited("a#1", 1000, 2500, 1500, 30),
            sem_waited("b#1", 1100, 1105, 500, 20, 1),
        ]
        .concat();
        assert_eq!(check_fifo(&ops, &tickets, &[]).fifo_pairs, 0);
    }

    /// [`waited`] for a slot of semaphore `n`: granted slot `slot` with
    /// `token`, or (token 0) refused when its wait ran out.
    fn sem_waited(holding: &str, t0: u64, t1: u64, wait: u64, token: u64, slot: u32) -> Vec<Op> {
        waited(holding, t0, t1, wait, token)
            .into_iter()
            .map(|o| match o.phase {
                Phase::Ok => Op { slot, ..o },
                _ => o,
            })
            .collect()
    }

    /// The first write of `holder`'s ticket in semaphore `n`'s queue
    /// (`_tenure.q._tenure.sem.n.ticket.<slot>`) at `time_ms`.
    fn sem_ticket(holder: &str, place: u64, time_ms: u64) -> Ticket {
        Ticket {
            semaphore: true,
            ..ticket(holder, place, time_ms)
        }
    }

    /// Property 6 on a run of semaphores of limit 3.
    fn check_sem_fifo(ops: &[Op], tickets: &[Ticket], faults: &[Window]) -> Report {
        check(&Input {
            ops,
            faults,
            tickets,
            limit: Some(3),
            ..input()
        })
    }

    #[test]
    fn semaphore_waiters_granted_slots_in_ticket_order_pass_fifo() {
        // a queued first (place 10), b second (place 12): a takes slot 2
        // with token 20 at 1500, b slot 1 with token 30 at 2500 (tokens
        // are stream revisions: they compare across slots).
        let ops = [
            sem_waited("a#1", 1000, 1500, 1500, 20, 2),
            sem_waited("b#1", 1100, 2500, 1500, 30, 1),
        ]
        .concat();
        let tickets = [sem_ticket("a", 10, 1001), sem_ticket("b", 12, 1102)];
        let r = check_sem_fifo(&ops, &tickets, &[]);
        assert_eq!((r.p6_fifo, r.fifo_pairs), (0, 1), "{:?}", r.examples);

        // a's wait ran out (refused at 2500, no slot); b took a slot
        // after that (2600): not overtaken.
        let ops = [
            sem_waited("a#1", 1000, 2500, 1500, 0, 0),
            sem_waited("b#1", 1100, 2600, 1500, 20, 3),
        ]
        .concat();
        let r = check_sem_fifo(&ops, &tickets, &[]);
        assert_eq!((r.p6_fifo, r.fifo_pairs), (0, 1), "{:?}", r.examples);

        // b released and acquired again at 1600, after a was granted
        // (1500), and took a free slot without a ticket (nobody queued):
        // not contended, not judged.
        let ops = [
            sem_waited("a#1", 1000, 1500, 1500, 20, 2),
            sem_waited("b#2", 1600, 1605, 500, 30, 1),
        ]
        .concat();
        let r = check_sem_fifo(&ops, &tickets[..1], &[]);
        assert_eq!((r.p6_fifo, r.fifo_pairs), (0, 0), "{:?}", r.examples);

        // The same waiters' tickets in a lease's queue of the same name
        // are not this semaphore's: nothing queued, nothing judged.
        let lease_tickets = [ticket("a", 10, 1001), ticket("b", 12, 1102)];
        let r = check_sem_fifo(&ops, &lease_tickets, &[]);
        assert_eq!((r.fifo_waiters, r.fifo_pairs), (0, 0), "{:?}", r.examples);
    }

    #[test]
    fn a_later_semaphore_waiter_taking_a_slot_first_breaks_fifo() {
        // b queued after a (place 12 after 10) but took a free slot first
        // (slot 3, token 20 at 1500) while a waited on; a got slot 1 later
        // with token 30: overtaken (the semaphore-herd fault's race).
        let ops = [
            sem_waited("a#1", 1000, 2500, 1500, 30, 1),
            sem_waited("b#1", 1100, 1500, 1500, 20, 3),
        ]
        .concat();
        let tickets = [sem_ticket("a", 10, 1001), sem_ticket("b", 12, 1102)];
        let r = check_sem_fifo(&ops, &tickets, &[]);
        assert_eq!((r.p6_fifo, r.fifo_pairs), (1, 1), "{:?}", r.examples);
        assert!(r.examples[0].contains("(semaphore)"), "{:?}", r.examples);

        // a gave up (its wait ran out at 2500) though b had a slot at
        // 1500, inside a's wait: overtaken too.
        let ops = [
            sem_waited("a#1", 1000, 2500, 1500, 0, 0),
            sem_waited("b#1", 1100, 1500, 1500, 20, 3),
        ]
        .concat();
        assert_eq!(check_sem_fifo(&ops, &tickets, &[]).p6_fifo, 1);

        // b sent at 1100, after a queued, took a slot at once without a
        // ticket (a holder acquiring again while a waiter was queued):
        // overtaking.
        let ops = [
            sem_waited("a#1", 1000, 2500, 1500, 30, 1),
            sem_waited("b#2", 1100, 1105, 500, 20, 2),
        ]
        .concat();
        let r = check_sem_fifo(&ops, &tickets[..1], &[]);
        assert_eq!(
            (r.p6_fifo, r.fifo_pairs, r.fifo_ticketless),
            (1, 1, 1),
            "{:?}",
            r.examples
        );

        // Under a fault, excused.
        let fault = Window {
            start_ms: 1200,
            end_ms: 1300,
        };
        let r = check_sem_fifo(&ops, &tickets[..1], &[fault]);
        assert_eq!((r.p6_fifo, r.fifo_excused), (0, 1), "{:?}", r.examples);
    }

    /// A fenced write of `holding` with `token` sent at `t0`, answered at
    /// `t0 + 2` (ms), accepted.
    fn wrote(holding: &str, token: u64, t0: u64) -> Op {
        Op {
            token,
            ..op(holding, OpKind::Write, Phase::Ok, t0, t0 + 2)
        }
    }

    #[test]
    fn writes_accepted_after_the_lease_ended_and_a_newer_grant_are_counted() {
        // a: sent 1000, TTL 1000: its lease ends at 2000 at the earliest.
        // b took the name with token 3 (answered at 2100).
        let base = vec![
            acquired("a#1", 1, 1000, 1002, 1000, -500),
            acquired("b#1", 3, 2050, 2100, 1000, 50),
        ];
        // a wrote at 1900 (in time) and at 2200 (after both): one stale.
        let ops = [
            base.clone(),
            vec![wrote("a#1", 1, 1900), wrote("a#1", 1, 2200)],
        ]
        .concat();
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.stale_accepted, 1, "{:?}", r.examples);
        // Not a violation of property 2 (the store took no lower token
        // after a higher one).
        assert_eq!(r.p2_store, 0);

        // After its deadline but before b was granted: not counted (no
        // newer token existed yet).
        let ops = [base.clone(), vec![wrote("a#1", 1, 2060)]].concat();
        assert_eq!(check_ops(&ops, &[], &[], &[]).stale_accepted, 0);

        // b's own writes are not stale.
        let ops = [base, vec![wrote("b#1", 3, 2200)]].concat();
        assert_eq!(check_ops(&ops, &[], &[], &[]).stale_accepted, 0);
    }

    /// A semaphore holding: slot, token, acquired at `t0` (reply `t0+2`),
    /// TTL 1000, released at `end`.
    fn sem_holding(holding: &str, slot: u32, token: u64, t0: u64, end: u64) -> Vec<Op> {
        vec![
            Op {
                slot,
                ..acquired(holding, token, t0, t0 + 2, 1000, 50)
            },
            Op {
                slot,
                ..op(holding, OpKind::Release, Phase::Invoke, end, 0)
            },
            Op {
                slot,
                ..op(holding, OpKind::Release, Phase::Ok, end, end + 1)
            },
        ]
    }

    fn check_limit(ops: &[Op], limit: u32) -> Report {
        check(&Input {
            ops,
            limit: Some(limit),
            ..input()
        })
    }

    #[test]
    fn semaphore_holders_within_the_limit_pass() {
        // Two slots, three holders; c takes slot 1 after a released it.
        let ops = [
            sem_holding("a#1", 1, 10, 1000, 1400),
            sem_holding("b#1", 2, 11, 1100, 1800),
            sem_holding("c#1", 1, 12, 1400, 1900),
        ]
        .concat();
        let r = check_limit(&ops, 2);
        assert_eq!(r.violations(), 0, "{:?}", r.examples);
        assert_eq!(r.max_concurrent, 2);
        // Slots are leases of their own: one handoff on slot 1.
        assert_eq!(r.handoffs, 1);
    }

    #[test]
    fn more_holders_than_the_limit_are_reported() {
        // Three holders at once (1100 to 1400) for a limit of 2.
        let ops = [
            sem_holding("a#1", 1, 10, 1000, 1400),
            sem_holding("b#1", 2, 11, 1100, 1800),
            sem_holding("c#1", 3, 12, 1200, 1900),
        ]
        .concat();
        let r = check_limit(&ops, 2);
        assert_eq!(r.p7_limit, 1, "{:?}", r.examples);
        assert_eq!(r.max_concurrent, 3);
        // The same holdings under a limit of 3 are fine.
        assert_eq!(check_limit(&ops, 3).violations(), 0);
    }

    /// A read-write lock holding in `mode`: slot, token, acquired at `t0`
    /// (reply `t0+2`), TTL 1000, released at `end`.
    fn rw_holding(holding: &str, mode: Mode, slot: u32, token: u64, t0: u64, end: u64) -> Vec<Op> {
        sem_holding(holding, slot, token, t0, end)
            .into_iter()
            .map(|o| match o.op {
                OpKind::Acquire => Op {
                    mode: Some(mode),
                    ..o
                },
                _ => o,
            })
            .collect()
    }

    #[test]
    fn readers_sharing_and_a_writer_alone_pass_rw_exclusion() {
        use Mode::{Exclusive, Shared};
        // a and b read at once (1102 to 1400); c writes once both have
        // released (from 1502), d reads from the moment c released (its
        // interval starts at 1900, when c's ends: no overlap).
        let ops = [
            rw_holding("a#1", Shared, 1, 10, 1000, 1400),
            rw_holding("b#1", Shared, 2, 11, 1100, 1500),
            rw_holding("c#1", Exclusive, 1, 12, 1500, 1900),
            rw_holding("d#1", Shared, 2, 13, 1898, 2300),
        ]
        .concat();
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.violations(), 0, "{:?}", r.examples);
        assert_eq!((r.rw_exclusive, r.rw_shared_pairs), (1, 1));
        // Slots are leases of their own: a handoff on each.
        assert_eq!(r.handoffs, 2);
    }

    #[test]
    fn a_holding_acting_beside_an_exclusive_one_breaks_rw_exclusion() {
        use Mode::{Exclusive, Shared};
        // A reader in another slot while a writer holds (1202 to 1400).
        let ops = [
            rw_holding("a#1", Exclusive, 1, 10, 1000, 1400),
            rw_holding("b#1", Shared, 2, 11, 1200, 1600),
        ]
        .concat();
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.p10_rw, 1, "{:?}", r.examples);
        assert!(
            r.examples[0].contains("P10 n: b#1 (shared, slot 2, token 11) acted for 198.0 ms"),
            "{:?}",
            r.examples
        );
        // Other slots, so property 3 has nothing to say.
        assert_eq!(r.p3_overlap, 0);

        // A writer that begins while a reader holds.
        let ops = [
            rw_holding("a#1", Shared, 1, 10, 1000, 1400),
            rw_holding("b#1", Exclusive, 2, 11, 1200, 1600),
        ]
        .concat();
        assert_eq!(check_ops(&ops, &[], &[], &[]).p10_rw, 1);

        // Two writers at once, and a reader beside both: three pairs.
        let ops = [
            rw_holding("a#1", Exclusive, 1, 10, 1000, 1400),
            rw_holding("b#1", Exclusive, 2, 11, 1200, 1600),
            rw_holding("c#1", Shared, 3, 12, 1300, 1500),
        ]
        .concat();
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!((r.p10_rw, r.rw_exclusive), (3, 2), "{:?}", r.examples);

        // The same intervals as a semaphore's (no mode) are not judged.
        let ops = [
            sem_holding("a#1", 1, 10, 1000, 1400),
            sem_holding("b#1", 2, 11, 1200, 1600),
        ]
        .concat();
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!((r.p10_rw, r.rw_exclusive), (0, 0));

        // Unavailability is the lock's, over all its slots: slot 1 idle
        // between two readers while a reader in slot 2 held is no gap.
        let readers = |with: fn(&str, Mode, u32, u64, u64, u64) -> Vec<Op>| {
            [
                with("a#1", Shared, 1, 10, 1000, 1400),
                with("b#1", Shared, 2, 11, 1300, 1900),
                with("c#1", Shared, 1, 12, 1800, 2200),
            ]
            .concat()
        };
        let r = check_ops(&readers(rw_holding), &[], &[], &[]);
        assert_eq!(r.longest_unavailable_ms, 0.0);
        // As a semaphore's slots, slot 1's idle time is a gap.
        let as_slots =
            |h: &str, _: Mode, slot, token, t0, end| sem_holding(h, slot, token, t0, end);
        let r = check_ops(&readers(as_slots), &[], &[], &[]);
        assert!(r.longest_unavailable_ms > 0.0);
    }

    #[test]
    fn read_write_lock_waiters_are_judged_as_semaphore_waiters() {
        // A writer queued first (place 10) gave up at 2500, still within
        // its wait when a reader that queued after it (place 12) was
        // granted slot 1 at 1500: overtaken. A run of read-write locks has
        // no limit: the refusal (no slot) is a semaphore waiter by its mode.
        let with_mode = |ops: Vec<Op>, mode: Mode| -> Vec<Op> {
            ops.into_iter()
                .map(|o| Op {
                    mode: Some(mode),
                    ..o
                })
                .collect()
        };
        let ops = [
            with_mode(sem_waited("a#1", 1000, 2500, 1500, 0, 0), Mode::Exclusive),
            with_mode(sem_waited("b#1", 1100, 1500, 1500, 20, 1), Mode::Shared),
        ]
        .concat();
        let tickets = [sem_ticket("a", 10, 1001), sem_ticket("b", 12, 1102)];
        let r = check_fifo(&ops, &tickets, &[]);
        assert_eq!((r.p6_fifo, r.fifo_pairs), (1, 1), "{:?}", r.examples);
        assert!(r.examples[0].contains("(semaphore)"), "{:?}", r.examples);
        // The same waiters' tickets in a lease's queue are not the lock's.
        let lease_tickets = [ticket("a", 10, 1001), ticket("b", 12, 1102)];
        let r = check_fifo(&ops, &lease_tickets, &[]);
        assert_eq!((r.fifo_waiters, r.fifo_pairs), (0, 0), "{:?}", r.examples);
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
            segment: 0,
            fence,
        };
        let r = check_ops(&[], &[log(1, 3), log(2, 5), log(3, 5), log(4, 3)], &[], &[]);
        assert_eq!(r.p2_store, 1, "{:?}", r.examples);
        // Segments of one resource (Redis, after a lost reply) are judged
        // apart: their order between them is unknown.
        let later = Accepted {
            segment: 1,
            ..log(5, 4)
        };
        let r = check_ops(&[], &[log(1, 3), log(2, 5), later], &[], &[]);
        assert_eq!(r.p2_store, 0, "{:?}", r.examples);
    }

    /// A check of `ops` with the store's `accepted` log and `highest`
    /// tokens, resources under prefix `p/`.
    fn check_store(ops: &[Op], accepted: &[Accepted], highest: &[(String, String)]) -> Report {
        check(&Input {
            ops,
            accepted,
            highest,
            prefix: "p/",
            ..input()
        })
    }

    #[test]
    fn a_token_tenure_never_granted_for_the_resource_is_foreign() {
        let ops = vec![acquired("a#1", 5, 1000, 1002, 1000, 50)];
        let log = |fence| Accepted {
            seq: 1,
            resource: "p/n".into(),
            segment: 0,
            fence,
        };
        let high = |t: &str| vec![("p/n".to_string(), t.to_string())];
        let r = check_store(&ops, &[log(5)], &high("5"));
        assert_eq!(r.violations(), 0, "{:?}", r.examples);
        // The forged 2^62 in the log and as the highest: one foreign
        // token, counted once.
        let forged = (1u64 << 62).to_string();
        let r = check_store(&ops, &[log(5), log(1 << 62)], &high(&forged));
        assert_eq!(r.foreign_tokens, 1, "{:?}", r.examples);
        assert!(r.examples[0].contains("never granted"), "{:?}", r.examples);
        // A genuine token of another name is foreign to this resource.
        let other = Op {
            name: "m".into(),
            ..acquired("b#1", 9, 1000, 1002, 1000, 50)
        };
        let r = check_store(&[ops[0].clone(), other], &[log(9)], &high("9"));
        assert_eq!(r.foreign_tokens, 1, "{:?}", r.examples);
        // A semaphore slot's tokens are its own resource's.
        let slotted = Op {
            slot: 2,
            ..acquired("c#1", 7, 1000, 1002, 1000, 50)
        };
        let r = check_store(&[slotted], &[], &[("p/n#2".into(), "7".into())]);
        assert_eq!(r.foreign_tokens, 0, "{:?}", r.examples);
    }

    #[test]
    fn a_forged_write_that_was_not_refused_is_a_violation() {
        let forged = |phase, kind: &str, t0| Op {
            token: 1 << 62,
            detail: format!("{kind}: refused"),
            ..op("x#forged", OpKind::Forge, phase, t0, t0 + 1)
        };
        let wrote = |t0| op("a#1", OpKind::Write, Phase::Ok, t0, t0 + 1);
        let ops = vec![
            wrote(1),
            forged(Phase::Fail, "no-proof", 5),
            forged(Phase::Fail, "other-name", 6),
            wrote(7),
            wrote(8),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!((r.forged_sent, r.forged_refused), (2, 2));
        assert_eq!(r.forged_kinds, [1, 0, 0, 1]);
        assert_eq!(r.writes_after_forgery, 2);
        assert_eq!(r.violations(), 0, "{:?}", r.examples);
        for phase in [Phase::Ok, Phase::Info] {
            let mut bad = ops.clone();
            bad.push(forged(phase, "bad-signature", 9));
            let r = check_ops(&bad, &[], &[], &[]);
            assert_eq!(r.violations(), 1, "{phase:?}: {:?}", r.examples);
        }
    }

    #[test]
    fn a_genuine_proof_refused_is_a_violation_and_not_a_stale_write() {
        let refused = |detail: &str| Op {
            detail: detail.into(),
            ..op("a#1", OpKind::Write, Phase::Fail, 5, 6)
        };
        let r = check_ops(&[refused(STALE)], &[], &[], &[]);
        assert_eq!((r.stale_refused, r.bad_proofs), (1, 0));
        let detail = format!("{PROOF_REFUSED}: FENCE_BAD_SIGNATURE: altered");
        let r = check_ops(&[refused(&detail)], &[], &[], &[]);
        assert_eq!((r.stale_refused, r.bad_proofs), (0, 1));
        assert_eq!(r.violations(), 1);
    }

    #[test]
    fn late_expiry_is_reported_unless_a_fault_explains_it() {
        let ops = vec![acquired("a#1", 1, 1000, 1002, 1000, 50)];
        let late = Event {
            kind: "EXPIRED".into(),
            name: "n".into(),
            token: 1,
            time_ms: 3500,
            ..plain_event()
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

    /// Due 2000, bound 3000: a refusal sent after the bound proves the
    /// holding outlived it; one sent before and answered after does not
    /// (its read may have come before the bound).
    #[test]
    fn a_refusal_long_after_due_is_a_lease_that_outlived_its_ttl() {
        let refused = |t0, t1| Op {
            detail: "LEASE_HELD".into(),
            ..op("b#1", OpKind::Acquire, Phase::Fail, t0, t1)
        };
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 50),
            refused(3100, 3500),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.p4_expiry, 1, "{:?}", r.examples);
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 50),
            refused(2900, 3500),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.p4_expiry, 0, "{:?}", r.examples);
    }

    #[test]
    fn an_expiry_under_a_fault_is_still_bounded() {
        // Due 2000; fault 1500-3000 (1500 ms): bound = 2000 + 1500 + lag
        // 1000 + grace 3000 = 7500.
        let ops = vec![acquired("a#1", 1, 1000, 1002, 1000, 50)];
        let fault = Window {
            start_ms: 1500,
            end_ms: 3000,
        };
        let at = |time_ms| Event {
            kind: "EXPIRED".into(),
            name: "n".into(),
            token: 1,
            time_ms,
            ..plain_event()
        };
        let r = check_ops(&ops, &[], &[at(7400)], std::slice::from_ref(&fault));
        assert_eq!(r.p4_expiry, 0, "{:?}", r.examples);
        assert_eq!((r.expiry_excused, r.max_excused_lag_ms), (1, 5400));
        let r = check_ops(&ops, &[], &[at(20_000)], &[fault]);
        assert_eq!(r.p4_expiry, 1, "{:?}", r.examples);
    }

    #[test]
    fn a_lease_granted_before_the_previous_could_end_is_early() {
        // a: sent 1000, TTL 1000, so the server keeps it until 2000 at
        // least; its holder stopped early (margin 500). b's Acquire was
        // answered at 1700: granted early, though the holders never
        // overlapped.
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 500),
            acquired("b#1", 3, 1600, 1700, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.p3_overlap, 0, "{:?}", r.examples);
        assert_eq!(r.p5_early, 1, "{:?}", r.examples);

        // Answered at 2100: on time.
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 500),
            acquired("b#1", 3, 1600, 2100, 1000, 50),
        ];
        assert_eq!(check_ops(&ops, &[], &[], &[]).p5_early, 0);
    }

    #[test]
    fn an_acquire_retried_with_its_key_counts_from_the_first_send() {
        // a's first attempt (sent 1000) got no answer; the retry (sent
        // 1500) was answered with the holding the first one wrote. The
        // server may end it at 2000, so b granted at 2100 is not early.
        let ops = vec![
            op("a#1", OpKind::Acquire, Phase::Invoke, 1000, 0),
            op("a#1", OpKind::Acquire, Phase::Invoke, 1500, 0),
            acquired("a#1", 1, 1500, 1502, 1000, 50),
            acquired("b#1", 3, 1800, 2100, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.p5_early, 0, "{:?}", r.examples);
    }

    #[test]
    fn a_holding_with_no_evidence_of_its_end_is_unverified() {
        let ops = vec![acquired("a#1", 1, 1000, 1002, 1000, 50)];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!((r.expiry_unverified, r.expiries_judged()), (1, 1));
        assert_eq!(r.unverified_share(), 1.0);

        // The next holder's Acquire within the bound (due 2000 + lag 1000)
        // proves it ended in time.
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 50),
            acquired("b#1", 3, 2500, 2510, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!((r.expiry_by_handoff, r.expiry_unverified), (1, 1));
    }
    #[test]
    fn a_release_refused_while_its_own_tombstone_landed_released() {
        // a (token 1, TTL 1000 from 1000) released at 1100, answered
        // LEASE_NOT_HELD at 1108; the bucket's tombstone at 1102. b at
        // 1200 is then no early grant; with an expiry marker instead, or a
        // tombstone stamped outside the call, it is.
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 50),
            op("a#1", OpKind::Release, Phase::Invoke, 1100, 0),
            Op {
                detail: "LEASE_NOT_HELD".into(),
                ..op("a#1", OpKind::Release, Phase::Fail, 1100, 1108)
            },
            acquired("b#1", 3, 1150, 1200, 1000, 50),
        ];
        let check = |truth: &[Truth]| {
            check(&Input {
                ops: &ops,
                truth,
                ..input()
            })
        };
        let end = |tombstone, time_ms| Truth {
            end: true,
            tombstone,
            time_ms,
            ..bucket_change("n", 2)
        };
        let r = check(&[end(true, 1102)]);
        assert_eq!(
            (r.p5_early, r.released_though_refused),
            (0, 1),
            "{:?}",
            r.examples
        );
        assert_eq!(check(&[end(false, 1102)]).p5_early, 1);
        assert_eq!(check(&[end(true, 1050)]).p5_early, 1);
    }

    #[test]
    fn the_buckets_end_message_within_the_bound_proves_an_end() {
        // a (token 1, due 2000) with no EXPIRED event and no next holder:
        // the bucket's marker at 2300 proves it ended within the bound; one
        // at 3500 proves nothing either way (the watch may have skipped an
        // earlier one).
        let ops = vec![acquired("a#1", 1, 1000, 1002, 1000, 50)];
        let marker = |time_ms| Truth {
            end: true,
            time_ms,
            ..bucket_change("n", 4)
        };
        let check = |truth: &[Truth]| {
            check(&Input {
                ops: &ops,
                truth,
                ..input()
            })
        };
        let r = check(&[marker(2300)]);
        assert_eq!(
            (r.p4_expiry, r.expiry_by_handoff),
            (0, 1),
            "{:?}",
            r.examples
        );
        let r = check(&[marker(3500)]);
        assert_eq!(
            (r.p4_expiry, r.expiry_unverified),
            (0, 1),
            "{:?}",
            r.examples
        );
    }

    /// The runner's revoke of the holding of `name` "n" with `token`, sent
    /// at `t0` ms, answered (`Ok`) or not (`Info`).
    fn revoke(token: u64, t0: u64, phase: Phase) -> Op {
        Op {
            client: "runner".into(),
            holding: String::new(),
            token,
            ..op("", OpKind::Revoke, phase, t0, t0 + 3)
        }
    }

    #[test]
    fn a_revoked_holding_ends_at_the_revoke() {
        // a holds until 1950 by its deadline; revoked at 1200, b takes the
        // name at 1210: no overlap, no early grant, no expiry to judge.
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 50),
            revoke(1, 1200, Phase::Ok),
            acquired("b#1", 3, 1205, 1210, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.violations(), 0, "{:?}", r.examples);
        // (b, unreleased, is judged by property 4.)
        assert_eq!((r.revoked, r.p5_pairs, r.expiries_judged()), (1, 0, 1));
        // An unanswered revoke may have landed: the same.
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 50),
            revoke(1, 1200, Phase::Info),
            acquired("b#1", 3, 1205, 1210, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!((r.violations(), r.revoked), (0, 0), "{:?}", r.examples);
        // A refused revoke (the holding had ended) changes nothing: b's
        // grant is early again.
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 50),
            revoke(1, 1200, Phase::Fail),
            acquired("b#1", 3, 1205, 1210, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!((r.p3_overlap, r.p5_early), (1, 1), "{:?}", r.examples);
    }

    #[test]
    fn a_revoked_holders_writes_are_fencings_and_it_must_stop_once_it_knows() {
        let write = |t0, phase, detail: &str| Op {
            token: 1,
            deadline: 1950 * MS,
            detail: detail.into(),
            ..op("a#1", OpKind::Write, phase, t0, t0 + 2)
        };
        // Revoked at 1200: its writes at 1300 (accepted: b had not written)
        // and 1400 (refused) are fencing's; it learned at 1500 and stopped.
        let lost = op("a#1", OpKind::Lost, Phase::Ok, 1500, 0);
        let ops = vec![
            acquired("a#1", 1, 1000, 1002, 1000, 50),
            revoke(1, 1200, Phase::Ok),
            acquired("b#1", 3, 1205, 1210, 1000, 50),
            write(1300, Phase::Ok, ""),
            write(1400, Phase::Fail, STALE),
            lost.clone(),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(r.violations(), 0, "{:?}", r.examples);
        assert_eq!(
            (r.revoked_writes_accepted, r.revoked_writes_refused),
            (1, 1)
        );
        // A write after it knew: property 3.
        let ops = [ops, vec![write(1600, Phase::Fail, STALE)]].concat();
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!(
            (r.p3_overlap, r.acted_after_loss),
            (1, 1),
            "{:?}",
            r.examples
        );
    }

    #[test]
    fn nobody_takes_a_name_inside_the_lock_delay_of_an_expiry_or_a_revoke() {
        let delayed = |holding, token, t0| Op {
            lock_delay_ms: 1000,
            ..acquired(holding, token, t0, t0 + 2, 1000, 50)
        };
        let expired = |token, time_ms| Event {
            kind: "EXPIRED".into(),
            token,
            time_ms,
            ..plain_event()
        };
        // a expired at 2100 with a delay of 1 s: b at 3200 is fine, at 2900
        // inside the delay.
        let b = Op {
            server_ms: 3200,
            ..acquired("b#1", 3, 2500, 3200, 1000, 50)
        };
        let ops = vec![delayed("a#1", 1, 1000), b];
        let r = check_ops(&ops, &[], &[expired(1, 2100)], &[]);
        assert_eq!((r.p5_early, r.delays_judged), (0, 1), "{:?}", r.examples);
        let ops = [
            delayed("a#1", 1, 1000),
            acquired("b#1", 3, 2500, 2900, 1000, 50),
        ];
        let b = Op {
            server_ms: 2900,
            ..ops[1].clone()
        };
        let r = check_ops(&[ops[0].clone(), b], &[], &[expired(1, 2100)], &[]);
        assert_eq!((r.p5_early, r.p5_delay), (1, 1), "{:?}", r.examples);
        // Revoked at 1200 (sent): b granted at 1900 was inside the delay.
        let b = Op {
            server_ms: 1900,
            ..acquired("b#1", 3, 1300, 1900, 1000, 50)
        };
        let ops = vec![delayed("a#1", 1, 1000), revoke(1, 1200, Phase::Ok), b];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!((r.p5_delay, r.delays_judged), (1, 1), "{:?}", r.examples);
        // A release starts no delay.
        let ops = vec![
            delayed("a#1", 1, 1000),
            op("a#1", OpKind::Release, Phase::Invoke, 1100, 0),
            op("a#1", OpKind::Release, Phase::Ok, 1100, 1105),
            acquired("b#1", 3, 1110, 1120, 1000, 50),
        ];
        let r = check_ops(&ops, &[], &[], &[]);
        assert_eq!((r.p5_early, r.delays_judged), (0, 0), "{:?}", r.examples);
    }

    /// A change event `kind` of name `name` at `revision` in stream
    /// `stream`, `replay` or live.
    fn change(kind: &str, name: &str, revision: u64, stream: u32, replay: bool) -> Event {
        Event {
            kind: kind.into(),
            name: name.into(),
            revision,
            stream,
            replay,
            ..plain_event()
        }
    }

    /// A write (change) of `name` at `revision` in the bucket.
    fn bucket_change(name: &str, revision: u64) -> Truth {
        Truth {
            shard: 0,
            revision,
            name: name.into(),
            slot: 0,
            change: true,
            end: false,
            tombstone: false,
            time_ms: 0,
        }
    }

    fn check_watch(events: &[Event], streams: &[WatchStream], truth: &[Truth]) -> Report {
        check(&Input {
            events,
            streams,
            truth,
            ..input()
        })
    }

    #[test]
    fn a_resumed_watch_reports_every_change_once() {
        // Stream 1 (fresh, snapshot at 10) saw 11 and 12; stream 2 resumed
        // from 12, replayed to 16 (x at 13 coalesced into x at 15, y at
        // 14 and 16), then live 17.
        let streams = vec![
            WatchStream {
                no: 1,
                caught_up: vec![10],
                ..Default::default()
            },
            WatchStream {
                no: 2,
                resume: vec![12],
                caught_up: vec![16],
                ..Default::default()
            },
        ];
        let truth: Vec<Truth> = [
            ("x", 9),
            ("x", 11),
            ("y", 12),
            ("x", 13),
            ("y", 14),
            ("x", 15),
            ("y", 16),
            ("x", 17),
        ]
        .iter()
        .map(|(n, r)| bucket_change(n, *r))
        .collect();
        let mut events = vec![
            change("ACQUIRED", "x", 11, 1, false),
            change("ACQUIRED", "y", 12, 1, false),
            change("RENEWED", "y", 14, 2, true),
            change("RELEASED", "x", 15, 2, true),
            change("RELEASED", "y", 16, 2, true),
            change("ACQUIRED", "x", 17, 2, false),
        ];
        let r = check_watch(&events, &streams, &truth);
        assert_eq!(r.p9_watch, 0, "{:?}", r.examples);
        assert_eq!(
            (r.watch_resumes, r.watch_judged, r.watch_coalesced),
            (1, 7, 1)
        );
        // x at 13 unreported and stream 2 ended before x's next change (at
        // 17, after the seam 16) reached it: that change is in the next
        // stream's replay (judged there), so 13 is not a gap; y at 14 with
        // no later change of y after the seam is.
        let cut: Vec<Event> = events
            .iter()
            .filter(|e| {
                !((e.name == "x" && e.revision >= 15) || (e.name == "y" && e.revision == 14))
            })
            .cloned()
            .collect();
        let cut_truth: Vec<Truth> = truth.iter().filter(|t| t.revision != 15).cloned().collect();
        let r = check_watch(&cut, &streams, &cut_truth);
        assert_eq!(
            r.p9_watch, 0,
            "16 reported, 14 coalesced into it: {:?}",
            r.examples
        );
        let no_y_after: Vec<Event> = cut
            .iter()
            .filter(|e| e.name != "y" || e.revision < 14)
            .cloned()
            .collect();
        let r = check_watch(&no_y_after, &streams, &cut_truth);
        assert_eq!(
            r.p9_watch, 2,
            "y at 14 and 16, with no change of y after the seam: {:?}",
            r.examples
        );
        // y at 14 missing (no later change of y in the replay but 16... so
        // drop 16 too): a gap.
        events.retain(|e| !(e.name == "y" && e.revision >= 14));
        let r = check_watch(&events, &streams, &truth);
        assert_eq!(r.p9_watch, 2, "{:?}", r.examples);
        // Unless the stream said it missed them.
        let missed = Event {
            kind: "MISSED".into(),
            missed_after: 12,
            ..change("MISSED", "y", 18, 2, false)
        };
        events.push(missed);
        let r = check_watch(&events, &streams, &truth);
        assert_eq!((r.p9_watch, r.watch_missed), (0, 2), "{:?}", r.examples);
        // 12 replayed again by stream 2: reported twice.
        events.push(change("ACQUIRED", "y", 12, 2, true));
        let r = check_watch(&events, &streams, &truth);
        assert_eq!(r.p9_watch, 1, "{:?}", r.examples);
        events.pop();
        // A Transfer: the giver's end and the recipient's grant at one
        // revision are two changes; the same end named again by a replay,
        // at a later revision, is one reported twice.
        let ended = |revision, stream, replay| Event {
            token: 11,
            ..change("RELEASED", "x", revision, stream, replay)
        };
        events.push(ended(17, 2, false));
        let r = check_watch(&events, &streams, &truth);
        assert_eq!(r.p9_watch, 0, "{:?}", r.examples);
        events.push(ended(19, 2, true));
        let r = check_watch(&events, &streams, &truth);
        assert_eq!(r.p9_watch, 1, "{:?}", r.examples);
        // Live, a write shows in the same holding's next write (a lagging
        // watcher first reads the grant at 17 as its renewal at 19)...
        let events = vec![
            change("ACQUIRED", "x", 11, 1, false),
            change("ACQUIRED", "x", 19, 1, false),
        ];
        let streams = vec![WatchStream {
            no: 1,
            caught_up: vec![10],
            ..Default::default()
        }];
        let truth = [bucket_change("x", 17), bucket_change("x", 19)];
        let r = check_watch(&events, &streams, &truth);
        assert_eq!((r.p9_watch, r.watch_coalesced), (0, 1), "{:?}", r.examples);
        // ...but never across an end, and an end never coalesces: x
        // released at 18 between them, neither 17 nor 18 reported.
        let end = Truth {
            end: true,
            tombstone: true,
            ..bucket_change("x", 18)
        };
        let truth = [bucket_change("x", 17), end, bucket_change("x", 19)];
        let r = check_watch(&events, &streams, &truth);
        assert_eq!(r.p9_watch, 2, "{:?}", r.examples);
    }

    #[test]
    fn a_group_block_the_stream_says_it_missed_is_not_a_violation() {
        // x granted at 7 in a group with y (8); the stream missed y's 8.
        let events = vec![
            granted("x", &["x", "y"], 7, 0),
            Event {
                kind: "MISSED".into(),
                name: "y".into(),
                revision: 9,
                missed_after: 3,
                ..plain_event()
            },
        ];
        let r = check_ops(&[], &[], &events, &[]);
        assert_eq!((r.p8_group, r.p8_watch), (0, 0), "{:?}", r.examples);
        // A block in a resumed stream's replay is not judged either.
        let events = vec![Event {
            replay: true,
            ..granted("x", &["x", "y"], 7, 0)
        }];
        let r = check_ops(&[], &[], &events, &[]);
        assert_eq!(r.p8_group, 0, "{:?}", r.examples);
    }
}
