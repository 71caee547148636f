//! The operation history: one JSON line per event, written by every client
//! process and read back by the checker.
//!
//! A client appends each line with one `write` call and no buffering, so a
//! client killed with SIGKILL leaves every line it wrote before it died. An
//! Acquire or Renew is logged when it is *sent* (phase `invoke`) and again
//! when it completes: a holder killed mid-call still tells the checker that
//! the write may have reached NATS, which moves the lease's expiry later.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// What an operation was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// `Acquire` (with a wait).
    Acquire,
    /// `Renew`.
    Renew,
    /// `Release`; its `t0` is when the holder stopped acting.
    Release,
    /// A fenced write to the downstream store.
    Write,
    /// A forged write of the `negative-forged-tokens` control (not part of
    /// any holding): `detail` starts with its kind (`forge`), then how the
    /// store answered; `token` is the token it claimed.
    Forge,
    /// The holder stopped renewing on purpose (it will let the lease expire).
    Abandon,
    /// The holder stopped acting: its deadline passed, the service said
    /// `LEASE_NOT_HELD`, or the store refused its token (see `detail`).
    Lost,
    /// A `RevokeLease` the runner sent (client `runner`, no holding): the
    /// holding of `name` (and `slot`) with fencing token `token`, ended by
    /// an operator. `revision` is the revoke's, when answered.
    Revoke,
}

/// How a read-write lock's holding holds its name (`AcquireRequest.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `LOCK_MODE_EXCLUSIVE`: nobody else, shared or exclusive, holds it.
    Exclusive,
    /// `LOCK_MODE_SHARED`: any number of shared holders, and no exclusive
    /// one.
    Shared,
}

impl Mode {
    /// The mode as the history writes it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Sent; the completion follows in another line (unless the process died).
    Invoke,
    /// Succeeded: the lease call returned a lease, or the store accepted.
    Ok,
    /// Failed for sure: `LEASE_HELD`, `LEASE_NOT_HELD`, or a store refusal.
    Fail,
    /// Outcome unknown: timeout, unavailable, connection lost.
    Info,
}

/// One line of the history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Op {
    /// The client process (`c3.1`: client 3, second incarnation); also the
    /// lease holder name it uses.
    pub client: String,
    /// The holding this op belongs to (`c3.1#7`: its 7th Acquire); one per
    /// lease key.
    pub holding: String,
    /// The lease name.
    pub name: String,
    /// What was done.
    pub op: OpKind,
    /// How it ended.
    pub phase: Phase,
    /// Monotonic nanoseconds when it was sent (see `clock`).
    pub t0: u64,
    /// Monotonic nanoseconds when it completed (0 for `invoke`).
    #[serde(default)]
    pub t1: u64,
    /// Wall-clock milliseconds when it was sent.
    pub w0: u64,
    /// The fencing token, when known.
    #[serde(default)]
    pub token: u64,
    /// The revision the call returned (lease calls), or the store's log
    /// sequence of an accepted write.
    #[serde(default)]
    pub revision: u64,
    /// The granted TTL in milliseconds (Acquire/Renew).
    #[serde(default)]
    pub ttl_ms: u64,
    /// The holder's safe deadline after this call, monotonic nanoseconds:
    /// `t0 + ttl - margin` for a successful Acquire/Renew.
    #[serde(default)]
    pub deadline: u64,
    /// The server's wall-clock write time from the reply (ms): acquire time
    /// for Acquire, renew time for Renew.
    #[serde(default)]
    pub server_ms: u64,
    /// The RPC timeout the call was sent with (ms): how late an unknown
    /// outcome could still have been written.
    #[serde(default)]
    pub timeout_ms: u64,
    /// The semaphore slot of the holding (from the Acquire reply); 0 for a
    /// plain lease.
    #[serde(default)]
    pub slot: u32,
    /// The wait an Acquire was sent with (ms): how long the server keeps it
    /// queued at least, which the fairness property needs.
    #[serde(default)]
    pub wait_ms: u64,
    /// The lock delay an Acquire asked for (ms; 0: none): after the
    /// holding expires or is revoked, nobody may take the name for this
    /// long.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_delay_ms: u64,
    /// The group a member holding belongs to (the group's holding id, on
    /// its Acquire lines); empty outside groups.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// The mode a read-write lock's Acquire asked for (on its Acquire
    /// lines; property 10 reads a holding's mode from them); none for a
    /// plain lease, a semaphore or an election.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Error reason or note.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// A write accepted by the Redis store: the value it replaced (empty:
    /// none), which orders the store's writes (`redis_kit`); its own value
    /// is made of its token, client and `revision` (the client's write
    /// number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<String>,
}

/// Whether `n` is 0 (fields left out of the history when 0).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An append-only history file.
pub struct Recorder {
    /// The open file; every line is one unbuffered write.
    file: File,
}

impl Recorder {
    /// Creates (or appends to) the history file at `path`.
    pub fn open(path: &Path) -> std::io::Result<Recorder> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder { file })
    }

    /// Appends one op as a JSON line.
    pub fn record(&mut self, op: &Op) {
        let mut line = serde_json::to_vec(op).unwrap_or_default();
        line.push(b'\n');
        if let Err(err) = self.file.write_all(&line) {
            eprintln!("history: cannot write: {err}");
        }
    }
}

/// What the history files held.
#[derive(Debug, Default)]
pub struct History {
    /// Every parsed line, file by file, in the order written.
    pub ops: Vec<Op>,
    /// Complete lines that did not parse (`file:line: error`): a checker
    /// that skipped them could miss the very operation that breaks a
    /// property, so a scenario with any fails.
    pub unparsable: Vec<String>,
    /// Clients whose file ends in a line without its newline: a process
    /// killed mid-write. Acceptable only for a client the runner killed.
    pub torn: Vec<String>,
}

/// Reads every history file (`<client>.jsonl`) in `dir`.
pub fn read_dir(dir: &Path) -> std::io::Result<History> {
    let mut history = History::default();
    let mut paths: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("jsonl"))
        .collect();
    paths.sort();
    for path in paths {
        let client = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let text = std::fs::read_to_string(&path)?;
        let complete = text.ends_with('\n') || text.is_empty();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str::<Op>(line) {
                Ok(op) => history.ops.push(op),
                Err(_) if i + 1 == lines.len() && !complete => history.torn.push(client.clone()),
                Err(err) => history
                    .unparsable
                    .push(format!("{}:{}: {err}", path.display(), i + 1)),
            }
        }
    }
    Ok(history)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_reported_and_a_torn_tail_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let good = r#"{"client":"c0.0","holding":"c0.0#1","name":"n","op":"acquire","phase":"invoke","t0":1,"w0":1}"#;
        std::fs::write(dir.path().join("c0.0.jsonl"), format!("{good}\nnot json\n")).unwrap();
        std::fs::write(
            dir.path().join("c1.0.jsonl"),
            format!("{good}\n{{\"client\":"),
        )
        .unwrap();
        let h = read_dir(dir.path()).unwrap();
        assert_eq!(h.ops.len(), 2);
        assert_eq!(h.unparsable.len(), 1, "{:?}", h.unparsable);
        assert!(h.unparsable[0].contains("c0.0.jsonl:2"));
        assert_eq!(h.torn, vec!["c1.0".to_string()]);
    }
}
