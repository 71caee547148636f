//! The one-shot subcommands: `get`, `list`, `watch`, `acquire`, `renew`,
//! `release` and `revoke`. Each is one RPC (or a stream) printed as a table
//! or as JSON; failures come back as [`CliError`] for `run` to print.

use std::time::Duration;

use futures::StreamExt;

use super::args::{
    AcquireArgs, Connection, GetArgs, ListArgs, OutputFormat, ReleaseArgs, RenewArgs, RevokeArgs,
    TransferArgs, Wait, WatchArgs,
};
use super::connect::{connect, request, Client};
use super::error::CliError;
use super::output::{
    self, event_header, event_json, event_line, lease_json, lease_table, proto_duration,
};
use crate::proto::{
    AcquireGroupRequest, AcquireRequest, EventType, GetLeaseRequest, Lease, ListLeasesRequest,
    ReleaseRequest, RenewRequest, RevokeLeaseRequest, TransferRequest, WatchLeaseRequest,
};

/// `print!` of a rendered table (already escaped cell by cell) that does
/// not panic when stdout is a closed pipe.
macro_rules! out {
    ($($t:tt)*) => {{
        let _ = super::output::write_out(&format!($($t)*));
    }};
}

/// `println!` of one human-readable line, [escaped](super::output::escape)
/// (it may quote names, holders and keys from the server), that does not
/// panic when stdout is a closed pipe.
macro_rules! outln {
    ($($t:tt)*) => {{
        let _ = super::output::write_line(&format!($($t)*));
    }};
}

/// The longest wait sent in one Acquire; longer waits are a loop of these,
/// so `--wait forever` never runs into the server's --max-wait.
pub const WAIT_CHUNK: Duration = Duration::from_secs(30);

/// Prints JSON, pretty for one object (exact, in printable characters:
/// see [`output::json_text`]).
fn print_json(v: &serde_json::Value) {
    let _ = output::write_json(v, true);
}

/// A protobuf duration of (at least one millisecond of) `d`.
pub fn to_proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs().min(i64::MAX as u64) as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// `tenure get NAME`.
pub async fn get(a: GetArgs) -> Result<(), CliError> {
    let mut c = connect(&a.conn).await?;
    let resp = c
        .get_lease(request(
            GetLeaseRequest { name: a.name },
            &a.conn,
            Duration::ZERO,
        ))
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner();
    if resp.limit > 0 {
        // A semaphore: every holder, the limit and the free slots.
        match a.output.output {
            OutputFormat::Json => print_json(&serde_json::json!({
                "limit": resp.limit,
                "free_slots": resp.free_slots,
                "holders": resp.holders.iter().map(lease_json).collect::<Vec<_>>(),
            })),
            OutputFormat::Table => {
                out!("{}", lease_table(&resp.holders));
                outln!("LIMIT {}  FREE SLOTS {}", resp.limit, resp.free_slots);
            }
        }
        return Ok(());
    }
    let lease = resp.lease.unwrap_or_default();
    match a.output.output {
        OutputFormat::Json => print_json(&lease_json(&lease)),
        OutputFormat::Table => out!("{}", lease_table(std::slice::from_ref(&lease))),
    }
    Ok(())
}

/// Every live lease under a plain string prefix, all pages.
pub async fn list_all(
    c: &mut Client,
    conn: &Connection,
    prefix: &str,
) -> Result<Vec<Lease>, CliError> {
    let mut leases = Vec::new();
    let mut page_token = String::new();
    loop {
        let resp = c
            .list_leases(request(
                ListLeasesRequest {
                    prefix: prefix.to_string(),
                    page_size: 1000,
                    page_token: page_token.clone(),
                },
                conn,
                Duration::ZERO,
            ))
            .await
            .map_err(|s| CliError::from_status(&s))?
            .into_inner();
        leases.extend(resp.leases);
        if resp.next_page_token.is_empty() || resp.next_page_token == page_token {
            return Ok(leases);
        }
        page_token = resp.next_page_token;
    }
}

