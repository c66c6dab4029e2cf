//! Statements of the bulk actions: retry, cancel, delete or run now a batch of jobs by id,
//! each batch in one statement, reporting which ids it acted on.

use sqlx::PgConnection;

use super::err;
use crate::{Error, JobState};

/// Whether a row whose state is `$state` is among the filter's states, bound as
/// `$2` (every state when that array is empty): each bulk statement checks it
/// again under the row lock, so a job that changed state after the filter chose
/// it is left alone.
macro_rules! in_states {
    ($state:literal) => {
        concat!("(cardinality($2::text[]) = 0 or ", $state, " = any($2))")
    };
}

/// The names of `states`, as the bulk statements bind them.
fn state_names(states: &[JobState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}

/// Runs one bulk statement with `ids` bound as `$1` and the names of `states`
/// as `$2`, in a transaction of its own (a savepoint within the caller's) with
/// table scans ruled out (`NO_TABLE_SCANS`): every statement finds its rows
/// by id.
async fn by_ids(
    conn: &mut PgConnection,
    op: &'static str,
    statement: &'static str,
    ids: &[i64],
    states: &[JobState],
) -> Result<Vec<(i64, JobState, bool)>, Error> {
    let mut tx = super::begin_with_settings(conn, NO_TABLE_SCANS, op).await?;
    let rows = sqlx::query_as(statement)
        .bind(ids)
        .bind(state_names(states))
        .fetch_all(&mut *tx)
        .await
        .map_err(err(op))?;
    tx.commit().await.map_err(err(op))?;
    Ok(rows)
}

/// The bulk statements' setting: no table scans. With the history's
/// statistics calling it empty (a vacuum of a history a prune had emptied
/// leaves one row in many pages), the planner costed a table scan of
/// `lq.finished_jobs` below a probe of its key for `id = any($1)`, and a bulk
/// retry read the whole history for each batch of 500
/// (`tests/integration/planned_when_empty.rs`, `bench/FINDINGS.md` stop 78).
const NO_TABLE_SCANS: &str = "select pg_catalog.set_config('enable_seqscan', 'off', true)";

/// Puts the dead or cancelled jobs among `ids` back in the queue to run now with
/// fresh attempts (errors kept, newest 20), and among them only those in one of
/// `states` when it is not empty (see [`jobs_delete_many`]). A job whose unique
/// key a live job holds (or an earlier job of the batch took) stays where it is.
/// Returns `(id, state before)` of every job found, and whether it was requeued.
/// The history is read by the ids given alone, also where its rows are deleted.
pub async fn jobs_retry_many(
    conn: &mut PgConnection,
    ids: &[i64],
    states: &[JobState],
) -> Result<Vec<(i64, JobState, bool)>, Error> {
    by_ids(conn, "jobs_retry_many", RETRY_MANY, ids, states).await
}

const RETRY_MANY: &str = concat!(
    "with found as materialized (
             select id, state from lq.all_jobs where id = any($1)
         ),
         cand as materialized (
             select * from lq.finished_jobs
             where id = any($1) and state in ('dead', 'cancelled')
                 and ",
    in_states!("state::text"),
    "
             order by id
             for update
         ),
         requeued as (
             insert into lq.jobs (id, kind, queue, priority, payload, state, run_at, attempts,
                 max_attempts, unique_key, errors, created_at, started_at, meta)
             overriding system value
             select id, kind, queue, priority, payload, 'queued', now(), 0,
                 max_attempts, unique_key, jsonb_path_query_array(errors, '$[last - 19 to last]'),
                 created_at, started_at, meta
             from cand
             on conflict do nothing
             returning id, queue
         ),
         gone as (
             delete from lq.finished_jobs f using requeued r
             where f.id = any($1) and f.id = r.id
             returning f.id
         ),
         woken as (
             select pg_notify('lq_jobs', q) from (select distinct queue as q from requeued) qs
         )
         select f.id, f.state, exists (select from gone g where g.id = f.id)
         from found f
         where (select count(*) from woken) >= 0
         order by f.id"
);

/// Cancels the live jobs among `ids`, and among them only those in one of
/// `states` when it is not empty (see [`jobs_delete_many`]): queued ones end
/// `cancelled` now, running ones are flagged and their workers told by NOTIFY.
/// Returns `(id, state before, cancelled)` of every job found (finished ones,
/// and live ones outside `states`, are left as they are).
pub async fn jobs_cancel_many(
    conn: &mut PgConnection,
    ids: &[i64],
    states: &[JobState],
) -> Result<Vec<(i64, JobState, bool)>, Error> {
    by_ids(conn, "jobs_cancel_many", CANCEL_MANY, ids, states).await
}

