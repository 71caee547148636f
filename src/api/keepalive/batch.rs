//! One KeepAlive request message: its entries renewed concurrently, each
//! as a unary Renew would be, and their results made compact.
//!
//! Each entry is authorized first (on the raw name: a caller without the
//! grant learns nothing of what else is wrong with it), then validated,
//! then given a renewal permit ([`Class::Renewal`](crate::api::limits::Class::Renewal)) for the NATS operation
//! it makes, so a message counts as many calls as it makes NATS
//! operations and entries refused earlier cost none. An entry refused only
//! by its identity's share waits for the identity's next permit to end
//! (at most [`SHARE_PATIENCE`]). Denied entries are
//! logged like unary denials, at most one line a second per replica with
//! the count since the last line. Results are built as the entries finish,
//! in entry order, and an entry whose error repeats exactly the error of
//! an earlier entry of the same reply carries only its code, its reason
//! and `same_as` (that entry's index): the reply to a message of a
//! thousand failing entries is small, and never held whole in memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::stream::FuturesOrdered;
use tokio::time::{Duration, Instant};
use tokio_stream::StreamExt;
use tonic::Code;
use tracing::Instrument;

use super::Renewal;
use crate::api::auth::{clip, Auth, Caller, Target};
use crate::api::convert::lease;
use crate::api::limits::CallLimits;
use crate::config::{Action, Limits};
use crate::error::{Error, Reason};
use crate::lease::Shards;
use crate::observe::METRICS;
use crate::proto;
use crate::proto::keep_alive_result::Outcome;

/// The metrics label of each renewal over a stream.
const METHOD: &str = "KeepAlive";

/// The bytes charged per entry while its message runs: the entry and its
/// result as they sit in memory, and a renewed plain lease's text (the
/// reply's real [`weight`] replaces the estimate once it is computed).
pub(super) const ENTRY_ESTIMATE: usize =
    size_of::<proto::KeepAliveEntry>() + size_of::<proto::KeepAliveResult>() + 256;

/// What a computed reply weighs until the transport takes it: its results
/// as they sit in memory and the bytes they point to (about their encoded
/// size).
pub(super) fn weight(reply: &proto::KeepAliveResponse) -> usize {
    use prost::Message;
    reply.encoded_len() + reply.results.len() * size_of::<proto::KeepAliveResult>()
}

/// How long an entry refused only by its identity's share of renewal
/// permits waits for one of them to end before it is refused: the
/// identity's flood is held back (its streams stop being read) instead of
/// being refused as fast as it is sent.
const SHARE_PATIENCE: Duration = Duration::from_secs(2);

/// How often denied entries are logged, at most, per replica.
const DENIAL_LOG_EVERY: Duration = Duration::from_secs(1);

/// What one stream's work needs, shared by its messages.
pub(super) struct Renewer {
    /// The lease protocol over each shard.
    pub(super) shards: Shards,
    /// TTL bounds.
    pub(super) limits: Limits,
    /// Per-entry authorization.
    pub(super) auth: Arc<Auth>,
    /// The renewal permit of each entry.
    pub(super) calls: Arc<CallLimits>,
    /// Who opened the stream.
    pub(super) caller: Caller,
}

impl Renewer {
    /// Answers one request: renews every entry concurrently, and turns
    /// each outcome into its result as it arrives, in entry order, so that
    /// an error repeating an earlier one is never held whole.
    pub(super) async fn batch(&self, request: proto::KeepAliveRequest) -> proto::KeepAliveResponse {
        // Debug, like the RPC spans: traces export it, info logs skip it.
        let span = tracing::debug_span!(
            "keepalive",
            otel.name = METHOD,
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.method = METHOD,
            identity = clip(&self.caller.identity),
            entries = request.entries.len(),
            failed = tracing::field::Empty,
        );
        async {
            let started = Instant::now();
            let mut results = Compact::default();
            // One entry (the common message of a session helper) needs no
            // queue: its future is not moved into one.
            match request.entries.as_slice() {
                [one] => results.push(one, self.entry(one, started).await),
                entries => {
                    let mut renewals: FuturesOrdered<_> =
                        entries.iter().map(|e| self.entry(e, started)).collect();
                    let mut next = entries.iter();
                    while let Some(result) = renewals.next().await {
                        results.push(next.next().expect("one entry per result"), result);
                    }
                }
            }
            if let Some(first) = &results.first_denied {
                log_denials(&self.caller, results.denied, first);
            }
            tracing::Span::current().record("failed", results.failed);
            proto::KeepAliveResponse {
                results: results.results,
            }
        }
        .instrument(span)
        .await
    }

    /// Renews one entry as a unary Renew would: the caller's `renew` grant
    /// on the name, then the fields, then a renewal permit and the
    /// renewal; counted in the RPC metrics.
    async fn entry(
        &self,
        e: &proto::KeepAliveEntry,
        started: Instant,
    ) -> Result<proto::Lease, Error> {
        let result = async {
            self.auth
                .authorize(&self.caller, Action::Renew, Target::Entry(&e.name))?;
            let renewal = Renewal::check(
                &self.limits,
                &e.name,
                e.expected_revision,
                &e.lease_key,
                e.ttl.as_ref(),
                e.slot,
            )?;
            let _permit = self
                .calls
                .admit_renewal_waiting(&self.caller.identity, SHARE_PATIENCE)
                .await?;
            renewal.run(&self.shards).await
        }
        .await;
        let code = match &result {
            Ok(_) => Code::Ok,
            Err(err) => err.reason.code(),
        };
        METRICS.rpc(METHOD, code, started.elapsed());
        result.map(|h| lease(&h))
    }
}