/// `tenure list [PREFIX]`.
pub async fn list(a: ListArgs) -> Result<(), CliError> {
    let mut c = connect(&a.conn).await?;
    let leases = list_all(&mut c, &a.conn, &a.prefix).await?;
    match a.output.output {
        OutputFormat::Json => print_json(&serde_json::Value::Array(
            leases.iter().map(lease_json).collect(),
        )),
        OutputFormat::Table => out!("{}", lease_table(&leases)),
    }
    Ok(())
}

/// `tenure watch NAME [--from-revision N]`: prints events until the stream
/// ends, --count is reached, or the process is interrupted.
pub async fn watch(a: WatchArgs) -> Result<(), CliError> {
    let mut c = connect(&a.conn).await?;
    let mut stream = c
        .watch_lease(WatchLeaseRequest {
            name: a.name.clone(),
            event_types: vec![],
            start_revision: a.from_revision,
            shard_revisions: Vec::new(),
        })
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner();
    let table = a.output.output == OutputFormat::Table;
    if table {
        outln!("{}", event_header().trim_end());
    }
    let mut live = false;
    let mut seen = 0u64;
    while let Some(item) = stream.next().await {
        let event = item
            .map_err(|s| CliError::from_status(&s))?
            .event
            .unwrap_or_default();
        if event.r#type == EventType::SnapshotComplete as i32 {
            live = true;
        }
        if a.no_snapshot && !live {
            continue;
        }
        if a.no_snapshot && event.r#type == EventType::SnapshotComplete as i32 {
            continue;
        }
        let written = if table {
            output::write_line(&event_line(&event))
        } else {
            output::write_json(&event_json(&event), false)
        };
        if !written {
            // stdout is gone (`| head`): nobody reads any more.
            return Ok(());
        }
        seen += 1;
        if a.count.is_some_and(|n| seen >= n) {
            return Ok(());
        }
    }
    Err(CliError {
        code: super::error::EXIT_UNAVAILABLE,
        reason: "UNAVAILABLE".into(),
        message: "the server ended the watch".into(),
        hint: Some("it is restarting or shutting down; watch again".into()),
    })
}

/// The default holder: `USER@HOST`.
pub fn default_holder() -> String {
    format!("{}@{}", user(), hostname())
}

/// The user's name from USER or LOGNAME, else `uid` and the numeric id.
pub fn user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        // SAFETY: getuid cannot fail and touches no memory.
        .unwrap_or_else(|| format!("uid{}", unsafe { libc::getuid() }))
}

/// This machine's host name, or `localhost`.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most
    // that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(s) if !s.is_empty() => s.to_string(),
        _ => "localhost".into(),
    }
}

/// Acquire, waiting up to `wait` in chunks of [`WAIT_CHUNK`] with the same
/// holder and key (a retried Acquire with them is safe). Returns the lease,
/// the key and when the Acquire that succeeded was sent.
pub async fn acquire_waiting(
    c: &mut Client,
    conn: &Connection,
    mut req: AcquireRequest,
    wait: Option<Wait>,
) -> Result<(Lease, String, std::time::Instant), CliError> {
    let until = match wait {
        Some(Wait::For(d)) => Some(tokio::time::Instant::now() + d),
        Some(Wait::Forever) => None,
        None => Some(tokio::time::Instant::now()),
    };
    if req.lease_key.is_empty() {
        req.lease_key = new_lease_key();
    }
    loop {
        let now = tokio::time::Instant::now();
        let chunk = match until {
            Some(u) => u.saturating_duration_since(now).min(WAIT_CHUNK),
            None => WAIT_CHUNK,
        };
        req.wait = (!chunk.is_zero()).then(|| to_proto(chunk));
        let sent = std::time::Instant::now();
        match c.acquire(request(req.clone(), conn, chunk)).await {
            Ok(resp) => {
                let resp = resp.into_inner();
                let lease = resp.lease.unwrap_or_default();
                // The safe deadline counts from the send time: after a long
                // wait little of the TTL may be left by it. Ask again with
                // the same key (the server renews the same holding) for a
                // fresh send time, as the client libraries do.
                let ttl = lease.ttl.map(proto_duration).unwrap_or_default();
                if sent.elapsed() > ttl / 3 {
                    req.wait = None;
                    let again = std::time::Instant::now();
                    if let Ok(resp) = c.acquire(request(req.clone(), conn, Duration::ZERO)).await {
                        let resp = resp.into_inner();
                        let renewed = resp.lease.unwrap_or_default();
                        if renewed.fencing_token == lease.fencing_token {
                            return Ok((renewed, resp.lease_key, again));
                        }
                    }
                }
                return Ok((lease, resp.lease_key, sent));
            }
            Err(s) => {
                let e = CliError::from_status(&s);
                let waiting_on = until.is_none_or(|u| tokio::time::Instant::now() < u);
                if e.reason == "LEASE_HELD" && waiting_on {
                    continue;
                }
                return Err(e);
            }
        }
    }
}

