//! Statements of the cron scheduler.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::err;
use crate::{Error, JobOptions};

/// Locks kind's schedule row for this transaction, creating it (starting now) on
/// first sight. Returns `(now, last_tick)`, or `None` when another runtime holds
/// it. A frozen holder cannot block others for long: its idle transaction is ended
/// by the server after 2 s.
pub async fn cron_schedule_lock(
    conn: &mut PgConnection,
    kind: &str,
    now: Option<DateTime<Utc>>,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>, Error> {
    sqlx::query(
        "select set_config('idle_in_transaction_session_timeout', '2s', true), set_config('lock_timeout', '2s', true)",
    )
        .execute(&mut *conn)
        .await
        .map_err(err("cron_schedule_lock"))?;
    sqlx::query("insert into lq.cron_schedules (kind, last_tick) values ($1, coalesce($2, now())) on conflict do nothing")
        .bind(kind)
        .bind(now)
        .execute(&mut *conn)
        .await
        .map_err(err("cron_schedule_lock"))?;
    // The clock is read when the row is locked, not at the transaction's start:
    // the insert above can wait for another pass that fires a later tick, and
    // a `now()` from before that wait would take the tick for one in the future.
    sqlx::query_as(
        "select coalesce($2, clock_timestamp()), last_tick from lq.cron_schedules where kind = $1 for update skip locked",
    )
    .bind(kind)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("cron_schedule_lock"))
}

/// Records `tick` and enqueues its job, both or neither, except that a job
/// whose `unique_key` (the schedule's, in `options.cron`) a live job of its
/// kind holds is not enqueued (the tick is still recorded, so it is not fired
/// again); `None` when the tick was already fired (the primary key holds) or
/// the key was held.
pub async fn cron_tick_fire(
    conn: &mut PgConnection,
    kind: &str,
    options: &JobOptions,
    payload: &str,
    tick: DateTime<Utc>,
    catch_up: bool,
    meta: &serde_json::Value,
) -> Result<Option<i64>, Error> {
    sqlx::query_scalar(
        "with new_id as (select nextval(pg_get_serial_sequence('lq.jobs', 'id')) as id),
         tick as (
             insert into lq.cron_ticks (kind, tick, catch_up, job_id)
             select $1, $5, $7, new_id.id from new_id
             on conflict do nothing
             returning job_id
         ), job as (
             insert into lq.jobs (id, kind, queue, priority, payload, max_attempts, meta, unique_key)
             overriding system value
             select tick.job_id, $1, $2, $3, $4::jsonb, $6, $8, $9 from tick
             on conflict (kind, unique_key) where unique_key is not null do nothing
             returning id
         )
         select id from job
         where (select true from pg_notify('lq_jobs', $2))",
    )
    .bind(kind)
    .bind(options.queue)
    .bind(options.priority)
    .bind(payload)
    .bind(tick)
    .bind(options.max_attempts.min(i32::MAX as u32) as i32)
    .bind(catch_up)
    .bind(meta)
    .bind(options.cron.as_ref().and_then(|c| (c.unique_key)()))
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("cron_tick_fire"))
}

/// Moves the schedule forward to `tick` (never backwards).
pub async fn cron_schedule_advance(
    conn: &mut PgConnection,
    kind: &str,
    tick: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    sqlx::query("update lq.cron_schedules set last_tick = $2, checked_at = $3 where kind = $1 and last_tick < $2")
        .bind(kind)
        .bind(tick)
        .bind(now)
        .execute(&mut *conn)
        .await
        .map_err(err("cron_schedule_advance"))?;
    Ok(())
}

/// Deletes fired ticks older than `keep_secs`, keeping each kind's newest.
pub async fn cron_ticks_prune(conn: &mut PgConnection, keep_secs: f64) -> Result<u64, Error> {
    let r = sqlx::query(
        "delete from lq.cron_ticks t
         where t.fired_at < now() - make_interval(secs => $1)
           and t.tick < (select max(tick) from lq.cron_ticks n where n.kind = t.kind)",
    )
    .bind(keep_secs)
    .execute(&mut *conn)
    .await
    .map_err(err("cron_ticks_prune"))?;
    Ok(r.rows_affected())
}

/// Moves a schedule whose last tick lies in the future back to `tick` (at or
/// before `now`). Ticks already fired stay recorded, so none fires twice.
pub async fn cron_schedule_rewind(
    conn: &mut PgConnection,
    kind: &str,
    tick: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    sqlx::query("update lq.cron_schedules set last_tick = $2, checked_at = $3 where kind = $1 and last_tick > $3")
        .bind(kind)
        .bind(tick)
        .bind(now)
        .execute(&mut *conn)
        .await
        .map_err(err("cron_schedule_rewind"))?;
    Ok(())
}

/// Records how `kind`'s schedule is declared (expression, zone, catch-up
/// policy, queue, and the runtime that said so), creating its row (starting
/// now) on first sight, so tools without the job types can show it.
pub async fn cron_schedule_describe(
    conn: &mut PgConnection,
    kind: &str,
    expr: &str,
    tz: &str,
    catch_up: &str,
    queue: &str,
    declared_by: &str,
) -> Result<(), Error> {
    sqlx::query(
        "insert into lq.cron_schedules (kind, last_tick, expr, tz, catch_up, queue, declared_by)
         values ($1, now(), $2, $3, $4, $5, $6)
         on conflict (kind) do update set expr = excluded.expr, tz = excluded.tz,
             catch_up = excluded.catch_up, queue = excluded.queue,
             declared_by = excluded.declared_by
         where (lq.cron_schedules.expr, lq.cron_schedules.tz, lq.cron_schedules.catch_up,
                lq.cron_schedules.queue, lq.cron_schedules.declared_by)
               is distinct from (excluded.expr, excluded.tz, excluded.catch_up,
                                 excluded.queue, excluded.declared_by)",
    )
    .bind(kind)
    .bind(expr)
    .bind(tz)
    .bind(catch_up)
    .bind(queue)
    .bind(declared_by)
    .execute(&mut *conn)
    .await
    .map_err(err("cron_schedule_describe"))?;
    Ok(())
}

/// One schedule row, with its newest fired tick's job.
#[derive(Debug, sqlx::FromRow)]
pub struct ScheduleRow {
    pub kind: String,
    pub expr: Option<String>,
    pub tz: Option<String>,
    pub catch_up: Option<String>,
    pub queue: Option<String>,
    pub declared_by: Option<String>,
    pub last_tick: DateTime<Utc>,
    pub checked_at: DateTime<Utc>,
    pub last_job_id: Option<i64>,
    pub now: DateTime<Utc>,
}

/// Every cron schedule, by kind.
pub async fn cron_schedules_list(conn: &mut PgConnection) -> Result<Vec<ScheduleRow>, Error> {
    sqlx::query_as(
        "select s.kind, s.expr, s.tz, s.catch_up, s.queue, s.declared_by, s.last_tick, s.checked_at,
             (select t.job_id from lq.cron_ticks t where t.kind = s.kind
              order by t.tick desc limit 1) as last_job_id,
             now() as now
         from lq.cron_schedules s
         order by s.kind",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(err("cron_schedules_list"))
}
