//! Listing the live holdings under a prefix, a page at a time.
//!
//! Listing reads the last message of every name under the prefix with an
//! ordered consumer (the same snapshot a watch starts with) and keeps one
//! page of live holdings, sorted by name; the page token is the last name
//! of the page, so a listing never holds more than one page in memory and
//! needs no server-side cursor (Tenure is stateless).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;

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
/// by the caller; a token must sort after the prefix.
pub async fn list(store: &Store, prefix: &str, page_size: u32, page_token: &str) -> Result<Page> {
    if !page_token.is_empty() && page_token <= prefix {
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
    let mut follow = store.follow(&filter, Start::Snapshot).await?;
    // name → holding; at most size + 1 entries (the extra one says a next
    // page exists).
    let mut page: BTreeMap<String, Holding> = BTreeMap::new();
    if follow.initially_pending > 0 {
        let read = async {
            while let Some(item) = follow.messages.next().await {
                let (message, pending) = item?;
                let entry = Entry::from(message);
                if let (Kind::Held(record), false) =
                    (entry.kind, super::rules::is_reserved(&entry.name))
                {
                    if entry.name.starts_with(prefix) && entry.name.as_str() > page_token {
                        let holding = Holding::at(&entry.name, entry.revision, record);
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
