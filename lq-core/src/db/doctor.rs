//! Statements of the health check: the figures `control::doctor` judges.

use sqlx::PgConnection;

use super::err;
use crate::Error;

/// Raw figures about the server and the `lq` schema.
#[derive(Debug, sqlx::FromRow)]
pub struct Figures {
    /// Whether autovacuum runs at all: the server's `autovacuum` setting, and
    /// `track_counts`, without which it never finds a table to vacuum.
    pub autovacuum: bool,
    /// `lq.jobs`'s storage option `autovacuum_enabled` is false, however it
    /// was written (`off`, `0`, `no`, `f`, `'FALSE'`: PostgreSQL keeps the
    /// spelling given).
    pub jobs_autovacuum_off: bool,
    /// Seconds the oldest transaction that holds back vacuum in this database
    /// has been open: a client session's holding a snapshot or a transaction
    /// id (one idle between statements of a read committed transaction holds
    /// neither; a lazy VACUUM, autovacuum's or a client's, is ignored by
    /// vacuum), among the sessions this role may see; or a prepared
    /// transaction (`PREPARE TRANSACTION`) not yet committed or rolled back.
    pub oldest_xact_secs: Option<f64>,
    /// Whether this role sees every session's transaction (`pg_read_all_stats`,
    /// which `pg_monitor` includes): PostgreSQL hides when another role's
    /// transaction began from a role without it.
    pub sees_all_sessions: bool,
    /// Live and dead row versions of `lq.jobs` (statistics, not exact).
    pub jobs_live_rows: i64,
    pub jobs_dead_rows: i64,
    /// Running jobs whose lease expired more than `stale_secs` ago.
    pub expired_leases: i64,
    /// Live runtimes, and whether one holds a valid leader lease.
    pub live_runtimes: i64,
    pub has_leader: bool,
    /// WAL bytes a replication slot without a reader may keep before it is a
    /// finding: `max_wal_size`, at least 1 GB.
    pub slot_wal_bound: i64,
}

/// Reads [`Figures`]; `stale_secs` is how long past its expiry an unrescued
/// lease counts as a finding.
pub async fn doctor_figures(conn: &mut PgConnection, stale_secs: f64) -> Result<Figures, Error> {
    sqlx::query_as(
        "select
             pg_catalog.current_setting('autovacuum')::bool
                 and pg_catalog.current_setting('track_counts')::bool as autovacuum,
             coalesce((select not o.option_value::bool
                       from pg_catalog.pg_class c,
                            pg_catalog.pg_options_to_table(c.reloptions) o
                       where c.oid = 'lq.jobs'::pg_catalog.regclass
                         and o.option_name = 'autovacuum_enabled'), false) as jobs_autovacuum_off,
             (select extract(epoch from pg_catalog.now() - min(open.since))::float8
              from (select a.xact_start
                    from pg_catalog.pg_stat_activity a
                    where a.datname = pg_catalog.current_database()
                      and a.backend_type = 'client backend'
                      and (a.backend_xmin is not null or a.backend_xid is not null)
                      and a.pid <> pg_catalog.pg_backend_pid()
                      and a.pid not in (select v.pid from pg_catalog.pg_stat_progress_vacuum v)
                    union all
                    select p.prepared
                    from pg_catalog.pg_prepared_xacts p
                    where p.database = pg_catalog.current_database()) as open(since)) as oldest_xact_secs,
             pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') as sees_all_sessions,
             coalesce((select n_live_tup from pg_catalog.pg_stat_user_tables
                       where schemaname = 'lq' and relname = 'jobs'), 0) as jobs_live_rows,
             coalesce((select n_dead_tup from pg_catalog.pg_stat_user_tables
                       where schemaname = 'lq' and relname = 'jobs'), 0) as jobs_dead_rows,
             (select count(*) from lq.jobs
              where state = 'running'
                and lease_expires_at < pg_catalog.now() - make_interval(secs => $1)) as expired_leases,
             (select count(*) from lq.runtimes where expires_at >= pg_catalog.now()) as live_runtimes,
             exists (select from lq.leader where expires_at >= pg_catalog.now()) as has_leader,
             greatest(pg_catalog.pg_size_bytes(pg_catalog.current_setting('max_wal_size')),
                      1073741824)::int8 as slot_wal_bound",
    )
    .bind(stale_secs)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("doctor_figures"))
}

