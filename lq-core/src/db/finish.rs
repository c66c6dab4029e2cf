//! Fenced writes that end an attempt. Each matches `(id, lease_token)` on a running
//! row, so a worker that lost its lease changes nothing and learns it.
//!
//! A job whose cancellation was requested while it ran ends `cancelled` whatever
//! its handler returned.

use sqlx::PgConnection;
use uuid::Uuid;

use super::err;
use crate::{Error, JobState};

/// Marks many jobs succeeded in one statement; returns the ids whose lease still held.
///
/// Rows are found and locked by `held_rows!`. No `state` test is needed (one
/// would let the planner pick the partial running-rows index from stale
/// statistics): the table's check constraint makes "has a lease token" the same
/// as "running". Like the claim, it is written to be run with a generic plan
/// (the runtime's hot-path connections force one): both steps go through the
/// primary key.
pub async fn job_complete_many(
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
) -> Result<Vec<i64>, Error> {
    sqlx::query_scalar(concat!(
        held_rows!(),
        "
         update lq.jobs j
         set state = case when j.cancel_requested_at is null then 'succeeded' else 'cancelled' end::lq.job_state,
             finished_at = now(), lease_token = null, lease_owner = null, lease_expires_at = null
         where j.id = any(array(select id from held))
         returning j.id"
    ))
    .bind(ids)
    .bind(tokens)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_complete_many"))
}

/// Records a failed attempt. With `retry_in_secs`, the job is queued again after
/// that delay unless its attempts are spent; without it, the job is dead now.
/// Returns the new state, or `None` when the lease was lost.
pub async fn job_fail(
    conn: &mut PgConnection,
    id: i64,
    token: Uuid,
    error: &str,
    retry_in_secs: Option<f64>,
) -> Result<Option<JobState>, Error> {
    sqlx::query_scalar(
        "update lq.jobs
         set state = case
                 when cancel_requested_at is not null then 'cancelled'
                 when $4::float8 is null or attempts >= max_attempts then 'dead'
                 else 'queued' end::lq.job_state,
             run_at = case when $4::float8 is null then run_at else now() + make_interval(secs => $4) end,
             finished_at = case
                 when $4::float8 is null or attempts >= max_attempts or cancel_requested_at is not null
                 then now() end,
             errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempts, 'at', now(), 'error', $3::text)),
             lease_token = null, lease_owner = null, lease_expires_at = null
         where id = $1 and lease_token = $2 and state = 'running'
         returning state",
    )
    .bind(id)
    .bind(token)
    .bind(error)
    .bind(retry_in_secs)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_fail"))
}

/// Requeues a job after `delay_secs` and gives back its attempt. `false` when the lease was lost.
pub async fn job_snooze(
    conn: &mut PgConnection,
    id: i64,
    token: Uuid,
    delay_secs: f64,
) -> Result<Option<JobState>, Error> {
    sqlx::query_scalar(
        "update lq.jobs
         set state = case when cancel_requested_at is null then 'queued' else 'cancelled' end::lq.job_state,
             finished_at = case when cancel_requested_at is null then null else now() end,
             run_at = now() + make_interval(secs => $3), attempts = attempts - 1,
             lease_token = null, lease_owner = null, lease_expires_at = null
         where id = $1 and lease_token = $2 and state = 'running'
         returning state",
    )
    .bind(id)
    .bind(token)
    .bind(delay_secs)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_snooze"))
}

/// Ends a job `cancelled` at its handler's request. `false` when the lease was lost.
pub async fn job_cancel_own(
    conn: &mut PgConnection,
    id: i64,
    token: Uuid,
    reason: &str,
) -> Result<bool, Error> {
    let r = sqlx::query(
        "update lq.jobs
         set state = 'cancelled', finished_at = now(),
             errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempts, 'at', now(), 'error', $3::text)),
             lease_token = null, lease_owner = null, lease_expires_at = null
         where id = $1 and lease_token = $2 and state = 'running'",
    )
    .bind(id)
    .bind(token)
    .bind(reason)
    .execute(&mut *conn)
    .await
    .map_err(err("job_cancel_own"))?;
    Ok(r.rows_affected() == 1)
}

/// Hands unfinished jobs back to the queue at shutdown, giving back their attempt.
/// They keep their `run_at`, and so their place in the queue. Returns the ids released.
pub async fn job_release_many(
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
) -> Result<Vec<i64>, Error> {
    sqlx::query_scalar(concat!(
        held_rows!(),
        "
         update lq.jobs j
         set state = case when j.cancel_requested_at is null then 'queued' else 'cancelled' end::lq.job_state,
             finished_at = case when j.cancel_requested_at is null then null else now() end,
             attempts = j.attempts - 1,
             lease_token = null, lease_owner = null, lease_expires_at = null
         from held
         where j.id = held.id
         returning j.id"
    ))
    .bind(ids)
    .bind(tokens)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_release_many"))
}
