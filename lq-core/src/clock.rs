//! The database's clock. Every due time, lease and cron tick litequeue keeps is
//! compared with the server's `now()`, never a host's clock; compute `run_at`
//! times from this one and they mean what they say however far hosts drift.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::{db, Error};

/// The database server's current time (the start of a fresh transaction).
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// use lq_core::{chrono::Duration, EnqueueOptions};
/// let at = lq_core::database_now(&pool).await? + Duration::minutes(5);
/// let options = EnqueueOptions::new().run_at(at);
/// # let _ = options; Ok(()) }
/// ```
pub async fn database_now(pool: &PgPool) -> Result<DateTime<Utc>, Error> {
    let mut conn = pool.acquire().await.map_err(db::err("clock_now"))?;
    db::clock::clock_now(&mut conn).await
}
