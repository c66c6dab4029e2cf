//! Every SQL statement litequeue runs, as typed functions named noun-verb.
//!
//! The rest of the code never writes SQL. Each function takes a connection (or an
//! executor) and maps driver errors to [`Error::Database`] naming the statement.
//! Callers bound each call with [`timed`].

use std::{future::Future, time::Duration};

use crate::Error;

/// The opening CTE of every batch write fenced by lease tokens (but the
/// heartbeat's, which skips locked rows): it finds the rows by primary key
/// (`id = any($1)`), keeps those whose current token is one of `$2` (exact
/// fencing, since every claim mints a fresh random token), and locks them in id
/// order, so two batches of one worker (completions, hand-back) can never
/// deadlock. `held_rows!(where …)` finds the rows by that condition instead.
///
/// It also reads, from the locked (so newest) row version, whether a cancel was
/// requested: statements that split the rows by it must decide here, not in a
/// later step that reads the statement's snapshot.
macro_rules! held_rows {
    () => {
        held_rows!(where "j.id = any($1::bigint[]) and j.lease_token = any($2::uuid[])")
    };
    (where $which:literal) => {
        concat!(
            "with held as materialized (
             select j.id, j.cancel_requested_at is not null as cancel_requested from lq.jobs j
             where ",
            $which,
            "
             order by j.id
             for update of j
         )"
        )
    };
}

/// `j.id = any(array[$id])`: the job row whose id is `$id`, a column of the
/// statement's other relation (a fence, a CTE), found by probing the primary
/// key once per row of that relation. Written plainly (`j.id = fence.id`) the
/// planner may also read the whole key in order and test each of its rows
/// against every row of the batch. On a hot-path connection (table scans off,
/// one plan kept) it picks that when the plan is made while `lq.jobs`'
/// statistics say one row in many pages, as a vacuum of a briefly drained
/// queue leaves them, and every later batch on the connection paid a read of
/// the whole table per job: 1.2 s for 1,000 jobs among 7,328 rows (stop 76,
/// `bench/FINDINGS.md`). An equality with an array can be neither merged nor
/// hashed, so the probe is the only plan left there. On the general pool
/// (table scans on) the same statistics made a failure's write read the whole
/// key in order for each of its two writes; with the probe open to it, the
/// planner takes it, as a table scan costs at least the table's pages.
macro_rules! job_by_id_of {
    ($id:literal) => {
        concat!("j.id = any(array[", $id, "])")
    };
}

/// The closing step of every statement that ends jobs. A job that ends leaves
/// `lq.jobs` for `lq.finished_jobs` in the statement that ends it, so the queue
/// table holds only live jobs however much history is kept.
///
/// The statement must define `moved` as a `delete from lq.jobs j … returning j.*`
/// plus the job's `final_state` and `final_errors`; this inserts those rows into
/// `lq.finished_jobs` (finished now) as `archived`, which returns `id, state`.
///
/// An id already in the history (ids restarted by `TRUNCATE … RESTART IDENTITY`,
/// or a hand-written row) is overwritten by the job that just ended: the live row
/// is the truth, and the write must land. `archive_moved_fast!` is the plain
/// insert for the success path, whose rare failures fall back to this one.
macro_rules! archive_moved {
    () => {
        concat!(
            archive_moved_fast!(),
            " on conflict (id) do update set kind = excluded.kind, queue = excluded.queue,
                 priority = excluded.priority, payload = excluded.payload, state = excluded.state,
                 run_at = excluded.run_at, attempts = excluded.attempts,
                 max_attempts = excluded.max_attempts, unique_key = excluded.unique_key,
                 lease_owner = excluded.lease_owner, cancel_requested_at = excluded.cancel_requested_at,
                 errors = excluded.errors, created_at = excluded.created_at,
                 started_at = excluded.started_at, finished_at = excluded.finished_at,
                 meta = excluded.meta
             returning id, state
         )"
        )
    };
}

/// [`archive_moved!`] without its conflict handling and closing parenthesis; on
/// its own (followed by `returning …` and `)`) the success path's plain insert.
macro_rules! archive_moved_fast {
    () => {
        "archived as (
             insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at,
                 attempts, max_attempts, unique_key, lease_owner, cancel_requested_at, errors, created_at,
                 started_at, finished_at, meta)
             select id, kind, queue, priority, payload, final_state, run_at,
                 attempts, max_attempts, unique_key, lease_owner, cancel_requested_at, final_errors, created_at,
                 started_at, now(), meta
             from moved"
    };
}

/// The error the rescuer stores for an attempt whose lease expired, naming the
/// worker `$owner` (an SQL expression) that stopped heartbeating. One place, as
/// [`finish::job_outcome_landed`] tells a rescued attempt by it.
macro_rules! lease_expired_error {
    ($owner:literal) => {
        concat!(
            "'lease expired: worker ' || coalesce(",
            $owner,
            ", '?') || ' stopped heartbeating'"
        )
    };
}