/// `(queue, kind, jobs)` of queued jobs that no live runtime serving their
/// queue declares, or on a queue no live runtime serves.
pub async fn doctor_unserved(conn: &mut PgConnection) -> Result<Vec<(String, String, i64)>, Error> {
    sqlx::query_as(
        "with serving as materialized (
             select s.queue, r.kinds
             from lq.runtimes r cross join lateral jsonb_object_keys(r.queues) as s(queue)
             where r.expires_at >= now()
         )
         select j.queue, j.kind, count(*)
         from lq.jobs j
         where j.state = 'queued'
           and not exists (select from serving s where s.queue = j.queue and j.kind = any(s.kinds))
         group by j.queue, j.kind
         order by j.queue, j.kind",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(err("doctor_unserved"))
}

/// A replication slot no client reads from ([`doctor_idle_slots`]).
#[derive(Debug, sqlx::FromRow)]
pub struct IdleSlot {
    /// The slot's name.
    pub name: String,
    /// `physical` (a standby's) or `logical` (a change-data-capture client's).
    pub kind: String,
    /// The database of a logical slot; `None` for a physical one.
    pub database: Option<String>,
    /// WAL bytes the server keeps for the slot: written since the position its
    /// reader last confirmed. `None` when the slot reserves no WAL, or on a
    /// standby that has replayed nothing yet.
    pub kept_wal_bytes: Option<i64>,
    /// The slot has an `xmin`: vacuum keeps every row version deleted since,
    /// in every table of the server (a standby's `hot_standby_feedback`).
    pub holds_back_vacuum: bool,
}

