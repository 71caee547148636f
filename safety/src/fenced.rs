//! The downstream store that enforces fencing: a PostgreSQL table whose row
//! per resource remembers the highest fencing token it accepted.
//!
//! The reference pattern for users is the upsert inside [`FENCED_WRITE`]:
//!
//! ```sql
//! INSERT INTO fenced_state (resource, fence, writer, body) VALUES ($1, $2, $3, $4)
//! ON CONFLICT (resource) DO UPDATE
//!   SET fence = EXCLUDED.fence, writer = EXCLUDED.writer, body = EXCLUDED.body
//!   WHERE fenced_state.fence <= EXCLUDED.fence;
//! -- 0 rows: a holder with a newer token has written; stop acting.
//! ```
//!
//! One statement, so the check and the write cannot be separated by another
//! writer: the row lock taken by the upsert orders writers of one resource.
//! The safety run wraps it in a CTE that also appends each accepted write to
//! `fenced_log` (with a store-assigned sequence) in the same statement; the
//! checker reads that log to verify that the store never accepted a token
//! lower than one it had accepted before. The unfenced variant (for the
//! negative control) drops the `WHERE`, which is the bug the pattern prevents.

use tokio_postgres::{Client, NoTls};

/// The schema: current state per resource, and the log of accepted writes.
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

/// A fenced write: accepted (one row back, the log sequence) only if the
/// token is at least the highest accepted for the resource.
const FENCED_WRITE: &str = "
WITH w AS (
    INSERT INTO fenced_state (resource, fence, writer, body) VALUES ($1, $2, $3, $4)
    ON CONFLICT (resource) DO UPDATE
        SET fence = EXCLUDED.fence, writer = EXCLUDED.writer, body = EXCLUDED.body
        WHERE fenced_state.fence <= EXCLUDED.fence
    RETURNING resource, fence, writer
)
INSERT INTO fenced_log (resource, fence, writer) SELECT resource, fence, writer FROM w
RETURNING seq";

/// The same write without the fence check: what a store that ignores
/// tokens does. Used only by the negative control.
const UNFENCED_WRITE: &str = "
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

/// Creates the tables if they are missing.
pub async fn setup(client: &Client) -> Result<(), String> {
    client
        .batch_execute(SCHEMA)
        .await
        .map_err(|e| format!("cannot create the fenced tables: {e}"))
}

/// One client's handle on the store.
pub struct Store {
    /// The connection.
    client: Client,
    /// Whether writes check the token (false only in the negative control).
    fenced: bool,
}

impl Store {
    /// A store over an open connection.
    pub fn new(client: Client, fenced: bool) -> Store {
        Store { client, fenced }
    }

    /// Writes `body` to `resource` with `token`; `Ok(Some(seq))` if the store
    /// accepted it, `Ok(None)` if a newer token had been accepted.
    pub async fn write(
        &self,
        resource: &str,
        token: u64,
        writer: &str,
        body: &str,
    ) -> Result<Option<i64>, String> {
        let sql = if self.fenced {
            FENCED_WRITE
        } else {
            UNFENCED_WRITE
        };
        let rows = self
            .client
            .query(sql, &[&resource, &(token as i64), &writer, &body])
            .await
            .map_err(|e| e.to_string())?;
        Ok(rows.first().map(|r| r.get::<_, i64>(0)))
    }
}

/// One accepted write as the store logged it.
pub struct Accepted {
    /// The store's sequence (commit order per resource).
    pub seq: i64,
    /// The resource.
    pub resource: String,
    /// The token it carried.
    pub fence: i64,
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
            fence: r.get(2),
        })
        .collect())
}
