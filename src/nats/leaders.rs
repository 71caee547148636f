//! Leader spreading for sharded buckets: NATS places a replicated
//! stream's leader at random, so the shards of one bucket often share a
//! leader node, which then serializes their writes. A replica that opens a
//! sharded bucket moves the extra leaders of a crowded node to its
//! least-loaded peers; the choice is a pure function, unit-tested apart.

use std::time::Duration;

use async_nats::jetstream;

use super::bucket::Store;

/// How long [`balance_leaders`] waits for one answer about a moving stream.
const LEADER_ASK: Duration = Duration::from_millis(500);

/// Spreads the stream leaders of a sharded bucket over the cluster's nodes:
/// NATS picks a replicated stream's leader at random, so three shards on
/// three nodes often share a node, which then serializes their writes.
/// When a node leads more shards than its share (shards / nodes, rounded
/// up), each extra shard's leader is asked to step down in favour of the
/// least-loaded node among its peers (`$JS.API.STREAM.LEADER.STEPDOWN`
/// with a preferred placement, nats-server 2.11+), and this waits (a few
/// seconds at most) until every moved stream has a leader again. Leaders
/// already spread are left alone, so replicas that start later move
/// nothing. A refused or failed move is logged and left: it costs
/// throughput, never safety.
pub async fn balance_leaders(stores: &[Store]) {
    if stores.len() < 2 {
        return;
    }
    let mut placed = Vec::with_capacity(stores.len());
    for store in stores {
        let mut stream = store.stream.clone();
        let Ok(info) = stream.info().await else {
            return;
        };
        let (leader, mut peers) = match &info.cluster {
            Some(c) => (
                c.leader.clone(),
                c.replicas
                    .iter()
                    .filter(|p| !p.offline)
                    .map(|p| p.name.clone())
                    .collect::<Vec<_>>(),
            ),
            None => (None, Vec::new()),
        };
        peers.extend(leader.clone());
        placed.push((leader, peers));
    }
    let moves = leader_moves(&placed);
    for (shard, node) in &moves {
        let store = &stores[*shard];
        let stream = format!("KV_{}", store.bucket);
        let body = serde_json::json!({ "placement": { "preferred": node } });
        let answer: std::result::Result<jetstream::response::Response<serde_json::Value>, _> =
            store
                .js
                .request(format!("STREAM.LEADER.STEPDOWN.{stream}"), &body)
                .await;
        match answer {
            Ok(jetstream::response::Response::Ok(_)) => {
                tracing::info!(%stream, leader = %node, "moved a shard's stream leader to spread writes over the cluster");
            }
            Ok(jetstream::response::Response::Err { error }) => {
                tracing::warn!(%stream, %error, "cannot move the shard's stream leader; shards sharing a leader share its write path");
            }
            Err(err) => {
                tracing::warn!(%stream, %err, "cannot move the shard's stream leader; shards sharing a leader share its write path");
            }
        }
    }
    for (shard, _) in moves {
        let mut stream = stores[shard].stream.clone();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline {
            // A stream without a leader does not answer at all: without the
            // timeout each ask would wait out the 10 s request timeout.
            let info = tokio::time::timeout(LEADER_ASK, stream.info()).await;
            let led = matches!(info, Ok(Ok(info)) if info.cluster.as_ref().is_some_and(|c| c.leader.is_some()));
            if led {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Which shards' leaders to move, and where: `placed` is each shard's
/// leader (if any) and its online peers (the leader included). A node
/// leading more than `ceil(shards / nodes)` gives its extra shards, in
/// shard order, to the peer with the fewest leaders (then by name) that is
/// under that share.
fn leader_moves(placed: &[(Option<String>, Vec<String>)]) -> Vec<(usize, String)> {
    let nodes: std::collections::BTreeSet<&String> =
        placed.iter().flat_map(|(_, peers)| peers).collect();
    if nodes.len() < 2 {
        return Vec::new();
    }
    let share = placed.len().div_ceil(nodes.len());
    let mut led: std::collections::BTreeMap<&String, usize> =
        nodes.iter().map(|n| (*n, 0)).collect();
    for leader in placed.iter().filter_map(|(l, _)| l.as_ref()) {
        *led.entry(leader).or_default() += 1;
    }
    let mut moves = Vec::new();
    for (shard, (leader, peers)) in placed.iter().enumerate() {
        let Some(leader) = leader else { continue };
        if led[leader] <= share {
            continue;
        }
        let target = peers
            .iter()
            .filter(|p| *p != leader && led[p] < share)
            .min_by_key(|p| (led[p], p.as_str()));
        if let Some(target) = target {
            *led.get_mut(leader).expect("counted") -= 1;
            *led.get_mut(target).expect("a node") += 1;
            moves.push((shard, target.clone()));
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three shards all led by n1 on three nodes: two move, one to each
    /// other node; leaders already spread stay; one node moves nothing.
    #[test]
    fn leader_moves_spread_the_shards() {
        let all = || vec!["n1".to_string(), "n2".to_string(), "n3".to_string()];
        let on = |leader: &str| (Some(leader.to_string()), all());
        assert_eq!(
            leader_moves(&[on("n1"), on("n1"), on("n1")]),
            vec![(0, "n2".to_string()), (1, "n3".to_string())]
        );
        assert_eq!(
            leader_moves(&[on("n2"), on("n2"), on("n1")]),
            vec![(0, "n3".to_string())]
        );
        assert!(leader_moves(&[on("n3"), on("n1"), on("n2")]).is_empty());
        // Four shards on three nodes: two may share a node.
        assert!(leader_moves(&[on("n1"), on("n1"), on("n2"), on("n3")]).is_empty());
        // A peer that is not in the shard's group is never chosen.
        let narrow = (
            Some("n1".to_string()),
            vec!["n1".to_string(), "n2".to_string()],
        );
        assert_eq!(
            leader_moves(&[on("n1"), narrow, on("n2")]),
            vec![(0, "n3".to_string())]
        );
        let single = (Some("n1".to_string()), vec!["n1".to_string()]);
        assert!(leader_moves(&[single.clone(), single]).is_empty());
    }
}
