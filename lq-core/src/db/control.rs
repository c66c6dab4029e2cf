//! Statements behind job control: inspect, cancel, retry.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::err;
use crate::{Error, JobState};

/// A job row as control calls show it.
#[derive(Debug, Clone)]
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
    /// Payload, unchanged since enqueue, as JSON text: any payload PostgreSQL
    /// stores can be shown, however deeply nested (a decoded `Value` has a depth
    /// limit). [`JobRow::payload_value`] and [`JobRow::payload_as`] decode it.
    pub payload: Box<serde_json::value::RawValue>,
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
    /// Worker holding the lease, while running; for a finished job, the worker
    /// that held it when the job ended (none if it ended while queued).
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

impl JobRow {
    /// The payload as a JSON value; fails for one nested deeper than serde_json's
    /// limit of 128 levels.
    pub fn payload_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(self.payload.get())
    }

    /// The payload decoded into `T`, usually the job's own type.
    pub fn payload_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.payload.get())
    }
}

impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for JobRow {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row;
        let text: String = row.try_get("payload")?;
        // Validation of raw JSON text keeps no stack per level, so any depth passes.
        let payload = serde_json::value::RawValue::from_string(text).map_err(|e| {
            sqlx::Error::ColumnDecode {
                index: "payload".to_owned(),
                source: Box::new(e),
            }
        })?;
        Ok(Self {
            id: row.try_get("id")?,
            kind: row.try_get("kind")?,
            queue: row.try_get("queue")?,
            priority: row.try_get("priority")?,
            payload,
            state: row.try_get("state")?,
            run_at: row.try_get("run_at")?,
            attempts: row.try_get("attempts")?,
            max_attempts: row.try_get("max_attempts")?,
            unique_key: row.try_get("unique_key")?,
            lease_owner: row.try_get("lease_owner")?,
            lease_expires_at: row.try_get("lease_expires_at")?,
            errors: row.try_get("errors")?,
            created_at: row.try_get("created_at")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
            cancel_requested_at: row.try_get("cancel_requested_at")?,
        })
    }
}

const COLUMNS: &str =
    "id, kind, queue, priority, payload::text as payload, state, run_at, attempts,
     max_attempts, unique_key, lease_owner, lease_expires_at, errors, created_at, started_at,
     finished_at, cancel_requested_at";

/// One job by id.
pub async fn job_get(conn: &mut PgConnection, id: i64) -> Result<Option<JobRow>, Error> {
    sqlx::query_as(&format!("select {COLUMNS} from lq.all_jobs where id = $1"))
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
        "select {COLUMNS} from lq.all_jobs
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
    let live = sqlx::query_scalar(concat!(
        "with old as materialized (select id, state from lq.jobs where id = $1 for update),
         flagged as (
             update lq.jobs j
             set cancel_requested_at = now()
             from old where j.id = old.id and old.state = 'running'
             returning j.id
         ),
         moved as (
             delete from lq.jobs j
             using old
             where j.id = old.id and old.state = 'queued'
             returning j.*, 'cancelled'::lq.job_state as final_state, j.errors as final_errors
         ),
         ",
        archive_moved!(),
        "
         select old.state from old
         where case when old.state = 'running'
                    then (select true from pg_notify('lq_cancel', old.id::text)) else true end"
    ))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_cancel"))?;
    match live {
        Some(state) => Ok(Some(state)),
        None => job_state(conn, id).await,
    }
}

/// Puts a dead or cancelled job back in the queue now with fresh attempts.
/// Returns the state before the call; fails with a unique violation when another
/// live job holds its key.
pub async fn job_retry_now(conn: &mut PgConnection, id: i64) -> Result<Option<JobState>, Error> {
    let retried = sqlx::query_scalar(
        "with old as materialized (
             delete from lq.finished_jobs where id = $1 and state in ('dead', 'cancelled')
             returning *
         ),
         requeued as (
             insert into lq.jobs (id, kind, queue, priority, payload, state, run_at, attempts,
                 max_attempts, unique_key, errors, created_at, started_at)
             overriding system value
             select id, kind, queue, priority, payload, 'queued', now(), 0,
                 max_attempts, unique_key, jsonb_path_query_array(errors, '$[last - 19 to last]'),
                 created_at, started_at
             from old
             returning id
         )
         select old.state from old
         where (select true from pg_notify('lq_jobs', old.queue))",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_retry_now"))?;
    match retried {
        Some(state) => Ok(Some(state)),
        None => job_state(conn, id).await,
    }
}

/// A job's state, live or finished. Read in a statement of its own, after a
/// write that found nothing to do: that write may have waited for a job to end,
/// and only a fresh snapshot sees where it went.
async fn job_state(conn: &mut PgConnection, id: i64) -> Result<Option<JobState>, Error> {
    sqlx::query_scalar("select state from lq.all_jobs where id = $1")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(err("job_state"))
}
