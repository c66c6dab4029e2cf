//! Statements that insert jobs.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::err;
use crate::Error;

/// One row to insert; `payload` is JSON text.
#[derive(Debug)]
pub struct NewJob<'a> {
    /// Job kind.
    pub kind: &'a str,
    /// Queue.
    pub queue: &'a str,
    /// Priority, larger first.
    pub priority: i16,
    /// Absolute run time; wins over `delay_secs`.
    pub run_at: Option<DateTime<Utc>>,
    /// Delay from the database's `now()`.
    pub delay_secs: f64,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// NOTIFY listeners when the job is ready now.
    pub notify: bool,
    /// Metadata, as JSON text (a JSON object).
    pub meta: Option<&'a str>,
}

/// Inserts one job; `None` when a live job already holds `unique_key`.
/// With `job.notify`, the statement also sends the queue's wake-up NOTIFY
/// (delivered at commit) when the job is due now by the database's clock; the
/// in-transaction enqueue wants that. Without it, the statement is a plain
/// insert: autocommit enqueues wake workers after their commit instead
/// (the crate's `notify` module), and the wrapper cost a one-client enqueue about 4 %
/// (bench/FINDINGS.md, "Stop 37").
pub async fn job_insert(
    conn: &mut PgConnection,
    job: &NewJob<'_>,
    payload: &str,
    unique_key: Option<&str>,
) -> Result<Option<i64>, Error> {
    // Without a unique key the conflict check is pure overhead.
    let (unique, meta) = (
        usize::from(unique_key.is_some()),
        usize::from(job.meta.is_some()),
    );
    let sql = if job.notify {
        INSERT_ONE_NOTIFYING[unique][meta]
    } else {
        INSERT_ONE[unique][meta]
    };
    let query = sqlx::query_scalar(sql)
        .bind(job.kind)
        .bind(job.queue)
        .bind(job.priority)
        .bind(payload)
        .bind(job.run_at)
        .bind(job.delay_secs)
        .bind(job.max_attempts)
        .bind(unique_key);
    let query = match job.meta {
        Some(meta) => query.bind(meta),
        None => query,
    };
    query
        .fetch_optional(&mut *conn)
        .await
        .map_err(err("job_insert"))
}

