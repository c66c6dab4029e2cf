//! Statements of the testing helpers: the queued jobs of one kind.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::err;
use crate::Error;

/// A queued job as the testing helpers read it.
#[derive(Debug, sqlx::FromRow)]
pub struct QueuedRow {
    pub id: i64,
    pub queue: String,
    pub priority: i16,
    pub payload: String,
    pub run_at: DateTime<Utc>,
    pub max_attempts: i32,
    pub unique_key: Option<String>,
    pub meta: Option<String>,
}

/// Every queued job of `kind` the connection can see (its own transaction's
/// uncommitted jobs included), oldest first.
pub async fn jobs_queued_of_kind(
    conn: &mut PgConnection,
    kind: &str,
) -> Result<Vec<QueuedRow>, Error> {
    sqlx::query_as(
        "select id, queue, priority, payload::text as payload, run_at, max_attempts, unique_key,
             meta::text as meta
         from lq.jobs
         where kind operator(pg_catalog.=) $1 and state operator(pg_catalog.=) 'queued'::lq.job_state
         order by id",
    )
    .bind(kind)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("jobs_queued_of_kind"))
}
