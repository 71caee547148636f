//! All-or-nothing groups: several plain leases taken, renewed and released
//! in one call each (design section 21).
//!
//! An AcquireGroup reads every member, applies to each the rules a single
//! Acquire applies (held by another, lock delay running, waiters queued),
//! and then writes every member's record in ONE JetStream atomic batch, each
//! write conditional on the revision it read: either every member is taken
//! or none is, so no observer can see part of a group. Each member's token
//! is the revision of its own message in the batch (a batch is stored at
//! consecutive revisions). Every record lists the group's names, so a
//! reader of any member (GetLease, WatchLease, ListLeases) can tell.
//!
//! A waiting AcquireGroup holds nothing while it waits: it tries again when
//! a member's holding ends or its queue loses a waiter (the shared watcher
//! wakes it), or on the backstop tick, so groups cannot deadlock whatever
//! order callers list names in.
//! A group waiter takes no queue tickets: it is not FIFO-ordered, and it
//! never jumps a queue either (it only writes while no member has a queued
//! waiter, checked in its batch through each member's queue guard).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, try_join_all};
use futures::StreamExt;

use super::acquire::fence_write;
use super::keys;
use super::record::{Entry, KeyHash, Record, Released};
use super::refusals::{contended, delayed, held, queued, unreadable};
use super::rules::{self, AcquirePlan};
use super::wait::{Wait, Wakeups};
use super::{fifo, now_ms, EventKind, Filter, Holding, Leases, MAX_CAS_ATTEMPTS};
use crate::config::TestFault;
use crate::error::{Error, Reason, Result};
use crate::nats::{CasError, Write, WriteOp};
use crate::observe::METRICS;

/// The hard cap on `--max-group-size`: a group's batch holds up to three
/// writes per member (queue guard, fence, record), far below JetStream's
/// 1,000 messages per batch, and a group read is one leader read per member.
pub const MAX_GROUP_SIZE: usize = 64;
// Three writes per member must fit one JetStream batch.
const _: () = assert!(MAX_GROUP_SIZE * 3 < 1000);

/// The pause between two members of a group under the test fault
/// `split-groups`.
const SPLIT_GROUP_PAUSE: Duration = Duration::from_millis(20);

/// What AcquireGroup asks for, already validated.
#[derive(Debug, Clone)]
pub struct GroupArgs {
    /// The member names, distinct, in request order.
    pub names: Vec<String>,
    /// Who wants them.
    pub holder: String,
    /// Granted TTL of every member, whole seconds.
    pub ttl_s: u64,
    /// The one ownership secret of every member.
    pub key: String,
    /// How long to wait until every member is free at once; `None`: fail
    /// at once.
    pub wait: Option<Duration>,
    /// Metadata stored with every member.
    pub metadata: BTreeMap<String, String>,
    /// Lock delay of every member, whole seconds (0: none).
    pub lock_delay_s: u64,
}

/// One holding of a group as its holder presents it.
#[derive(Debug, Clone)]
pub struct GroupMember {
    /// The lease name.
    pub name: String,
    /// The revision from the last AcquireGroup or RenewGroup reply.
    pub expected: u64,
}

/// What a ReleaseGroup did.
#[derive(Debug, Clone, Default)]
pub struct GroupRelease {
    /// The members that were held and are now released.
    pub released: Vec<String>,
    /// The members that were already lost.
    pub not_held: Vec<String>,
    /// The revision of the release batch; 0 when nothing was held.
    pub revision: u64,
}

/// What an attempt writes for one member.
enum Plan {
    /// A new holding over the name's last message (`expected`), which ended
    /// a holding at `last` (the lock-delay rules need it).
    Take {
        /// The revision the write replaces (0: no message).
        expected: u64,
        /// The name's last message.
        last: Option<Entry>,
    },
    /// The caller's own holding, found again (a retried AcquireGroup): it is
    /// renewed, keeping its token.
    Keep {
        /// Its current revision.
        revision: u64,
        /// Its record.
        record: Record,
    },
}

impl Leases {
    /// Takes every name of `args.names` or none, waiting until all are free
    /// at once if `args.wait` says so. Returns the holdings in request
    /// order.
    pub async fn acquire_group(&self, args: &GroupArgs) -> Result<Vec<Holding>> {
        self.store.require_atomic()?;
        let Some(wait) = args.wait else {
            return self.try_group(args).await;
        };
        let wait = Wait::new("AcquireGroup", wait);
        let wakeups = self.follow_group(&args.names);
        self.wait_for(wait, wakeups, || self.try_group(args)).await
    }