/// Inserts one row per `jobs[i]` (payload `payloads[i]`) in one statement, none
/// with a unique key, and returns their ids in the same order. Sends no NOTIFY.
///
/// The order holds because PostgreSQL inserts the rows of `insert … select` in
/// the order its `select` yields them (here `unnest`, array order) and returns
/// them in that order (checked by `tests/integration/enqueuer.rs`,
/// `a_shared_statement_answers_each_call_with_its_own_job`).
pub async fn job_insert_rows(
    conn: &mut PgConnection,
    jobs: &[NewJob<'_>],
    payloads: &[&str],
) -> Result<Vec<i64>, Error> {
    let kinds: Vec<&str> = jobs.iter().map(|j| j.kind).collect();
    let queues: Vec<&str> = jobs.iter().map(|j| j.queue).collect();
    let priorities: Vec<i16> = jobs.iter().map(|j| j.priority).collect();
    let run_ats: Vec<_> = jobs.iter().map(|j| j.run_at).collect();
    let delays: Vec<f64> = jobs.iter().map(|j| j.delay_secs).collect();
    let max_attempts: Vec<i32> = jobs.iter().map(|j| j.max_attempts).collect();
    let with_meta = jobs.iter().any(|j| j.meta.is_some());
    let query = sqlx::query_scalar(INSERT_ROWS[usize::from(with_meta)])
        .bind(kinds)
        .bind(queues)
        .bind(priorities)
        .bind(payloads)
        .bind(run_ats)
        .bind(delays)
        .bind(max_attempts);
    let query = if with_meta {
        query.bind(jobs.iter().map(|j| j.meta).collect::<Vec<_>>())
    } else {
        query
    };
    query
        .fetch_one(&mut *conn)
        .await
        .map_err(err("job_insert_rows"))
}

/// The live job of `kind` holding `unique_key`, if any.
pub async fn job_find_live_by_key(
    conn: &mut PgConnection,
    kind: &str,
    unique_key: &str,
) -> Result<Option<i64>, Error> {
    sqlx::query_scalar(
        "select id from lq.jobs
         where kind operator(pg_catalog.=) $1 and unique_key operator(pg_catalog.=) $2
           and unique_key is not null",
    )
    .bind(kind)
    .bind(unique_key)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_find_live_by_key"))
}

/// Inserts many jobs of one kind in one statement; returns the ids inserted,
/// ascending (rows whose unique key is already live are skipped). One NOTIFY at most.
pub async fn job_insert_many(
    conn: &mut PgConnection,
    job: &NewJob<'_>,
    payloads: &[String],
    unique_keys: &[Option<String>],
) -> Result<Vec<i64>, Error> {
    // Without unique keys the conflict check is pure overhead (~20 % of a bulk
    // insert), and so is sending an array of nulls for the key column.
    let unique = unique_keys.iter().any(Option::is_some);
    let query =
        sqlx::query_scalar(INSERT_MANY[usize::from(unique)][usize::from(job.meta.is_some())])
            .bind(job.kind)
            .bind(job.queue)
            .bind(job.priority)
            .bind(job.run_at)
            .bind(job.delay_secs)
            .bind(job.max_attempts)
            .bind(payloads)
            .bind(job.notify);
    let query = if unique {
        query.bind(unique_keys)
    } else {
        query
    };
    let query = match job.meta {
        Some(meta) => query.bind(meta),
        None => query,
    };
    let mut ids: Vec<i64> = query
        .fetch_one(&mut *conn)
        .await
        .map_err(err("job_insert_many"))?;
    // Here rather than `array_agg(id order by id)`: a sort in the statement cost
    // a few per cent of a 1,000-row insert under pgbench.
    ids.sort_unstable();
    Ok(ids)
}

// The statements below run on the application's connection, inside its
// transaction, under whatever `search_path` it has: every function, operator and
// type in them is qualified with `pg_catalog`, so no other role's object can be
// picked instead (see `db::SEARCH_PATH` for the other statements).

/// What a unique insert does when a live job of its kind holds the key.
macro_rules! on_conflict {
    () => {
        "
         on conflict (kind, unique_key) where unique_key is not null
         do nothing"
    };
}

/// The bulk insert: `$1`–`$8` as bound by [`job_insert_many`], then the keys
/// (unique variants) and the metadata (`meta` variants) in that order. The
/// `meta` column is named only when there is metadata, so a producer role
/// without INSERT on it (docs/roles.md) enqueues as before.
/// Every row gets the same `run_at`, so whether the batch is due is decided once
/// (`now()` is fixed for the transaction), not per row.
macro_rules! insert_many {
    ($cols:literal, $vals:literal, $from:literal, $conflict:expr) => {
        concat!(
            "with ins as (
         insert into lq.jobs (kind, queue, priority, payload, run_at, max_attempts",
            $cols,
            ")
         select $1, $2, $3, p::pg_catalog.jsonb,
             coalesce($4, pg_catalog.now() operator(pg_catalog.+) pg_catalog.make_interval(secs => $5)), $6",
            $vals,
            "
         from ",
            $from,
            $conflict,
            "
         returning id
     )
     select coalesce(pg_catalog.array_agg(id), '{}') from ins
     having case when $8 and pg_catalog.count(*) operator(pg_catalog.>) 0
                      and coalesce($4, pg_catalog.now() operator(pg_catalog.+) pg_catalog.make_interval(secs => $5))
                          operator(pg_catalog.<=) pg_catalog.now()
                 then (select true from pg_catalog.pg_notify('lq_jobs', $2)) else true end"
        )
    };
}

/// `[unique][meta]`.
const INSERT_MANY: [[&str; 2]; 2] = [
    [
        insert_many!("", "", "pg_catalog.unnest($7::pg_catalog.text[]) as p", ""),
        insert_many!(", meta", ", $9::pg_catalog.jsonb", "pg_catalog.unnest($7::pg_catalog.text[]) as p", ""),
    ],
    [
        insert_many!(", unique_key", ", k", "rows from (pg_catalog.unnest($7::pg_catalog.text[]), pg_catalog.unnest($9::pg_catalog.text[])) as u(p, k)", on_conflict!()),
        insert_many!(", unique_key, meta", ", k, $10::pg_catalog.jsonb", "rows from (pg_catalog.unnest($7::pg_catalog.text[]), pg_catalog.unnest($9::pg_catalog.text[])) as u(p, k)", on_conflict!()),
    ],
];

/// Sends the wake-up NOTIFY for each of `queues` in one short transaction of its
/// own (autocommit: never call it inside a transaction that writes data).
///
/// That transaction commits without waiting for its WAL flush (`synchronous_commit`
/// off, for it alone): a NOTIFY carries no data a crash could lose, the jobs it
/// announces were committed durably by their own enqueue. Not waiting takes a disk
/// flush off the path from enqueue to `perform`, and shortens the time the NOTIFY
/// holds PostgreSQL's database-wide notify lock.
pub async fn queues_notify<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    queues: &[String],
) -> Result<(), Error> {
    sqlx::query(QUEUES_NOTIFY)
        .bind(queues)
        .execute(conn)
        .await
        .map_err(err("queues_notify"))?;
    Ok(())
}

