//! Listing the live holdings under a prefix, a page at a time.
//!
//! Listing reads the last message of every name under the prefix with an
//! ordered consumer (the same snapshot a watch starts with) and keeps one
//! page of live holdings, sorted by name; the page token is the last name
//! of the page, so a listing never holds more than one page in memory and
//! needs no server-side cursor (Tenure is stateless). Semaphore holders
//! (slot keys under `_tenure.sem.`) are read by a second pass and listed
//! under their semaphore's name, one per slot.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;

use super::keys;
use super::record::{Entry, Holding, Kind};
use crate::error::{Error, Reason, Result};
use crate::nats::{Start, Store};

/// Page size when a request gives none.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest page.
pub const MAX_PAGE_SIZE: usize = 1000;
/// How long a listing may read the bucket when the caller set no deadline.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// One page of a listing.
#[derive(Debug)]
pub struct Page {
    /// The holdings, sorted by name.
    pub leases: Vec<Holding>,
    /// The name to continue after, empty on the last page.
    pub next_page_token: String,
}

/// Lists the live holdings whose names start with `prefix`, after
/// `page_token`, at most `page_size` (0: the default). Both are validated
/// by the caller. A semaphore contributes one holding per live holder,
/// sorted by slot after the name's plain lease (if any); the page token of
/// a holder is `name#slot`.
pub async fn list(store: &Store, prefix: &str, page_size: u32, page_token: &str) -> Result<Page> {
    let after = parse_token(page_token)
        .filter(|(name, _)| page_token.is_empty() || *name >= prefix)
        .ok_or_else(|| {
            Error::new(
                Reason::InvalidArgument,
                "page_token is not one this server issued for this prefix; start again with an empty page_token",
            )
        })?;
    let size = match page_size as usize {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    };
    // Narrow each subscription to the deepest whole level of the prefix.
    let level = prefix.rfind('.').map_or("", |i| &prefix[..=i]);
    // (name, slot) → holding; at most size + 1 entries (the extra one says
    // a next page exists).
    let mut page: BTreeMap<(String, u32), Holding> = BTreeMap::new();
    let mut keep = |key: (String, u32), holding: Holding| {
        if key.0.starts_with(prefix) && (key.0.as_str(), key.1) > after {
            page.insert(key, holding);
            if page.len() > size + 1 {
                page.pop_last();
            }
        }
    };
    read_all(store, &keys::leases_under(level), |entry, record| {
        if let Some(name) = keys::parse_lease(&entry.name) {
            let holding = Holding::at(name, entry.revision, record);
            keep((name.to_string(), 0), holding);
        }
    })
    .await?;
    let semaphores = format!(
        "{}.{level}>",
        keys::semaphore_prefix("").trim_end_matches('.')
    );
    read_all(store, &semaphores, |entry, record| {
        if let Some((name, slot)) = keys::parse_semaphore_slot(&entry.name) {
            let holding = Holding::at(&entry.name, entry.revision, record).in_slot(name, slot);
            keep((name.to_string(), slot), holding);
        }
    })
    .await?;
    let more = page.len() > size;
    Ok(Page::of(page.into_values().take(size).collect(), more))
}

impl Page {
    /// A page of `leases` (sorted, at most one page), with a token after
    /// its last holding when `more` follow: `name`, or `name#slot` for a
    /// semaphore holder.
    pub fn of(leases: Vec<Holding>, more: bool) -> Page {
        let next_page_token = match (more, leases.last()) {
            (true, Some(last)) if last.slot == 0 => last.name.clone(),
            (true, Some(last)) => format!("{}#{}", last.name, last.slot),
            _ => String::new(),
        };
        Page {
            leases,
            next_page_token,
        }
    }
}

/// The position a page token names: `name` (a plain lease, slot 0) or
/// `name#slot` (a semaphore holder); the empty token is before everything.
pub fn parse_token(token: &str) -> Option<(&str, u32)> {
    match token.rsplit_once('#') {
        None => Some((token, 0)),
        Some((name, slot)) if !slot.is_empty() && slot.bytes().all(|b| b.is_ascii_digit()) => {
            Some((name, slot.parse().ok().filter(|s| *s > 0)?))
        }
        Some(_) => None,
    }
}

/// Reads the last message of every key under `filter` and passes each live
/// holding to `each`, within [`LIST_TIMEOUT`].
async fn read_all(
    store: &Store,
    filter: &str,
    mut each: impl FnMut(Entry, super::record::Record),
) -> Result<()> {
    let mut follow = store.follow(filter, Start::Snapshot).await?;
    if follow.initially_pending == 0 {
        return Ok(());
    }
    let read = async {
        while let Some(item) = follow.messages.next().await {
            let (message, pending) = item?;
            let mut entry = Entry::from(message);
            if let Kind::Held(record) = std::mem::replace(&mut entry.kind, Kind::Unreadable) {
                each(entry, record);
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
        .map_err(|_| Error::nats("listing the bucket", "timed out"))?
}

#[cfg(test)]
mod tests {
    use super::parse_token;

    #[test]
    fn page_tokens() {
        assert_eq!(parse_token(""), Some(("", 0)));
        assert_eq!(parse_token("jobs.a"), Some(("jobs.a", 0)));
        assert_eq!(parse_token("jobs.a#3"), Some(("jobs.a", 3)));
        assert_eq!(parse_token("jobs.a#0"), None);
        assert_eq!(parse_token("jobs.a#"), None);
        assert_eq!(parse_token("jobs.a#x"), None);
        assert_eq!(parse_token("jobs.a#99999999999"), None);
    }
}
