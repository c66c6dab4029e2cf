//! Statements behind job control: inspect, cancel, retry.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, QueryBuilder};

use super::err;
use crate::{job_filter::Readiness, AttemptError, Error, JobFilter, JobState};

/// A job row as control calls show it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobRow {
    /// Job id.
    pub id: i64,
    /// Kind: the name stored in the row, which finds the job's type.
    pub kind: String,
    /// The queue it was enqueued on.
    pub queue: String,
    /// Priority within the queue; larger runs first.
    pub priority: i16,
    /// Payload, unchanged since enqueue, as JSON text: any payload PostgreSQL
    /// stores can be shown, however deeply nested (a decoded `Value` has a depth
    /// limit). [`JobRow::payload_value`] and [`JobRow::payload_as`] decode it.
    pub payload: Box<serde_json::value::RawValue>,
    /// Where the job is in its life: queued, running, or how it ended.
    pub state: JobState,
    /// Earliest next run.
    pub run_at: DateTime<Utc>,
    /// Attempts so far (counted at claim).
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Unique key, if any.
    pub unique_key: Option<String>,
    /// Worker holding the lease, while running; for a finished job, the worker
    /// that held it when the job ended (none if it ended while queued).
    pub lease_owner: Option<String>,
    /// Lease expiry, while running.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Every failed attempt kept, oldest first (at most [`crate::MAX_ERRORS_KEPT`]).
    pub errors: Vec<AttemptError>,
    /// Free-form metadata (the cron tick a recurring job stands for, trace
    /// context, tags), as JSON text like the payload; [`JobRow::meta_value`]
    /// decodes it.
    pub meta: Option<Box<serde_json::value::RawValue>>,
    /// Enqueue time.
    pub created_at: DateTime<Utc>,
    /// Start of the latest attempt.
    pub started_at: Option<DateTime<Utc>>,
    /// When the job reached a final state.
    pub finished_at: Option<DateTime<Utc>>,
    /// When cancellation was requested while it ran.
    pub cancel_requested_at: Option<DateTime<Utc>>,
}

impl JobRow {
    /// The payload as a JSON value; fails for one nested deeper than serde_json's
    /// limit of 128 levels.
    pub fn payload_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(self.payload.get())
    }

    /// The metadata as a JSON value, if the job has any.
    pub fn meta_value(&self) -> Option<Result<serde_json::Value, serde_json::Error>> {
        self.meta.as_ref().map(|m| serde_json::from_str(m.get()))
    }

    /// The payload decoded into `T`, usually the job's own type.
    pub fn payload_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.payload.get())
    }
}

impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for JobRow {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row;
        // Validation of raw JSON text keeps no stack per level, so any depth passes.
        let raw = |column: &str, text: String| {
            serde_json::value::RawValue::from_string(text).map_err(|e| sqlx::Error::ColumnDecode {
                index: column.to_owned(),
                source: Box::new(e),
            })
        };
        let payload = raw("payload", row.try_get("payload")?)?;
        let meta = match row.try_get::<Option<String>, _>("meta")? {
            Some(text) => Some(raw("meta", text)?),
            None => None,
        };
        let errors_text: String = row.try_get("errors")?;
        let errors = match serde_json::from_str(&errors_text) {
            Ok(value) => AttemptError::list_from_json(&value),
            // Deeper than serde_json decodes (written by hand): kept as text.
            Err(_) => AttemptError::list_from_json(&serde_json::Value::String(errors_text)),
        };
        Ok(Self {
            id: row.try_get("id")?,
            kind: row.try_get("kind")?,
            queue: row.try_get("queue")?,
            priority: row.try_get("priority")?,
            payload,
            state: row.try_get("state")?,
            run_at: row.try_get("run_at")?,
            attempts: row.try_get("attempts")?,
            max_attempts: row.try_get("max_attempts")?,
            unique_key: row.try_get("unique_key")?,
            lease_owner: row.try_get("lease_owner")?,
            lease_expires_at: row.try_get("lease_expires_at")?,
            errors,
            meta,
            created_at: row.try_get("created_at")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
            cancel_requested_at: row.try_get("cancel_requested_at")?,
        })
    }
}