/// A fresh random lease key: 32 alphanumeric characters.
pub fn new_lease_key() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    Alphanumeric.sample_string(&mut rand::rng(), 32)
}

/// `tenure acquire NAME`.
pub async fn acquire(a: AcquireArgs) -> Result<(), CliError> {
    if !a.more.is_empty() {
        return acquire_group(a).await;
    }
    let mut c = connect(&a.conn).await?;
    let req = AcquireRequest {
        name: a.name,
        holder: a.holder.unwrap_or_else(default_holder),
        ttl: a.ttl.map(to_proto),
        lease_key: a.lease_key.unwrap_or_default(),
        wait: None,
        metadata: a.metadata.into_iter().collect(),
        lock_delay: None,
        limit: a.limit,
        preference: 0,
        mode: super::args::LockMode::proto(a.mode),
    };
    let (lease, key, _) = acquire_waiting(&mut c, &a.conn, req, a.wait).await?;
    match a.output.output {
        OutputFormat::Json => {
            let mut v = lease_json(&lease);
            v["lease_key"] = key.into();
            print_json(&v);
        }
        OutputFormat::Table => {
            out!("{}", lease_table(std::slice::from_ref(&lease)));
            outln!("LEASE KEY  {key}");
            if !lease.fence_proof.is_empty() {
                outln!(
                    "FENCE      {}",
                    super::output::fence_text(&lease.fence_proof)
                );
            }
            let slot = match lease.slot {
                0 => String::new(),
                n => format!(" --slot {n}"),
            };
            for verb in ["renew", "release"] {
                outln!(
                    "{:<9}  tenure {verb} {} --revision {}{slot} --lease-key {key}",
                    format!("{verb}:"),
                    lease.name,
                    lease.revision
                );
            }
        }
    }
    Ok(())
}

/// `tenure acquire NAME NAME...`: one AcquireGroup, all names or none.
/// A wait is sent in chunks of [`WAIT_CHUNK`] with the same holder and key
/// (a retried AcquireGroup with them is safe). Each member is then renewed
/// or released like any lease (or all at once through the API).
async fn acquire_group(a: AcquireArgs) -> Result<(), CliError> {
    let mut c = connect(&a.conn).await?;
    let mut names = vec![a.name];
    names.extend(a.more);
    let mut req = AcquireGroupRequest {
        names,
        holder: a.holder.unwrap_or_else(default_holder),
        ttl: a.ttl.map(to_proto),
        lease_key: a.lease_key.unwrap_or_else(new_lease_key),
        wait: None,
        metadata: a.metadata.into_iter().collect(),
        lock_delay: None,
    };
    let until = match a.wait {
        Some(Wait::For(d)) => Some(tokio::time::Instant::now() + d),
        Some(Wait::Forever) => None,
        None => Some(tokio::time::Instant::now()),
    };
    let resp = loop {
        let now = tokio::time::Instant::now();
        let chunk = match until {
            Some(u) => u.saturating_duration_since(now).min(WAIT_CHUNK),
            None => WAIT_CHUNK,
        };
        req.wait = (!chunk.is_zero()).then(|| to_proto(chunk));
        match c.acquire_group(request(req.clone(), &a.conn, chunk)).await {
            Ok(resp) => break resp.into_inner(),
            Err(s) => {
                let e = CliError::from_status(&s);
                let waiting_on = until.is_none_or(|u| tokio::time::Instant::now() < u);
                if e.reason == "LEASE_HELD" && waiting_on {
                    continue;
                }
                return Err(e);
            }
        }
    };
    let key = resp.lease_key;
    match a.output.output {
        OutputFormat::Json => {
            let leases: Vec<_> = resp.leases.iter().map(lease_json).collect();
            print_json(&serde_json::json!({ "leases": leases, "lease_key": key }));
        }
        OutputFormat::Table => {
            out!("{}", lease_table(&resp.leases));
            outln!("LEASE KEY  {key}");
            for l in &resp.leases {
                outln!(
                    "release:   tenure release {} --revision {} --lease-key {key}",
                    l.name,
                    l.revision
                );
            }
        }
    }
    Ok(())
}

