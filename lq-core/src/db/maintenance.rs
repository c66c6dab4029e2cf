//! Housekeeping statements: pruning history, burying unknown kinds, health.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::err;
use crate::Error;

/// Deletes up to `limit` finished jobs, lowest id first, among those `ids`
/// leaves to read: succeeded or cancelled ones finished more than
/// `keep_finished_secs` before `as_of`, dead ones more than `keep_dead_secs`
/// before it. `as_of` is the database's `now()` when `None` (the leader's
/// prune); an operator's prune passes the time of the count it confirmed, so
/// jobs that passed their retention since are left. Returns how many it
/// deleted and the highest id among them: the next batch of the same prune
/// starts above it, since every job at or below it was just tested.
///
/// The primary key carries each job's state and `finished_at`, so the scan
/// tests them in the index; the bound (from [`prune_ids`]) keeps it from
/// reading the jobs that finished since the cutoff. The ids go to the delete
/// as an array, which it looks up in the primary key: as `id in (subquery)`
/// the planner hashed them and read the whole history for each batch (438 ms
/// for 5,000 of a million rows, against 25 ms).
///
/// It runs in a transaction of its own (a savepoint within the caller's) with
/// table scans, bitmap scans and sorts ruled out (`KEY_ORDER_ONLY`).
pub async fn job_prune(
    conn: &mut PgConnection,
    keep_finished_secs: f64,
    keep_dead_secs: f64,
    as_of: Option<DateTime<Utc>>,
    ids: PruneIds,
    limit: i64,
) -> Result<(u64, Option<i64>), Error> {
    let mut tx = super::begin_with_settings(conn, KEY_ORDER_ONLY, "job_prune").await?;
    let (n, highest): (i64, Option<i64>) = sqlx::query_as(concat!(
        "with gone as (
             delete from lq.finished_jobs where id = any(array(
                 select id from (
                     (select id from lq.finished_jobs
                      where id > $5 and id <= $6 and ",
        past_retention!("coalesce($3::timestamptz, now())"),
        "            order by id limit $4)
                     union all
                     (select id from lq.finished_jobs
                      where id > greatest($5, $6, $7) and ",
        past_retention!("coalesce($3::timestamptz, now())"),
        "            order by id limit $4)
                 ) ids
                 order by id limit $4
             ))
             returning id
         )
         select count(*), max(id) from gone"
    ))
    .bind(keep_finished_secs)
    .bind(keep_dead_secs)
    .bind(as_of)
    .bind(limit)
    .bind(ids.after)
    .bind(ids.upto.unwrap_or(i64::MAX))
    .bind(ids.drawn.unwrap_or(i64::MAX))
    .fetch_one(&mut *tx)
    .await
    .map_err(err("job_prune"))?;
    tx.commit().await.map_err(err("job_prune"))?;
    Ok((u64::try_from(n).unwrap_or(0), highest))
}

/// The prune's settings: it reads the history's primary key in order, and
/// nothing else. Without them, a history that was never analyzed (autovacuum
/// off, or not yet come round) costs `id > $bound` at a third of the table, and
/// the recent ids' branch read the whole history to find a few rows: a
/// sequential scan of 5.66M rows, 1.3 s, in `lq-bench --only sustained` (stop
/// 76); 86 ms against 2.7 ms for 300,000 rows in psql (stop 77).
const KEY_ORDER_ONLY: &str = "select pg_catalog.set_config('enable_seqscan', 'off', true),
     pg_catalog.set_config('enable_bitmapscan', 'off', true),
     pg_catalog.set_config('enable_sort', 'off', true)";

/// The ids one prune reads: above `after` (the highest it has tested so far),
/// and either at most `upto` or above `drawn`. Every id when `upto` is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneIds {
    /// Ids at or below this were tested by an earlier batch of the same prune.
    pub after: i64,
    /// No job with an id from the sequence that finished before the prune's
    /// cutoff has a larger id.
    pub upto: Option<i64>,
    /// The sequence's value at the newest mark. Ids above it are read too:
    /// jobs enqueued since, and rows written into the history with ids the
    /// sequence never gave (an import, a restore), which no mark bounds.
    pub drawn: Option<i64>,
}

/// Records the job id sequence's value now in `lq.id_marks`, and deletes the
/// marks older than `keep_secs` (no prune with a retention up to that reads
/// them: each reads the first mark at or after its cutoff). The leader calls
/// it before each prune.
pub async fn id_mark(conn: &mut PgConnection, keep_secs: f64) -> Result<(), Error> {
    sqlx::query(
        "with old as (
             delete from lq.id_marks where at < now() - make_interval(secs => $1)
         )
         insert into lq.id_marks (at, last_id)
         values (now(), coalesce(pg_catalog.pg_sequence_last_value('lq.jobs_id_seq'), 0))
         on conflict (at) do nothing",
    )
    .bind(keep_secs)
    .execute(&mut *conn)
    .await
    .map_err(err("id_mark"))?;
    Ok(())
}