/// The columns of a [`JobRow`] read from `source` (a table or `lq.all_jobs`).
fn columns(source: &str) -> &'static str {
    if source == "lq.finished_jobs" {
        "id, kind, queue, priority, payload::text as payload, state, run_at, attempts,
         max_attempts, unique_key, lease_owner, null::timestamptz as lease_expires_at,
         errors::text as errors, created_at, started_at, finished_at, cancel_requested_at,
         meta::text as meta"
    } else {
        "id, kind, queue, priority, payload::text as payload, state::lq.job_state as state,
         run_at, attempts, max_attempts, unique_key, lease_owner, lease_expires_at, errors::text as errors,
         created_at, started_at, finished_at, cancel_requested_at, meta::text as meta"
    }
}

/// One job by id.
pub async fn job_get(conn: &mut PgConnection, id: i64) -> Result<Option<JobRow>, Error> {
    let source = "lq.all_jobs";
    sqlx::query_as(&format!(
        "select {} from {source} where id = $1",
        columns(source)
    ))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_get"))
}

/// Appends `filter`'s conditions on `source` as a `where` clause. Only the
/// conditions set are written, so each filter's shape gets a plan of its own.
/// Every value is bound but the states, written as a literal of litequeue's own
/// names in the column's own type: the planner can then match them with a partial
/// index's predicate (the queued jobs' pickup index, the running jobs' lease
/// index, the dead jobs' in the history), which a bound array, or a column cast
/// to another enum, never does.
fn push_where(q: &mut QueryBuilder<'_, Postgres>, filter: &JobFilter, source: &str) {
    q.push(" where true");
    if !filter.states.is_empty() {
        // Sorted and once each, so one set of states is one statement to prepare.
        let mut names: Vec<&'static str> = filter.states.iter().map(|s| s.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let (column, of_type) = match source {
            "lq.jobs" => ("state", "lq.live_state"),
            "lq.finished_jobs" => ("state", "lq.job_state"),
            _ => ("state::lq.job_state", "lq.job_state"),
        };
        q.push(format!(" and {column} = any('{{"))
            .push(names.join(","))
            .push(format!("}}'::{of_type}[])"));
    }
    match &filter.queues[..] {
        [] => {}
        // One queue as a plain equality: the history's dead and cancelled
        // indexes, on (queue, id), then hand out that queue's jobs in id order
        // from the cursor on. PostgreSQL 15 reads no order from an `any`, so
        // under statistics that call the history empty it read every match of
        // the queue and sorted them, for each page and each bulk batch.
        [queue] => {
            q.push(" and queue = ").push_bind(queue.clone());
        }
        queues => {
            q.push(" and queue = any(")
                .push_bind(queues.to_vec())
                .push(")");
        }
    }
    if !filter.kinds.is_empty() {
        q.push(" and kind = any(")
            .push_bind(filter.kinds.clone())
            .push(")");
    }
    if !filter.ids.is_empty() {
        q.push(" and id = any(")
            .push_bind(filter.ids.clone())
            .push(")");
    }
    if let Some(id) = filter.min_id {
        q.push(" and id >= ").push_bind(id);
    }
    if let Some(id) = filter.max_id {
        q.push(" and id <= ").push_bind(id);
    }
    if let Some(id) = filter.before_id {
        q.push(" and id < ").push_bind(id);
    }
    if let Some(age) = filter.older_than {
        q.push(" and created_at <= now() - make_interval(secs => ")
            .push_bind(age.as_secs_f64())
            .push(")");
    }
    if let Some(age) = filter.newer_than {
        q.push(" and created_at >= now() - make_interval(secs => ")
            .push_bind(age.as_secs_f64())
            .push(")");
    }
    if let Some(age) = filter.finished_within {
        q.push(" and finished_at >= now() - make_interval(secs => ")
            .push_bind(age.as_secs_f64())
            .push(")");
    }
    if let Some(json) = &filter.payload_contains {
        q.push(" and payload @> ").push_bind(json.clone());
    }
    if let Some(json) = &filter.meta_contains {
        q.push(" and meta @> ").push_bind(json.clone());
    }
    if let Some(readiness) = filter.readiness {
        // Queued rows only, the state written as the states above are, so the
        // pickup index (over queued rows, by run_at within each queue and
        // priority) can serve it; the history holds none.
        q.push(match source {
            "lq.jobs" => " and state = 'queued'",
            "lq.finished_jobs" => " and false",
            _ => " and state::lq.job_state = 'queued'",
        });
        q.push(match readiness {
            Readiness::Available => " and run_at <= now()",
            Readiness::Scheduled => " and run_at > now()",
        });
    }
}

