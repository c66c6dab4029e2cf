//! Bulk actions: retry, cancel, delete or run now every job a [`JobFilter`] matches, in
//! batches of short transactions, with a limit, reporting each refusal.

use sqlx::PgPool;

use super::pinned;
use crate::{db, Error, JobFilter, JobState};

/// Jobs acted on per transaction: short enough that no lock is held for long.
const BATCH: i64 = 500;

/// What a bulk action did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct BulkReport {
    /// Jobs the filter matched and the action looked at.
    pub matched: u64,
    /// Ids of the jobs it acted on (retried, cancelled, deleted or made due).
    pub done: Vec<i64>,
    /// The jobs it could not act on, each with the reason
    /// ([`Error::WrongState`], [`Error::LeftFilter`], [`Error::UniqueKeyHeld`],
    /// [`Error::NotFound`] for one that was deleted meanwhile,
    /// [`Error::AmbiguousId`] for a delete by an id two jobs share).
    pub refused: Vec<(i64, Error)>,
}

/// Which bulk action.
#[derive(Debug, Clone, Copy)]
enum Action {
    Retry,
    Cancel,
    Delete,
    RunNow,
}

impl Action {
    /// The action's participle, as its refusals name it ("cannot be retried").
    fn done(self) -> &'static str {
        match self {
            Action::Retry => "retried",
            Action::Cancel => "cancelled",
            Action::Delete => "deleted",
            Action::RunNow => "run now",
        }
    }
}

/// Queues every dead or cancelled job matching `filter` (at most `limit`) to run
/// now with fresh attempts, as [`super::retry_now`] does one. A job whose unique
/// key a live job holds is refused with [`Error::UniqueKeyHeld`] (of dead jobs
/// sharing a key in one batch, the oldest takes it), a job in another state
/// with [`Error::WrongState`], and one that left the filter's states after being
/// chosen with [`Error::LeftFilter`]; the others go ahead.
///
/// ```no_run
/// use lq_core::{control, JobFilter, JobState};
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// // After an outage: everything of one kind that died in the last hour.
/// let filter = JobFilter::new()
///     .state(JobState::Dead)
///     .kind("ChargeCard")
///     .newer_than(std::time::Duration::from_secs(3600));
/// let report = control::retry_matching(&pool, &filter, None).await?;
/// println!("retried {}, refused {}", report.done.len(), report.refused.len());
/// # Ok(()) }
/// ```
pub async fn retry_matching(
    pool: &PgPool,
    filter: &JobFilter,
    limit: Option<u64>,
) -> Result<BulkReport, Error> {
    run(pool, filter, limit, Action::Retry).await
}

/// Cancels every live job matching `filter` (at most `limit`), as
/// [`super::cancel`] does one; a finished job is refused with
/// [`Error::WrongState`], and a job that left the filter's states between being
/// chosen and being cancelled with [`Error::LeftFilter`] (with `--state queued`,
/// a job that started running meanwhile is not cancelled).
///
/// ```no_run
/// use lq_core::{control, JobFilter, JobState};
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// // A tenant's import was wrong: stop its jobs that have not started.
/// let filter = JobFilter::new()
///     .state(JobState::Queued)
///     .payload_contains(serde_json::json!({"tenant": "acme"}));
/// let report = control::cancel_matching(&pool, &filter, Some(10_000)).await?;
/// println!("cancelled {}, refused {}", report.done.len(), report.refused.len());
/// # Ok(()) }
/// ```
pub async fn cancel_matching(
    pool: &PgPool,
    filter: &JobFilter,
    limit: Option<u64>,
) -> Result<BulkReport, Error> {
    run(pool, filter, limit, Action::Cancel).await
}

/// Deletes for good every queued or finished job matching `filter` (at most
/// `limit`); a running job is refused with [`Error::WrongState`] (cancel it
/// first), and a job that left the filter's states between being chosen and
/// being deleted with [`Error::LeftFilter`] (a dead job retried meanwhile is not
/// deleted as queued).
/// A deleted queued job never runs, and its unique key is free again.
///
/// ```no_run
/// use lq_core::{control, JobFilter, JobState};
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// // Dead jobs of a kind that was removed from the code: nothing will retry them.
/// let filter = JobFilter::new().state(JobState::Dead).kind("LegacySync");
/// let report = control::delete_matching(&pool, &filter, None).await?;
/// println!("deleted {}", report.done.len());
/// # Ok(()) }
/// ```
pub async fn delete_matching(
    pool: &PgPool,
    filter: &JobFilter,
    limit: Option<u64>,
) -> Result<BulkReport, Error> {
    run(pool, filter, limit, Action::Delete).await
}

/// Makes every queued job matching `filter` (at most `limit`) due now, as
/// [`super::run_now`] does one: jobs scheduled for later, snoozed, or waiting
/// out a retry's backoff run as soon as workers are free, their attempts and
/// errors unchanged. A running or finished job is refused with
/// [`Error::WrongState`] (retry a dead one instead), and one a claim took after
/// the filter chose it with [`Error::LeftFilter`] when the filter names states.
///
/// ```no_run
/// use lq_core::{control, JobFilter, JobState};
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// // The payment provider is back: stop waiting out the backoff.
/// let filter = JobFilter::new().state(JobState::Queued).kind("ChargeCard");
/// let report = control::run_now_matching(&pool, &filter, None).await?;
/// println!("{} due now", report.done.len());
/// # Ok(()) }
/// ```
pub async fn run_now_matching(
    pool: &PgPool,
    filter: &JobFilter,
    limit: Option<u64>,
) -> Result<BulkReport, Error> {
    run(pool, filter, limit, Action::RunNow).await
}

