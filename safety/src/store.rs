//! The downstream store a workload client writes to, behind one call:
//! PostgreSQL with its kit (`fenced`, every scenario but one) or Redis
//! with its kit (`redis_kit`, `fenced-redis`); and what the checker reads
//! back from either.

use crate::admit::Admitted;
use crate::{fenced, redis_kit};

/// Which store a scenario's clients write to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// PostgreSQL, fenced by `fence/kits/postgres/tenure_fence.sql`.
    Postgres,
    /// Redis, fenced by `fence/kits/redis/tenure_fence.lua`.
    Redis,
}

/// What became of a write the store answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// The store took it.
    Accepted {
        /// PostgreSQL: its place in the store's log.
        seq: Option<i64>,
        /// Redis: the value it replaced (empty: none), which orders the
        /// store's writes (`redis_kit`).
        replaced: Option<String>,
    },
    /// The kit refused its token: a newer holder has written.
    Stale,
}

/// One accepted write, in the store's order.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// Its place in the store's order (commit order per resource).
    pub seq: i64,
    /// The resource.
    pub resource: String,
    /// The stretch of the resource's order it belongs to: always 0 in
    /// PostgreSQL's log; in Redis, where the order is rebuilt from values,
    /// a new segment starts after a write whose reply was lost.
    pub segment: u32,
    /// The token it carried.
    pub fence: i64,
}

/// One client's store.
pub enum Store {
    /// PostgreSQL with the kit.
    Postgres(fenced::Store),
    /// Redis with the kit.
    Redis(redis_kit::Store),
}

impl Store {
    /// Connects a client's store of `kind` (`pg` or `redis`: the URLs).
    pub async fn open(kind: Kind, pg: Option<&str>, redis: Option<&str>) -> Result<Store, String> {
        match kind {
            Kind::Postgres => {
                let url = pg.ok_or("the PostgreSQL store needs --pg")?;
                Ok(Store::Postgres(fenced::Store::new(
                    fenced::connect(url).await?,
                )))
            }
            Kind::Redis => {
                let url = redis.ok_or("the Redis store needs --redis")?;
                Ok(Store::Redis(redis_kit::Store::new(
                    redis_kit::connect(url).await?,
                )))
            }
        }
    }

    /// A fenced write of the client's `n`th write, through the kit, with
    /// the token the proof check admitted.
    pub async fn write(
        &mut self,
        fence: &Admitted,
        prefix: &str,
        writer: &str,
        n: u64,
        body: &str,
    ) -> Result<Written, String> {
        let resource = fence.resource(prefix);
        match self {
            Store::Postgres(s) => s.write(&resource, fence, writer, body).await,
            Store::Redis(s) => {
                let value = redis_kit::value(fence.token, writer, n);
                s.write(&resource, fence, &value).await
            }
        }
    }

    /// The negative control's write that bypasses the kit (PostgreSQL only:
    /// the Redis kit is the only way its scenario writes).
    pub async fn write_unfenced(
        &mut self,
        resource: &str,
        token: u64,
        writer: &str,
        body: &str,
    ) -> Result<Written, String> {
        match self {
            Store::Postgres(s) => s.write_unfenced(resource, token, writer, body).await,
            Store::Redis(_) => Err("the Redis store has no unfenced write".into()),
        }
    }
}
