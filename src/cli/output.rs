//! How results look: aligned tables for people, JSON for scripts, and the
//! small formatting helpers (RFC 3339 times, "TTL left", event names) that
//! `tenure top` shares.
//!
//! JSON field names are the proto's snake_case names, durations are whole
//! or fractional seconds (`ttl_seconds`), times RFC 3339 UTC, so a script
//! can read them without a protobuf library.
//!
//! Everything here treats what the server sent as untrusted: text reaches
//! a terminal only through [`escape`] (tables, one-line messages, stderr),
//! JSON is exact but written with only printable characters, and durations
//! and times are computed without overflow, whatever their size.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::proto::{EventType, Lease, LeaseEvent};

/// Whether `c` must not reach a terminal as it is: the control characters
/// (C0 with ESC, CR, LF and TAB; DEL; C1, which some terminals take as
/// escape sequences too) and the Unicode characters that break lines or
/// reorder what follows them (U+2028, U+2029, bidirectional overrides and
/// isolates).
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Text for a terminal: every character of [`unsafe_char`] written as an
/// escape (`\n`, `\r`, `\t`, `\x1b` for the other ASCII ones,
/// `\u{9b}` beyond), so that a holder, name, metadata or message from the
/// server can neither start a new line (a forged table row) nor drive the
/// terminal. Everything else is kept as it is, backslashes included:
/// ordinary text is unchanged, and escaping twice changes nothing.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if unsafe_char(c) && c.is_ascii() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if unsafe_char(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Writes to stdout as it is (tables, already escaped cell by cell); false
/// when it cannot (a closed pipe): callers stop quietly instead of
/// panicking as `print!` would.
pub fn write_out(text: &str) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// Writes one human-readable line to stdout, [escaped](escape); false when
/// stdout is gone.
pub fn write_line(line: &str) -> bool {
    write_out(&format!("{}\n", escape(line)))
}