/// The ids a prune with cutoff `as_of` (`now()` when `None`) less `keep_secs`
/// reads, from the marks: up to the first mark recorded at or after the
/// cutoff, since a job enqueued after a moment cannot have finished before
/// it, and above the newest mark. Every id when no mark is that recent.
pub async fn prune_ids(
    conn: &mut PgConnection,
    as_of: Option<DateTime<Utc>>,
    keep_secs: f64,
) -> Result<PruneIds, Error> {
    let (upto, drawn) = sqlx::query_as(
        "select (select last_id from lq.id_marks
                 where at >= coalesce($1::timestamptz, now()) - make_interval(secs => $2)
                 order by at limit 1),
                (select max(last_id) from lq.id_marks)",
    )
    .bind(as_of)
    .bind(keep_secs)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("prune_ids"))?;
    Ok(PruneIds {
        after: 0,
        upto,
        drawn,
    })
}

/// Marks dead the queued jobs ready for more than `grace_secs` whose queue some
/// live runtime serves and whose kind no runtime serving that queue has
/// declared (`lq.runtimes`) for `grace_secs` either; the reason is stored and
/// the payload kept. A queue no live runtime serves is left alone: nobody can
/// judge it. A runtime that stopped beating (restarting, shutting down, cut off
/// from the database) still vouches for its kinds until `grace_secs` after its
/// last beat: the leader keeps its row that long (see [`super::cluster::runtimes_reap`]).
/// Returns the ids.
pub async fn job_bury_unknown_kinds(
    conn: &mut PgConnection,
    grace_secs: f64,
    limit: i64,
) -> Result<Vec<i64>, Error> {
    sqlx::query_scalar(concat!(
        "with declared as materialized (
             select s.queue, r.kinds, r.expires_at >= now() as alive
             from lq.runtimes r cross join lateral jsonb_object_keys(r.queues) as s(queue)
             where r.heartbeat_at >= now() - make_interval(secs => $1)
                or r.expires_at >= now()
         ),
         unknown as materialized (
             select j.id from lq.jobs j
             where j.state = 'queued' and j.run_at < now() - make_interval(secs => $1)
               and j.queue in (select queue from declared where alive)
               and not exists (
                   select from declared d where d.queue = j.queue and j.kind = any(d.kinds))
             limit $2
             for update skip locked
         ),
         moved as (
             delete from lq.jobs j
             using unknown
             where ",
        job_by_id_of!("unknown.id"),
        " and j.state = 'queued'
             returning j.*, 'dead'::lq.job_state as final_state,
                 ",
        append_error!(
            "j.errors",
            "j.attempts",
            "null",
            "'unknown kind ' || j.kind || ': no job type with this kind is registered by the runtimes serving queue ' || j.queue"
        ),
        " as final_errors
         ),
         ",
        archive_moved!(),
        "
         select id from archived"
    ))
    .bind(grace_secs)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_bury_unknown_kinds"))
}

/// Age in seconds of the oldest open transaction in this database: a long-open
/// snapshot stops vacuum and slows the claim.
pub async fn oldest_transaction_age(conn: &mut PgConnection) -> Result<f64, Error> {
    sqlx::query_scalar(
        "select coalesce(extract(epoch from now() - min(xact_start))::float8, 0)
         from pg_stat_activity where datname = current_database() and xact_start is not null",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(err("oldest_transaction_age"))
}

/// A table of jobs the runtime keeps vacuumed: the queue churns dead rows with
/// every claim and completion, the history with every prune.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobTable {
    /// `lq.jobs`: live jobs.
    Live,
    /// `lq.finished_jobs`: the history, until pruned.
    Finished,
}

impl JobTable {
    /// Both tables.
    pub const ALL: [JobTable; 2] = [JobTable::Live, JobTable::Finished];

    /// The table's qualified name.
    pub fn name(self) -> &'static str {
        match self {
            JobTable::Live => "lq.jobs",
            JobTable::Finished => "lq.finished_jobs",
        }
    }
}