/// Up to `limit` jobs matching `filter`, newest (highest id) first.
pub async fn job_list(
    conn: &mut PgConnection,
    filter: &JobFilter,
    limit: i64,
) -> Result<Vec<JobRow>, Error> {
    let source = filter.source();
    let mut q = QueryBuilder::new(format!("select {} from {source}", columns(source)));
    push_where(&mut q, filter, source);
    q.push(" order by id desc limit ").push_bind(limit);
    q.build_query_as()
        .fetch_all(&mut *conn)
        .await
        .map_err(err("job_list"))
}

/// The ids of up to `limit` jobs matching `filter`, highest first.
pub async fn job_ids(
    conn: &mut PgConnection,
    filter: &JobFilter,
    limit: i64,
) -> Result<Vec<i64>, Error> {
    let source = filter.source();
    let mut q = QueryBuilder::new(format!("select id from {source}"));
    push_where(&mut q, filter, source);
    q.push(" order by id desc limit ").push_bind(limit);
    q.build_query_scalar()
        .fetch_all(&mut *conn)
        .await
        .map_err(err("job_ids"))
}

/// How many jobs match `filter`, per queue and state; no rows are loaded.
pub async fn job_count(
    conn: &mut PgConnection,
    filter: &JobFilter,
) -> Result<Vec<(String, JobState, i64)>, Error> {
    let source = filter.source();
    let mut q = QueryBuilder::new(format!(
        "select queue, state::lq.job_state as state, count(*) from {source}"
    ));
    push_where(&mut q, filter, source);
    q.push(" group by queue, state order by queue, state");
    q.build_query_as()
        .fetch_all(&mut *conn)
        .await
        .map_err(err("job_count"))
}

/// How many jobs match `filter` in each of `states`, counting at most `cap + 1`
/// in each: one statement, a subquery per state that stops reading at the cap,
/// in `lq.job_state`'s order (which [`JobState::ALL`] follows). `filter`'s own
/// states are replaced by each of `states`. Each subquery reads the one table
/// that holds its state, with the state written as a plain literal of that
/// table's column type, so the partial index over it serves the count (queued,
/// running, dead, cancelled); a live state under `finished_within`, or a state
/// other than queued under a readiness, matches nothing and reads nothing.
pub async fn job_count_by_state_capped(
    conn: &mut PgConnection,
    filter: &JobFilter,
    states: &[JobState],
    cap: i64,
) -> Result<Vec<(JobState, i64)>, Error> {
    if states.is_empty() {
        return Ok(Vec::new());
    }
    let mut rest = filter.clone();
    rest.states.clear();
    let mut q = QueryBuilder::new("");
    for (i, state) in states.iter().enumerate() {
        if i > 0 {
            q.push(" union all ");
        }
        let name = state.as_str();
        let never = (state.is_live() && filter.finished_within.is_some())
            || (*state != JobState::Queued && filter.readiness.is_some());
        if never {
            q.push(format!("select '{name}'::lq.job_state, 0::int8"));
            continue;
        }
        let table = if state.is_live() {
            "lq.jobs"
        } else {
            "lq.finished_jobs"
        };
        q.push(format!(
            "select '{name}'::lq.job_state, count(*) from (select from {table}"
        ));
        push_where(&mut q, &rest, table);
        q.push(format!(" and state = '{name}' limit "))
            .push_bind(cap.saturating_add(1))
            .push(") x");
    }
    q.push(" order by 1");
    q.build_query_as()
        .fetch_all(&mut *conn)
        .await
        .map_err(err("job_count_by_state_capped"))
}

