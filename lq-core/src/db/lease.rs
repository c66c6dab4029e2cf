//! Lease upkeep: heartbeats extend live leases, rescue reclaims expired ones.

use sqlx::PgConnection;
use uuid::Uuid;

use super::err;
use crate::Error;

/// A lease renewed by a heartbeat.
#[derive(Debug, sqlx::FromRow)]
pub struct HeldLease {
    /// Job id.
    pub id: i64,
    /// True when a user asked to cancel the job.
    pub cancel_requested: bool,
}

/// Extends the leases this worker still holds to `now() + secs[i]`. Jobs missing
/// from the result were lost (expired and rescued, or finished elsewhere), or
/// their rows were locked by another session: rows locked elsewhere are skipped
/// rather than waited for, since waiting would let one locked row hold up the
/// renewal of every other lease until they all expired.
/// [`job_leases_still_held`] tells the two apart.
pub async fn job_heartbeat_many(
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
    secs: &[f64],
) -> Result<Vec<HeldLease>, Error> {
    sqlx::query_as(concat!(
        "with held as materialized (
             select j.id from lq.jobs j
             where j.id = any($1::bigint[]) and j.lease_token = any($2::uuid[])
             order by j.id
             for update of j skip locked
         )
         update lq.jobs j
         set lease_expires_at = now() + make_interval(secs => d.secs)
         from held join unnest($1::bigint[], $3::float8[]) as d(id, secs) on d.id = held.id
         where ",
        job_by_id_of!("held.id"),
        "
         returning j.id, j.cancel_requested_at is not null as cancel_requested"
    ))
    .bind(ids)
    .bind(tokens)
    .bind(secs)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_heartbeat_many"))
}

/// Which of `ids` still carry one of this worker's lease `tokens` as of now: after
/// a heartbeat that did not renew them, these were skipped as locked elsewhere, and
/// the rest were lost.
pub async fn job_leases_still_held(
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
) -> Result<Vec<i64>, Error> {
    sqlx::query_scalar(
        "select id from lq.jobs where id = any($1::bigint[]) and lease_token = any($2::uuid[])",
    )
    .bind(ids)
    .bind(tokens)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_leases_still_held"))
}

/// Returns running jobs whose lease expired to the queue (or ends them `dead` when
/// their attempts are spent, or `cancelled` when cancellation was requested), in
/// one guarded statement: a job that completed meanwhile is left alone. Rescued
/// jobs keep their `run_at`, so they keep their place instead of waiting behind
/// the whole backlog. With `only`, just that job is rescued (the fallback, one
/// job at a time, after a batch was refused).
///
/// The longest expired go first, read in the order of the running rows' expiry
/// index: ordered by id, the planner could read the whole primary key instead,
/// and did, every pass, when the statistics called the table empty
/// (`tests/integration/planned_when_empty.rs`). Skipping locked rows, it never
/// waits for a lock, so it need not lock in id order as the fenced writes do.
pub async fn job_rescue_expired(
    conn: &mut PgConnection,
    limit: i64,
    only: Option<i64>,
) -> Result<Vec<i64>, Error> {
    sqlx::query_scalar(concat!(
        "with cur as materialized (
             select id,
                 case when cancel_requested_at is not null then 'cancelled'
                      when attempts >= max_attempts then 'dead'
                      else 'queued' end::lq.job_state as next,
                 ",
        append_error!(
            "errors",
            "attempts",
            "lease_owner",
            lease_expired_error!("lease_owner")
        ),
        " as next_errors
             from lq.jobs
             where state = 'running' and lease_expires_at < now() and ($2::bigint is null or id = $2)
             order by lease_expires_at
             limit $1
             for update skip locked
         ),
         ",
        requeue_or_end!(""),
        "
         select id from requeued union all select id from archived"
    ))
    .bind(limit)
    .bind(only)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_rescue_expired"))
}

/// Ids of up to `limit` running jobs whose lease expired, longest expired first
/// (as [`job_rescue_expired`] takes them), for rescuing them one at a time after
/// a batch rescue was refused.
pub async fn job_expired_ids(conn: &mut PgConnection, limit: i64) -> Result<Vec<i64>, Error> {
    sqlx::query_scalar(
        "select id from lq.jobs where state = 'running' and lease_expires_at < now()
         order by lease_expires_at limit $1",
    )
    .bind(limit)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_expired_ids"))
}

/// Which of the jobs `ids` (each held under the lease in `tokens` at the same
/// place) have a cancellation requested: a NOTIFY on the cancel channel is only a
/// hint (any role that can connect may send one), acted on when the row confirms
/// it. One statement for every hint gathered, however many arrive.
pub async fn job_cancels_requested(
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
) -> Result<Vec<i64>, Error> {
    sqlx::query_scalar(concat!(
        "select j.id from lq.jobs j
         join rows from (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::uuid[])) as hint(id, token)
           on ",
        job_by_id_of!("hint.id"),
        " and j.lease_token = hint.token
         where j.cancel_requested_at is not null"
    ))
    .bind(ids)
    .bind(tokens)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_cancels_requested"))
}
