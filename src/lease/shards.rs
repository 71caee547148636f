//! Sharded buckets: which shard holds a name, and the calls that span shards.
//!
//! One bucket is one stream, and every write to a stream goes through its
//! one leader. A bucket made with `--shards N` is N buckets (streams) whose
//! leaders NATS can place on different cluster nodes. A name always lives in
//! the same shard ([`shard_of`], fixed by the name and N), and so does
//! everything Tenure keeps about it (queue tickets, lock-delay fence,
//! semaphore slots): each shard is a complete, independent [`Leases`] with
//! its own shared watcher, and fencing tokens stay monotonic per name
//! because a name's revisions all come from one stream.
//!
//! What spans shards lives here: listings (each shard lists a page, the
//! pages merge by name) and subtree watches (each shard's snapshot in turn,
//! one `SnapshotComplete` carrying every shard's position, then the live
//! events of all shards as they come). Revisions are per shard, so a
//! subtree watch resumes from one revision per shard. A group is one
//! atomic batch, which one stream commits: its members must share a shard.

use std::sync::Arc;

use futures::stream::{self, BoxStream, StreamExt};

use super::event::{Event, EventKind, Filter};
use super::history::{HistoryPage, HistoryQuery};
use super::list::Page;
use super::watch::Subscription;
use super::Leases;
use crate::error::{Error, Reason, Result};
use crate::nats::History;

/// The shard of `name` in a bucket of `count` shards: FNV-1a (64-bit) of
/// the name's UTF-8 bytes, modulo `count`. Stable across versions and
/// replicas; written down in the design so other tools can compute it.
pub fn shard_of(name: &str, count: u32) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    if count <= 1 {
        return 0;
    }
    let hash = name
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    (hash % u64::from(count)) as u32
}

/// Where a watch starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum From {
    /// A snapshot of the current holdings.
    Now,
    /// After this revision (a watch of one name, or a bucket of one shard).
    Revision(u64),
    /// After these revisions, one per shard (0: that shard's snapshot).
    PerShard(Vec<u64>),
}

/// The lease operations over every shard of a bucket. Cheap to clone.
#[derive(Clone)]
pub struct Shards {
    /// One [`Leases`] per shard, by shard number.
    shards: Arc<[Leases]>,
    /// The history stream over every shard, when kept.
    history: Option<History>,
}

/// One event of a watch, with the shard it came from.
#[derive(Debug, Clone)]
pub struct ShardEvent {
    /// The shard whose stream the event is from (0 on one shard).
    pub shard: u32,
    /// The event.
    pub event: Arc<Event>,
    /// On the `SnapshotComplete` of a watch over several shards: where each
    /// shard's snapshot or replay ended. Empty otherwise.
    pub positions: Vec<u64>,
}

/// A watch over the shards that can hold what it follows.
pub struct Watch {
    /// The subscriptions, with their shard numbers (one for a name).
    parts: Vec<(u32, Subscription)>,
}

impl Shards {
    /// The bucket's shards, in shard order (at least one).
    pub fn new(shards: Vec<Leases>) -> Shards {
        assert!(!shards.is_empty(), "a bucket has at least one shard");
        Shards {
            shards: shards.into(),
            history: None,
        }
    }

    /// The shards, answering LeaseHistory from `history`.
    pub fn with_history(mut self, history: Option<History>) -> Shards {
        self.history = history;
        self
    }

    /// The holdings of `name` the history records (see
    /// [`Leases::history`]).
    pub async fn history(&self, name: &str, query: HistoryQuery) -> Result<HistoryPage> {
        self.of(name)
            .history(self.history.as_ref(), name, query)
            .await
    }

    /// How many shards the bucket has.
    pub fn count(&self) -> u32 {
        self.shards.len() as u32
    }

    /// The shard number of `name`.
    pub fn index_of(&self, name: &str) -> u32 {
        shard_of(name, self.count())
    }

