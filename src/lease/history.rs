//! Who held a name, when: the holdings of a name read back from the
//! history stream ([`History`]), each with its holder, fencing token, when
//! it began and ended and how.
//!
//! A read folds one name's recorded messages (its key and its semaphore
//! slot keys, in the order they were written) into holdings: a record
//! opens one (or goes on with it: same token), a tombstone, purge or
//! expiry marker ends it.
//!
//! **What the history can miss, and says.** NATS copies the bucket into the
//! history stream with a mirror's (or a source's) consumer, which reads
//! behind the writers; the bucket keeps one message per key, so a message
//! superseded before that consumer read it (a tombstone the next Acquire
//! wrote over within milliseconds, a holding that came and went) is never
//! copied. The read
//! never hides that: a new holding whose record says it was written over
//! a revision the history did not record (`Record::over`), or a tombstone
//! of a holding other than the one open, is a gap, reported with the
//! revisions and times between which holdings may be missing; a holding
//! whose end was not copied ends `Unknown`, at the time of the message that
//! showed it had ended (an upper bound). The first message read of a key
//! that is not a holding written over an empty key starts with a gap
//! (`after_revision` 0): what came before it was not read, either before
//! `since` or never copied. Memory is bounded per read: the holdings open at
//! once (one per key: the name and its slots) and the page of ended ones
//! (`page_size`); the messages read are bounded too (`max_messages`), and a
//! read cut short says where to go on from.

use std::collections::BTreeMap;

use futures::StreamExt;

use super::keys;
use super::record::{Entry, Kind, Revoked};
use super::Leases;
use crate::error::{Error, Reason, Result};
use crate::nats::{History, Op};

/// How a holding ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// It was still held at the last message read.
    Held,
    /// Its holder released it.
    Released,
    /// It ran out of time.
    Expired,
    /// An operator revoked it.
    Revoked {
        /// Who revoked it.
        by: String,
        /// Why.
        reason: String,
    },
    /// Its end is not recorded (a value written over it by something else,
    /// or a record of another holding written over it without an end:
    /// history older than the retention).
    Unknown,
}

/// One holding of the name, as the history records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenure {
    /// The lease name.
    pub name: String,
    /// The semaphore slot; 0 for a plain lease.
    pub slot: u32,
    /// Who held it.
    pub holder: String,
    /// Its fencing token.
    pub token: u64,
    /// When it was acquired (Unix ms; 0: before what was read).
    pub acquired_ms: u64,
    /// Its last write seen (Unix ms).
    pub renewed_ms: u64,
    /// The TTL of its last write, whole seconds.
    pub ttl_s: u64,
    /// When it ended (Unix ms); 0 while held.
    pub ended_ms: u64,
    /// How it ended.
    pub ending: Ending,
}

/// What to read.
#[derive(Debug, Clone, Copy)]
pub struct HistoryQuery {
    /// Only holdings that ended at or after this time (Unix ms) or are
    /// still held; reading starts here. 0: from the oldest kept.
    pub since_ms: u64,
    /// Only holdings held at this instant (Unix ms), when set.
    pub at_ms: Option<u64>,
    /// Most holdings returned.
    pub page_size: usize,
    /// Most messages read.
    pub max_messages: usize,
    /// Longest TTL a holding can have: a holding held at `at_ms` wrote a
    /// message at most this long before it.
    pub max_ttl_ms: u64,
}

/// A stretch of a key's history the history stream did not record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The lease name.
    pub name: String,
    /// The semaphore slot; 0 for a plain lease.
    pub slot: u32,
    /// The last revision of the key recorded before it (0: none read).
    pub after_revision: u64,
    /// Its time (Unix ms; 0: none read).
    pub after_ms: u64,
    /// The revision of the recorded message that revealed it.
    pub before_revision: u64,
    /// Its time (Unix ms).
    pub before_ms: u64,
}

/// The answer to a history read.
#[derive(Debug, Clone, Default)]
pub struct HistoryPage {
    /// The holdings, by fencing token.
    pub tenures: Vec<Tenure>,
    /// Where holdings may be missing: never silent about what the history
    /// stream did not record.
    pub gaps: Vec<Gap>,
    /// When the read stopped short (page full or message bound), the time
    /// of the first message not read: read again from there for more.
    pub more_since_ms: Option<u64>,
    /// The time of the oldest message the history keeps (Unix ms): nothing
    /// before it can be answered.
    pub oldest_ms: Option<u64>,
    /// How long the history keeps messages.
    pub retention_s: u64,
}