    /// Follows the ends of holdings of every member, merged into one
    /// stream; `None` when the hub cannot follow (the waiter then polls).
    async fn follow_group(&self, names: &[String]) -> Wakeups {
        let mut merged = futures::stream::SelectAll::new();
        for name in names {
            // A turn: a member's queue lost a waiter while the name is free,
            // which may be what kept the group out.
            let ends = vec![
                EventKind::Released,
                EventKind::Expired,
                EventKind::Revoked,
                EventKind::Turn,
            ];
            let sub = self
                .hub
                .follow(Filter::Name(name.clone()), ends)
                .await
                .ok()?;
            merged.push(sub.into_stream().map(|e| e.map(drop)).boxed());
        }
        Some(merged.boxed())
    }

    /// One AcquireGroup without waiting: read, then one batch, retried on
    /// lost races.
    async fn try_group(&self, args: &GroupArgs) -> Result<Vec<Holding>> {
        for _ in 0..MAX_CAS_ATTEMPTS {
            if let Some(holdings) = self.attempt_group(args).await? {
                return Ok(holdings);
            }
            METRICS.group_conflicts.inc();
        }
        Err(contended(&args.names[0]).with("name", &args.names[0]))
    }

    /// One attempt: read every member, decide, write one atomic batch
    /// (`None`: the batch lost a race and wrote nothing).
    async fn attempt_group(&self, args: &GroupArgs) -> Result<Option<Vec<Holding>>> {
        let hash = KeyHash::of(&args.key);
        let lasts = try_join_all(args.names.iter().map(|n| self.read_lease(n))).await?;
        let mut plans = Vec::with_capacity(args.names.len());
        for (name, last) in args.names.iter().zip(lasts) {
            let plan = match rules::plan_acquire(last.as_ref(), &args.holder, &hash) {
                AcquirePlan::Take { expected } => Plan::Take {
                    expected,
                    last: last.clone(),
                },
                AcquirePlan::Retry { revision, record } => Plan::Keep {
                    revision,
                    record: record.clone(),
                },
                AcquirePlan::Held { revision, record } => {
                    METRICS.group_refused.inc();
                    return Err(held(name, record, revision).with("name", name));
                }
                AcquirePlan::Unreadable => {
                    return Err(unreadable(name, self.store.bucket()).with("name", name))
                }
            };
            plans.push(plan);
        }
        // The queue and the fence of every member taken anew, read at once.
        let checks = args
            .names
            .iter()
            .zip(&plans)
            .map(|(name, plan)| async move {
                let Plan::Take { last, .. } = plan else {
                    return Ok(None);
                };
                let queue = fifo::Queue::read(&self.store, name, self.max_waiters).await?;
                let fence = if rules::needs_fence(last.as_ref(), args.lock_delay_s) {
                    self.fence(name).await?
                } else {
                    (0, None)
                };
                Ok::<_, Error>(Some((queue, fence)))
            });
        let checks = try_join_all(checks).await?;
        let now = now_ms();
        let mut guards = Vec::new();
        for ((name, plan), check) in args.names.iter().zip(&plans).zip(&checks) {
            let (Plan::Take { last, expected }, Some((queue, fence))) = (plan, check) else {
                continue;
            };
            // The record's write names the line as read with the queue, so
            // the record must be in that read as the plan read it: a
            // holding taken in between is a lost race, read again.
            let scanned = queue.lease.as_ref().map_or(0, |msg| msg.revision);
            if scanned != *expected {
                return Ok(None);
            }
            // A group never jumps a queue: it writes only while no member
            // has a waiter, and each guard re-checks that in the batch.
            if queue.waiting() > 0 {
                METRICS.group_refused.inc();
                return Err(queued(name, queue.waiting()).with("name", name));
            }
            if let Some(free_at) = rules::delayed_until(
                last.as_ref(),
                fence.1.as_ref().map_or(0, |f| f.lock_delay_s),
            ) {
                if free_at > now {
                    METRICS.group_refused.inc();
                    return Err(delayed(name, free_at, now).with("name", name));
                }
            }
            guards.push(queue.guard(name));
            if args.lock_delay_s > 0 || fence.1.is_some() {
                guards.push(fence_write(name, args.lock_delay_s, fence.0));
            }
        }
        // The records first, in request order, so member i is at revision
        // `first + i` of the batch. A member taken anew is written on its
        // line as read with its queue (design section 16, "One write"), as
        // every write that takes a free lease is: on a replicated stream
        // the leader holds it back while another grant of the name is in
        // flight. Its guard, after it, names the queue alone (its record is
        // on no queue), as tickets do, and is held back by a ticket in
        // flight (section 21).
        let mut writes = Vec::with_capacity(plans.len() + guards.len());
        let mut records = Vec::with_capacity(plans.len());
        for ((name, plan), check) in args.names.iter().zip(&plans).zip(&checks) {
            let (record, expected) = match plan {
                Plan::Take { expected, .. } => (
                    Record {
                        group: args.names.clone(),
                        ..Record::grant(
                            &args.holder,
                            &hash,
                            args.ttl_s,
                            &args.metadata,
                            args.lock_delay_s,
                            now,
                            *expected,
                        )
                    },
                    *expected,
                ),
                Plan::Keep { revision, record } => (
                    Record {
                        group: args.names.clone(),
                        ..record.renewal(*revision, Some(args.ttl_s), now)
                    },
                    *revision,
                ),
            };
            let put = Write::put(
                keys::lease(name),
                record.encode(),
                expected,
                self.nats_ttl(args.ttl_s),
            );
            writes.push(match check {
                Some((queue, _)) => Write {
                    expected: Some(queue.line),
                    expected_of: Some(keys::line_filter(name)),
                    ..put
                },
                None => put,
            });
            records.push(record);
        }
        // TEST FAULT split-groups: the records one by one, not one batch.
        if self.faults.contains(TestFault::SplitGroups) {
            let puts = &writes[..records.len()];
            return self.write_one_by_one(&args.names, puts, records).await;
        }
        writes.extend(guards);
        let later = writes.len() as u64 - 1;
        let first = match self.store.batch(&writes).await {
            Ok(last) => last - later,
            Err(CasError::Conflict) => return Ok(None),
            Err(CasError::Failed(err)) => return Err(err),
        };
        let holdings = self.written(&args.names, records, first);
        let taken = plans
            .iter()
            .filter(|p| matches!(p, Plan::Take { .. }))
            .count();
        METRICS.acquired.inc_by(taken as u64);
        METRICS.group_acquired.inc();
        tracing::debug!(names = ?args.names, holder = %args.holder, revision = first, "group acquired");
        Ok(Some(holdings))
    }

