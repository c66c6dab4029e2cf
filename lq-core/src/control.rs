//! Job control as library calls: inspect, list, count, cancel, retry and run now jobs;
//! pause, resume and survey queues. Every tool (the CLI, the dashboard) is built
//! on these, so each behaves the same everywhere.
//!
//! ```no_run
//! use lq_core::{control, JobFilter, JobState};
//! # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
//! let dead_emails = JobFilter::new().state(JobState::Dead).queue("emails");
//! for job in control::list(&pool, &dead_emails, 50).await? {
//!     let last = job.errors.last().map_or("", |e| e.error.as_str());
//!     println!("{} {} {last}", job.id, job.kind);
//!     control::retry_now(&pool, job.id).await?;
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::{db, Error, JobFilter, JobState};

pub use crate::db::control::JobRow;
pub use bound::{timeout, with_timeout, DEFAULT_TIMEOUT, MAX_TIMEOUT};
pub use bulk::{cancel_matching, delete_matching, retry_matching, run_now_matching, BulkReport};
pub use cron::{cron_run_now, cron_schedules, CronInfo};
pub use doctor::{doctor, Check};
pub use queues::{pause_queue, queues, resume_queue, Paused, QueueInfo, RateBucket};
pub use runtimes::{runtimes, RuntimeInfo};
pub use stats::{stats, wait_bucket, wait_quantile, MinuteStats, WAIT_BUCKET_BOUNDS};

/// The longest age a [`JobFilter`] condition or a [`prune`] retention takes,
/// and the longest retention a runtime's settings take: 1,000 years (of 366
/// days). PostgreSQL's timestamps end about 4,700 years before now, so a longer
/// age would fail in the database instead of being refused here.
///
/// ```
/// assert!(lq_core::control::MAX_AGE.as_secs() >= 1_000 * 365 * 86_400);
/// ```
pub const MAX_AGE: Duration = crate::job_filter::MAX_FILTER_AGE;

mod bound;
mod bulk;
mod checkpoints_check;
mod connections_check;
mod cron;
mod doctor;
mod limits_check;
mod queues;
mod runtimes;
mod stats;

/// Runs `f` in a transaction of its own whose `search_path` is pinned to
/// `pg_catalog` (see `db::SEARCH_PATH`): an application's pool may have any
/// setting, and no other role's functions may run in a control call. The call is
/// bounded by [`with_timeout`]'s scope (30 s without one), and the server
/// cancels a statement that runs for nine tenths of that bound, so a call
/// held up by one statement (a count over a huge history, a row locked
/// elsewhere) fails with the server's cancel rather than leave it running on the
/// application's pool.
async fn pinned<T, F>(pool: &PgPool, op: &'static str, f: F) -> Result<T, Error>
where
    F: for<'c> FnOnce(
        &'c mut sqlx::PgConnection,
    ) -> futures_util::future::BoxFuture<'c, Result<T, Error>>,
{
    let bound = bound::timeout();
    db::timed(op, bound, async {
        let mut tx = pool.begin().await.map_err(db::err(op))?;
        db::pin_transaction(&mut tx, bound).await?;
        let out = f(&mut tx).await?;
        tx.commit().await.map_err(db::err(op))?;
        Ok(out)
    })
    .await
}

/// One job by id, live or finished, with each failed attempt's error;
/// [`Error::NotFound`] when there is none (never enqueued, or pruned).
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let job = lq_core::control::get(&pool, 42).await?;
/// println!("{} is {:?} after {} attempts", job.kind, job.state, job.attempts);
/// # Ok(()) }
/// ```
pub async fn get(pool: &PgPool, id: i64) -> Result<JobRow, Error> {
    pinned(pool, "job_get", |conn| {
        Box::pin(async move {
            db::control::job_get(conn, id)
                .await?
                .ok_or(Error::NotFound { id })
        })
    })
    .await
}

/// Up to `limit` jobs matching `filter`, newest (highest id) first. For the
/// next page, pass the last id to [`JobFilter::before_id`]. A filter the
/// database could not take, or a negative limit, is [`Error::InvalidFilter`].
///
/// ```no_run
/// use lq_core::{control, JobFilter, JobState};
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// // Every dead job of a queue, 100 at a time.
/// let mut page = JobFilter::new().state(JobState::Dead).queue("emails");
/// loop {
///     let jobs = control::list(&pool, &page, 100).await?;
///     let Some(last) = jobs.last() else { break };
///     page = page.before_id(last.id);
/// }
/// # Ok(()) }
/// ```
pub async fn list(pool: &PgPool, filter: &JobFilter, limit: i64) -> Result<Vec<JobRow>, Error> {
    filter.validate()?;
    if limit < 0 {
        return Err(Error::InvalidFilter {
            reason: format!("limit {limit} is negative"),
        });
    }
    let filter = filter.clone();
    pinned(pool, "job_list", |conn| {
        Box::pin(async move { db::control::job_list(conn, &filter, limit).await })
    })
    .await
}

