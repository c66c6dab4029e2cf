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
/// the key was held. The tick row's `fired_at` and the job are dated by this
/// statement's start, not by its transaction's: the tick was found due by a
/// clock read after the transaction began (perhaps after a wait for another
/// runtime's pass), and a firing dated before its tick would claim to predate it.
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
             insert into lq.cron_ticks (kind, tick, catch_up, job_id, fired_at)
             select $1, $5, $7, new_id.id, pg_catalog.statement_timestamp() from new_id
             on conflict do nothing
             returning job_id
         ), job as (
             insert into lq.jobs (id, kind, queue, priority, payload, max_attempts, meta, unique_key,
                 created_at, run_at)
             overriding system value
             select tick.job_id, $1, $2, $3, $4::jsonb, $6, $8, $9,
                 pg_catalog.statement_timestamp(), pg_catalog.statement_timestamp()
             from tick
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

/// How a runtime that has the job's type declares its schedule: what tools
/// without the type show ([`cron_schedules_list`]) and what they fire when
/// asked to run it now ([`cron_run_now`]).
#[derive(Debug, Clone, Copy)]
pub struct ScheduleDeclaration<'a> {
    pub kind: &'a str,
    pub expr: &'a str,
    pub tz: &'a str,
    pub catch_up: &'a str,
    pub queue: &'a str,
    /// The payload of each tick's job, as JSON text.
    pub payload: &'a str,
    pub priority: i16,
    pub max_attempts: i32,
    /// The unique key of each tick's job, if its type has one.
    pub unique_key: Option<&'a str>,
    /// The runtime that declares it.
    pub declared_by: &'a str,
}

/// Records `d`, creating the schedule's row (starting now) on first sight, so
/// tools without the job types can show it and run it now. A declaration that
/// has not changed writes nothing.
pub async fn cron_schedule_describe(
    conn: &mut PgConnection,
    d: ScheduleDeclaration<'_>,
) -> Result<(), Error> {
    sqlx::query(
        "insert into lq.cron_schedules (kind, last_tick, expr, tz, catch_up, queue, declared_by,
             payload, priority, max_attempts, unique_key)
         values ($1, now(), $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10)
         on conflict (kind) do update set expr = excluded.expr, tz = excluded.tz,
             catch_up = excluded.catch_up, queue = excluded.queue,
             declared_by = excluded.declared_by, payload = excluded.payload,
             priority = excluded.priority, max_attempts = excluded.max_attempts,
             unique_key = excluded.unique_key
         where (lq.cron_schedules.expr, lq.cron_schedules.tz, lq.cron_schedules.catch_up,
                lq.cron_schedules.queue, lq.cron_schedules.declared_by, lq.cron_schedules.payload,
                lq.cron_schedules.priority, lq.cron_schedules.max_attempts,
                lq.cron_schedules.unique_key)
               is distinct from (excluded.expr, excluded.tz, excluded.catch_up,
                                 excluded.queue, excluded.declared_by, excluded.payload,
                                 excluded.priority, excluded.max_attempts, excluded.unique_key)",
    )
    .bind(d.kind)
    .bind(d.expr)
    .bind(d.tz)
    .bind(d.catch_up)
    .bind(d.queue)
    .bind(d.declared_by)
    .bind(d.payload)
    .bind(d.priority)
    .bind(d.max_attempts)
    .bind(d.unique_key)
    .execute(&mut *conn)
    .await
    .map_err(err("cron_schedule_describe"))?;
    Ok(())
}

/// What [`cron_run_now`] found and did.
#[derive(Debug, sqlx::FromRow)]
pub struct RunNowRow {
    /// Whether `lq.cron_schedules` has a row for the kind.
    pub scheduled: bool,
    /// Whether a runtime recorded the job the schedule fires (schema 12 on).
    pub declared: bool,
    /// The job enqueued; `None` when none was (see the other fields).
    pub id: Option<i64>,
    /// The schedule's unique key, when it has one: with no job enqueued, a live
    /// job of its kind holds it.
    pub unique_key: Option<String>,
}

/// Enqueues one job of recurring `kind` now, outside its schedule: the job its
/// declaration records (payload, queue, priority, attempts, unique key), with
/// `meta` as its metadata, and wakes the queue's runtimes. Records no tick, so
/// the schedule's own ticks fire as before. A unique key a live job holds
/// enqueues nothing, as at a tick.
pub async fn cron_run_now(
    conn: &mut PgConnection,
    kind: &str,
    meta: &serde_json::Value,
) -> Result<RunNowRow, Error> {
    sqlx::query_as(
        "with s as (
             select kind, queue, priority, payload, max_attempts, unique_key,
                 (payload, queue, priority, max_attempts) is not null as declared
             from lq.cron_schedules where kind = $1
         ), job as (
             insert into lq.jobs (kind, queue, priority, payload, max_attempts, meta, unique_key)
             select kind, queue, priority, payload, max_attempts, $2, unique_key from s
             where declared
             on conflict (kind, unique_key) where unique_key is not null do nothing
             returning id, queue
         ), woken as (
             select pg_catalog.pg_notify('lq_jobs', job.queue) from job
         )
         select exists (select from s) as scheduled,
                exists (select from s where declared) as declared,
                (select id from job) as id,
                (select unique_key from s) as unique_key,
                (select count(*) from woken) as woken",
    )
    .bind(kind)
    .bind(meta)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("cron_run_now"))
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
    /// Whether the row records the job its ticks enqueue (see [`cron_run_now`]).
    pub runnable: bool,
    pub now: DateTime<Utc>,
}

/// Every cron schedule, by kind.
pub async fn cron_schedules_list(conn: &mut PgConnection) -> Result<Vec<ScheduleRow>, Error> {
    sqlx::query_as(
        "select s.kind, s.expr, s.tz, s.catch_up, s.queue, s.declared_by, s.last_tick, s.checked_at,
             (select t.job_id from lq.cron_ticks t where t.kind = s.kind
              order by t.tick desc limit 1) as last_job_id,
             (s.payload, s.queue, s.priority, s.max_attempts) is not null as runnable,
             now() as now
         from lq.cron_schedules s
         order by s.kind",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(err("cron_schedules_list"))
}