    /// The test fault `split-groups`: a group's record writes `puts` made
    /// one by one (no queue guards, no fences), 20 ms apart, so that
    /// watchers see part of the group and other writes come between its
    /// members. A lost race releases the members written so far and is a
    /// lost race (`None`: the caller reads again).
    async fn write_one_by_one(
        &self,
        names: &[String],
        puts: &[Write],
        records: Vec<Record>,
    ) -> Result<Option<Vec<Holding>>> {
        let mut holdings: Vec<Holding> = Vec::with_capacity(records.len());
        for ((name, put), record) in names.iter().zip(puts).zip(records) {
            if !holdings.is_empty() {
                tokio::time::sleep(SPLIT_GROUP_PAUSE).await;
            }
            let expected = put.expected.unwrap_or(0);
            let key = keys::lease(name);
            let written = match &put.expected_of {
                Some(line) => {
                    self.store
                        .put_under(&key, put.payload.clone(), expected, line, put.ttl)
                        .await
                }
                None => {
                    self.store
                        .put(&key, put.payload.clone(), expected, put.ttl)
                        .await
                }
            };
            let failed = match written {
                Ok(revision) => {
                    self.cache.insert(name, revision, &record);
                    holdings.push(Holding::at(name, revision, record));
                    continue;
                }
                Err(CasError::Conflict) => None,
                Err(CasError::Failed(err)) => Some(err),
            };
            for h in &holdings {
                let released = Released {
                    holder: h.record.holder.clone(),
                    token: h.token,
                };
                let _ = self
                    .store
                    .delete(&keys::lease(&h.name), released.encode(), h.revision)
                    .await;
                self.cache.remove(&h.name);
            }
            return failed.map_or(Ok(None), Err);
        }
        METRICS.group_acquired.inc();
        Ok(Some(holdings))
    }

