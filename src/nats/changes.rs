//! The bucket's writes as NATS publishes them, before and apart from the
//! stream: a core subscription on the bucket's subjects that yields the
//! key and operation of each write it hears.
//!
//! It is a hint, never a record: no revisions, no order with the stream,
//! nothing while disconnected, and nothing for what the server writes by
//! itself (a TTL's expiry marker). A message may also arrive before the
//! stream has stored its write. Tenure uses it only to wake waiters early
//! while the shared watcher loads the bucket (`lease::watch`); what it
//! misses, the end of the load makes up for. A NATS user without
//! permission to subscribe to the bucket's subjects gets no hints, and
//! waiters wait for the load instead.

use futures::{Stream, StreamExt};

use super::bucket::Store;
use super::message::{classify, Op};
use crate::error::{Error, Reason, Result};

impl Store {
    /// The keys and operations of the bucket's writes as they are
    /// published (see the module doc for what it does not promise).
    /// Dropping the stream unsubscribes.
    pub async fn changes(&self) -> Result<impl Stream<Item = (String, Op)> + Send + 'static> {
        self.ensure_connected()?;
        let prefix = self.subject("");
        let subscriber = self
            .client
            .subscribe(format!("{prefix}>"))
            .await
            .map_err(|e| {
                Error::new(
                    Reason::NatsUnavailable,
                    format!("cannot subscribe to the bucket's writes: {e}"),
                )
            })?;
        Ok(subscriber.filter_map(move |message| {
            let change = message
                .subject
                .as_str()
                .strip_prefix(prefix.as_str())
                .map(|key| {
                    let op = classify(message.headers.as_ref(), message.payload.clone());
                    (key.to_string(), op)
                });
            std::future::ready(change)
        }))
    }
}
