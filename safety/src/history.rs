//! The operation history: one JSON line per event, written by every client
//! process and read back by the checker.
//!
//! A client appends each line with one `write` call and no buffering, so a
//! client killed with SIGKILL leaves every line it wrote before it died. An
//! Acquire or Renew is logged when it is *sent* (phase `invoke`) and again
//! when it completes: a holder killed mid-call still tells the checker that
//! the write may have reached NATS, which moves the lease's expiry later.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
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
    /// The holder stopped renewing on purpose (it will let the lease expire).
    Abandon,
    /// The holder stopped acting: its deadline passed, the service said
    /// `LEASE_NOT_HELD`, or the store refused its token (see `detail`).
    Lost,
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
    /// Error reason or note.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
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

/// Reads every history file (`*.jsonl`) in `dir`. A torn last line (a
/// process killed mid-write) is skipped.
pub fn read_dir(dir: &Path) -> std::io::Result<Vec<Op>> {
    let mut ops = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        for line in BufReader::new(File::open(&path)?).lines() {
            if let Ok(op) = serde_json::from_str::<Op>(&line?) {
                ops.push(op);
            }
        }
    }
    Ok(ops)
}