    /// The lease operations of the shard that holds `name`.
    pub fn of(&self, name: &str) -> &Leases {
        &self.shards[self.index_of(name) as usize]
    }

    /// The shard that holds every one of `names` (a group's members), or
    /// `INVALID_ARGUMENT` naming two that live apart.
    pub fn of_group<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<&Leases> {
        let mut names = names.into_iter();
        let Some(first) = names.next() else {
            return Ok(&self.shards[0]);
        };
        let shard = self.index_of(first);
        if let Some(other) = names.find(|n| self.index_of(n) != shard) {
            return Err(Error::new(
                Reason::InvalidArgument,
                format!(
                    "group members {first:?} (shard {shard}) and {other:?} (shard {}) live in \
                     different shards of this {}-shard bucket; a group's members must share a \
                     shard",
                    self.index_of(other),
                    self.count()
                ),
            ));
        }
        Ok(&self.shards[shard as usize])
    }

    /// One page of the live holdings under `prefix`, across shards: every
    /// shard lists a page after the token and the pages merge by name (a
    /// token is a name, which every shard can continue after).
    pub async fn list(&self, prefix: &str, page_size: u32, page_token: &str) -> Result<Page> {
        if self.shards.len() == 1 {
            return self.shards[0].list(prefix, page_size, page_token).await;
        }
        let pages = futures::future::try_join_all(
            self.shards
                .iter()
                .map(|s| s.list(prefix, page_size, page_token)),
        )
        .await?;
        let size = match page_size as usize {
            0 => super::list::DEFAULT_PAGE_SIZE,
            n => n.min(super::list::MAX_PAGE_SIZE),
        };
        let more = pages.iter().any(|p| !p.next_page_token.is_empty());
        let mut leases: Vec<_> = pages.into_iter().flat_map(|p| p.leases).collect();
        leases.sort_by(|a, b| (&a.name, a.slot).cmp(&(&b.name, b.slot)));
        let more = more || leases.len() > size;
        leases.truncate(size);
        Ok(Page::of(leases, more))
    }

    /// Follows `filter` from `from`: a name in its shard, a subtree in
    /// every shard.
    pub async fn watch(&self, filter: Filter, kinds: Vec<EventKind>, from: From) -> Result<Watch> {
        let count = self.count();
        if let From::PerShard(revisions) = &from {
            if revisions.len() != self.shards.len() {
                return Err(Error::new(
                    Reason::InvalidRevision,
                    format!(
                        "shard_revisions has {} entries but the bucket has {count} shard(s); give one per shard",
                        revisions.len()
                    ),
                ));
            }
        }
        let shards: Vec<u32> = match &filter {
            Filter::Name(name) => vec![self.index_of(name)],
            Filter::Subtree(_) => (0..count).collect(),
        };
        if let (From::Revision(_), true) = (&from, shards.len() > 1) {
            // One revision cannot say where each shard's stream stood. The
            // answer clients already take as "start afresh" (a snapshot,
            // whose check shows any loss) is the safe one.
            return Err(Error::new(
                Reason::WatchHistoryCompacted,
                format!(
                    "revisions are per shard and this bucket has {count} shards: start the \
                     subtree watch afresh (start_revision 0), or resume it with shard_revisions"
                ),
            ));
        }
        let mut parts = Vec::with_capacity(shards.len());
        for shard in shards {
            let leases = &self.shards[shard as usize];
            let start = match &from {
                From::Now => 0,
                From::Revision(r) => *r,
                From::PerShard(revisions) => revisions[shard as usize],
            };
            let subscription = match start {
                0 => leases.watch(filter.clone(), kinds.clone()).await?,
                from => leases.resume(filter.clone(), kinds.clone(), from).await?,
            };
            parts.push((shard, subscription));
        }
        Ok(Watch { parts })
    }

    /// Every shard's lease operations, by shard number.
    pub fn all(&self) -> &[Leases] {
        &self.shards
    }
}