/// The results of one message, built entry by entry: an error that
/// repeats an earlier one exactly is sent as its code, its reason and the
/// earlier one's index (`same_as`).
#[derive(Default)]
struct Compact {
    /// The results so far, in entry order.
    results: Vec<proto::KeepAliveResult>,
    /// Each distinct error so far, with the index of its first result.
    first: HashMap<Error, u32>,
    /// Entries failed.
    failed: usize,
    /// Entries denied, and the name of the first.
    denied: u64,
    /// The lease name of the first denied entry.
    first_denied: Option<String>,
}

impl Compact {
    /// Adds the result of entry `e`.
    fn push(&mut self, e: &proto::KeepAliveEntry, result: Result<proto::Lease, Error>) {
        let index = u32::try_from(self.results.len()).unwrap_or(u32::MAX);
        let outcome = match result {
            Ok(l) => Outcome::Lease(l),
            Err(err) => {
                self.failed += 1;
                if err.reason == Reason::PermissionDenied {
                    self.denied += 1;
                    self.first_denied
                        .get_or_insert_with(|| clip(&e.name).to_string());
                }
                Outcome::Error(match self.first.get(&err) {
                    Some(&first) => proto::KeepAliveError {
                        code: err.reason.code() as i32,
                        reason: err.reason.sent().as_str_name().to_string(),
                        same_as: Some(first),
                        ..Default::default()
                    },
                    None => {
                        let whole = entry_error(&err);
                        self.first.insert(err, index);
                        whole
                    }
                })
            }
        };
        self.results.push(proto::KeepAliveResult {
            id: e.id,
            outcome: Some(outcome),
        });
    }
}

/// An entry's error, as the status of a unary Renew would carry it.
fn entry_error(err: &Error) -> proto::KeepAliveError {
    let reason = err.reason.sent();
    proto::KeepAliveError {
        code: reason.code() as i32,
        reason: reason.as_str_name().to_string(),
        message: err.message.clone(),
        metadata: err
            .metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        retry_delay: err.retry_after.map(|d| prost_types::Duration {
            seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos() as i32,
        }),
        same_as: None,
    }
}

/// Denied entries not yet logged, across the replica.
struct DenialLog {
    /// When the last line was written.
    last: Option<Instant>,
    /// Entries denied since, not yet in a line.
    unlogged: u64,
}

/// The replica's denial log state.
static DENIALS: Mutex<DenialLog> = Mutex::new(DenialLog {
    last: None,
    unlogged: 0,
});

/// Logs `n` entries of `caller` denied in one message (the first for the
/// lease `first`), like a unary denial, unless a line was written less
/// than [`DENIAL_LOG_EVERY`] ago: then they are counted in the next line.
fn log_denials(caller: &Caller, n: u64, first: &str) {
    let now = Instant::now();
    let unlogged = {
        let mut log = DENIALS.lock().expect("denial log lock");
        log.unlogged += n;
        if log
            .last
            .is_some_and(|last| now.duration_since(last) < DENIAL_LOG_EVERY)
        {
            return;
        }
        log.last = Some(now);
        std::mem::take(&mut log.unlogged)
    };
    tracing::info!(
        method = METHOD,
        lease.name = clip(first),
        identity = %caller.identity,
        action = Action::Renew.as_str(),
        denied_entries = unlogged,
        "permission denied: {unlogged} KeepAlive entries since the last such line (this one's first for lease {:?}); add a [[grant]] with the renew action to the server's config",
        clip(first),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64) -> proto::KeepAliveEntry {
        proto::KeepAliveEntry {
            id,
            ..Default::default()
        }
    }

    fn bad(message: &str) -> Result<proto::Lease, Error> {
        Err(Error::new(Reason::InvalidName, message).with("field", "name"))
    }

    fn error(r: &proto::KeepAliveResult) -> &proto::KeepAliveError {
        match &r.outcome {
            Some(Outcome::Error(e)) => e,
            other => panic!("an error, not {other:?}"),
        }
    }

    /// Errors repeating an earlier one keep code and reason and point to
    /// it; different errors and renewals are left whole; ids are echoed.
    #[test]
    fn repeated_errors_point_to_the_first() {
        let mut c = Compact::default();
        c.push(&entry(7), bad("bad"));
        c.push(&entry(8), Ok(proto::Lease::default()));
        c.push(&entry(9), bad("bad"));
        c.push(&entry(10), bad("worse"));
        c.push(&entry(11), bad("bad"));
        let r = &c.results;
        let first = error(&r[0]);
        assert_eq!(first.message, "bad");
        assert_eq!(
            first.metadata.get("field").map(String::as_str),
            Some("name")
        );
        assert_eq!(
            (first.code, first.same_as),
            (Code::InvalidArgument as i32, None)
        );
        let e = error(&r[2]);
        assert_eq!((e.same_as, e.message.as_str()), (Some(0), ""));
        assert!(e.metadata.is_empty());
        assert_eq!(
            (e.code, e.reason.as_str()),
            (Code::InvalidArgument as i32, "INVALID_NAME")
        );
        assert_eq!(
            (error(&r[3]).same_as, error(&r[3]).message.as_str()),
            (None, "worse")
        );
        assert_eq!(error(&r[4]).same_as, Some(0));
        assert_eq!(
            r.iter().map(|r| r.id).collect::<Vec<_>>(),
            [7, 8, 9, 10, 11]
        );
        assert_eq!(c.failed, 4);
    }
}
