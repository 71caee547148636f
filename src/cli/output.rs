//! How results look: aligned tables for people, JSON for scripts, and the
//! small formatting helpers (RFC 3339 times, "TTL left", event names) that
//! `tenure top` shares.
//!
//! JSON field names are the proto's snake_case names, durations are whole
//! or fractional seconds (`ttl_seconds`), times RFC 3339 UTC, so a script
//! can read them without a protobuf library.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::proto::{EventType, Lease, LeaseEvent};

/// Writes to stdout; false when it cannot (a closed pipe): callers stop
/// quietly instead of panicking as `print!` would.
pub fn write_out(text: &str) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// Writes one line to stderr, ignoring failures (nowhere left to report
/// them).
pub fn write_err(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// A table: a header row and data rows, printed with two spaces between
/// left-aligned columns.
#[derive(Debug, Default)]
pub struct Table {
    /// The rows, header first.
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, each ending in a newline.
    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    let pad = widths[i] - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// The columns of a lease table.
pub const LEASE_HEADER: &[&str] = &[
    "NAME", "HOLDER", "TOKEN", "REVISION", "TTL LEFT", "TTL", "WAITERS", "RENEWED",
];

/// One lease as a table row (see [`LEASE_HEADER`]).
pub fn lease_row(l: &Lease, now: SystemTime) -> Vec<String> {
    vec![
        // A semaphore holder shows its slot: `name#slot` (as ListLeases'
        // page tokens and `tenure revoke NAME --slot SLOT` name it).
        match l.slot {
            0 => l.name.clone(),
            slot => format!("{}#{slot}", l.name),
        },
        l.holder.clone(),
        l.fencing_token.to_string(),
        l.revision.to_string(),
        ttl_left(l, now).map(secs).unwrap_or_else(|| "-".into()),
        l.ttl
            .map(|d| secs(proto_duration(d)))
            .unwrap_or_else(|| "-".into()),
        // The API does not count waiters yet.
        "-".into(),
        l.renew_time.map(rfc3339).unwrap_or_else(|| "-".into()),
    ]
}

/// A table of leases.
pub fn lease_table(leases: &[Lease]) -> String {
    let now = SystemTime::now();
    let mut t = Table::new(LEASE_HEADER);
    for l in leases {
        t.row(lease_row(l, now));
    }
    t.render()
}

/// A lease as JSON, with the TTL left as seen from here.
pub fn lease_json(l: &Lease) -> Value {
    let mut v = json!({
        "name": l.name,
        "holder": l.holder,
        "fencing_token": l.fencing_token,
        "revision": l.revision,
        "ttl_seconds": l.ttl.map(|d| proto_duration(d).as_secs_f64()),
        "ttl_left_seconds": ttl_left(l, SystemTime::now()).map(|d| d.as_millis() as f64 / 1000.0),
        "metadata": l.metadata,
        "acquire_time": l.acquire_time.map(rfc3339),
        "renew_time": l.renew_time.map(rfc3339),
    });
    if l.slot > 0 {
        v["slot"] = l.slot.into();
    }
    if !l.group.is_empty() {
        v["group"] = l.group.clone().into();
    }
    v
}

/// An event as JSON.
pub fn event_json(e: &LeaseEvent) -> Value {
    let mut v = json!({
        "type": event_name(e.r#type),
        "name": e.name,
        "revision": e.revision,
        "holder": e.holder,
        "fencing_token": e.fencing_token,
        "lease": e.lease.as_ref().map(lease_json),
        "time": e.time.map(rfc3339),
    });
    if e.slot > 0 {
        v["slot"] = e.slot.into();
    }
    v
}

/// The columns of `tenure watch`'s table output.
pub const EVENT_HEADER: &[&str] = &[
    "TIME", "EVENT", "NAME", "HOLDER", "TOKEN", "REVISION", "TTL",
];

/// One event as a line of `tenure watch`, aligned to fixed widths so a
/// stream lines up without knowing later rows.
pub fn event_line(e: &LeaseEvent) -> String {
    let ttl = e
        .lease
        .as_ref()
        .and_then(|l| l.ttl)
        .map(|d| secs(proto_duration(d)))
        .unwrap_or_else(|| "-".into());
    let holder = if e.holder.is_empty() { "-" } else { &e.holder };
    let num = |n: u64| {
        if n == 0 {
            "-".to_string()
        } else {
            n.to_string()
        }
    };
    let line = format!(
        "{:<24}  {:<17}  {:<24}  {:<16}  {:>5}  {:>8}  {}",
        e.time.map(rfc3339).unwrap_or_else(|| "-".into()),
        event_name(e.r#type),
        if e.name.is_empty() { "-" } else { &e.name },
        holder,
        num(e.fencing_token),
        num(e.revision),
        ttl
    );
    line.trim_end().to_string()
}

/// The header line matching [`event_line`].
pub fn event_header() -> String {
    let h = EVENT_HEADER;
    format!(
        "{:<24}  {:<17}  {:<24}  {:<16}  {:>5}  {:>8}  {}",
        h[0], h[1], h[2], h[3], h[4], h[5], h[6]
    )
}

/// The short name of an event type: `ACQUIRED`, `SNAPSHOT_COMPLETE`, ...
pub fn event_name(t: i32) -> &'static str {
    match EventType::try_from(t) {
        Ok(EventType::Current) => "CURRENT",
        Ok(EventType::SnapshotComplete) => "SNAPSHOT_COMPLETE",
        Ok(EventType::Acquired) => "ACQUIRED",
        Ok(EventType::Renewed) => "RENEWED",
        Ok(EventType::Released) => "RELEASED",
        Ok(EventType::Expired) => "EXPIRED",
        Ok(EventType::Revoked) => "REVOKED",
        Ok(EventType::Unspecified) | Err(_) => "UNKNOWN",
    }
}

/// A protobuf duration as a `Duration` (negative ones as zero).
pub fn proto_duration(d: prost_types::Duration) -> Duration {
    if d.seconds < 0 || d.nanos < 0 {
        return Duration::ZERO;
    }
    Duration::new(d.seconds as u64, d.nanos as u32)
}

/// A protobuf timestamp as a `SystemTime` (before 1970 as the epoch).
pub fn proto_time(t: prost_types::Timestamp) -> SystemTime {
    if t.seconds < 0 || t.nanos < 0 {
        return UNIX_EPOCH;
    }
    UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos as u32)
}

/// When the holding expires by the server's clock: last write + TTL.
pub fn expires_at(l: &Lease) -> Option<SystemTime> {
    Some(proto_time(l.renew_time?) + proto_duration(l.ttl?))
}

/// Time left before the holding expires, as seen on this machine's clock
/// (approximate across machines); zero once past.
pub fn ttl_left(l: &Lease, now: SystemTime) -> Option<Duration> {
    Some(expires_at(l)?.duration_since(now).unwrap_or(Duration::ZERO))
}

/// "9.4s", "12s", "3m05s": short enough for a table cell.
pub fn secs(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s >= 10 || d.subsec_millis() == 0 {
        format!("{s}s")
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// RFC 3339 UTC with milliseconds: `2026-11-30T18:14:10.123Z`.
pub fn rfc3339(t: prost_types::Timestamp) -> String {
    let ms = (t.nanos.max(0) / 1_000_000) as u32;
    let (date, hms) = civil(t.seconds);
    format!("{date}T{hms}.{ms:03}Z")
}

/// `HH:MM:SS.mmm` of a timestamp (UTC), for compact feeds.
pub fn clock(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (_, hms) = civil(d.as_secs() as i64);
    format!("{hms}.{:03}", d.subsec_millis())
}

/// Splits seconds since the epoch into `YYYY-MM-DD` and `HH:MM:SS` (UTC),
/// by the days-from-civil algorithm (proleptic Gregorian calendar).
fn civil(secs: i64) -> (String, String) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!("{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known instants format as RFC 3339.
    #[test]
    fn times() {
        let t = |seconds, nanos| prost_types::Timestamp { seconds, nanos };
        assert_eq!(rfc3339(t(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(t(951_782_400, 5_000_000)),
            "2000-02-29T00:00:00.005Z"
        );
        assert_eq!(rfc3339(t(1_796_062_450, 0)), "2026-11-30T18:14:10.000Z");
    }

    /// Columns are as wide as their widest cell, plus two spaces.
    #[test]
    fn table() {
        let mut t = Table::new(&["NAME", "TOKEN"]);
        t.row(vec!["jobs.nightly".into(), "7".into()]);
        assert_eq!(t.render(), "NAME          TOKEN\njobs.nightly  7\n");
    }

    /// TTL left counts down from the last write and stops at zero.
    #[test]
    fn ttl_left_drains() {
        let written = UNIX_EPOCH + Duration::from_secs(1000);
        let l = Lease {
            ttl: Some(prost_types::Duration {
                seconds: 10,
                nanos: 0,
            }),
            renew_time: Some(prost_types::Timestamp {
                seconds: 1000,
                nanos: 0,
            }),
            ..Default::default()
        };
        assert_eq!(
            ttl_left(&l, written + Duration::from_secs(3)),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            ttl_left(&l, written + Duration::from_secs(30)),
            Some(Duration::ZERO)
        );
        assert_eq!(secs(Duration::from_millis(9400)), "9.4s");
        assert_eq!(secs(Duration::from_secs(185)), "3m05s");
    }

    /// Unknown enum values from a newer server do not panic.
    #[test]
    fn unknown_event() {
        assert_eq!(event_name(99), "UNKNOWN");
        assert_eq!(event_name(EventType::Expired as i32), "EXPIRED");
    }
}
