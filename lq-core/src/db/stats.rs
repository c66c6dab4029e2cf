//! Statements of the per-minute rollup (`lq.stats_minute`): each runtime adds
//! its counts, the leader prunes old minutes, tools read them.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::err;
use crate::Error;

/// How many wait buckets a row has (see `WAIT_BUCKET_BOUNDS` in `control`).
pub const WAIT_BUCKETS: usize = 15;

/// Counts of one queue and kind, to add to the current minute.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsDelta {
    pub queue: String,
    pub kind: String,
    pub succeeded: i64,
    pub retried: i64,
    pub snoozed: i64,
    pub dead: i64,
    pub cancelled: i64,
    pub started: i64,
    pub wait_seconds: f64,
    pub run_seconds: f64,
    pub wait_buckets: [i64; WAIT_BUCKETS],
}

/// Adds `deltas` to the current minute's rows (database time), in one statement.
pub async fn stats_minute_add(conn: &mut PgConnection, deltas: &[StatsDelta]) -> Result<(), Error> {
    let col = |f: fn(&StatsDelta) -> i64| deltas.iter().map(f).collect::<Vec<i64>>();
    let buckets: Vec<i64> = deltas.iter().flat_map(|d| d.wait_buckets).collect();
    sqlx::query(
        "insert into lq.stats_minute as s (minute, queue, kind, succeeded, retried, snoozed, dead,
             cancelled, started, wait_seconds, run_seconds, wait_buckets)
         select pg_catalog.date_trunc('minute', pg_catalog.now()), d.queue, d.kind, d.succeeded,
             d.retried, d.snoozed, d.dead, d.cancelled, d.started, d.wait_seconds, d.run_seconds,
             ($11::int8[])[(d.i operator(pg_catalog.-) 1) operator(pg_catalog.*) 15 operator(pg_catalog.+) 1
                           : d.i operator(pg_catalog.*) 15]
         from rows from (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
             pg_catalog.unnest($3::int8[]), pg_catalog.unnest($4::int8[]), pg_catalog.unnest($5::int8[]),
             pg_catalog.unnest($6::int8[]), pg_catalog.unnest($7::int8[]), pg_catalog.unnest($8::int8[]),
             pg_catalog.unnest($9::float8[]), pg_catalog.unnest($10::float8[]))
             with ordinality as d(queue, kind, succeeded, retried, snoozed, dead, cancelled, started,
                                  wait_seconds, run_seconds, i)
         on conflict (minute, queue, kind) do update set
             succeeded = s.succeeded operator(pg_catalog.+) excluded.succeeded,
             retried = s.retried operator(pg_catalog.+) excluded.retried,
             snoozed = s.snoozed operator(pg_catalog.+) excluded.snoozed,
             dead = s.dead operator(pg_catalog.+) excluded.dead,
             cancelled = s.cancelled operator(pg_catalog.+) excluded.cancelled,
             started = s.started operator(pg_catalog.+) excluded.started,
             wait_seconds = s.wait_seconds operator(pg_catalog.+) excluded.wait_seconds,
             run_seconds = s.run_seconds operator(pg_catalog.+) excluded.run_seconds,
             wait_buckets = (select pg_catalog.array_agg(a operator(pg_catalog.+) b order by n)
                             from rows from (pg_catalog.unnest(s.wait_buckets),
                                             pg_catalog.unnest(excluded.wait_buckets))
                                  with ordinality as t(a, b, n))",
    )
    .bind(deltas.iter().map(|d| d.queue.as_str()).collect::<Vec<_>>())
    .bind(deltas.iter().map(|d| d.kind.as_str()).collect::<Vec<_>>())
    .bind(col(|d| d.succeeded))
    .bind(col(|d| d.retried))
    .bind(col(|d| d.snoozed))
    .bind(col(|d| d.dead))
    .bind(col(|d| d.cancelled))
    .bind(col(|d| d.started))
    .bind(deltas.iter().map(|d| d.wait_seconds).collect::<Vec<_>>())
    .bind(deltas.iter().map(|d| d.run_seconds).collect::<Vec<_>>())
    .bind(buckets)
    .execute(&mut *conn)
    .await
    .map_err(err("stats_minute_add"))?;
    Ok(())
}

/// Deletes minutes older than `keep_secs`; returns how many rows.
///
/// The parentheses matter: operators written `operator(...)` all share one
/// precedence and bind left to right, so without them PostgreSQL reads
/// `(minute < now()) - interval` and refuses the statement.
pub async fn stats_minute_prune(conn: &mut PgConnection, keep_secs: f64) -> Result<u64, Error> {
    sqlx::query(
        "delete from lq.stats_minute
         where minute operator(pg_catalog.<)
               (pg_catalog.now() operator(pg_catalog.-) pg_catalog.make_interval(secs => $1))",
    )
    .bind(keep_secs)
    .execute(&mut *conn)
    .await
    .map(|r| r.rows_affected())
    .map_err(err("stats_minute_prune"))
}

/// One minute of one queue and kind, summed over every runtime (a row of
/// `lq.stats_minute`, read by `control::stats`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
#[non_exhaustive]
pub struct MinuteStats {
    /// The minute (database time, when the runtimes wrote their counts).
    pub minute: DateTime<Utc>,
    /// Queue.
    pub queue: String,
    /// Kind.
    pub kind: String,
    /// Attempts that succeeded.
    pub succeeded: i64,
    /// Attempts that failed and were queued for a retry.
    pub retried: i64,
    /// Attempts that snoozed.
    pub snoozed: i64,
    /// Jobs that ended dead.
    pub dead: i64,
    /// Jobs that ended cancelled.
    pub cancelled: i64,
    /// Attempts started.
    pub started: i64,
    /// Their total wait, from due (`run_at`) to start.
    pub wait_seconds: f64,
    /// Total handler time.
    pub run_seconds: f64,
    /// Attempts started per wait bucket (`control::WAIT_BUCKET_BOUNDS`).
    pub wait_buckets: Vec<i64>,
}

/// The rows of the last `since_secs` seconds, oldest minute first.
pub async fn stats_minute_since(
    conn: &mut PgConnection,
    since_secs: f64,
) -> Result<Vec<MinuteStats>, Error> {
    sqlx::query_as(
        "select minute, queue, kind, succeeded, retried, snoozed, dead, cancelled, started,
             wait_seconds, run_seconds, wait_buckets
         from lq.stats_minute
         where minute operator(pg_catalog.>=) pg_catalog.date_trunc('minute',
             pg_catalog.now() operator(pg_catalog.-) pg_catalog.make_interval(secs => $1))
         order by minute, queue, kind",
    )
    .bind(since_secs)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("stats_minute_since"))
}