    /// The holdings of a batch whose last `records.len()` writes were the
    /// records of `names`, in order, ending at revision `last`; each is
    /// remembered in the key cache.
    fn written(&self, names: &[String], records: Vec<Record>, first: u64) -> Vec<Holding> {
        names
            .iter()
            .zip(records)
            .enumerate()
            .map(|(i, (name, record))| {
                let revision = first + i as u64;
                self.cache.insert(name, revision, &record);
                Holding::at(name, revision, record)
            })
            .collect()
    }

    /// Renews every member in one atomic batch, all or none: a member that
    /// is not the caller's holding any more is `LEASE_NOT_HELD` naming it,
    /// and then no member is renewed.
    pub async fn renew_group(
        &self,
        members: &[GroupMember],
        key: &str,
        ttl_s: Option<u64>,
    ) -> Result<Vec<Holding>> {
        self.store.require_atomic()?;
        let hash = KeyHash::of(key);
        let names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
        for _ in 0..MAX_CAS_ATTEMPTS {
            let current = try_join_all(members.iter().map(|m| async {
                self.verify_holding(&m.name, m.expected, &hash)
                    .await
                    .map_err(|e| e.with("name", &m.name))
            }))
            .await?;
            let now = now_ms();
            let mut writes = Vec::with_capacity(members.len());
            let mut records = Vec::with_capacity(members.len());
            for (m, (revision, rec)) in members.iter().zip(&current) {
                let record = rec.renewal(*revision, ttl_s, now);
                writes.push(Write::put(
                    keys::lease(&m.name),
                    record.encode(),
                    *revision,
                    self.nats_ttl(record.ttl_s),
                ));
                records.push(record);
            }
            match self.store.batch(&writes).await {
                Ok(last) => {
                    let first = last - (writes.len() as u64 - 1);
                    return Ok(self.written(&names, records, first));
                }
                Err(CasError::Conflict) => METRICS.group_conflicts.inc(),
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(contended(&names[0]).with("name", &names[0]))
    }

    /// Releases every member still held by `key`, in one atomic batch;
    /// members already lost are reported, never an error.
    pub async fn release_group(&self, members: &[GroupMember], key: &str) -> Result<GroupRelease> {
        self.store.require_atomic()?;
        let hash = KeyHash::of(key);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let checks = join_all(
                members
                    .iter()
                    .map(|m| self.verify_holding(&m.name, m.expected, &hash)),
            )
            .await;
            let mut out = GroupRelease::default();
            let mut fences = Vec::new();
            let mut ends = Vec::new();
            for (m, check) in members.iter().zip(checks) {
                let (revision, rec): (u64, Arc<Record>) = match check {
                    Ok(held) => held,
                    Err(err) if err.reason == Reason::LeaseNotHeld => {
                        out.not_held.push(m.name.clone());
                        continue;
                    }
                    Err(err) => return Err(err.with("name", &m.name)),
                };
                if rec.lock_delay_s > 0 {
                    // As a single release: the fence goes with the holding
                    // (a release never delays).
                    fences.push(Write::delete(
                        keys::fence(&m.name),
                        bytes::Bytes::new(),
                        None,
                    ));
                }
                ends.push(Write {
                    name: keys::lease(&m.name),
                    op: WriteOp::Delete,
                    payload: Released {
                        holder: rec.holder.clone(),
                        token: rec.token_at(revision),
                    }
                    .encode(),
                    expected: Some(revision),
                    expected_of: None,
                    ttl: Duration::ZERO,
                });
                out.released.push(m.name.clone());
            }
            if ends.is_empty() {
                return Ok(out);
            }
            fences.append(&mut ends);
            match self.store.batch(&fences).await {
                Ok(revision) => {
                    for name in &out.released {
                        self.cache.remove(name);
                    }
                    METRICS.released.inc_by(out.released.len() as u64);
                    out.revision = revision;
                    return Ok(out);
                }
                Err(CasError::Conflict) => {
                    METRICS.group_conflicts.inc();
                    for m in members {
                        self.cache.remove(&m.name);
                    }
                }
                Err(CasError::Failed(err)) => return Err(err),
            }
        }
        Err(contended(&members[0].name).with("name", &members[0].name))
    }
}