/// `$errors` with one more `{"attempt", "at", "worker", "error"}` entry (see
/// [`crate::AttemptError`]), keeping the newest `MAX_ERRORS_KEPT` (20) entries,
/// so a job's history stays bounded however often it fails (and a history grown
/// large before the bound shrinks at the next write).
macro_rules! append_error {
    ($errors:literal, $attempt:literal, $worker:literal, $text:expr) => {
        concat!(
            "jsonb_path_query_array(",
            $errors,
            " || jsonb_build_array(jsonb_build_object('attempt', ",
            $attempt,
            ", 'at', now(), 'worker', ",
            $worker,
            ", 'error', ",
            $text,
            ")), '$[last - 19 to last]')"
        )
    };
}

/// The two writes of a statement that either sends jobs back to the queue or ends
/// them. The statement first defines `cur (id, next, next_errors)` from the
/// locked rows: `next` is the state chosen (`queued`, or a final one) and
/// `next_errors` the errors to store (null: unchanged). `$set` adds assignments
/// to a requeue, each followed by a comma. Defines `requeued` (returning `id,
/// state`), `moved` and `archived` (see `archive_moved!`).
macro_rules! requeue_or_end {
    ($set:literal) => {
        concat!(
            "requeued as (
                 update lq.jobs j
                 set state = 'queued', errors = coalesce(cur.next_errors, j.errors), ",
            $set,
            "
                     lease_token = null, lease_owner = null, lease_expires_at = null
                 from cur
                 where ",
            job_by_id_of!("cur.id"),
            " and cur.next = 'queued'
                 returning j.id, j.state::lq.job_state as state
             ),
             moved as (
                 delete from lq.jobs j
                 using cur
                 where ",
            job_by_id_of!("cur.id"),
            " and cur.next <> 'queued'
                 returning j.*, cur.next as final_state, coalesce(cur.next_errors, j.errors) as final_errors
             ),
             ",
            archive_moved!()
        )
    };
}

