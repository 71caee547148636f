//! [`Semaphore`]: at most N holders of a name at once, each a [`Session`]
//! with its own slot and fencing token.
//!
//! The limit is enforced by the server (conditional writes in NATS), not by
//! this client: a holder is an ordinary session of slot `1..=limit`
//! ([`Session::slot`]), renewed, fenced, watched and released like a lease.
//! The client's one watch tells a holder's slot apart from the others', so
//! other holders coming and going never end a session.

use std::time::Duration;

use crate::client::{AcquireOptions, Client, LeaseInfo};
use crate::error::Error;
use crate::proto::{Lease, LockMode};
use crate::session::Session;

/// A counting semaphore: the name `name`, with up to `limit` holders.
///
/// ```no_run
/// use std::time::Duration;
/// use tenure_client::{AcquireOptions, Client, Semaphore};
///
/// # async fn f(client: Client) -> Result<(), tenure_client::Error> {
/// let slots = Semaphore::new(&client, "jobs.exports", 3);
/// let permit = slots
///     .acquire("worker-7", Duration::from_secs(10), AcquireOptions::default().wait(Duration::from_secs(60)))
///     .await?;
/// // Stop before permit.safe_deadline(); pass permit.fencing_token() downstream.
/// tokio::select! {
///     _ = permit.lost().cancelled() => eprintln!("lost slot {}: stop", permit.slot()),
///     _ = export(permit.fencing_token()) => {}
/// }
/// permit.release().await?;
/// # Ok(()) }
/// # async fn export(_token: u64) {}
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    /// The connection the holders are acquired through.
    client: Client,
    /// The semaphore's name.
    name: String,
    /// The most holders at once.
    limit: u32,
}

impl Semaphore {
    /// The semaphore `name` of at most `limit` holders (1 to the server's
    /// `--max-semaphore-limit`). Nothing is sent until [`acquire`](Self::acquire).
    pub fn new(client: &Client, name: impl Into<String>, limit: u32) -> Semaphore {
        Semaphore {
            client: client.clone(),
            name: name.into(),
            limit,
        }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The limit this handle asks for.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Takes a free slot for `holder` (with [`AcquireOptions::wait`], waits
    /// for one in arrival order) and renews it in the background: the
    /// [`Session`] has its own [`slot`](Session::slot), fencing token, safe
    /// deadline and loss signal, exactly like a lease's. Stop before its safe
    /// deadline and pass its fencing token downstream.
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseHeld`](crate::Reason::LeaseHeld) when every slot is
    /// taken (and no wait, or the wait ran out);
    /// [`Reason::LimitMismatch`](crate::Reason::LimitMismatch) when the
    /// semaphore is held with another limit (metadata `limit`: the one in
    /// force, also [`limit_in_force`]); the errors of [`Client::acquire`].
    pub async fn acquire(
        &self,
        holder: impl Into<String>,
        ttl: Duration,
        options: AcquireOptions,
    ) -> Result<Session, Error> {
        self.client
            .acquire_slot(
                self.name.clone(),
                holder.into(),
                ttl,
                self.limit,
                LockMode::Unspecified,
                options,
            )
            .await
    }

    /// The live holders (by slot), the limit in force and the free slots.
    ///
    /// # Errors
    ///
    /// [`Reason::LeaseNotFound`](crate::Reason::LeaseNotFound) when nobody
    /// holds a slot.
    pub async fn inspect(&self) -> Result<LeaseInfo, Error> {
        self.client.inspect(self.name.clone()).await
    }

    /// The live holders, by slot (empty when nobody holds a slot).
    ///
    /// # Errors
    ///
    /// As [`Client::inspect`], but no holder is not an error.
    pub async fn holders(&self) -> Result<Vec<Lease>, Error> {
        match self.inspect().await {
            Ok(info) => Ok(info.holders),
            Err(err) if err.reason() == crate::error::Reason::LeaseNotFound => Ok(Vec::new()),
            Err(err) => Err(err),
        }
    }
}

/// The limit in force that a `LIMIT_MISMATCH` error reports (its `limit`
/// metadata); `None` for any other error.
pub fn limit_in_force(err: &Error) -> Option<u32> {
    if err.reason() != crate::error::Reason::LimitMismatch {
        return None;
    }
    err.metadata().get("limit")?.parse().ok()
}