/// The server's replication slots that no client is reading from and that still
/// keep WAL or hold back vacuum, the largest keeper first (judged against
/// [`Figures::slot_wal_bound`]). A queue writes WAL with every claim and
/// completion (about a kilobyte a job), so a slot whose standby or CDC client is
/// gone keeps more and more of it. On a standby the kept WAL is measured from the
/// last replayed position. Slots a PostgreSQL 17 standby keeps in step with its
/// primary's (`synced`) are never read there, and are left out.
pub async fn doctor_idle_slots(conn: &mut PgConnection) -> Result<Vec<IdleSlot>, Error> {
    sqlx::query_as(
        "select s.slot_name::text as name, s.slot_type as kind, s.database::text as database,
                pg_catalog.pg_wal_lsn_diff(
                    case when pg_catalog.pg_is_in_recovery() then pg_catalog.pg_last_wal_replay_lsn()
                         else pg_catalog.pg_current_wal_lsn() end,
                    s.restart_lsn)::int8 as kept_wal_bytes,
                s.xmin is not null as holds_back_vacuum
         from pg_catalog.pg_replication_slots s
         where not s.active and (s.restart_lsn is not null or s.xmin is not null)
           and not coalesce((pg_catalog.to_jsonb(s) ->> 'synced')::bool, false)
         order by s.restart_lsn nulls last, s.slot_name",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(err("doctor_idle_slots"))
}

/// The checkpointer's counts since they were last reset, and the two settings
/// that decide when a checkpoint starts.
#[derive(Debug, sqlx::FromRow)]
pub struct Checkpoints {
    /// Checkpoints started because `checkpoint_timeout` had passed.
    pub timed: i64,
    /// Checkpoints started on request: the WAL since the last one reached
    /// `max_wal_size`, or a `CHECKPOINT`, a `DROP DATABASE` or a base backup
    /// asked for one.
    pub requested: i64,
    /// Seconds since the counts were reset (`None` if the server does not say).
    pub counted_secs: Option<f64>,
    /// `max_wal_size`, in bytes.
    pub max_wal_size: i64,
    /// `checkpoint_timeout`, in seconds.
    pub checkpoint_timeout_secs: i64,
    /// The statistics to reset with `pg_stat_reset_shared` once the settings
    /// are mended: `checkpointer` from PostgreSQL 17, `bgwriter` before.
    pub reset_target: String,
}

/// Where a server keeps its checkpoint counts: the view, its timed and
/// requested columns, and the name `pg_stat_reset_shared` resets them by.
fn checkpoint_counts_source(server_version_num: i32) -> [&'static str; 4] {
    if server_version_num >= 170_000 {
        [
            "pg_stat_checkpointer",
            "num_timed",
            "num_requested",
            "checkpointer",
        ]
    } else {
        [
            "pg_stat_bgwriter",
            "checkpoints_timed",
            "checkpoints_req",
            "bgwriter",
        ]
    }
}

/// Reads [`Checkpoints`] from `pg_stat_checkpointer` (PostgreSQL 17 and later)
/// or `pg_stat_bgwriter` (earlier), which every role may read.
pub async fn doctor_checkpoints(conn: &mut PgConnection) -> Result<Checkpoints, Error> {
    let version: i32 =
        sqlx::query_scalar("select pg_catalog.current_setting('server_version_num')::int4")
            .fetch_one(&mut *conn)
            .await
            .map_err(err("doctor_checkpoints"))?;
    let [view, timed, requested, target] = checkpoint_counts_source(version);
    sqlx::query_as(&format!(
        "select s.{timed}::int8 as timed, s.{requested}::int8 as requested,
                extract(epoch from pg_catalog.now() - s.stats_reset)::float8 as counted_secs,
                pg_catalog.pg_size_bytes(pg_catalog.current_setting('max_wal_size'))::int8
                    as max_wal_size,
                (select t.setting::int8 from pg_catalog.pg_settings t
                 where t.name = 'checkpoint_timeout') as checkpoint_timeout_secs,
                '{target}' as reset_target
         from pg_catalog.{view} s"
    ))
    .fetch_one(&mut *conn)
    .await
    .map_err(err("doctor_checkpoints"))
}

/// The server's client sessions against its connection limit.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Connections {
    /// Client sessions on the whole server, every database and role (this
    /// one included). Every role sees every session's row, but PostgreSQL
    /// hides another role's session type from a role without
    /// `pg_read_all_stats`: those count when they belong to a role, which
    /// background processes do not (the logical replication launcher, which
    /// does, is then counted too).
    pub in_use: i64,
    /// `max_connections`.
    pub max: i64,
    /// `superuser_reserved_connections`: slots only superusers may take.
    pub reserved: i64,
    /// The most connections this database's live runtimes may open of their
    /// own, added up from their rows (`RuntimeBuilder::connections`).
    pub runtimes_may_open: i64,
    /// Live runtimes whose rows do not say (built before schema 16).
    pub runtimes_unsized: i64,
}

/// Reads [`Connections`].
pub async fn doctor_connections(conn: &mut PgConnection) -> Result<Connections, Error> {
    sqlx::query_as(
        "select (select pg_catalog.count(*) from pg_catalog.pg_stat_activity a
                 where coalesce(a.backend_type operator(pg_catalog.=) 'client backend',
                                a.usesysid is not null))::int8 as in_use,
                pg_catalog.current_setting('max_connections')::int8 as max,
                pg_catalog.current_setting('superuser_reserved_connections')::int8 as reserved,
                (select coalesce(pg_catalog.sum(r.connections), 0)::int8 from lq.runtimes r
                 where r.expires_at >= pg_catalog.now()) as runtimes_may_open,
                (select pg_catalog.count(*) from lq.runtimes r
                 where r.expires_at >= pg_catalog.now() and r.connections is null) as runtimes_unsized",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(err("doctor_connections"))
}

#[cfg(test)]
mod tests {
    use super::checkpoint_counts_source;

    #[test]
    fn checkpoint_counts_moved_to_their_own_view_in_postgresql_17() {
        assert_eq!(checkpoint_counts_source(160_004)[0], "pg_stat_bgwriter");
        assert_eq!(
            checkpoint_counts_source(170_000),
            [
                "pg_stat_checkpointer",
                "num_timed",
                "num_requested",
                "checkpointer"
            ]
        );
    }
}
