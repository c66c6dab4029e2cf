//! Job control as library calls: inspect, list, cancel, retry.
//!
//! ```no_run
//! use lq_core::{control, JobState};
//! # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
//! for job in control::list(&pool, Some(JobState::Dead), Some("emails"), 50).await? {
//!     println!("{} {} {}", job.id, job.kind, job.errors);
//!     control::retry_now(&pool, job.id).await?;
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use sqlx::PgPool;

use crate::{db, Error, JobState};

pub use crate::db::control::JobRow;

/// Bound on each control call.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);

/// One job by id.
pub async fn get(pool: &PgPool, id: i64) -> Result<JobRow, Error> {
    db::timed("job_get", CONTROL_TIMEOUT, async {
        let mut conn = pool.acquire().await.map_err(db::err("job_get"))?;
        db::control::job_get(&mut conn, id)
            .await?
            .ok_or(Error::NotFound { id })
    })
    .await
}

/// Up to `limit` jobs, newest first, optionally filtered by state and queue.
pub async fn list(
    pool: &PgPool,
    state: Option<JobState>,
    queue: Option<&str>,
    limit: i64,
) -> Result<Vec<JobRow>, Error> {
    db::timed("job_list", CONTROL_TIMEOUT, async {
        let mut conn = pool.acquire().await.map_err(db::err("job_list"))?;
        db::control::job_list(&mut conn, state, queue, limit).await
    })
    .await
}

/// Cancels a job. A queued job ends `cancelled` at once. A running job's handler
/// sees its cancellation signal fire on whichever host runs it (NOTIFY, with the
/// heartbeat as a fallback) and the job ends `cancelled` whatever the handler
/// returns; one claimed ahead that still waits for a handler ends `cancelled`
/// without its handler running. Returns the state the job was in; fails with
/// [`Error::WrongState`] for a job already finished.
pub async fn cancel(pool: &PgPool, id: i64) -> Result<JobState, Error> {
    let before = db::timed("job_cancel", CONTROL_TIMEOUT, async {
        let mut conn = pool.acquire().await.map_err(db::err("job_cancel"))?;
        db::control::job_cancel(&mut conn, id).await
    })
    .await?
    .ok_or(Error::NotFound { id })?;
    if before.is_live() {
        Ok(before)
    } else {
        Err(Error::WrongState {
            id,
            state: before,
            action: "cancelled",
        })
    }
}

/// Queues a dead or cancelled job to run now with a fresh set of attempts; its
/// error history is kept. Fails with [`Error::UniqueKeyHeld`] when another live
/// job holds its unique key (the live job wins).
pub async fn retry_now(pool: &PgPool, id: i64) -> Result<(), Error> {
    let before = db::timed("job_retry_now", CONTROL_TIMEOUT, async {
        let mut conn = pool.acquire().await.map_err(db::err("job_retry_now"))?;
        match db::control::job_retry_now(&mut conn, id).await {
            Err(Error::Database {
                source: sqlx::Error::Database(e),
                ..
            }) if e.is_unique_violation() => {
                let row = db::control::job_get(&mut conn, id)
                    .await?
                    .ok_or(Error::NotFound { id })?;
                let key = row.unique_key.unwrap_or_default();
                let holder = db::enqueue::job_find_live_by_key(&mut conn, &key)
                    .await?
                    .unwrap_or(0);
                Err(Error::UniqueKeyHeld { id, holder, key })
            }
            other => other,
        }
    })
    .await?
    .ok_or(Error::NotFound { id })?;
    match before {
        JobState::Dead | JobState::Cancelled => Ok(()),
        state => Err(Error::WrongState {
            id,
            state,
            action: "retried",
        }),
    }
}

/// Age of the oldest open transaction in the database, for health checks: a
/// long-open snapshot stops vacuum, and a queue table then slows down steadily.
pub async fn oldest_transaction_age(pool: &PgPool) -> Result<Duration, Error> {
    let secs = db::timed("oldest_transaction_age", CONTROL_TIMEOUT, async {
        let mut conn = pool
            .acquire()
            .await
            .map_err(db::err("oldest_transaction_age"))?;
        db::maintenance::oldest_transaction_age(&mut conn).await
    })
    .await?;
    Ok(Duration::from_secs_f64(secs.max(0.0)))
}