/// `tenure renew NAME --revision N --lease-key K`.
pub async fn renew(a: RenewArgs) -> Result<(), CliError> {
    let mut c = connect(&a.conn).await?;
    let lease = c
        .renew(request(
            RenewRequest {
                name: a.name,
                expected_revision: a.revision,
                lease_key: a.lease_key,
                ttl: a.ttl.map(to_proto),
                slot: a.slot,
            },
            &a.conn,
            Duration::ZERO,
        ))
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner()
        .lease
        .unwrap_or_default();
    match a.output.output {
        OutputFormat::Json => print_json(&lease_json(&lease)),
        OutputFormat::Table => out!("{}", lease_table(std::slice::from_ref(&lease))),
    }
    Ok(())
}

/// `tenure release NAME --revision N --lease-key K`.
pub async fn release(a: ReleaseArgs) -> Result<(), CliError> {
    let mut c = connect(&a.conn).await?;
    let name = a.name.clone();
    let resp = c
        .release(request(
            ReleaseRequest {
                name: a.name,
                expected_revision: a.revision,
                lease_key: a.lease_key,
                slot: a.slot,
            },
            &a.conn,
            Duration::ZERO,
        ))
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner();
    match a.output.output {
        OutputFormat::Json => print_json(&serde_json::json!({
            "name": name,
            "revision": resp.revision,
        })),
        OutputFormat::Table => outln!("released {name} at revision {}", resp.revision),
    }
    Ok(())
}

/// `tenure transfer NAME --revision R --lease-key K [--to HOLDER]`.
pub async fn transfer(a: TransferArgs) -> Result<(), CliError> {
    let mut c = connect(&a.conn).await?;
    let lease = c
        .transfer(request(
            TransferRequest {
                name: a.name.clone(),
                expected_revision: a.revision,
                lease_key: a.lease_key,
                to_holder: a.to.unwrap_or_default(),
            },
            &a.conn,
            Duration::ZERO,
        ))
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner()
        .lease
        .unwrap_or_default();
    match a.output.output {
        OutputFormat::Json => print_json(&lease_json(&lease)),
        OutputFormat::Table => outln!(
            "transferred {} to {} (fencing token {})",
            lease.name,
            lease.holder,
            lease.fencing_token
        ),
    }
    Ok(())
}

/// The default revoke reason: who did it and with what.
pub fn default_reason() -> String {
    format!("revoked by {}@{} with tenure revoke", user(), hostname())
}

/// `tenure revoke NAME`.
pub async fn revoke(a: RevokeArgs) -> Result<(), CliError> {
    let mut c = connect(&a.conn).await?;
    let resp = c
        .revoke_lease(request(
            RevokeLeaseRequest {
                name: a.name.clone(),
                reason: a.reason.unwrap_or_else(default_reason),
                fencing_token: a.fencing_token.unwrap_or(0),
                slot: a.slot.unwrap_or(0),
            },
            &a.conn,
            Duration::ZERO,
        ))
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner();
    let revoked = resp.revoked.unwrap_or_default();
    match a.output.output {
        OutputFormat::Json => print_json(&serde_json::json!({
            "name": a.name,
            "revision": resp.revision,
            "revoked": lease_json(&revoked),
        })),
        OutputFormat::Table => outln!(
            "revoked {} (holder {}, token {}) at revision {}",
            a.name,
            revoked.holder,
            revoked.fencing_token,
            resp.revision
        ),
    }
    Ok(())
}