const CANCEL_MANY: &str = concat!(
    "with old as materialized (
             select id, state::lq.job_state as state,
                 ",
    in_states!("state::text"),
    " as chosen
             from lq.jobs where id = any($1) order by id for update
         ),
         flagged as (
             update lq.jobs j
             set cancel_requested_at = coalesce(j.cancel_requested_at, now())
             from old where ",
    job_by_id_of!("old.id"),
    " and old.state = 'running' and old.chosen
             returning j.id
         ),
         moved as (
             delete from lq.jobs j
             using old
             where ",
    job_by_id_of!("old.id"),
    " and old.state = 'queued' and old.chosen
             returning j.*, 'cancelled'::lq.job_state as final_state, j.errors as final_errors
         ),
         ",
    archive_moved!(),
    ",
         told as (
             select pg_notify('lq_cancel', f.id::text) from flagged f
         ),
         finished as (
             select id, state from lq.finished_jobs where id = any($1)
         )
         select id, state, chosen from old
         where (select count(*) from told) >= 0 and (select count(*) from archived) >= 0
         union all
         select id, state, false from finished
         order by id"
);

/// Makes the queued jobs among `ids` due now, and among them only those in one
/// of `states` when it is not empty (see [`jobs_delete_many`]): a job scheduled
/// for later, snoozed, or waiting out a retry's backoff runs as soon as a worker
/// is free, its attempts and errors as they were. A job already due is left as
/// it is (and counts as done). Sends the queues' wake-up NOTIFY.
/// Returns `(id, state before, made due)` of every job found, except a queued
/// one a claim took (or an operator ended) while this waited for its row lock:
/// the caller looks that one up. That job is told by its lease token (the check
/// constraint makes "none" the same as "queued"), and the rows are locked in the
/// order of the ids found (the same as theirs): a `state` test let the planner
/// read the queued rows' partial index whole for each job, and `order by j.id`
/// the whole primary key, when the statistics called the table empty
/// (`tests/integration/planned_when_empty.rs`).
pub async fn jobs_run_now_many(
    conn: &mut PgConnection,
    ids: &[i64],
    states: &[JobState],
) -> Result<Vec<(i64, JobState, bool)>, Error> {
    by_ids(conn, "jobs_run_now_many", RUN_NOW_MANY, ids, states).await
}

const RUN_NOW_MANY: &str = concat!(
    "with old as materialized (
             select id, state::lq.job_state as state,
                 ",
    in_states!("state::text"),
    " as chosen
             from lq.jobs where id = any($1)
         ),
         due as materialized (
             select j.id, j.queue from old join lq.jobs j on ",
    job_by_id_of!("old.id"),
    "
             where old.state = 'queued' and old.chosen and j.lease_token is null
             order by old.id
             for update of j
         ),
         moved as (
             update lq.jobs j set run_at = now()
             from due where ",
    job_by_id_of!("due.id"),
    " and j.run_at > now()
             returning j.queue
         ),
         woken as (
             select pg_notify('lq_jobs', q) from (select distinct queue as q from moved) qs
         )
         select id, 'queued'::lq.job_state, true from due
         where (select count(*) from woken) >= 0
         union all
         select id, state, false from old where not (state = 'queued' and chosen)
         union all
         select id, state, false from lq.finished_jobs where id = any($1)
         order by 1"
);

/// Deletes the queued and finished jobs among `ids` for good (a running job is
/// left: cancel it first), and among them only those still in one of `states`
/// when it is not empty: a job retried or finished since a filter on its state
/// chose it is left, not deleted in its new state. An id that names a live job
/// and a finished one in those states (ids restarted by `TRUNCATE … RESTART
/// IDENTITY`) deletes neither: the caller cannot have meant both. Returns `(id,
/// state before, deleted)` of every job deleted, running, or sharing its id.
/// Live jobs are told queued or running by their lease (the check constraint
/// makes a lease token and expiry the same as "running"), as in
/// [`jobs_run_now_many`].
/// An id in both tables is looked up by the ids given in each: joined on `id`
/// alone, the history was read in key order from its first row when its
/// statistics called it empty.
pub async fn jobs_delete_many(
    conn: &mut PgConnection,
    ids: &[i64],
    states: &[JobState],
) -> Result<Vec<(i64, JobState, bool)>, Error> {
    by_ids(conn, "jobs_delete_many", DELETE_MANY, ids, states).await
}

const DELETE_MANY: &str = concat!(
    "with twice as materialized (
             select j.id, j.state::lq.job_state as live, f.state as finished
             from lq.jobs j join lq.finished_jobs f using (id)
             where j.id = any($1) and f.id = any($1)
               and ",
    in_states!("j.state::text"),
    " and ",
    in_states!("f.state::text"),
    "
         ),
         live as (
             delete from lq.jobs where id = any($1) and lease_token is null
                 and ",
    in_states!("'queued'"),
    "
                 and id not in (select id from twice)
             returning id, state::lq.job_state as state
         ),
         finished as (
             delete from lq.finished_jobs where id = any($1)
                 and ",
    in_states!("state::text"),
    "
                 and id not in (select id from twice)
             returning id, state
         ),
         running as (
             select id, state::lq.job_state as state from lq.jobs where id = any($1)
                 and lease_token is not null and lease_expires_at is not null
                 and id not in (select id from twice)
         )
         select id, state, true from live
         union all select id, state, true from finished
         union all select id, state, false from running
         union all select id, live, false from twice
         union all select id, finished, false from twice
         order by 1"
);
