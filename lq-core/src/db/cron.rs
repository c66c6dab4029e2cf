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
    sqlx::query_as(
        "select coalesce($2, now()), last_tick from lq.cron_schedules where kind = $1 for update skip locked",
    )
    .bind(kind)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("cron_schedule_lock"))
}

/// Records `tick` and enqueues its job, both or neither; `None` when the tick was
/// already fired (the primary key holds).
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
             insert into lq.jobs (id, kind, queue, priority, payload, max_attempts, meta)
             overriding system value
             select tick.job_id, $1, $2, $3, $4::jsonb, $6, $8 from tick
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