/// What the statistics say about a [`JobTable`], for the runtime's vacuum duty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, sqlx::FromRow)]
pub struct JobTableStats {
    /// Live rows, as last counted.
    pub live: i64,
    /// Dead row versions not yet vacuumed.
    pub dead: i64,
    /// Rows changed since the last analyze.
    pub modified_since_analyze: i64,
    /// Rows inserted since the last vacuum: until a vacuum visits their pages,
    /// an index-only scan reads the table for each of them.
    pub inserted_since_vacuum: i64,
    /// Whole seconds since the table was last analyzed (by ANALYZE, a vacuum
    /// that analyzed, or autovacuum); `None` if it never was.
    pub analyzed_secs_ago: Option<i64>,
    /// Autovacuum is off, server-wide or for the table.
    pub autovacuum_off: bool,
    /// This role may vacuum and analyze the table (it owns it, or is a superuser).
    pub may_vacuum: bool,
}

/// Reads [`JobTableStats`] of `table`.
pub async fn job_table_stats(
    conn: &mut PgConnection,
    table: JobTable,
) -> Result<JobTableStats, Error> {
    sqlx::query_as(
        "select n_live_tup as live, n_dead_tup as dead,
                n_mod_since_analyze as modified_since_analyze,
                n_ins_since_vacuum as inserted_since_vacuum,
                floor(extract(epoch from now() - greatest(last_analyze, last_autoanalyze)))::int8
                    as analyzed_secs_ago,
                current_setting('autovacuum') = 'off'
                    or coalesce((select not option_value::bool
                                 from pg_options_to_table(c.reloptions)
                                 where option_name = 'autovacuum_enabled'), false) as autovacuum_off,
                pg_has_role(c.relowner, 'USAGE') as may_vacuum
         from pg_stat_user_tables t join pg_class c on c.oid = t.relid
         where t.relid = $1::regclass",
    )
    .bind(table.name())
    .fetch_one(&mut *conn)
    .await
    .map_err(err("job_table_stats"))
}

/// What [`job_table_vacuum`] does to a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upkeep {
    /// Vacuum: remove dead rows (and refresh the row count the planner scales by).
    Vacuum,
    /// Vacuum, then refresh the column statistics.
    VacuumAnalyze,
    /// Only refresh the column statistics.
    Analyze,
}

/// Runs `upkeep` on `table`, skipping it if another vacuum holds it.
///
/// A vacuum may run longer than the connection's `statement_timeout` allows other
/// statements, so it runs under `bound` (the client's own bound for it): the
/// session's setting is raised for the vacuum and set back after it, also when
/// the vacuum failed. If setting it back fails, the caller must not hand the
/// connection to other statements (close it).
pub async fn job_table_vacuum(
    conn: &mut PgConnection,
    table: JobTable,
    upkeep: Upkeep,
    bound: std::time::Duration,
) -> Result<(), Error> {
    let sql = match (table, upkeep) {
        (JobTable::Live, Upkeep::Vacuum) => "vacuum (skip_locked) lq.jobs",
        (JobTable::Live, Upkeep::VacuumAnalyze) => "vacuum (analyze, skip_locked) lq.jobs",
        (JobTable::Live, Upkeep::Analyze) => "analyze (skip_locked) lq.jobs",
        (JobTable::Finished, Upkeep::Vacuum) => "vacuum (skip_locked) lq.finished_jobs",
        (JobTable::Finished, Upkeep::VacuumAnalyze) => {
            "vacuum (analyze, skip_locked) lq.finished_jobs"
        }
        (JobTable::Finished, Upkeep::Analyze) => "analyze (skip_locked) lq.finished_jobs",
    };
    let (name, value) = super::statement_timeout_within(bound);
    sqlx::query("select pg_catalog.set_config($1, $2, false)")
        .bind(name)
        .bind(value)
        .execute(&mut *conn)
        .await
        .map_err(err("job_table_vacuum"))?;
    let vacuumed = sqlx::Executor::execute(&mut *conn, sql)
        .await
        .map_err(err("job_table_vacuum"));
    // Back to the value the connection was opened with.
    let reset = sqlx::Executor::execute(&mut *conn, "reset statement_timeout")
        .await
        .map_err(err("job_table_vacuum"));
    vacuumed?;
    reset?;
    Ok(())
}

/// This session's server process id, so that another session can cancel the
/// statement it runs ([`cancel_vacuum`]).
pub async fn backend_pid(conn: &mut PgConnection) -> Result<i32, Error> {
    sqlx::query_scalar("select pg_catalog.pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await
        .map_err(err("backend_pid"))
}

/// Asks the server to cancel the vacuum or analyze that session `pid` runs now
/// (one the runtime started, when it stops); a session running anything else,
/// or idle, is left alone. A role may cancel the sessions it logged in as. True
/// if a cancel was sent.
pub async fn cancel_vacuum(conn: &mut PgConnection, pid: i32) -> Result<bool, Error> {
    let sent: Option<bool> = sqlx::query_scalar(
        "select pg_catalog.pg_cancel_backend(pid) from pg_catalog.pg_stat_activity
         where pid = $1 and state = 'active' and query ~* '^\\s*(vacuum|analyze)'",
    )
    .bind(pid)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("cancel_vacuum"))?;
    Ok(sent.unwrap_or(false))
}

