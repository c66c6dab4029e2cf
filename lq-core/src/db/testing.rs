//! Statements of the testing helpers: the queued jobs of one kind, and the
//! in-task runner's claim.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{claim::ClaimedJob, err};
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
         where kind operator(pg_catalog.=) $1 and state operator(pg_catalog.=) 'queued'
         order by id",
    )
    .bind(kind)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("jobs_queued_of_kind"))
}

/// A job claimed by [`job_claim_for_test`], with the queue it came from.
#[derive(Debug, sqlx::FromRow)]
pub struct ClaimedForTest {
    /// The job, as the runtime's claim returns it.
    #[sqlx(flatten)]
    pub job: ClaimedJob,
    /// Its queue.
    pub queue: String,
}

/// Claims the best ready job of `kinds` in `queues` for the testing helpers'
/// in-task runner: the claim of [`super::claim::job_claim`] (attempt counted,
/// lease minted), one job at a time (so it finds its row by id and mints the
/// token on the server, where the runtime's batches save both costs),
/// optionally no newer than `max_id` (a single pass over the jobs there at the
/// start) or only job `only_id`. A paused queue is drained too: the runner is a
/// test tool, not a worker.
pub async fn job_claim_for_test(
    conn: &mut PgConnection,
    queues: &[String],
    kinds: &[String],
    lease_secs: &[f64],
    owner: &str,
    max_id: Option<i64>,
    only_id: Option<i64>,
) -> Result<Option<ClaimedForTest>, Error> {
    sqlx::query_as(
        "with picked as materialized (
             select id from lq.jobs
             where state operator(pg_catalog.=) 'queued'
               and queue operator(pg_catalog.=) any($1) and run_at operator(pg_catalog.<=) pg_catalog.now()
               and kind operator(pg_catalog.=) any($2)
               and ($5::int8 is null or id operator(pg_catalog.<=) $5)
               and ($6::int8 is null or id operator(pg_catalog.=) $6)
             order by priority desc, run_at, id
             limit 1
             for update skip locked
         )
         update lq.jobs j
         set state = 'running', attempts = j.attempts operator(pg_catalog.+) 1,
             started_at = pg_catalog.now(), lease_token = pg_catalog.gen_random_uuid(), lease_owner = $4,
             lease_expires_at = pg_catalog.now() operator(pg_catalog.+) pg_catalog.make_interval(secs => ($3::float8[])[pg_catalog.array_position($2::text[], j.kind)])
         from picked where j.id operator(pg_catalog.=) picked.id
         returning j.id, j.kind, j.payload::text as payload, j.attempts, j.max_attempts, j.lease_token,
                   j.run_at, j.created_at, j.started_at, j.meta::text as meta, j.queue",
    )
    .bind(queues)
    .bind(kinds)
    .bind(lease_secs)
    .bind(owner)
    .bind(max_id)
    .bind(only_id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_claim_for_test"))
}

/// The newest job id in `queues`, live or not yet claimed: where a single pass
/// of the in-task runner stops.
pub async fn jobs_newest_id(
    conn: &mut PgConnection,
    queues: &[String],
) -> Result<Option<i64>, Error> {
    sqlx::query_scalar(
        "select pg_catalog.max(id) from lq.jobs where queue operator(pg_catalog.=) any($1)",
    )
    .bind(queues)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("jobs_newest_id"))
}

/// Makes every scheduled (queued, due later) job in `queues` due now; returns
/// how many. For draining with scheduled jobs included, as Oban's
/// `with_scheduled` does.
pub async fn jobs_make_due(conn: &mut PgConnection, queues: &[String]) -> Result<u64, Error> {
    sqlx::query(
        "update lq.jobs set run_at = pg_catalog.now()
         where state operator(pg_catalog.=) 'queued'
           and queue operator(pg_catalog.=) any($1) and run_at operator(pg_catalog.>) pg_catalog.now()",
    )
    .bind(queues)
    .execute(&mut *conn)
    .await
    .map(|r| r.rows_affected())
    .map_err(err("jobs_make_due"))
}
