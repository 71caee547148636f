//! The Redis store of the `fenced-redis` scenario: every write is a fenced
//! `SET` through the Redis kit (`fence/kits/redis/tenure_fence.lua`, sent
//! as `EVALSHA`, loaded on `NOSCRIPT`), on a real redis-server.
//!
//! Keys, as the kit's README gives them: the fence key of a resource is
//! `tenure:fence:{<resource>}` (its highest token), the data key
//! `<resource>:{<resource>}:state` (the last write's value).
//!
//! Redis has no log to audit the store's commit order with, so each write
//! makes the data key one: its value is `<token> <client> <n>` (unique per
//! write), and it is sent as `SET <value> GET`, which the script runs
//! atomically and which answers the value it replaced. Each accepted write
//! thus names its predecessor; [`order`] follows the links from the first
//! write (which replaced nothing) and gives the store's own order of
//! accepted writes, which property 2 judges like PostgreSQL's log. A write
//! whose outcome was lost (no reply) leaves a gap: the writes after it form
//! a new segment, judged on its own.

use std::collections::{BTreeMap, HashMap, HashSet};

use redis::aio::MultiplexedConnection;

use crate::admit::Admitted;
use crate::history::{Op, OpKind, Phase};
use crate::store::{Accepted, Written};

/// The kit's script, as the kit ships it.
const KIT: &str = include_str!("../../fence/kits/redis/tenure_fence.lua");

/// The fence key of `resource`.
pub fn fence_key(resource: &str) -> String {
    format!("tenure:fence:{{{resource}}}")
}

/// The data key of `resource`.
pub fn data_key(resource: &str) -> String {
    format!("{resource}:{{{resource}}}:state")
}

/// The value a write stores: its token, its client and the client's write
/// number (unique per write; the token first, so a predecessor's token can
/// be read from it).
pub fn value(token: u64, client: &str, n: u64) -> String {
    format!("{token} {client} {n}")
}

/// One client's handle on Redis.
pub struct Store {
    /// The connection.
    conn: MultiplexedConnection,
    /// The kit, by its SHA-1.
    script: redis::Script,
}

/// Connects to Redis at `url` (`redis://host:port/db`).
pub async fn connect(url: &str) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| format!("bad Redis URL {url:?}: {e}"))?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("cannot connect to Redis at {url}: {e}"))
}

impl Store {
    /// A store over an open connection.
    pub fn new(conn: MultiplexedConnection) -> Store {
        Store {
            conn,
            script: redis::Script::new(KIT),
        }
    }

    /// Stores `value` in `resource` through the kit with the admitted
    /// token: `Accepted` with the value it replaced (empty: none), or
    /// `Stale` when the kit answered `FENCE_STALE`.
    pub async fn write(
        &mut self,
        resource: &str,
        fence: &Admitted,
        value: &str,
    ) -> Result<Written, String> {
        let res: redis::RedisResult<Option<String>> = self
            .script
            .key(fence_key(resource))
            .key(data_key(resource))
            .arg(fence.token.to_string())
            .arg("SET")
            .arg(value)
            .arg("GET")
            .invoke_async(&mut self.conn)
            .await;
        match res {
            Ok(old) => Ok(Written::Accepted {
                seq: None,
                replaced: Some(old.unwrap_or_default()),
            }),
            Err(e) if e.code() == Some("FENCE_STALE") => Ok(Written::Stale),
            Err(e) => Err(format!("Redis kit: {e}")),
        }
    }
}

/// The highest token of each of `resources` (their fence keys; resources
/// never fenced are left out).
pub async fn highest(
    conn: &mut MultiplexedConnection,
    resources: &[String],
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for r in resources {
        let v: Option<String> = redis::cmd("GET")
            .arg(fence_key(r))
            .query_async(conn)
            .await
            .map_err(|e| format!("cannot read the fence key of {r}: {e}"))?;
        if let Some(v) = v {
            out.push((r.clone(), v));
        }
    }
    Ok(out)
}

/// The last value of each of `resources` (their data keys).
pub async fn last_values(
    conn: &mut MultiplexedConnection,
    resources: &[String],
) -> Result<HashMap<String, String>, String> {
    let mut out = HashMap::new();
    for r in resources {
        let v: Option<String> = redis::cmd("GET")
            .arg(data_key(r))
            .query_async(conn)
            .await
            .map_err(|e| format!("cannot read the data key of {r}: {e}"))?;
        if let Some(v) = v {
            out.insert(r.clone(), v);
        }
    }
    Ok(out)
}

/// The store's order of accepted writes, rebuilt from the values each
/// replaced.
#[derive(Debug, Default)]
pub struct Order {
    /// The accepted writes in the store's order, per resource and segment
    /// (the writes after a gap are a segment of their own); the `seq` is
    /// the place in that order.
    pub accepted: Vec<Accepted>,
    /// Why the writes do not form one chain per resource: two writes that
    /// replaced the same value (the script was not atomic), or a last value
    /// that no accepted write stored.
    pub problems: Vec<String>,
}

