//! Operator RPCs: `ListLeases` and `RevokeLease`.
//!
//! Listing reads the last message of every name under the prefix with an
//! ordered consumer (the same snapshot a watch starts with) and keeps one
//! page of live holdings, sorted by name; the page token is the last name
//! of the page, so a listing never holds more than one page in memory and
//! needs no server-side cursor (Tenure is stateless).
//!
//! A revoke is one compare-and-set write over the current holding: a
//! `KV-Operation: PURGE` message, which watchers report as REVOKED and
//! which makes the holder's next Renew or Release fail with LEASE_NOT_HELD
//! (its revision is no longer the last one and the record is gone). The
//! next Acquire gets a greater fencing token, as after any other ending.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;

use crate::error::{Error, Reason, Result};
use crate::lease::{unreadable, Holding};
use crate::store::{CasError, Kind, Store};
use crate::validate;

/// Page size when a request gives none.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest page.
pub const MAX_PAGE_SIZE: usize = 1000;
/// Longest revoke reason, in bytes.
pub const MAX_REASON_LEN: usize = 256;
/// How long a listing may read the bucket when the caller set no deadline.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a revoke re-reads after losing a race.
const MAX_REVOKE_ATTEMPTS: usize = 5;

/// One page of a listing.
#[derive(Debug)]
pub struct Page {
    /// The holdings, sorted by name.
    pub leases: Vec<Holding>,
    /// The name to continue after, empty on the last page.
    pub next_page_token: String,
}

/// Checks a listing prefix: empty, or characters allowed in names.
pub fn prefix(prefix: &str) -> Result<&str> {
    if prefix.is_empty() {
        return Ok(prefix);
    }
    let ok = prefix.len() <= validate::MAX_NAME_LEN
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-/_=.".contains(&b));
    if !ok {
        return Err(Error::new(
            Reason::InvalidName,
            format!(
                "prefix {:?} is invalid: use up to 255 characters from [-/_=.a-zA-Z0-9], or empty for all",
                prefix.chars().take(64).collect::<String>()
            ),
        ));
    }
    Ok(prefix)
}

/// Lists the live holdings whose names start with `prefix`, after
/// `page_token`, at most `page_size` (0: the default).
pub async fn list(store: &Store, prefix: &str, page_size: u32, page_token: &str) -> Result<Page> {
    if !page_token.is_empty() && (validate::name(page_token).is_err() || page_token <= prefix) {
        return Err(Error::new(
            Reason::InvalidArgument,
            "page_token is not one this server issued for this prefix; start again with an empty page_token",
        ));
    }
    let size = match page_size as usize {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    };
    // Narrow the subscription to the deepest whole level of the prefix.
    let filter = match prefix.rfind('.') {
        Some(i) => format!("{}>", &prefix[..=i]),
        None => ">".to_string(),
    };
    let mut follow = store.follow(&filter, true).await?;
    // name → holding; at most size + 1 entries (the extra one says a next
    // page exists).
    let mut page: BTreeMap<String, Holding> = BTreeMap::new();
    if follow.initially_pending > 0 {
        let read = async {
            while let Some(item) = follow.messages.next().await {
                let (entry, pending) = item?;
                if let Kind::Held(record) = entry.kind {
                    if entry.name.starts_with(prefix) && entry.name.as_str() > page_token {
                        let holding = Holding {
                            name: entry.name.clone(),
                            revision: entry.revision,
                            token: record.token_at(entry.revision),
                            record,
                        };
                        page.insert(entry.name, holding);
                        if page.len() > size + 1 {
                            page.pop_last();
                        }
                    }
                }
                if pending == 0 {
                    return Ok(());
                }
            }
            Err(Error::new(
                Reason::NatsUnavailable,
                "the bucket listing ended early; retry",
            ))
        };
        tokio::time::timeout(LIST_TIMEOUT, read)
            .await
            .map_err(|_| Error::nats("listing the bucket", "timed out"))??;
    }
    let more = page.len() > size;
    let leases: Vec<Holding> = page.into_values().take(size).collect();
    let next_page_token = match (more, leases.last()) {
        (true, Some(last)) => last.name.clone(),
        _ => String::new(),
    };
    Ok(Page {
        leases,
        next_page_token,
    })
}

/// The payload of a revoke message: who revoked which holding and why.
#[derive(Debug, Serialize)]
struct Revoked<'a> {
    /// The holder whose holding ended.
    holder: &'a str,
    /// Its fencing token.
    token: u64,
    /// Who revoked it (the caller's identity).
    revoked_by: &'a str,
    /// Why.
    reason: &'a str,
}

/// Checks a revoke reason: 1 to 256 bytes of printable text.
pub fn reason(reason: &str) -> Result<&str> {
    if reason.trim().is_empty()
        || reason.len() > MAX_REASON_LEN
        || reason.chars().any(char::is_control)
    {
        return Err(Error::new(
            Reason::InvalidArgument,
            format!("reason must be 1 to {MAX_REASON_LEN} bytes of printable text saying why"),
        ));
    }
    Ok(reason)
}

/// Revokes the current holding of `name` (only the one with `token`, when
/// not 0). Returns the revoke's revision and the holding that ended.
pub async fn revoke(
    store: &Store,
    name: &str,
    token: u64,
    why: &str,
    by: &str,
) -> Result<(u64, Holding)> {
    for _ in 0..MAX_REVOKE_ATTEMPTS {
        let last = store.last(name).await?;
        let (revision, record) = match last {
            Some(entry) => match entry.kind {
                Kind::Held(record) => (entry.revision, record),
                Kind::Unreadable => return Err(unreadable(name, store.bucket())),
                _ => return Err(not_found(name, "it is not held")),
            },
            None => return Err(not_found(name, "it is not held")),
        };
        let current = record.token_at(revision);
        if token != 0 && token != current {
            return Err(not_found(
                name,
                &format!("its current holding has token {current}, not {token}"),
            )
            .with("fencing_token", current));
        }
        let payload = serde_json::to_vec(&Revoked {
            holder: &record.holder,
            token: current,
            revoked_by: by,
            reason: why,
        })
        .map_err(|e| Error::new(Reason::Internal, format!("encoding a revoke: {e}")))?;
        match store.purge(name, payload.into(), revision).await {
            Ok(at) => {
                tracing::warn!(
                    name,
                    holder = %record.holder,
                    token = current,
                    revoked_by = by,
                    reason = why,
                    revision = at,
                    "lease revoked"
                );
                let holding = Holding {
                    name: name.to_string(),
                    revision,
                    token: current,
                    record,
                };
                return Ok((at, holding));
            }
            Err(CasError::Conflict { .. }) => continue,
            Err(CasError::Failed(err)) => return Err(err),
        }
    }
    Err(Error::new(
        Reason::LeaseHeld,
        format!("lease {name:?} is changing hands too fast to revoke; retry"),
    ))
}

/// LEASE_NOT_FOUND for a revoke of something that is not there.
fn not_found(name: &str, why: &str) -> Error {
    Error::new(
        Reason::LeaseNotFound,
        format!("cannot revoke lease {name:?}: {why}; list leases to see what is held"),
    )
}