async fn run(
    pool: &PgPool,
    filter: &JobFilter,
    limit: Option<u64>,
    action: Action,
) -> Result<BulkReport, Error> {
    filter.validate()?;
    let mut report = BulkReport::default();
    let stopped = batches(pool, filter, limit, action, &mut report).await;
    report.done.sort_unstable();
    match stopped {
        Ok(()) => Ok(report),
        // Nothing committed yet: the error alone says it all.
        Err(e) if report.matched == 0 => Err(e),
        Err(e) => Err(Error::BulkStopped {
            action: action.done(),
            report: Box::new(report),
            source: Box::new(e),
        }),
    }
}

/// Runs the action batch by batch, newest id first, adding each committed
/// batch to `report`; stops at the first error, leaving `report` as it was
/// after the last batch that committed.
async fn batches(
    pool: &PgPool,
    filter: &JobFilter,
    limit: Option<u64>,
    action: Action,
    report: &mut BulkReport,
) -> Result<(), Error> {
    let mut cursor = filter.clone();
    loop {
        let left = limit.map_or(u64::MAX, |l| l.saturating_sub(report.matched));
        if left == 0 {
            return Ok(());
        }
        let take = BATCH.min(i64::try_from(left).unwrap_or(i64::MAX));
        let page = cursor.clone();
        let mut ids = pinned(pool, "job_ids", |conn| {
            Box::pin(async move { db::control::job_ids(conn, &page, take).await })
        })
        .await?;
        let Some(&lowest) = ids.last() else {
            return Ok(());
        };
        let found = ids.len();
        // An id a live job and a finished one share is one id to act on.
        ids.dedup();
        let mut batch = BulkReport::default();
        let acted = act(pool, &ids, &filter.states_required(), action, &mut batch).await;
        // A batch that committed and then failed to explain a refusal still
        // counts what it did.
        report.matched += match acted {
            Ok(()) => ids.len(),
            Err(_) => batch.done.len() + batch.refused.len(),
        } as u64;
        report.done.append(&mut batch.done);
        report.refused.append(&mut batch.refused);
        acted?;
        cursor = cursor.before_id(lowest);
        if (found as i64) < take {
            return Ok(());
        }
    }
}

/// Acts on one batch in one transaction and sorts its ids into done and refused.
async fn act(
    pool: &PgPool,
    ids: &[i64],
    states: &[JobState],
    action: Action,
    report: &mut BulkReport,
) -> Result<(), Error> {
    let batch = ids.to_vec();
    let wanted = states.to_vec();
    let seen: Vec<(i64, JobState, bool)> = match action {
        Action::Retry => {
            pinned(pool, "jobs_retry_many", |conn| {
                Box::pin(async move { db::bulk::jobs_retry_many(conn, &batch, &wanted).await })
            })
            .await?
        }
        Action::Delete => {
            pinned(pool, "jobs_delete_many", |conn| {
                Box::pin(async move { db::bulk::jobs_delete_many(conn, &batch, &wanted).await })
            })
            .await?
        }
        Action::Cancel => {
            pinned(pool, "jobs_cancel_many", |conn| {
                Box::pin(async move { db::bulk::jobs_cancel_many(conn, &batch, &wanted).await })
            })
            .await?
        }
        Action::RunNow => {
            pinned(pool, "jobs_run_now_many", |conn| {
                Box::pin(async move { db::bulk::jobs_run_now_many(conn, &batch, &wanted).await })
            })
            .await?
        }
    };
    // The batch has committed: what it did is recorded before any lookup below
    // can fail.
    let reported: std::collections::HashSet<i64> = seen.iter().map(|&(id, ..)| id).collect();
    report.done.extend(
        seen.iter()
            .filter(|&&(.., acted)| acted)
            .map(|&(id, ..)| id),
    );
    let unacted: Vec<(i64, JobState)> = (seen.into_iter())
        .filter(|&(.., acted)| !acted)
        .map(|(id, state, _)| (id, state))
        .collect();
    let mut at = 0;
    while let Some(&(id, state)) = unacted.get(at) {
        at += 1;
        // A delete lists an id twice when it names a live job and a finished
        // one (rows ordered by id), and deleted neither.
        let why = match unacted.get(at) {
            Some(&(next, other)) if next == id && matches!(action, Action::Delete) => {
                at += 1;
                let (live, finished) = if state.is_live() {
                    (state, other)
                } else {
                    (other, state)
                };
                Error::AmbiguousId { id, live, finished }
            }
            _ => refusal(pool, id, state, states, action).await?,
        };
        report.refused.push((id, why));
    }
    // A job that ended or went away while the batch waited for its lock.
    for &id in ids.iter().filter(|id| !reported.contains(id)) {
        let err = match super::get(pool, id).await {
            Ok(row) => refusal(pool, id, row.state, states, action).await?,
            Err(Error::NotFound { id }) => Error::NotFound { id },
            Err(e) => return Err(e),
        };
        report.refused.push((id, err));
    }
    Ok(())
}

/// Why `action` did not act on job `id`, found in `state`, for a filter on
/// `states` (any state if empty).
async fn refusal(
    pool: &PgPool,
    id: i64,
    state: JobState,
    states: &[JobState],
    action: Action,
) -> Result<Error, Error> {
    if !states.is_empty() && !states.contains(&state) {
        let action = action.done();
        return Ok(Error::LeftFilter { id, state, action });
    }
    Ok(match (action, state) {
        // A job deleted since the batch looked at it is refused as gone, not
        // a failure of the whole action.
        (Action::Retry, JobState::Dead | JobState::Cancelled) => {
            match super::unique_key_holder(pool, id).await {
                Ok(held) => held,
                Err(Error::NotFound { id }) => Error::NotFound { id },
                Err(e) => return Err(e),
            }
        }
        _ => Error::WrongState {
            id,
            state,
            action: action.done(),
        },
    })
}