/// How many jobs match `filter`, per queue and state, counted in the database
/// (no rows are loaded). Counting finished jobs reads the whole history the
/// filter allows: filter live states only (`queued`, `running`) for a cheap count.
///
/// ```no_run
/// use lq_core::{control, JobFilter, JobState};
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let live = JobFilter::new().state(JobState::Queued).state(JobState::Running);
/// for c in control::count(&pool, &live).await? {
///     println!("{:>12} {:>9} {}", c.queue, c.state, c.count);
/// }
/// # Ok(()) }
/// ```
pub async fn count(pool: &PgPool, filter: &JobFilter) -> Result<Vec<JobCount>, Error> {
    filter.validate()?;
    let filter = filter.clone();
    let rows = pinned(pool, "job_count", |conn| {
        Box::pin(async move { db::control::job_count(conn, &filter).await })
    })
    .await?;
    Ok(rows
        .into_iter()
        .map(|(queue, state, count)| JobCount {
            queue,
            state,
            count: u64::try_from(count).unwrap_or(0),
        })
        .collect())
}

/// How many jobs match `filter` in each state, exactly up to `cap` and
/// reported as "more than `cap`" past it: the dashboard's state tabs, refreshed
/// every few seconds. Each state's count stops reading once it passes the cap,
/// and reads the state's partial index where there is one (every state but
/// `succeeded`), where [`count`] reads every matching row. A state with fewer
/// than `cap` matches and no index to read (`succeeded` under a narrow filter)
/// still reads the history's rows. `filter`'s states are ignored: every state
/// is counted. One statement.
///
/// ```no_run
/// use lq_core::{control, JobFilter};
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// for c in control::count_by_state_capped(&pool, &JobFilter::new().queue("emails"), 10_000).await? {
///     println!("{:>9} {}{}", c.state, c.count, if c.more { "+" } else { "" });
/// }
/// # Ok(()) }
/// ```
pub async fn count_by_state_capped(
    pool: &PgPool,
    filter: &JobFilter,
    cap: u64,
) -> Result<Vec<StateCount>, Error> {
    filter.validate()?;
    let filter = filter.clone();
    let cap_sql = i64::try_from(cap).unwrap_or(i64::MAX - 1);
    let rows = pinned(pool, "job_count_by_state_capped", |conn| {
        Box::pin(async move {
            db::control::job_count_by_state_capped(conn, &filter, &JobState::ALL, cap_sql).await
        })
    })
    .await?;
    Ok(rows
        .into_iter()
        .map(|(state, n)| {
            let n = u64::try_from(n).unwrap_or(0);
            StateCount {
                state,
                count: n.min(cap),
                more: n > cap,
            }
        })
        .collect())
}

/// The jobs in one state, counted up to a cap ([`count_by_state_capped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateCount {
    /// State.
    pub state: JobState,
    /// Jobs in that state, at most the cap.
    pub count: u64,
    /// More jobs than the cap are in that state (`count` is the cap).
    pub more: bool,
}

/// The number of jobs in one queue and state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobCount {
    /// Queue.
    pub queue: String,
    /// State.
    pub state: JobState,
    /// Jobs in that queue and state.
    pub count: u64,
}