/// The finished jobs past their retention as of the time `$at`: `$1` seconds
/// for succeeded and cancelled ones, `$2` for dead ones. One place for the leader's
/// prune (as of `now()`) and an operator's, confirmed against a count taken
/// earlier (as of that count's time).
macro_rules! past_retention {
    ($at:literal) => {
        concat!(
            "finished_at < ",
            $at,
            " - make_interval(secs => least($1, $2))
               and ((state in ('succeeded', 'cancelled') and finished_at < ",
            $at,
            " - make_interval(secs => $1))
                    or (state = 'dead' and finished_at < ",
            $at,
            " - make_interval(secs => $2)))"
        )
    };
}

pub mod bulk;
pub mod claim;
pub mod clock;
pub mod cluster;
pub mod control;
pub mod cron;
pub mod doctor;
pub mod enqueue;
pub mod finish;
pub mod lease;
pub mod maintenance;
pub mod migration;
pub mod queues;
pub mod stats;
#[cfg(feature = "testing")]
pub mod testing;

/// Name of the NOTIFY channel whose payload is a queue name with new work.
pub const JOBS_CHANNEL: &str = "lq_jobs";
/// Name of the NOTIFY channel whose payload is the id of a job being cancelled.
pub const CANCEL_CHANNEL: &str = "lq_cancel";
/// NOTIFY channel on which a pause names its queue, so runtimes hand back the
/// jobs they claimed ahead instead of starting them.
pub const PAUSE_CHANNEL: &str = "lq_pause";

/// True when the database refused a statement because of the data it was given
/// (SQLSTATE classes 22 "data exception", 23 "integrity constraint violation" and
/// 54 "program limit exceeded"): trying the same rows again cannot help, while a
/// smaller batch may let the rows beside the bad one through.
pub fn is_data_rejection(e: &Error) -> bool {
    let Error::Database {
        source: sqlx::Error::Database(db),
        ..
    } = e
    else {
        return false;
    };
    db.code()
        .is_some_and(|c| c.starts_with("22") || c.starts_with("23") || c.starts_with("54"))
}

/// PostgreSQL's `lock_not_available`: a statement waited longer than its
/// session's `lock_timeout` for a lock.
pub const LOCK_NOT_AVAILABLE: &str = "55P03";

/// PostgreSQL's `query_canceled`: among others, a statement cancelled by its
/// session's `statement_timeout`.
pub const QUERY_CANCELED: &str = "57014";

/// PostgreSQL's `read_only_sql_transaction`: a write on a session that is
/// read-only, as every session of a standby is, and every session opened while
/// `default_transaction_read_only` was on keeps being.
pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";

/// PostgreSQL's `deadlock_detected`: the server rolled back one transaction of
/// a cycle of sessions waiting for each other.
pub const DEADLOCK_DETECTED: &str = "40P01";

/// The SQLSTATE of a database error, if it is one.
pub fn sqlstate(e: &Error) -> Option<String> {
    match e {
        Error::Database {
            source: sqlx::Error::Database(db),
            ..
        } => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

/// The `search_path` every litequeue statement runs under: functions, operators
/// and types resolve in `pg_catalog` only, never in a schema another role can
/// write to. The runtime's own connections start with it; calls on an
/// application's connection pin it for their transaction ([`pin_transaction`]) or
/// qualify every name (the enqueue statements, which run in the caller's
/// transaction and must leave its settings alone).
pub const SEARCH_PATH: &str = "pg_catalog,pg_temp";

/// Settings of the hot-path connections: a claimer per queue and the completer.
///
/// `job_claim` and `job_complete_many` are planned once per connection and reused
/// (a fresh plan per call cost up to a third of a 100-row claim). That one plan
/// may be made while `lq.jobs` is empty or was never analyzed, when a scan of the
/// whole table looks cheapest, and it would stay in use as the table grows (one
/// measured at 300,000 rows: 205 ms per claim instead of 1.7 ms). Both statements
/// only ever need the pickup index in order, tuple ids and the primary key, so on
/// these connections full scans, bitmap scans and sorts are ruled out.
///
/// JIT compilation is off too: the generic plan costs `limit $3` as a tenth of the
/// table, so from about ten million queued jobs its estimate passes
/// `jit_above_cost` and every claim was compiled anew (measured at 10M: 8.9 ms per
/// 300-job claim, 2.1–2.5 ms without JIT; `bench/results/curves-10m-claim-plan.txt`).
pub const HOT_PATH_SETTINGS: [(&str, &str); 5] = [
    ("plan_cache_mode", "force_generic_plan"),
    ("jit", "off"),
    ("enable_seqscan", "off"),
    ("enable_bitmapscan", "off"),
    ("enable_sort", "off"),
];

/// The `statement_timeout` setting of every connection the runtime opens, for a
/// client bound of `bound` (its `db_timeout`): nine tenths of it, so the server
/// cancels a statement held up that long (a lock, a stall) and it commits nothing,
/// before the client gives up on it. A claim the client had abandoned would still
/// commit once unblocked, leaving its jobs leased by nobody, their attempts spent,
/// until their leases expired; any other abandoned statement would hold its pooled
/// connection until then (sqlx pings a connection as it takes it back, and the
/// ping waits for the statement), until the pool had none left for the rescuer.
pub fn statement_timeout_within(bound: std::time::Duration) -> (&'static str, String) {
    let ms = (bound.as_millis() * 9 / 10).max(1);
    ("statement_timeout", ms.to_string())
}

/// Pins [`SEARCH_PATH`] for the rest of the current transaction, and bounds each
/// of its statements on the server by `bound`, the caller's own bound on the call
/// ([`statement_timeout_within`]): a statement the caller gave up on is cancelled
/// there, rather than left running with its locks and its pooled connection.
pub async fn pin_transaction(
    conn: &mut sqlx::PgConnection,
    bound: std::time::Duration,
) -> Result<(), Error> {
    let (_, statement_timeout) = statement_timeout_within(bound);
    sqlx::query(
        "select pg_catalog.set_config('search_path', $1, true),
                pg_catalog.set_config('statement_timeout', $2, true)",
    )
    .bind(SEARCH_PATH)
    .bind(statement_timeout)
    .execute(conn)
    .await
    .map_err(err("pin_transaction"))?;
    Ok(())
}

/// Pins [`SEARCH_PATH`] for the rest of the current transaction only, for a call
/// on the application's own connection that sets no bound of its own.
pub async fn pin_search_path(conn: &mut sqlx::PgConnection) -> Result<(), Error> {
    sqlx::query("select pg_catalog.set_config('search_path', $1, true)")
        .bind(SEARCH_PATH)
        .execute(conn)
        .await
        .map_err(err("pin_search_path"))?;
    Ok(())
}

/// Opens a transaction on `conn` (a savepoint within the caller's) and applies
/// `settings`, a `select pg_catalog.set_config(…, true)` statement, to it: the
/// plan settings of the prune and the bulk statements (`docs/internals.md`,
/// "Plans that hold whatever the statistics say"). Within a caller's
/// transaction they last until that one ends.
pub(crate) async fn begin_with_settings<'c>(
    conn: &'c mut sqlx::PgConnection,
    settings: &'static str,
    op: &'static str,
) -> Result<sqlx::Transaction<'c, sqlx::Postgres>, Error> {
    use sqlx::Connection;
    let mut tx = conn.begin().await.map_err(err(op))?;
    sqlx::query(settings)
        .execute(&mut *tx)
        .await
        .map_err(err(op))?;
    Ok(tx)
}

/// Maps a driver error to [`Error::Database`] for statement `op`.
pub fn err(op: &'static str) -> impl Fn(sqlx::Error) -> Error {
    move |source| Error::Database { op, source }
}

/// Runs `fut`, failing with [`Error::Timeout`] after `after`.
pub async fn timed<T>(
    op: &'static str,
    after: Duration,
    fut: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(after, fut).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout { op, after }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::statement_timeout_within;

    #[test]
    fn the_server_gives_up_on_a_hot_statement_before_the_client_does() {
        assert_eq!(
            statement_timeout_within(Duration::from_secs(10)),
            ("statement_timeout", "9000".to_owned())
        );
        assert_eq!(
            statement_timeout_within(Duration::from_millis(500)).1,
            "450"
        );
        // Never 0, which PostgreSQL reads as "no limit".
        assert_eq!(statement_timeout_within(Duration::from_millis(1)).1, "1");
    }
}