/// `set_config(…, true)` lasts until this statement's own commit.
const QUEUES_NOTIFY: &str = "select pg_catalog.pg_notify('lq_jobs', q)
     from (select pg_catalog.set_config('synchronous_commit', 'off', true)) as async_commit,
          pg_catalog.unnest($1::pg_catalog.text[]) as q";

/// The single insert's row: `$1`–`$8` as bound by [`job_insert`], `$9` the
/// metadata in the `meta` variants (the column is named only then; see
/// [`insert_many`]), then the conflict clause of the unique variants.
macro_rules! insert_one_row {
    ($cols:literal, $vals:literal, $conflict:expr) => {
        concat!(
            "insert into lq.jobs (kind, queue, priority, payload, run_at, max_attempts, unique_key",
            $cols,
            ")
         values ($1, $2, $3, $4::pg_catalog.jsonb,
             coalesce($5, pg_catalog.now() operator(pg_catalog.+) pg_catalog.make_interval(secs => $6)), $7, $8",
            $vals,
            ")",
            $conflict
        )
    };
}

/// The single insert that sends no NOTIFY: the row, returning its id.
macro_rules! insert_one {
    ($cols:literal, $vals:literal, $conflict:expr) => {
        concat!(
            insert_one_row!($cols, $vals, $conflict),
            "
         returning id"
        )
    };
}

/// The single insert that NOTIFYs the queue when the row is due now by the
/// database's clock.
macro_rules! insert_one_notifying {
    ($cols:literal, $vals:literal, $conflict:expr) => {
        concat!(
            "with ins as (
         ",
            insert_one_row!($cols, $vals, $conflict),
            "
         returning id, run_at operator(pg_catalog.<=) pg_catalog.now() as ready
     )
     select id from ins
     where case when ready then (select true from pg_catalog.pg_notify('lq_jobs', $2)) else true end"
        )
    };
}

/// `[unique][meta]`, without NOTIFY.
const INSERT_ONE: [[&str; 2]; 2] = [
    [
        insert_one!("", "", ""),
        insert_one!(", meta", ", $9::pg_catalog.jsonb", ""),
    ],
    [
        insert_one!("", "", on_conflict!()),
        insert_one!(", meta", ", $9::pg_catalog.jsonb", on_conflict!()),
    ],
];

/// `[unique][meta]`, with the wake-up NOTIFY.
const INSERT_ONE_NOTIFYING: [[&str; 2]; 2] = [
    [
        insert_one_notifying!("", "", ""),
        insert_one_notifying!(", meta", ", $9::pg_catalog.jsonb", ""),
    ],
    [
        insert_one_notifying!("", "", on_conflict!()),
        insert_one_notifying!(", meta", ", $9::pg_catalog.jsonb", on_conflict!()),
    ],
];

/// The shared insert of an `Enqueuer`: one row per array element, `$1`–`$7` as
/// bound by [`job_insert_rows`], `$8` the metadata in the `meta` variant (the
/// column is named only then; see [`insert_many`]).
macro_rules! insert_rows {
    ($cols:literal, $vals:literal, $unnest:literal, $names:literal) => {
        concat!(
            "with ins as (
         insert into lq.jobs (kind, queue, priority, payload, run_at, max_attempts",
            $cols,
            ")
         select k, q, p, pl::pg_catalog.jsonb,
             coalesce(r, pg_catalog.now() operator(pg_catalog.+) pg_catalog.make_interval(secs => d)), m",
            $vals,
            "
         from rows from (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[]),
             pg_catalog.unnest($3::pg_catalog.int2[]), pg_catalog.unnest($4::pg_catalog.text[]),
             pg_catalog.unnest($5::pg_catalog.timestamptz[]), pg_catalog.unnest($6::pg_catalog.float8[]),
             pg_catalog.unnest($7::pg_catalog.int4[])",
            $unnest,
            ") as u(k, q, p, pl, r, d, m",
            $names,
            ")
         returning id
     )
     select coalesce(pg_catalog.array_agg(id), '{}') from ins"
        )
    };
}

/// `[meta]`.
const INSERT_ROWS: [&str; 2] = [
    insert_rows!("", "", "", ""),
    insert_rows!(
        ", meta",
        ", mt::pg_catalog.jsonb",
        ", pg_catalog.unnest($8::pg_catalog.text[])",
        ", mt"
    ),
];