/// Cancels a job: a queued one ends `cancelled` now; a running one is flagged and
/// its workers are told by NOTIFY. Returns the state before the call, or `None`
/// when no such job exists.
pub async fn job_cancel(conn: &mut PgConnection, id: i64) -> Result<Option<JobState>, Error> {
    let live = sqlx::query_scalar(concat!(
        "with old as materialized (select id, state::lq.job_state as state from lq.jobs where id = $1 for update),
         flagged as (
             update lq.jobs j
             set cancel_requested_at = now()
             from old where ",
        job_by_id_of!("old.id"),
        " and old.state = 'running'
             returning j.id
         ),
         moved as (
             delete from lq.jobs j
             using old
             where ",
        job_by_id_of!("old.id"),
        " and old.state = 'queued'
             returning j.*, 'cancelled'::lq.job_state as final_state, j.errors as final_errors
         ),
         ",
        archive_moved!(),
        "
         select old.state from old
         where case when old.state = 'running'
                    then (select true from pg_notify('lq_cancel', old.id::text)) else true end"
    ))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_cancel"))?;
    match live {
        Some(state) => Ok(Some(state)),
        None => job_state(conn, id).await,
    }
}

/// Puts a dead or cancelled job back in the queue now with fresh attempts.
/// Returns the state before the call; fails with a unique violation when another
/// live job holds its key.
pub async fn job_retry_now(conn: &mut PgConnection, id: i64) -> Result<Option<JobState>, Error> {
    let retried = sqlx::query_scalar(
        "with old as materialized (
             delete from lq.finished_jobs where id = $1 and state in ('dead', 'cancelled')
             returning *
         ),
         requeued as (
             insert into lq.jobs (id, kind, queue, priority, payload, state, run_at, attempts,
                 max_attempts, unique_key, errors, created_at, started_at, meta)
             overriding system value
             select id, kind, queue, priority, payload, 'queued', now(), 0,
                 max_attempts, unique_key, jsonb_path_query_array(errors, '$[last - 19 to last]'),
                 created_at, started_at, meta
             from old
             returning id
         )
         select old.state from old
         where (select true from pg_notify('lq_jobs', old.queue))",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_retry_now"))?;
    match retried {
        Some(state) => Ok(Some(state)),
        None => job_state(conn, id).await,
    }
}

/// A job's state, live or finished. Read in a statement of its own, after a
/// write that found nothing to do: that write may have waited for a job to end,
/// and only a fresh snapshot sees where it went.
async fn job_state(conn: &mut PgConnection, id: i64) -> Result<Option<JobState>, Error> {
    sqlx::query_scalar("select state from lq.all_jobs where id = $1")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(err("job_state"))
}

/// How many finished jobs among those `ids` leaves to read (see
/// [`super::maintenance::prune_ids`]) were past their retention at `as_of`.
pub async fn job_prune_count(
    conn: &mut PgConnection,
    keep_finished_secs: f64,
    keep_dead_secs: f64,
    as_of: DateTime<Utc>,
    ids: super::maintenance::PruneIds,
) -> Result<i64, Error> {
    sqlx::query_scalar(concat!(
        "select count(*) from lq.finished_jobs
         where (id <= $4 or id > greatest($4, $5)) and ",
        past_retention!("$3::timestamptz")
    ))
    .bind(keep_finished_secs)
    .bind(keep_dead_secs)
    .bind(as_of)
    .bind(ids.upto.unwrap_or(i64::MAX))
    .bind(ids.drawn.unwrap_or(i64::MAX))
    .fetch_one(&mut *conn)
    .await
    .map_err(err("job_prune_count"))
}
