//! The PostgreSQL store that enforces fencing, with the PostgreSQL kit
//! (`fence/kits/postgres/tenure_fence.sql`): a table whose row per
//! resource holds its last write, and the kit's `tenure_fence` table, the
//! highest token accepted per resource.
//!
//! Each fenced write is one transaction, as the kit's README asks of an
//! application:
//!
//! ```sql
//! BEGIN;
//! SELECT tenure_fence($1::text, $2::text::numeric);  -- the verified proof's lease and token
//! -- the write itself, without a token check of its own (WRITE below)
//! COMMIT;
//! ```
//!
//! `tenure_fence` advances the resource's highest token and keeps its row
//! locked until commit, so writers of one resource are ordered by token; a
//! token lower than the highest raises SQLSTATE `TF409` (`FENCE_STALE`) and
//! the transaction rolls back, so nothing of a stale write commits. The
//! token comes from a fence proof the client verified first (`admit`); the
//! kit compares tokens, it does not check proofs.
//!
//! The write appends every accepted write to `fenced_log` (with a
//! store-assigned sequence) in the same transaction; the checker reads that
//! log to verify that the store never accepted a token lower than one it
//! had accepted before. The unfenced variant (for the negative control)
//! skips the `tenure_fence` call: the bug the kit prevents. No trigger
//! (`tenure_fenced`) guards `fenced_state`, so that the control can.

use tokio_postgres::{Client, NoTls};

use crate::admit::Admitted;
use crate::store::{Accepted, Written};

/// The kit, applied once before the clients start.
const KIT: &str = include_str!("../../fence/kits/postgres/tenure_fence.sql");

/// The checker's schema: current state per resource, and the log of
/// accepted writes.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS fenced_state (
    resource text PRIMARY KEY,
    fence    bigint NOT NULL,
    writer   text NOT NULL,
    body     text NOT NULL
);
CREATE TABLE IF NOT EXISTS fenced_log (
    seq      bigserial PRIMARY KEY,
    resource text NOT NULL,
    fence    bigint NOT NULL,
    writer   text NOT NULL
);
CREATE INDEX IF NOT EXISTS fenced_log_resource ON fenced_log (resource, seq);
";

/// The kit's call, first in each fenced transaction (the token as a decimal
/// string, as the kit's README advises for any driver).
const FENCE: &str = "SELECT tenure_fence($1::text, $2::text::numeric)";

/// The write: the resource's state, and the log of accepted writes, in one
/// statement. It checks no token itself: in the fenced store the kit's call
/// before it has.
const WRITE: &str = "
WITH w AS (
    INSERT INTO fenced_state (resource, fence, writer, body) VALUES ($1, $2, $3, $4)
    ON CONFLICT (resource) DO UPDATE
        SET fence = EXCLUDED.fence, writer = EXCLUDED.writer, body = EXCLUDED.body
    RETURNING resource, fence, writer
)
INSERT INTO fenced_log (resource, fence, writer) SELECT resource, fence, writer FROM w
RETURNING seq";

/// Connects to PostgreSQL at `url` (a `postgres://` URL or key=value string).
pub async fn connect(url: &str) -> Result<Client, String> {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| format!("cannot connect to PostgreSQL at {url}: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The advisory lock that runs under `setup`: two concurrent `CREATE OR
/// REPLACE FUNCTION`s of one function can fail ("tuple concurrently
/// updated"), and `scripts/safety.sh --lanes` starts runs at once.
const SETUP_LOCK: i64 = 0x7465_6e75_7265; // "tenure"

/// Creates the checker's tables if they are missing and applies the kit
/// (idempotent). Once per run, before any client; runs started together
/// take turns under an advisory lock.
pub async fn setup(client: &Client) -> Result<(), String> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&SETUP_LOCK])
        .await
        .map_err(|e| format!("cannot take the setup lock: {e}"))?;
    let done = async {
        client
            .batch_execute(SCHEMA)
            .await
            .map_err(|e| format!("cannot create the fenced tables: {e}"))?;
        client
            .batch_execute(KIT)
            .await
            .map_err(|e| format!("cannot apply fence/kits/postgres/tenure_fence.sql: {e}"))
    }
    .await;
    client
        .execute("SELECT pg_advisory_unlock($1)", &[&SETUP_LOCK])
        .await
        .map_err(|e| format!("cannot release the setup lock: {e}"))?;
    done
}

/// A database error as a one-liner: the server's message when there is one.
fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_owned())
}

/// One client's handle on the store.
pub struct Store {
    /// The connection.
    client: Client,
}

impl Store {
    /// A store over an open connection.
    pub fn new(client: Client) -> Store {
        Store { client }
    }

    /// Writes `body` to `resource` in a transaction fenced by the kit with
    /// the admitted token: `Accepted` with the log sequence, or `Stale`
    /// when the kit refused the token (`TF409`; the transaction is rolled
    /// back).
    pub async fn write(
        &mut self,
        resource: &str,
        fence: &Admitted,
        writer: &str,
        body: &str,
    ) -> Result<Written, String> {
        let tx = self.client.transaction().await.map_err(|e| message(&e))?;
        if let Err(e) = tx
            .execute(FENCE, &[&resource, &fence.token.to_string()])
            .await
        {
            // Dropping `tx` rolls it back.
            return match e.code().map(|c| c.code()) {
                Some("TF409") => Ok(Written::Stale),
                _ => Err(message(&e)),
            };
        }
        let row = tx
            .query_one(WRITE, &[&resource, &(fence.token as i64), &writer, &body])
            .await
            .map_err(|e| message(&e))?;
        tx.commit().await.map_err(|e| message(&e))?;
        Ok(Written::Accepted {
            seq: Some(row.get::<_, i64>(0)),
            replaced: None,
        })
    }

    /// The same write without the kit's call: what a write path that
    /// bypasses the fence does. Used only by the negative control.
    pub async fn write_unfenced(
        &mut self,
        resource: &str,
        token: u64,
        writer: &str,
        body: &str,
    ) -> Result<Written, String> {
        let row = self
            .client
            .query_one(WRITE, &[&resource, &(token as i64), &writer, &body])
            .await
            .map_err(|e| message(&e))?;
        Ok(Written::Accepted {
            seq: Some(row.get::<_, i64>(0)),
            replaced: None,
        })
    }
}

/// The store's log of accepted writes for resources starting with `prefix`,
/// in sequence order.
pub async fn accepted(client: &Client, prefix: &str) -> Result<Vec<Accepted>, String> {
    let rows = client
        .query(
            "SELECT seq, resource, fence FROM fenced_log WHERE starts_with(resource, $1) ORDER BY seq",
            &[&prefix],
        )
        .await
        .map_err(|e| format!("cannot read fenced_log: {e}"))?;
    Ok(rows
        .iter()
        .map(|r| Accepted {
            seq: r.get(0),
            resource: r.get(1),
            segment: 0,
            fence: r.get(2),
        })
        .collect())
}

/// The kit's highest token of every resource starting with `prefix`, as
/// decimal strings (the kit keeps them as `numeric(20,0)`).
pub async fn highest(client: &Client, prefix: &str) -> Result<Vec<(String, String)>, String> {
    let rows = client
        .query(
            "SELECT lease_name, highest_token::text FROM tenure_fence WHERE starts_with(lease_name, $1)",
            &[&prefix],
        )
        .await
        .map_err(|e| format!("cannot read the kit's tenure_fence table: {e}"))?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