impl Leases {
    /// The holdings of `name` the history stream records, as `query`
    /// asks. `UNAVAILABLE`-class errors when NATS does not answer;
    /// FAILED_PRECONDITION when the server keeps no history.
    pub async fn history(
        &self,
        history: Option<&History>,
        name: &str,
        query: HistoryQuery,
    ) -> Result<HistoryPage> {
        let Some(history) = history else {
            return Err(Error::new(
                Reason::HistoryOff,
                "this server keeps no lease history: start it with --history-retention (7 days by default; 0 turns it off)",
            ));
        };
        let filters = vec![
            self.store.subject(&keys::lease(name)),
            self.store
                .subject(&format!("{}.*", keys::semaphore_prefix(name))),
        ];
        let start = match query.at_ms {
            Some(at) => at.saturating_sub(query.max_ttl_ms).max(query.since_ms),
            None => query.since_ms,
        };
        let oldest_ms = history.oldest_ms().await?;
        let mut page = HistoryPage {
            oldest_ms,
            retention_s: history.retention().as_secs(),
            ..HistoryPage::default()
        };
        let messages = history.read(filters, start).await?;
        futures::pin_mut!(messages);
        let mut fold = Fold::default();
        let mut read = 0usize;
        while let Some(message) = messages.next().await {
            let message = message?;
            let time = message.time_ms;
            if read >= query.max_messages || page.tenures.len() >= query.page_size {
                page.more_since_ms = Some(time);
                break;
            }
            read += 1;
            if let Some(at) = query.at_ms {
                if time > at && fold.open.values().all(|t| t.acquired_ms > at) {
                    // Every holding held at `at` has ended and been kept.
                    break;
                }
            }
            let (ended, gap) = fold.apply(message.op.clone(), Entry::from(message));
            for ended in ended {
                if query.keeps(&ended) {
                    page.tenures.push(ended);
                }
            }
            if let Some(gap) = gap {
                let in_range = query
                    .at_ms
                    .is_none_or(|at| gap.after_ms <= at && at <= gap.before_ms);
                if in_range && gap.before_ms >= query.since_ms && page.gaps.len() < query.page_size
                {
                    page.gaps.push(gap);
                }
            }
        }
        if page.more_since_ms.is_none() {
            for held in fold.open.into_values() {
                if query.keeps(&held) {
                    page.tenures.push(held);
                }
            }
        }
        page.tenures.sort_by_key(|t| t.token);
        page.tenures.truncate(query.page_size);
        Ok(page)
    }
}

impl HistoryQuery {
    /// Whether `t` is one this query asks for.
    fn keeps(&self, t: &Tenure) -> bool {
        let ended_after = |ms: u64| t.ending == Ending::Held || t.ended_ms >= ms;
        match self.at_ms {
            Some(at) => t.acquired_ms <= at && (t.ending == Ending::Held || t.ended_ms > at),
            None => ended_after(self.since_ms),
        }
    }
}

/// The holdings open while reading, one per key.
#[derive(Default)]
struct Fold {
    /// Key → its open holding.
    open: BTreeMap<String, Tenure>,
    /// Key → the revision and time of its last recorded message.
    last: BTreeMap<String, (u64, u64)>,
}

