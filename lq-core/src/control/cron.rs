//! The cron schedules, as the database knows them, and running one now.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{pinned, queues::storable_note};
use crate::{
    cron::{Schedule, META_KEY},
    db, validate_name, Error,
};

/// Every recurring kind's schedule, by kind: its declaration (as the runtimes
/// that know the type recorded it), the newest tick decided, the job of the
/// newest tick fired, and the next fire time computed from the declaration.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// for s in lq_core::control::cron_schedules(&pool).await? {
///     println!("{} {:?} next {:?}", s.kind, s.expr, s.next_tick);
/// }
/// # Ok(()) }
/// ```
pub async fn cron_schedules(pool: &PgPool) -> Result<Vec<CronInfo>, Error> {
    let rows = pinned(pool, "cron_schedules_list", |conn| {
        Box::pin(async move { db::cron::cron_schedules_list(conn).await })
    })
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let schedule = match (&r.expr, &r.tz) {
                (Some(expr), Some(tz)) => Schedule::parse(expr, tz).ok(),
                _ => None,
            };
            // The first tick after the newest decided one; when that lies in the
            // past the schedule is due and fires at the scheduler's next pass.
            let next_tick = schedule
                .as_ref()
                .and_then(|s| s.next_after(r.last_tick.max(r.now - chrono::Duration::seconds(1))));
            CronInfo {
                kind: r.kind,
                expr: r.expr,
                tz: r.tz,
                catch_up: r.catch_up,
                queue: r.queue,
                declared_by: r.declared_by,
                last_tick: r.last_tick,
                checked_at: r.checked_at,
                last_job_id: r.last_job_id,
                next_tick,
                runnable: r.runnable,
            }
        })
        .collect())
}

/// One recurring kind's schedule, as [`cron_schedules`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CronInfo {
    /// The recurring job's kind.
    pub kind: String,
    /// Its cron expression, once a runtime knowing the type has recorded it.
    pub expr: Option<String>,
    /// The IANA zone the expression is read in.
    pub tz: Option<String>,
    /// What happens to ticks missed while no runtime ran (`once` or `skip`).
    pub catch_up: Option<String>,
    /// The queue its jobs go to.
    pub queue: Option<String>,
    /// The runtime that recorded the declaration.
    pub declared_by: Option<String>,
    /// The newest tick decided (fired or skipped).
    pub last_tick: DateTime<Utc>,
    /// When a scheduler last looked at it.
    pub checked_at: DateTime<Utc>,
    /// The job of the newest tick fired, if its record is kept.
    pub last_job_id: Option<i64>,
    /// The next tick to fire (database time), from the declaration.
    pub next_tick: Option<DateTime<Utc>>,
    /// Whether [`cron_run_now`] can enqueue its job: false until a runtime of
    /// schema 12 or later has declared the schedule and recorded the job.
    pub runnable: bool,
}

/// Enqueues one job of recurring `kind` now, outside its schedule: the job its
/// ticks enqueue (payload, queue, priority, attempts and unique key, as the
/// runtime that declares the schedule recorded them), so a tool without the
/// application's types can run it. `by` says who asked; it is kept in the job's
/// metadata as `{"lq": {"run_now": {"by": …}}}` (cut and escaped as
/// [`super::pause_queue`]'s note is). Returns the job's id.
///
/// No tick is recorded: the schedule fires its own ticks as before, and the
/// job's [`crate::JobContext::cron`] is `None`. As at a tick, a live job of the
/// kind holding the schedule's unique key means no job: [`Error::ScheduleKeyHeld`].
/// A kind with no schedule is [`Error::UnknownSchedule`]; a schedule no runtime
/// of schema version 12 or later has declared yet is [`Error::ScheduleUndeclared`];
/// a kind that breaks the naming rule is [`Error::InvalidName`].
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let id = lq_core::control::cron_run_now(&pool, "NightlyReport", "ops: alice").await?;
/// println!("enqueued job {id}");
/// # Ok(()) }
/// ```
pub async fn cron_run_now(pool: &PgPool, kind: &str, by: &str) -> Result<i64, Error> {
    validate_name("kind", kind)?;
    let meta = serde_json::json!({ (META_KEY): { "run_now": { "by": storable_note(by) } } });
    let kind = kind.to_owned();
    pinned(pool, "cron_run_now", move |conn| {
        Box::pin(async move {
            let row = db::cron::cron_run_now(conn, &kind, &meta).await?;
            match row {
                db::cron::RunNowRow { id: Some(id), .. } => Ok(id),
                db::cron::RunNowRow {
                    scheduled: false, ..
                } => Err(Error::UnknownSchedule { kind }),
                db::cron::RunNowRow {
                    declared: false, ..
                } => Err(Error::ScheduleUndeclared { kind }),
                db::cron::RunNowRow { unique_key, .. } => {
                    // The insert found the key taken: name the job that holds
                    // it (read in this transaction's next statement, so 0 when
                    // it ended in between).
                    let key = unique_key.unwrap_or_default();
                    let holder = db::enqueue::job_find_live_by_key(conn, &kind, &key)
                        .await?
                        .unwrap_or(0);
                    Err(Error::ScheduleKeyHeld { kind, holder, key })
                }
            }
        })
    })
    .await
}