/// What a runtime uses, as `(object, privilege)`: the privileges its role needs.
const RUNTIME_PRIVILEGES: &[(&str, &str)] = &[
    ("lq.jobs", "SELECT"),
    ("lq.jobs", "INSERT"),
    ("lq.jobs", "UPDATE"),
    ("lq.jobs", "DELETE"),
    ("lq.finished_jobs", "SELECT"),
    ("lq.finished_jobs", "INSERT"),
    ("lq.finished_jobs", "UPDATE"),
    ("lq.finished_jobs", "DELETE"),
    ("lq.cron_schedules", "SELECT"),
    ("lq.cron_schedules", "INSERT"),
    ("lq.cron_schedules", "UPDATE"),
    ("lq.cron_ticks", "SELECT"),
    ("lq.cron_ticks", "INSERT"),
    ("lq.cron_ticks", "DELETE"),
    ("lq.schema_migrations", "SELECT"),
    ("lq.queues", "SELECT"),
    ("lq.runtimes", "SELECT"),
    ("lq.runtimes", "INSERT"),
    ("lq.runtimes", "UPDATE"),
    ("lq.runtimes", "DELETE"),
    ("lq.leader", "SELECT"),
    ("lq.leader", "INSERT"),
    ("lq.leader", "UPDATE"),
    ("lq.leader", "DELETE"),
    ("lq.stats_minute", "SELECT"),
    ("lq.stats_minute", "INSERT"),
    ("lq.stats_minute", "UPDATE"),
    ("lq.stats_minute", "DELETE"),
];

/// What a runtime with a rate limit uses besides [`RUNTIME_PRIVILEGES`]: the
/// buckets. Asked of those runtimes only, so a deployment that sets no rate
/// limit needs no new grant to run schema version 13.
const RATE_LIMIT_PRIVILEGES: &[(&str, &str)] = &[
    ("lq.rate_limits", "SELECT"),
    ("lq.rate_limits", "INSERT"),
    ("lq.rate_limits", "UPDATE"),
];

/// The current role's name, and each privilege of `RUNTIME_PRIVILEGES` (plus
/// USAGE on schema `lq` and on the job id sequence, and with `rate_limited`
/// those on the rate limits' buckets) it lacks, as `"SELECT on lq.jobs"`.
pub async fn runtime_missing_privileges(
    conn: &mut PgConnection,
    rate_limited: bool,
) -> Result<(String, Vec<String>), Error> {
    let extra = if rate_limited {
        RATE_LIMIT_PRIVILEGES
    } else {
        &[]
    };
    let (objects, privileges): (Vec<&str>, Vec<&str>) =
        RUNTIME_PRIVILEGES.iter().chain(extra).copied().unzip();
    sqlx::query_as(
        "with schema_ok as (select pg_catalog.has_schema_privilege('lq', 'USAGE') as ok),
         needed as (
             select 'USAGE on schema lq' as what, (select ok from schema_ok) as ok
             union all
             select p || ' on ' || o,
                 case when (select ok from schema_ok) then pg_catalog.has_table_privilege(o, p) else false end
             from rows from (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) as n(o, p)
             union all
             select 'USAGE on sequence lq.jobs_id_seq',
                 case when (select ok from schema_ok)
                      then pg_catalog.has_sequence_privilege('lq.jobs_id_seq', 'USAGE')
                      else false end
         )
         select current_user::text, coalesce(pg_catalog.array_agg(what) filter (where not ok), '{}')
         from needed",
    )
    .bind(objects)
    .bind(privileges)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("runtime_missing_privileges"))
}

/// Connections the server could ever give this role (`max_connections` less the
/// superuser reserve, or the role's own limit if lower), and how many are free now.
pub async fn server_connection_room(conn: &mut PgConnection) -> Result<(i64, i64), Error> {
    sqlx::query_as(
        "with server as (
             select pg_catalog.current_setting('max_connections')::int8
                  - pg_catalog.current_setting('superuser_reserved_connections')::int8 as most
         ),
         role as (
             select case when rolconnlimit < 0 then null else rolconnlimit::int8 end as most
             from pg_catalog.pg_roles where rolname = current_user
         )
         select least((select most from server), coalesce((select most from role), (select most from server))),
                (select most from server)
                    - (select pg_catalog.count(*) from pg_catalog.pg_stat_activity
                       where backend_type = 'client backend')",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(err("server_connection_room"))
}