impl Fold {
    /// Applies one recorded message (`op` its raw form, for a purge's
    /// payload); returns the holdings it ended and the gap it revealed.
    fn apply(&mut self, op: Op, entry: Entry) -> (Vec<Tenure>, Option<Gap>) {
        let Some((shown, slot)) = keys::shown_as(&entry.name) else {
            return (Vec::new(), None);
        };
        let shown = shown.to_string();
        let last = self
            .last
            .insert(entry.name.clone(), (entry.revision, entry.time_ms));
        let gap_if = |missing: bool| {
            missing.then(|| Gap {
                name: shown.clone(),
                slot,
                after_revision: last.map_or(0, |l| l.0),
                after_ms: last.map_or(0, |l| l.1),
                before_revision: entry.revision,
                before_ms: entry.time_ms,
            })
        };
        let mut gap = None;
        let mut ended = Vec::new();
        let mut end = |open: &mut BTreeMap<String, Tenure>, ending: Ending| {
            if let Some(mut t) = open.remove(&entry.name) {
                t.ended_ms = entry.time_ms;
                t.ending = ending;
                ended.push(t);
            }
        };
        match entry.kind {
            Kind::Held(record) => {
                let token = record.token_at(entry.revision);
                let open_token = self.open.get(&entry.name).map(|t| t.token);
                if open_token.is_some_and(|t| t != token) {
                    // The end of the open holding was not recorded.
                    end(&mut self.open, Ending::Unknown);
                }
                if open_token != Some(token) {
                    // A new holding: was it written over the last message
                    // recorded? (Nothing read before it: the read's start.)
                    gap = gap_if(match (record.over, last) {
                        (Some(over), Some((rev, _))) => over != rev,
                        // The first message read of the key: anything
                        // before it that the read could have seen?
                        (Some(over), None) => over != 0,
                        (None, None) => true,
                        (None, Some(_)) => open_token.is_some(),
                    });
                }
                let t = self
                    .open
                    .entry(entry.name.clone())
                    .or_insert_with(|| Tenure {
                        name: shown,
                        slot,
                        holder: record.holder.clone(),
                        token,
                        acquired_ms: record.acquired_ms,
                        renewed_ms: 0,
                        ttl_s: 0,
                        ended_ms: 0,
                        ending: Ending::Held,
                    });
                t.renewed_ms = entry.time_ms;
                t.ttl_s = record.ttl_s;
            }
            Kind::Released(payload) => {
                let open_token = self.open.get(&entry.name).map(|t| t.token);
                let other = match (&payload, open_token) {
                    (Some(p), Some(t)) => p.token != t,
                    // A release of a holding whose start was not read.
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                gap = gap_if(other);
                if other && open_token.is_some() {
                    end(&mut self.open, Ending::Unknown);
                }
                if !self.open.contains_key(&entry.name) {
                    // Acquired before what was read: known by its payload.
                    if let Some(p) = payload {
                        ended.push(Tenure {
                            name: shown,
                            slot,
                            holder: p.holder,
                            token: p.token,
                            acquired_ms: 0,
                            renewed_ms: 0,
                            ttl_s: 0,
                            ended_ms: entry.time_ms,
                            ending: Ending::Released,
                        });
                    }
                } else {
                    end(&mut self.open, Ending::Released);
                }
            }
            Kind::Expired => end(&mut self.open, Ending::Expired),
            Kind::Revoked(_) => {
                let (by, reason) = match &op {
                    Op::Purge(payload) => Revoked::decode(payload)
                        .map(|r| (r.revoked_by, r.reason))
                        .unwrap_or_default(),
                    _ => Default::default(),
                };
                end(&mut self.open, Ending::Revoked { by, reason });
            }
            Kind::Unreadable => end(&mut self.open, Ending::Unknown),
        }
        (ended, gap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::record::fixtures::{entry, held};
    use crate::lease::record::Released;

    fn at(e: Entry, ms: u64) -> Entry {
        Entry { time_ms: ms, ..e }
    }

    /// Records open and renew a holding; a tombstone, a marker or a purge
    /// ends it; a release of a holding acquired before the read is known
    /// by its payload; a semaphore slot shows under its name.
    #[test]
    fn messages_fold_into_holdings() {
        let mut f = Fold::default();
        let none = Op::Expired;
        assert!(f
            .apply(none.clone(), at(entry("a", 1, held("h", 0)), 10))
            .0
            .is_empty());
        assert!(f
            .apply(none.clone(), at(entry("a", 2, held("h", 1)), 20))
            .0
            .is_empty());
        let (ended, _) = f.apply(
            none.clone(),
            at(
                entry(
                    "a",
                    3,
                    Kind::Released(Some(Released {
                        holder: "h".into(),
                        token: 1,
                    })),
                ),
                30,
            ),
        );
        assert_eq!(ended.len(), 1);
        let t = &ended[0];
        assert_eq!(
            (
                t.holder.as_str(),
                t.token,
                t.renewed_ms,
                t.ended_ms,
                &t.ending
            ),
            ("h", 1, 20, 30, &Ending::Released)
        );
        // A marker over a free key ends nothing.
        assert!(f
            .apply(none.clone(), at(entry("a", 4, Kind::Expired), 40))
            .0
            .is_empty());
        // An expiry.
        f.apply(none.clone(), at(entry("a", 5, held("g", 0)), 50));
        let (t, _) = f.apply(none.clone(), at(entry("a", 6, Kind::Expired), 60));
        assert_eq!((t[0].token, &t[0].ending), (5, &Ending::Expired));
        // A slot of semaphore "s".
        let key = keys::semaphore_slot("s", 2);
        f.apply(none.clone(), at(entry(&key, 7, held("x", 0)), 70));
        let (t, _) = f.apply(none, at(entry(&key, 8, Kind::Expired), 80));
        assert_eq!((t[0].name.as_str(), t[0].slot), ("s", 2));
        // A release of a holding whose start was not read.
        let (t, _) = f.apply(
            Op::Expired,
            at(
                entry(
                    "b",
                    9,
                    Kind::Released(Some(Released {
                        holder: "old".into(),
                        token: 4,
                    })),
                ),
                90,
            ),
        );
        assert_eq!((t[0].token, t[0].acquired_ms), (4, 0));
    }

    /// What the history did not record is a gap, never silence: a new
    /// holding written over a revision not recorded, or a release of a
    /// holding other than the one open (whose end then is Unknown).
    #[test]
    fn unrecorded_messages_are_gaps() {
        use crate::lease::record::fixtures::held_over;
        let mut f = Fold::default();
        let op = Op::Expired;
        f.apply(op.clone(), at(entry("a", 1, held_over("h", 0, 0)), 10));
        // 2 (h released) and 3 (g acquired over 2) not recorded; 4: g renews.
        let (ended, gap) = f.apply(op.clone(), at(entry("a", 4, held_over("g", 3, 2)), 40));
        assert_eq!(
            (ended[0].token, &ended[0].ending, ended[0].ended_ms),
            (1, &Ending::Unknown, 40)
        );
        let gap = gap.expect("a gap");
        assert_eq!(
            (gap.after_revision, gap.before_revision, gap.after_ms),
            (1, 4, 10)
        );
        // Over the message recorded: no gap.
        f.apply(
            op.clone(),
            at(
                entry(
                    "a",
                    5,
                    Kind::Released(Some(Released {
                        holder: "g".into(),
                        token: 3,
                    })),
                ),
                50,
            ),
        );
        let (_, gap) = f.apply(op.clone(), at(entry("a", 6, held_over("k", 0, 5)), 60));
        assert!(gap.is_none());
        // A release of another holding than the one open.
        let (ended, gap) = f.apply(
            op,
            at(
                entry(
                    "a",
                    9,
                    Kind::Released(Some(Released {
                        holder: "z".into(),
                        token: 8,
                    })),
                ),
                90,
            ),
        );
        assert!(gap.is_some());
        let tokens: Vec<(u64, Ending)> = ended.into_iter().map(|t| (t.token, t.ending)).collect();
        assert_eq!(tokens, vec![(6, Ending::Unknown), (8, Ending::Released)]);
    }

    /// A query at an instant keeps the holdings held then; a query since a
    /// time keeps those that ended after it or are held.
    #[test]
    fn queries_keep_what_they_ask_for() {
        let t = |acquired_ms, ended_ms, ending| Tenure {
            name: "a".into(),
            slot: 0,
            holder: "h".into(),
            token: 1,
            acquired_ms,
            renewed_ms: acquired_ms,
            ttl_s: 5,
            ended_ms,
            ending,
        };
        let q = |since_ms, at_ms| HistoryQuery {
            since_ms,
            at_ms,
            page_size: 10,
            max_messages: 10,
            max_ttl_ms: 1000,
        };
        assert!(q(0, Some(15)).keeps(&t(10, 20, Ending::Released)));
        assert!(!q(0, Some(25)).keeps(&t(10, 20, Ending::Released)));
        assert!(!q(0, Some(5)).keeps(&t(10, 20, Ending::Released)));
        assert!(q(0, Some(25)).keeps(&t(10, 0, Ending::Held)));
        assert!(q(15, None).keeps(&t(10, 20, Ending::Released)));
        assert!(!q(25, None).keeps(&t(10, 20, Ending::Released)));
    }
}