/// Cancels a job. A queued job ends `cancelled` at once. A running job's handler
/// sees its cancellation signal fire on whichever host runs it (NOTIFY, with the
/// heartbeat as a fallback) and the job ends `cancelled` whatever the handler
/// returns; one claimed ahead that still waits for a handler ends `cancelled`
/// without its handler running. Returns the state the job was in; fails with
/// [`Error::WrongState`] for a job already finished.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// match lq_core::control::cancel(&pool, 42).await {
///     Ok(was) => println!("cancelled; it was {was:?}"),
///     Err(lq_core::Error::WrongState { state, .. }) => println!("already {state:?}"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
pub async fn cancel(pool: &PgPool, id: i64) -> Result<JobState, Error> {
    let before = pinned(pool, "job_cancel", |conn| {
        Box::pin(async move { db::control::job_cancel(conn, id).await })
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
/// error history is kept (its newest entries, see [`crate::MAX_ERRORS_KEPT`]).
/// Fails with [`Error::UniqueKeyHeld`] when another live job of its kind holds
/// its unique key (the live job wins).
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// match lq_core::control::retry_now(&pool, 42).await {
///     Ok(()) => println!("job 42 queued again"),
///     Err(lq_core::Error::UniqueKeyHeld { holder, .. }) => println!("job {holder} holds its key"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
pub async fn retry_now(pool: &PgPool, id: i64) -> Result<(), Error> {
    let retried = pinned(pool, "job_retry_now", |conn| {
        Box::pin(async move { db::control::job_retry_now(conn, id).await })
    })
    .await;
    let before = match retried {
        Err(Error::Database {
            source: sqlx::Error::Database(e),
            ..
        }) if e.is_unique_violation() => return Err(unique_key_holder(pool, id).await?),
        other => other?,
    }
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

/// Makes a queued job due now: one scheduled for later, snoozed, or waiting out
/// a retry's backoff runs as soon as a worker of its queue is free (once the
/// queue is resumed, if paused), its attempts and errors unchanged. A job
/// already due is left as it is. Fails with [`Error::WrongState`] for a running
/// or finished job (a dead one is [`retry_now`]'s), [`Error::NotFound`] when
/// there is none.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// // The provider it failed against is back: skip the rest of the backoff.
/// lq_core::control::run_now(&pool, 42).await?;
/// # Ok(()) }
/// ```
pub async fn run_now(pool: &PgPool, id: i64) -> Result<(), Error> {
    let seen = pinned(pool, "jobs_run_now_many", |conn| {
        Box::pin(async move { db::bulk::jobs_run_now_many(conn, &[id], &[]).await })
    })
    .await?;
    if seen.iter().any(|&(.., due)| due) {
        return Ok(());
    }
    // The live job's state first: an id a finished job shares names it too.
    let state = match seen
        .iter()
        .map(|&(_, state, _)| state)
        .min_by_key(|s| !s.is_live())
    {
        Some(state) => state,
        // Queued when looked at, then claimed or ended before its row lock.
        None => get(pool, id).await?.state,
    };
    Err(Error::WrongState {
        id,
        state,
        action: "run now",
    })
}

/// Why finished job `id` could not be retried, looked up now: usually
/// [`Error::UniqueKeyHeld`], its unique key held by a live job (0 if that has
/// ended meanwhile). If the job itself is no longer finished (another session
/// retried it first: two operators, or a double-submitted form), it is
/// [`Error::WrongState`] with its state now, not a key it holds itself.
async fn unique_key_holder(pool: &PgPool, id: i64) -> Result<Error, Error> {
    pinned(pool, "job_retry_now", |conn| {
        Box::pin(async move {
            let row = db::control::job_get(conn, id)
                .await?
                .ok_or(Error::NotFound { id })?;
            if !matches!(row.state, JobState::Dead | JobState::Cancelled) {
                let state = row.state;
                return Ok(Error::WrongState {
                    id,
                    state,
                    action: "retried",
                });
            }
            let key = row.unique_key.unwrap_or_default();
            let holder = db::enqueue::job_find_live_by_key(conn, &row.kind, &key)
                .await?
                .unwrap_or(0);
            Ok(Error::UniqueKeyHeld { id, holder, key })
        })
    })
    .await
}

/// Deletes finished jobs older than their retention now, in batches: succeeded
/// and cancelled ones finished more than `keep_finished` ago, dead ones more
/// than `keep_dead` ago (the leader runtime does this every `prune_interval`).
/// "Now" is the database's time when the call starts: jobs that pass their
/// retention while it runs are left for the next prune. Returns how many were
/// deleted. A retention over [`MAX_AGE`] (1,000 years) is [`Error::InvalidFilter`]. Each
/// batch commits on its own, so a failure after the first is
/// [`Error::PruneStopped`], with the count already deleted.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// use std::time::Duration;
/// let day = Duration::from_secs(86_400);
/// let deleted = lq_core::control::prune(&pool, day, 7 * day).await?;
/// println!("deleted {deleted} finished jobs");
/// # Ok(()) }
/// ```
pub async fn prune(
    pool: &PgPool,
    keep_finished: Duration,
    keep_dead: Duration,
) -> Result<u64, Error> {
    retention_secs(keep_finished, keep_dead)?;
    let at = pinned(pool, "job_prune", |conn| {
        Box::pin(async move { db::clock::clock_now(conn).await })
    })
    .await?;
    prune_as_of(pool, keep_finished, keep_dead, at).await
}

/// Deletes, as [`prune`] does, the finished jobs that were past their
/// retention at database time `at`: the time of a [`prune_count_now`] an
/// operator confirmed, so that no more is deleted than was counted (jobs whose
/// retention ran out while the operator read the count are left). The example
/// at [`prune_count_now`] shows the pair.
pub async fn prune_as_of(
    pool: &PgPool,
    keep_finished: Duration,
    keep_dead: Duration,
    at: DateTime<Utc>,
) -> Result<u64, Error> {
    const BATCH: i64 = 5000;
    let (finished, dead) = retention_secs(keep_finished, keep_dead)?;
    let mut ids = prune_ids(pool, at, finished.min(dead)).await?;
    let mut total = 0;
    loop {
        let (n, highest) = pinned(pool, "job_prune", |conn| {
            Box::pin(async move {
                db::maintenance::job_prune(conn, finished, dead, Some(at), ids, BATCH).await
            })
        })
        .await
        .map_err(|e| match total {
            0 => e,
            pruned => Error::PruneStopped {
                pruned,
                source: Box::new(e),
            },
        })?;
        total += n;
        if n < BATCH as u64 {
            return Ok(total);
        }
        ids.after = highest.unwrap_or(ids.after);
    }
}

/// The ids a prune past `keep_secs` of retention at `at` reads (see
/// [`db::maintenance::prune_ids`]); every id when the role may not read the
/// marks.
async fn prune_ids(
    pool: &PgPool,
    at: DateTime<Utc>,
    keep_secs: f64,
) -> Result<db::maintenance::PruneIds, Error> {
    let ids = pinned(pool, "prune_ids", |conn| {
        Box::pin(async move { db::maintenance::prune_ids(conn, Some(at), keep_secs).await })
    })
    .await;
    match ids {
        Err(e) if crate::lacks_grant(&e) => Ok(db::maintenance::PruneIds::default()),
        other => other,
    }
}

/// How many finished jobs [`prune`] with these retentions would delete now: what
/// `lq prune` shows before it asks.
///
/// ```no_run
/// use std::time::Duration;
/// use lq_core::control;
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let (day, month) = (Duration::from_secs(86_400), Duration::from_secs(30 * 86_400));
/// if control::prune_count(&pool, day, month).await? > 0 {
///     control::prune(&pool, day, month).await?;
/// }
/// # Ok(()) }
/// ```
pub async fn prune_count(
    pool: &PgPool,
    keep_finished: Duration,
    keep_dead: Duration,
) -> Result<u64, Error> {
    Ok(prune_count_now(pool, keep_finished, keep_dead).await?.count)
}

/// How many finished jobs are past their retention now, and the database's
/// time of the count: pass it to [`prune_as_of`] to delete those and no more
/// (what `lq prune` does after it asks). The count reads the history's
/// primary key up to the jobs that finished around the shorter retention's
/// cutoff: on a long backlog of history to prune, prune without it.
///
/// ```no_run
/// use std::time::Duration;
/// use lq_core::control;
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let (day, month) = (Duration::from_secs(86_400), Duration::from_secs(30 * 86_400));
/// let counted = control::prune_count_now(&pool, day, month).await?;
/// println!("delete {} finished jobs?", counted.count);
/// control::prune_as_of(&pool, day, month, counted.at).await?;
/// # Ok(()) }
/// ```
pub async fn prune_count_now(
    pool: &PgPool,
    keep_finished: Duration,
    keep_dead: Duration,
) -> Result<PruneCount, Error> {
    let (finished, dead) = retention_secs(keep_finished, keep_dead)?;
    let at = pinned(pool, "job_prune_count", |conn| {
        Box::pin(async move { db::clock::clock_now(conn).await })
    })
    .await?;
    let ids = prune_ids(pool, at, finished.min(dead)).await?;
    let count = pinned(pool, "job_prune_count", |conn| {
        Box::pin(async move { db::control::job_prune_count(conn, finished, dead, at, ids).await })
    })
    .await?;
    Ok(PruneCount {
        count: u64::try_from(count).unwrap_or(0),
        at,
    })
}

/// The finished jobs past their retention at one moment ([`prune_count_now`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneCount {
    /// How many.
    pub count: u64,
    /// The database's time of the count.
    pub at: DateTime<Utc>,
}

/// The two retentions in seconds, each checked as a filter's age is.
fn retention_secs(keep_finished: Duration, keep_dead: Duration) -> Result<(f64, f64), Error> {
    crate::job_filter::check_age("keep_finished", keep_finished)?;
    crate::job_filter::check_age("keep_dead", keep_dead)?;
    Ok((keep_finished.as_secs_f64(), keep_dead.as_secs_f64()))
}

/// Age of the oldest open transaction in the database, for health checks: a
/// long-open snapshot stops vacuum, and a queue table then slows down steadily.
/// Among the sessions this role may see: without `pg_read_all_stats` (which
/// `pg_monitor` includes) PostgreSQL hides when other roles' transactions
/// began, and the age reads low; [`doctor`] says so when it applies.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let age = lq_core::control::oldest_transaction_age(&pool).await?;
/// if age > std::time::Duration::from_secs(300) {
///     eprintln!("a transaction has been open for {age:?}: vacuum is held back");
/// }
/// # Ok(()) }
/// ```
pub async fn oldest_transaction_age(pool: &PgPool) -> Result<Duration, Error> {
    let secs = pinned(pool, "oldest_transaction_age", |conn| {
        Box::pin(async move { db::maintenance::oldest_transaction_age(conn).await })
    })
    .await?;
    Ok(Duration::from_secs_f64(secs.max(0.0)))
}