/// JSON text with only printable characters: serde_json already writes C0
/// controls as `\u00XX`; DEL, C1 and the other characters of
/// [`unsafe_char`], which JSON allows raw, are written as `\uXXXX` too. The
/// value is the same, exactly; only its spelling changes. (Outside strings
/// JSON text has no such characters.)
pub fn json_text(v: &serde_json::Value, pretty: bool) -> String {
    let text = if pretty {
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    } else {
        v.to_string()
    };
    if !text.chars().any(|c| c != '\n' && unsafe_char(c)) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c != '\n' && unsafe_char(c) {
            // All of them are in the Basic Multilingual Plane: one \uXXXX.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Writes a JSON value and a newline to stdout (see [`json_text`]); false
/// when stdout is gone.
pub fn write_json(v: &serde_json::Value, pretty: bool) -> bool {
    write_out(&format!("{}\n", json_text(v, pretty)))
}

/// Writes one line to stderr, [escaped](escape), ignoring failures
/// (nowhere left to report them).
pub fn write_err(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{}", escape(line));
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

    /// The table as text, one line per row, each ending in a newline; cells
    /// are [escaped](escape), so none can break its row.
    pub fn render(&self) -> String {
        let rows: Vec<Vec<Cow<'_, str>>> = self
            .rows
            .iter()
            .map(|r| r.iter().map(|c| escape(c)).collect())
            .collect();
        let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                rows.iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &rows {
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
        // A read-write lock's holder says how it holds.
        match mode_name(l.mode) {
            Some(mode) => format!("{} ({mode})", l.holder),
            None => l.holder.clone(),
        },
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

/// How a read-write lock's holding holds it (`shared`, `exclusive`);
/// `None` for a plain lease or a semaphore slot.
fn mode_name(mode: i32) -> Option<&'static str> {
    match crate::proto::LockMode::try_from(mode) {
        Ok(crate::proto::LockMode::Shared) => Some("shared"),
        Ok(crate::proto::LockMode::Exclusive) => Some("exclusive"),
        _ => None,
    }
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
    if let Some(mode) = mode_name(l.mode) {
        v["mode"] = mode.into();
    }
    if !l.group.is_empty() {
        v["group"] = l.group.clone().into();
    }
    if !l.fence_proof.is_empty() {
        v["fence_proof"] = fence_text(&l.fence_proof).into();
    }
    v
}

/// A fence proof's text form (the `Tenure-Fence` header): base64url
/// without padding; empty for no proof.
pub fn fence_text(proof: &[u8]) -> String {
    tenure_fence::Proof(proof.to_vec()).to_text()
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
/// stream lines up without knowing later rows; name and holder
/// [escaped](escape).
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
        if e.name.is_empty() {
            "-".into()
        } else {
            escape(&e.name)
        },
        escape(holder),
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
        Ok(EventType::Missed) => "MISSED",
        Ok(EventType::Unspecified) | Err(_) => "UNKNOWN",
    }
}

/// Nanoseconds of a protobuf field's nanos, kept within a second (a
/// server may send anything).
fn nanos(n: i32) -> u32 {
    n.clamp(0, 999_999_999) as u32
}

/// A protobuf duration as a `Duration` (negative ones as zero). Any
/// protobuf duration fits: its seconds are at most `i64::MAX`.
pub fn proto_duration(d: prost_types::Duration) -> Duration {
    if d.seconds < 0 || d.nanos < 0 {
        return Duration::ZERO;
    }
    Duration::new(d.seconds as u64, nanos(d.nanos))
}

/// A protobuf timestamp as a `SystemTime`: before 1970 as the epoch, None
/// when this machine cannot represent it.
pub fn proto_time(t: prost_types::Timestamp) -> Option<SystemTime> {
    if t.seconds < 0 {
        return Some(UNIX_EPOCH);
    }
    UNIX_EPOCH.checked_add(Duration::new(t.seconds as u64, nanos(t.nanos)))
}

/// Nanoseconds since the epoch, as an `i128` (room for any protobuf
/// timestamp plus any protobuf duration).
fn unix_nanos(t: prost_types::Timestamp) -> i128 {
    i128::from(t.seconds) * 1_000_000_000 + i128::from(nanos(t.nanos))
}

/// Time left before the holding expires (its last write, by the server's
/// clock, plus its TTL), as seen on this machine's clock (approximate
/// across machines); zero once past. Computed in `i128` nanoseconds, so no
/// TTL or time the server sends can overflow it.
pub fn ttl_left(l: &Lease, now: SystemTime) -> Option<Duration> {
    let expiry = unix_nanos(l.renew_time?) + proto_duration(l.ttl?).as_nanos() as i128;
    let now = match now.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    };
    let left = (expiry - now).max(0);
    let secs = u64::try_from(left / 1_000_000_000).unwrap_or(u64::MAX);
    Some(Duration::new(secs, (left % 1_000_000_000) as u32))
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
    let ms = nanos(t.nanos) / 1_000_000;
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

    /// Control characters become visible escapes; ordinary text (backslashes
    /// included) is kept; escaping twice changes nothing; a table cell
    /// cannot start a row.
    #[test]
    fn escapes() {
        assert_eq!(escape("worker-1 \\ é"), "worker-1 \\ é");
        let evil = "a\x1b[2J\r\nb\tc\u{7f}\u{9b}d\u{202e}e\u{2028}";
        let shown = escape(evil);
        assert_eq!(
            shown,
            "a\\x1b[2J\\r\\nb\\tc\\x7f\\u{9b}d\\u{202e}e\\u{2028}"
        );
        assert_eq!(escape(&shown), shown);
        let mut t = Table::new(&["HOLDER", "TOKEN"]);
        t.row(vec!["x\nforged  9".into(), "1".into()]);
        assert_eq!(t.render(), "HOLDER        TOKEN\nx\\nforged  9  1\n");
    }

    /// JSON keeps the exact value, spelled in printable characters only.
    #[test]
    fn json_is_exact_and_printable() {
        let v = json!({"holder": "a\x1b[2J\r\n\u{7f}\u{9b}\u{202e}b"});
        for pretty in [false, true] {
            let text = json_text(&v, pretty);
            assert!(!text.chars().any(|c| c != '\n' && unsafe_char(c)), "{text}");
            let back: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back, v);
        }
    }

    /// TTLs and times at the ends of what protobuf can carry (and nanos out
    /// of range) are computed without overflow.
    #[test]
    fn extreme_durations_and_times() {
        let d = |seconds, nanos| prost_types::Duration { seconds, nanos };
        let t = |seconds, nanos| prost_types::Timestamp { seconds, nanos };
        assert_eq!(proto_duration(d(-1, 0)), Duration::ZERO);
        assert_eq!(
            proto_duration(d(i64::MAX, i32::MAX)),
            Duration::new(i64::MAX as u64, 999_999_999)
        );
        assert_eq!(proto_time(t(-5, 0)), Some(UNIX_EPOCH));
        let _ = proto_time(t(i64::MAX, i32::MAX));
        let now = SystemTime::now();
        for (ttl, written) in [
            (d(i64::MAX, i32::MAX), t(i64::MAX, i32::MAX)),
            (d(i64::MAX, 999_999_999), t(0, 0)),
            (d(i64::MAX, 0), t(i64::MIN, i32::MIN)),
            (d(i64::MIN, i32::MIN), t(i64::MIN, 0)),
        ] {
            let l = Lease {
                ttl: Some(ttl),
                renew_time: Some(written),
                ..Default::default()
            };
            let left = ttl_left(&l, now).unwrap();
            let _ = (secs(left), lease_row(&l, now), lease_json(&l));
        }
        assert_eq!(rfc3339(t(0, i32::MAX)), "1970-01-01T00:00:00.999Z");
        assert_eq!(
            rfc3339(t(i64::MIN, -1)),
            "-292277022657-01-27T08:29:52.000Z"
        );
    }

    /// Unknown enum values from a newer server do not panic.
    #[test]
    fn unknown_event() {
        assert_eq!(event_name(99), "UNKNOWN");
        assert_eq!(event_name(EventType::Expired as i32), "EXPIRED");
    }
}
