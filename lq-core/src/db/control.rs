//! Statements behind job control: inspect, cancel, retry.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::err;
use crate::{Error, JobState};

/// A job row as control calls show it.
#[derive(Debug, Clone, sqlx::FromRow)]
#[non_exhaustive]
pub struct JobRow {
    /// Job id.
    pub id: i64,
    /// Kind.
    pub kind: String,
    /// Queue.
    pub queue: String,
    /// Priority.
    pub priority: i16,
    /// Payload, unchanged since enqueue.
    pub payload: serde_json::Value,
    /// State.
    pub state: JobState,
    /// Earliest next run.
    pub run_at: DateTime<Utc>,
    /// Attempts so far (counted at claim).
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Unique key, if any.
    pub unique_key: Option<String>,
    /// Worker holding the lease, while running.
    pub lease_owner: Option<String>,
    /// Lease expiry, while running.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// One `{"attempt", "at", "error"}` object per failed attempt.
    pub errors: serde_json::Value,
    /// Enqueue time.
    pub created_at: DateTime<Utc>,
    /// Start of the latest attempt.
    pub started_at: Option<DateTime<Utc>>,
    /// When the job reached a final state.
    pub finished_at: Option<DateTime<Utc>>,
    /// When cancellation was requested while it ran.
    pub cancel_requested_at: Option<DateTime<Utc>>,
}

const COLUMNS: &str = "id, kind, queue, priority, payload, state, run_at, attempts, max_attempts, unique_key,
     lease_owner, lease_expires_at, errors, created_at, started_at, finished_at, cancel_requested_at";

/// One job by id.
pub async fn job_get(conn: &mut PgConnection, id: i64) -> Result<Option<JobRow>, Error> {
    sqlx::query_as(&format!("select {COLUMNS} from lq.jobs where id = $1"))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(err("job_get"))
}

/// Jobs filtered by state and queue (either may be `None`), newest first.
pub async fn job_list(
    conn: &mut PgConnection,
    state: Option<JobState>,
    queue: Option<&str>,
    limit: i64,
) -> Result<Vec<JobRow>, Error> {
    sqlx::query_as(&format!(
        "select {COLUMNS} from lq.jobs
         where ($1::lq.job_state is null or state = $1) and ($2::text is null or queue = $2)
         order by id desc limit $3"
    ))
    .bind(state)
    .bind(queue)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_list"))
}

/// Cancels a job: a queued one ends `cancelled` now; a running one is flagged and
/// its workers are told by NOTIFY. Returns the state before the call, or `None`
/// when no such job exists.
pub async fn job_cancel(conn: &mut PgConnection, id: i64) -> Result<Option<JobState>, Error> {
    sqlx::query_scalar(
        "with old as (select id, state from lq.jobs where id = $1 for update),
         upd as (
             update lq.jobs j
             set state = case when old.state = 'queued' then 'cancelled' else j.state end::lq.job_state,
                 finished_at = case when old.state = 'queued' then now() else j.finished_at end,
                 cancel_requested_at = case when old.state = 'running' then now() else j.cancel_requested_at end
             from old where j.id = old.id and old.state in ('queued', 'running')
             returning j.id
         )
         select old.state from old
         where case when old.state = 'running'
                    then (select true from pg_notify('lq_cancel', old.id::text)) else true end",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_cancel"))
}

/// Puts a dead or cancelled job back in the queue now with fresh attempts.
/// Returns the state before the call; fails with a unique violation when another
/// live job holds its key.
pub async fn job_retry_now(conn: &mut PgConnection, id: i64) -> Result<Option<JobState>, Error> {
    sqlx::query_scalar(
        "with old as (select id, state, queue from lq.jobs where id = $1 for update),
         upd as (
             update lq.jobs j
             set state = 'queued', run_at = now(), attempts = 0, finished_at = null, cancel_requested_at = null
             from old where j.id = old.id and old.state in ('dead', 'cancelled')
             returning j.id
         )
         select old.state from old
         where case when old.state in ('dead', 'cancelled')
                    then (select true from pg_notify('lq_jobs', old.queue)) else true end",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_retry_now"))
}