impl Watch {
    /// Keeps `guard` (the watch's slot in a limit) until the watch ends.
    pub fn hold(&self, guard: impl Send + 'static) {
        self.parts[0].1.hold(guard);
    }

    /// The events, ending after the first error. One part: its events as
    /// they are. Several: each shard's snapshot (or replay) in turn, while
    /// the others buffer their live events within the watch's budget; one
    /// `SnapshotComplete` with every shard's position; then the live events
    /// of every shard as they arrive (in order within a shard).
    pub fn into_stream(self) -> BoxStream<'static, Result<ShardEvent>> {
        let mut parts = self.parts;
        if parts.len() == 1 {
            let (shard, sub) = parts.remove(0);
            return sub
                .into_stream()
                .map(move |item| {
                    item.map(|event| ShardEvent {
                        shard,
                        event,
                        positions: Vec::new(),
                    })
                })
                .boxed();
        }
        let preludes = stream::unfold(Some((parts, 0usize, Vec::new())), |state| async move {
            let (mut parts, mut i, mut positions) = state?;
            loop {
                let Some((shard, sub)) = parts.get_mut(i) else {
                    // Every prelude is done: the one marker, then live.
                    let event = ShardEvent {
                        shard: 0,
                        event: Arc::new(Event {
                            revision: 0,
                            ..Event::snapshot_complete()
                        }),
                        positions,
                    };
                    return Some((Ok(Step::Done(event, parts)), None));
                };
                let shard = *shard;
                match sub.next().await {
                    Err(err) => return Some((Err(err), None)),
                    Ok(event) if event.kind == EventKind::SnapshotComplete => {
                        positions.push(event.revision);
                        i += 1;
                    }
                    Ok(event) => {
                        let event = ShardEvent {
                            shard,
                            event,
                            positions: Vec::new(),
                        };
                        return Some((Ok(Step::Event(event)), Some((parts, i, positions))));
                    }
                }
            }
        });
        preludes
            .flat_map(|step| match step {
                Err(err) => stream::once(async { Err(err) }).boxed(),
                Ok(Step::Event(event)) => stream::once(async { Ok(event) }).boxed(),
                Ok(Step::Done(marker, parts)) => {
                    let live = stream::select_all(parts.into_iter().map(|(shard, sub)| {
                        sub.into_stream()
                            .map(move |item| {
                                item.map(|event| ShardEvent {
                                    shard,
                                    event,
                                    positions: Vec::new(),
                                })
                            })
                            .boxed()
                    }));
                    stream::once(async { Ok(marker) }).chain(live).boxed()
                }
            })
            .scan(false, |ended, item| {
                // End after the first error, as one subscription does.
                let out = (!*ended).then_some(item);
                if matches!(out, Some(Err(_))) {
                    *ended = true;
                }
                async move { out }
            })
            .boxed()
    }
}

/// One step of reading the preludes of a watch over several shards.
enum Step {
    /// An event of a shard's snapshot or replay.
    Event(ShardEvent),
    /// Every prelude is read: the merged marker and the subscriptions.
    Done(ShardEvent, Vec<(u32, Subscription)>),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shard function is FNV-1a 64 modulo the count: pinned values, so a
    /// change to it (which would move names between shards) fails here.
    #[test]
    fn shard_of_is_fnv1a_and_stable() {
        assert_eq!(shard_of("anything", 1), 0);
        assert_eq!(shard_of("anything", 0), 0);
        // FNV-1a 64 of "" is the offset basis; of "a" is 0xaf63dc4c8601ec8c.
        assert_eq!(shard_of("", 7), (0xcbf2_9ce4_8422_2325u64 % 7) as u32);
        assert_eq!(shard_of("a", 3), (0xaf63_dc4c_8601_ec8cu64 % 3) as u32);
        // Names spread over the shards.
        let mut seen = [0u32; 3];
        for i in 0..300 {
            seen[shard_of(&format!("jobs.{i}"), 3) as usize] += 1;
        }
        assert!(seen.iter().all(|n| *n > 60), "{seen:?}");
    }
}
