//! Statements about queues as a whole: pause, resume, overview.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::err;
use crate::Error;

/// Pauses `queue` (a queue never seen before too); true if it was running.
/// Claims check `lq.queues`, so no runtime claims from it once this commits.
pub async fn queue_pause(conn: &mut PgConnection, queue: &str, by: &str) -> Result<bool, Error> {
    sqlx::query_scalar(
        "with paused as (
             insert into lq.queues (name, paused_at, paused_by) values ($1, now(), $2)
             on conflict (name) do update set paused_at = now(), paused_by = $2, updated_at = now()
                 where lq.queues.paused_at is null
             returning name
         )
         select exists (select from paused where (select true from pg_notify('lq_pause', $1)))",
    )
    .bind(queue)
    .bind(by)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("queue_pause"))
}

/// Whether `queue` is paused now.
pub async fn queue_is_paused(conn: &mut PgConnection, queue: &str) -> Result<bool, Error> {
    sqlx::query_scalar(
        "select exists (select from lq.queues where name = $1 and paused_at is not null)",
    )
    .bind(queue)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("queue_is_paused"))
}

/// Resumes `queue`; true if it was paused. Wakes its claimers by NOTIFY.
pub async fn queue_resume(conn: &mut PgConnection, queue: &str) -> Result<bool, Error> {
    sqlx::query_scalar(
        "with resumed as (
             update lq.queues set paused_at = null, paused_by = null, updated_at = now()
             where name = $1 and paused_at is not null
             returning name
         )
         select exists (select from resumed where (select true from pg_notify('lq_jobs', $1)))",
    )
    .bind(queue)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("queue_resume"))
}

/// One queue as [`queue_overview`] reads it.
#[derive(Debug, sqlx::FromRow)]
pub struct QueueRow {
    pub name: String,
    pub paused_at: Option<DateTime<Utc>>,
    pub paused_by: Option<String>,
    pub available: i64,
    pub scheduled: i64,
    pub running: i64,
    pub oldest_available_secs: Option<f64>,
}

/// Every queue that has live jobs, a row in `lq.queues` or a live runtime
/// serving it, by name: its pause, its live jobs by state and how long its
/// oldest available job has waited. Reads the live jobs only (`lq.jobs`),
/// never the history: an idle served queue is listed, with zeros, so it can be
/// paused before work arrives.
pub async fn queue_overview(conn: &mut PgConnection) -> Result<Vec<QueueRow>, Error> {
    sqlx::query_as(
        "with live as (
             select queue,
                 count(*) filter (where state = 'queued' and run_at <= now()) as available,
                 count(*) filter (where state = 'queued' and run_at > now()) as scheduled,
                 count(*) filter (where state = 'running') as running,
                 min(run_at) filter (where state = 'queued' and run_at <= now()) as oldest
             from lq.jobs group by queue
         ),
         names as (
             select queue as name from live
             union select name from lq.queues
             union select jsonb_object_keys(queues) from lq.runtimes where expires_at > now()
         )
         select n.name, q.paused_at, q.paused_by,
             coalesce(l.available, 0) as available, coalesce(l.scheduled, 0) as scheduled,
             coalesce(l.running, 0) as running,
             extract(epoch from now() - l.oldest)::float8 as oldest_available_secs
         from names n
         left join live l on l.queue = n.name
         left join lq.queues q on q.name = n.name
         order by 1",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(err("queue_overview"))
}

/// One rate limit's bucket as [`queue_rate_limits`] reads it.
#[derive(Debug, sqlx::FromRow)]
pub struct RateLimitRow {
    pub queue: String,
    pub allowed: i32,
    pub period_secs: f64,
    /// The tokens the bucket would hold if refilled now.
    pub tokens_now: f64,
    pub updated_at: DateTime<Utc>,
}

/// Every queue's rate-limit bucket (`lq.rate_limits`), with its tokens as a
/// refill now would leave them; reads only, so it moves no token. None when
/// the role may not read the table (granted what operators needed before
/// schema 13) or there is none yet: an overview without rate limits rather
/// than no overview.
pub async fn queue_rate_limits(conn: &mut PgConnection) -> Result<Vec<RateLimitRow>, Error> {
    let readable: bool = sqlx::query_scalar(
        "select case when pg_catalog.to_regclass('lq.rate_limits') is null then false
                     else pg_catalog.has_table_privilege('lq.rate_limits', 'SELECT') end",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(err("queue_rate_limits"))?;
    if !readable {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "select queue, allowed, period_secs,
             least(allowed::float8,
                   tokens + greatest(0, extract(epoch from now() - updated_at)::float8)
                            * allowed / period_secs) as tokens_now,
             updated_at
         from lq.rate_limits order by queue",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(err("queue_rate_limits"))
}

/// True while any of `queues` has a job ready to run or running.
pub async fn queues_busy(conn: &mut PgConnection, queues: &[String]) -> Result<bool, Error> {
    sqlx::query_scalar(
        "select exists (
             select from lq.jobs
             where queue operator(pg_catalog.=) any($1)
               and (state operator(pg_catalog.=) 'running'
                    or run_at operator(pg_catalog.<=) pg_catalog.now()))",
    )
    .bind(queues)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("queues_busy"))
}
