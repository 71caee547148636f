//! Proto ↔ domain conversions: holdings as `Lease` messages, events as
//! `LeaseEvent`s, event-type filters, timestamps, and the client's deadline
//! from the `grpc-timeout` header.

use std::time::Duration;

use crate::lease::{Event, EventKind, Holding, Mode, ShardEvent};
use crate::proto;

/// A holding as a proto `Lease`.
pub fn lease(h: &Holding) -> proto::Lease {
    proto::Lease {
        name: h.name.clone(),
        holder: h.record.holder.clone(),
        fencing_token: h.token,
        revision: h.revision,
        ttl: Some(prost_types::Duration {
            seconds: h.record.ttl_s as i64,
            nanos: 0,
        }),
        metadata: h
            .record
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        acquire_time: Some(timestamp(h.record.acquired_ms)),
        renew_time: Some(timestamp(h.record.renewed_ms)),
        lock_delay: (h.record.lock_delay_s > 0).then_some(prost_types::Duration {
            seconds: h.record.lock_delay_s as i64,
            nanos: 0,
        }),
        slot: h.slot,
        group: h.record.group.clone(),
        fence_proof: Vec::new(),
        mode: match h.record.mode {
            None => proto::LockMode::Unspecified,
            Some(Mode::Exclusive) => proto::LockMode::Exclusive,
            Some(Mode::Shared) => proto::LockMode::Shared,
        } as i32,
    }
}

/// A domain event as a proto `LeaseEvent`.
pub fn event(e: &Event) -> proto::LeaseEvent {
    let kind = match e.kind {
        EventKind::Current => proto::EventType::Current,
        EventKind::SnapshotComplete => proto::EventType::SnapshotComplete,
        EventKind::Acquired => proto::EventType::Acquired,
        EventKind::Renewed => proto::EventType::Renewed,
        EventKind::Released => proto::EventType::Released,
        EventKind::Expired => proto::EventType::Expired,
        EventKind::Revoked => proto::EventType::Revoked,
        EventKind::Missed => proto::EventType::Missed,
        // Only waiting Acquires subscribe to it; no watch receives it.
        EventKind::Turn | EventKind::Candidate => proto::EventType::Unspecified,
    };
    proto::LeaseEvent {
        r#type: kind as i32,
        name: e.name.clone(),
        revision: e.revision,
        holder: e.holder.clone(),
        fencing_token: e.token,
        lease: e.holding.as_deref().map(lease),
        time: (e.time_ms > 0).then(|| timestamp(e.time_ms)),
        slot: e.slot,
        shard: 0,
        shard_revisions: Vec::new(),
        missed_after_revision: e.missed_after,
    }
}

/// A watch event as the proto message, with its shard and, on a merged
/// `SnapshotComplete`, every shard's position.
pub fn shard_event(e: &ShardEvent) -> proto::LeaseEvent {
    proto::LeaseEvent {
        shard: e.shard,
        shard_revisions: e.positions.clone(),
        ..event(&e.event)
    }
}

/// The domain kind of a proto event type filter.
pub fn event_kind(t: proto::EventType) -> Option<EventKind> {
    Some(match t {
        proto::EventType::Unspecified => return None,
        proto::EventType::Current => EventKind::Current,
        proto::EventType::SnapshotComplete => EventKind::SnapshotComplete,
        proto::EventType::Acquired => EventKind::Acquired,
        proto::EventType::Renewed => EventKind::Renewed,
        proto::EventType::Released => EventKind::Released,
        proto::EventType::Expired => EventKind::Expired,
        proto::EventType::Revoked => EventKind::Revoked,
        proto::EventType::Missed => EventKind::Missed,
    })
}

/// A holding read back from the history as a proto `HistoricHolding`.
pub fn historic(t: &crate::lease::Tenure) -> proto::HistoricHolding {
    use crate::lease::Ending;
    let (ending, by, reason) = match &t.ending {
        Ending::Held => (proto::HoldingEnding::Held, "", ""),
        Ending::Released => (proto::HoldingEnding::Released, "", ""),
        Ending::Expired => (proto::HoldingEnding::Expired, "", ""),
        Ending::Revoked { by, reason } => {
            (proto::HoldingEnding::Revoked, by.as_str(), reason.as_str())
        }
        Ending::Unknown => (proto::HoldingEnding::Unknown, "", ""),
    };
    proto::HistoricHolding {
        name: t.name.clone(),
        slot: t.slot,
        holder: t.holder.clone(),
        fencing_token: t.token,
        acquire_time: (t.acquired_ms > 0).then(|| timestamp(t.acquired_ms)),
        renew_time: (t.renewed_ms > 0).then(|| timestamp(t.renewed_ms)),
        ttl: (t.ttl_s > 0).then_some(prost_types::Duration {
            seconds: t.ttl_s as i64,
            nanos: 0,
        }),
        end_time: (t.ended_ms > 0).then(|| timestamp(t.ended_ms)),
        ending: ending as i32,
        revoked_by: by.to_string(),
        revoke_reason: reason.to_string(),
    }
}

/// A stretch the history did not record as a proto `HistoryGap`.
pub fn history_gap(g: &crate::lease::Gap) -> proto::HistoryGap {
    proto::HistoryGap {
        name: g.name.clone(),
        slot: g.slot,
        after_revision: g.after_revision,
        after_time: (g.after_ms > 0).then(|| timestamp(g.after_ms)),
        before_revision: g.before_revision,
        before_time: Some(timestamp(g.before_ms)),
    }
}

/// Unix milliseconds as a protobuf timestamp.
pub fn timestamp(ms: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// The client's deadline from the `grpc-timeout` header (`"<digits><unit>"`).
pub fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unit of the grpc-timeout header is understood.
    #[test]
    fn parses_grpc_timeout() {
        let mut m = tonic::metadata::MetadataMap::new();
        assert_eq!(grpc_timeout(&m), None);
        m.insert("grpc-timeout", "1500m".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_millis(1500)));
        m.insert("grpc-timeout", "2S".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_secs(2)));
        m.insert("grpc-timeout", "x".parse().unwrap());
        assert_eq!(grpc_timeout(&m), None);
    }

    /// Every proto event type but the unspecified one has a domain kind.
    #[test]
    fn event_kinds_round_trip() {
        for n in 1..=8 {
            let t = proto::EventType::try_from(n).unwrap();
            let kind = event_kind(t).expect("a kind");
            let e = Event {
                kind,
                name: "a".into(),
                revision: 1,
                holder: String::new(),
                token: 0,
                holding: None,
                time_ms: 0,
                slot: 0,
                missed_after: 0,
            };
            assert_eq!(event(&e).r#type, n);
        }
        assert!(event_kind(proto::EventType::Unspecified).is_none());
    }
}
