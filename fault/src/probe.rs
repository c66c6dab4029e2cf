//! Reads of database state that scenarios wait on and measure with. Every time is
//! the database's (`now()`, as epoch seconds), never the orchestrator's clock.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};
use sqlx::PgPool;
use uuid::Uuid;

/// How often a wait polls the database.
pub const POLL: Duration = Duration::from_millis(50);

/// A bound on one wait; `tick` fails once it has passed.
pub struct Deadline {
    what: String,
    until: Instant,
}

impl Deadline {
    /// A wait for `what` of at most `limit`.
    pub fn new(what: impl Into<String>, limit: Duration) -> Self {
        Self {
            what: what.into(),
            until: Instant::now() + limit,
        }
    }

    /// Sleeps one poll interval, or fails when the deadline has passed.
    pub async fn tick(&self) -> Result<()> {
        self.check()?;
        tokio::time::sleep(POLL).await;
        Ok(())
    }

    /// Fails when the deadline has passed.
    pub fn check(&self) -> Result<()> {
        if Instant::now() >= self.until {
            bail!("timed out waiting for {}", self.what);
        }
        Ok(())
    }
}

/// The database's `now()` in epoch seconds.
pub async fn db_now(pool: &PgPool) -> Result<f64> {
    Ok(
        sqlx::query_scalar("select extract(epoch from now())::float8")
            .fetch_one(pool)
            .await?,
    )
}

/// Jobs in `state`.
pub async fn count_state(pool: &PgPool, state: &str) -> Result<i64> {
    Ok(
        sqlx::query_scalar("select count(*) from lq.all_jobs where state::text = $1")
            .bind(state)
            .fetch_one(pool)
            .await?,
    )
}

/// Jobs not yet in a final state.
pub async fn live_jobs(pool: &PgPool) -> Result<i64> {
    Ok(
        sqlx::query_scalar("select count(*) from lq.all_jobs where state in ('queued', 'running')")
            .fetch_one(pool)
            .await?,
    )
}

/// Running jobs per lease owner.
pub async fn running_by_owner(pool: &PgPool) -> Result<HashMap<String, i64>> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "select lease_owner, count(*) from lq.all_jobs where state = 'running' and lease_owner is not null group by 1",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// A lease held at one moment.
#[derive(Debug, Clone, Copy)]
pub struct HeldLease {
    /// Job id.
    pub id: i64,
    /// The lease token of the attempt.
    pub token: Uuid,
    /// The attempt number.
    pub attempt: i32,
}

/// The running jobs whose lease `owner` holds.
pub async fn held_by(pool: &PgPool, owner: &str) -> Result<Vec<HeldLease>> {
    let rows: Vec<(i64, Uuid, i32)> = sqlx::query_as(
        "select id, lease_token, attempts from lq.all_jobs where state = 'running' and lease_owner = $1 order by id",
    )
    .bind(owner)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, token, attempt)| HeldLease { id, token, attempt })
        .collect())
}

/// When the first of `ids` (or of all jobs, if `None`) succeeded after `after`.
pub async fn first_completion_after(
    pool: &PgPool,
    after: f64,
    ids: Option<&[i64]>,
) -> Result<Option<f64>> {
    Ok(sqlx::query_scalar(
        "select extract(epoch from min(finished_at))::float8 from lq.all_jobs
         where state = 'succeeded' and finished_at > to_timestamp($1)
           and ($2::bigint[] is null or id = any($2))",
    )
    .bind(after)
    .bind(ids)
    .fetch_one(pool)
    .await?)
}

/// A worker's `lease_lost` counter as last published, if it published.
pub async fn lease_lost_of(pool: &PgPool, owner: &str) -> Result<Option<i64>> {
    Ok(
        sqlx::query_scalar("select lease_lost from fault.worker_stats where owner = $1")
            .bind(owner)
            .fetch_optional(pool)
            .await?,
    )
}

/// True when `owner` has published its counters (it is up and claiming).
pub async fn has_published(pool: &PgPool, owner: &str) -> Result<bool> {
    Ok(lease_lost_of(pool, owner).await?.is_some())
}

/// Terminates every backend of the workers (by `application_name`) in this
/// database; returns how many were signalled. The caller's own backend is spared.
pub async fn terminate_workers(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "select count(*) filter (where pg_terminate_backend(pid)) from pg_stat_activity
         where datname = current_database() and application_name = $1 and pid <> pg_backend_pid()",
    )
    .bind(crate::WORKER_APP)
    .fetch_one(pool)
    .await?)
}

/// Backends the workers hold in this database.
pub async fn worker_backends(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "select count(*) from pg_stat_activity where datname = current_database() and application_name = $1",
    )
    .bind(crate::WORKER_APP)
    .fetch_one(pool)
    .await?)
}

/// For leases lost by a dead or frozen worker: when the first of them was rescued
/// (its `lease expired` error) and when the first of those jobs then succeeded
/// under another lease, as epoch seconds.
pub async fn rescue_and_recompletion(
    pool: &PgPool,
    held: &[HeldLease],
) -> Result<(Option<f64>, Option<f64>)> {
    let ids: Vec<i64> = held.iter().map(|h| h.id).collect();
    let attempts: Vec<i32> = held.iter().map(|h| h.attempt).collect();
    Ok(sqlx::query_as(
        "select extract(epoch from min((e->>'at')::timestamptz))::float8,
                extract(epoch from min(j.finished_at) filter (where j.state = 'succeeded'))::float8
         from unnest($1::bigint[], $2::int[]) h(id, attempt)
         join lq.all_jobs j on j.id = h.id
         cross join lateral jsonb_array_elements(j.errors) e
         where (e->>'attempt')::int = h.attempt and e->>'error' like 'lease expired%'",
    )
    .bind(ids)
    .bind(attempts)
    .fetch_one(pool)
    .await?)
}

/// When the server last started (`pg_postmaster_start_time()`), as epoch seconds.
pub async fn server_started(pool: &PgPool) -> Result<f64> {
    Ok(
        sqlx::query_scalar("select extract(epoch from pg_postmaster_start_time())::float8")
            .fetch_one(pool)
            .await?,
    )
}