/// Rebuilds the store's order from the clients' writes to resources under
/// `prefix` (`ops`: every history line; `last`: the data keys' final
/// values, by resource).
pub fn order(ops: &[Op], prefix: &str, last: &HashMap<String, String>) -> Order {
    let mut out = Order::default();
    // Per resource: value -> (token, value it replaced).
    let mut per: BTreeMap<String, HashMap<String, (u64, String)>> = BTreeMap::new();
    for op in ops
        .iter()
        .filter(|o| o.op == OpKind::Write && o.phase == Phase::Ok)
    {
        let Some(replaced) = &op.replaced else {
            continue;
        };
        let resource = crate::admit::resource(prefix, &op.name, op.slot);
        per.entry(resource).or_default().insert(
            value(op.token, &op.client, op.revision),
            (op.token, replaced.clone()),
        );
    }
    for (resource, writes) in &per {
        // The successor of each value; a value replaced twice breaks the
        // chain.
        let mut next: HashMap<&str, &str> = HashMap::new();
        for (v, (_, replaced)) in writes {
            if let Some(other) = next.insert(replaced.as_str(), v.as_str()) {
                out.problems.push(format!(
                    "Redis {resource}: writes {other:?} and {v:?} both replaced {replaced:?}"
                ));
            }
        }
        // Segments start at the first write (replaced nothing) and after
        // each gap (replaced a value no accepted write of ours stored).
        let mut starts: Vec<&str> = writes
            .iter()
            .filter(|(_, (_, r))| r.is_empty() || !writes.contains_key(r))
            .map(|(v, _)| v.as_str())
            .collect();
        starts.sort_by_key(|v| writes[*v].0);
        let mut seen: HashSet<&str> = HashSet::new();
        let mut seq = 0;
        for (segment, start) in starts.iter().enumerate() {
            let mut at = Some(*start);
            while let Some(v) = at.filter(|v| seen.insert(v)) {
                seq += 1;
                out.accepted.push(Accepted {
                    seq,
                    resource: resource.clone(),
                    segment: segment as u32,
                    fence: writes[v].0 as i64,
                });
                at = next.get(v).copied();
            }
        }
        if seen.len() < writes.len() {
            out.problems.push(format!(
                "Redis {resource}: {} accepted writes are not on any chain from a first write",
                writes.len() - seen.len()
            ));
        }
        if let Some(v) = last.get(resource) {
            if !writes.contains_key(v) {
                out.problems.push(format!(
                    "Redis {resource}: its last value {v:?} is no accepted write's"
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An accepted write of `client`'s `n`th write with `token` that
    /// replaced `replaced`.
    fn wrote(client: &str, n: u64, token: u64, replaced: &str) -> Op {
        Op {
            client: client.into(),
            holding: format!("{client}#1"),
            name: "res.a".into(),
            op: OpKind::Write,
            phase: Phase::Ok,
            t0: 1,
            t1: 2,
            w0: 1,
            token,
            revision: n,
            ttl_ms: 0,
            deadline: 0,
            server_ms: 0,
            timeout_ms: 0,
            slot: 0,
            wait_ms: 0,
            lock_delay_ms: 0,
            group: String::new(),
            mode: None,
            detail: String::new(),
            replaced: Some(replaced.into()),
        }
    }

    #[test]
    fn the_store_order_follows_the_replaced_values() {
        let ops = vec![
            wrote("c1", 1, 5, "3 c0 1"),
            wrote("c0", 1, 3, ""),
            wrote("c1", 2, 5, "5 c1 1"),
        ];
        let last = HashMap::from([("p/res.a".to_string(), "5 c1 2".to_string())]);
        let o = order(&ops, "p/", &last);
        assert!(o.problems.is_empty(), "{:?}", o.problems);
        let fences: Vec<i64> = o.accepted.iter().map(|a| a.fence).collect();
        assert_eq!(fences, [3, 5, 5]);
        assert!(o
            .accepted
            .iter()
            .all(|a| a.resource == "p/res.a" && a.segment == 0));
    }

    #[test]
    fn a_broken_chain_and_a_gap_are_told_apart() {
        // Two writes replaced the same value: not atomic.
        let ops = vec![
            wrote("c0", 1, 3, ""),
            wrote("c1", 1, 5, "3 c0 1"),
            wrote("c2", 1, 4, "3 c0 1"),
        ];
        let o = order(&ops, "p/", &HashMap::new());
        assert!(o.problems.iter().any(|p| p.contains("both replaced")));
        // A lost reply: the next write replaced a value we never saw
        // accepted; it starts a segment of its own.
        let ops = vec![wrote("c0", 1, 3, ""), wrote("c1", 2, 9, "7 c1 1")];
        let o = order(&ops, "p/", &HashMap::new());
        assert!(o.problems.is_empty(), "{:?}", o.problems);
        assert_eq!(o.accepted[1].segment, 1);
        // A final value no accepted write stored.
        let last = HashMap::from([("p/res.a".to_string(), "1 x 1".to_string())]);
        let o = order(&[wrote("c0", 1, 3, "")], "p/", &last);
        assert_eq!(o.problems.len(), 1, "{:?}", o.problems);
    }

    #[test]
    fn keys_share_the_resource_hash_tag() {
        assert_eq!(fence_key("r/s/res.a"), "tenure:fence:{r/s/res.a}");
        assert_eq!(data_key("r/s/res.a"), "r/s/res.a:{r/s/res.a}:state");
    }
}
