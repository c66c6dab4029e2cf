//! The benchmark database and the SQL the harness itself runs (never timed).

use std::{str::FromStr, time::Duration};

use anyhow::{Context, Result};
use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    Connection, PgConnection, PgPool,
};

/// Name of the scratch database (dropped and recreated on every run).
pub const DB_NAME: &str = "lq_bench";

/// Drops and recreates `lq_bench` on the admin server, migrates it, and returns
/// its connect options and a small harness pool.
pub async fn create(admin_url: &str) -> Result<(PgConnectOptions, PgPool)> {
    let admin = PgConnectOptions::from_str(admin_url).context("parsing DATABASE_URL")?;
    let opts = recreate(&admin, DB_NAME).await?;
    let pool = pool(&opts, 4).await?;
    lq_runtime::migrate(&pool)
        .await
        .context("migrating lq_bench")?;
    // A diagnostic only, to price a schema change within one build (say, an index
    // dropped): SQL run right after the migration (bench/FINDINGS.md, stop 44).
    if let Ok(sql) = std::env::var("LQ_BENCH_AFTER_MIGRATE_SQL") {
        sqlx::raw_sql(&sql)
            .execute(&pool)
            .await
            .context("running LQ_BENCH_AFTER_MIGRATE_SQL")?;
    }
    Ok((opts, pool))
}

/// Drops database `name` on the server of `admin` (ending its sessions) and
/// creates it empty; returns its connect options.
pub async fn recreate(admin: &PgConnectOptions, name: &str) -> Result<PgConnectOptions> {
    let mut conn = PgConnection::connect_with(admin)
        .await
        .context("connecting to the admin database")?;
    sqlx::query(&format!("drop database if exists {name} with (force)"))
        .execute(&mut conn)
        .await?;
    sqlx::query(&format!("create database {name}"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(admin.clone().database(name))
}

/// A pool of at most `max` connections on the benchmark database, built as the
/// README recommends for an application that enqueues: no ping before every
/// acquire (sqlx's default pings), which would add a round trip to each enqueue.
pub async fn pool(opts: &PgConnectOptions, max: u32) -> Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(max)
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(opts.clone())
        .await?)
}

/// `n` connections taken out of `pool` for good, one per producer, each behind a
/// lock its producer's calls take in turn: the benchmark's "connection of its
/// own", with no pool acquire or release (and no release ping) per statement.
pub async fn detached(
    pool: &PgPool,
    n: u32,
) -> Result<Vec<std::sync::Arc<tokio::sync::Mutex<sqlx::PgConnection>>>> {
    let mut conns = Vec::new();
    for _ in 0..n {
        let conn = pool.acquire().await?.detach();
        conns.push(std::sync::Arc::new(tokio::sync::Mutex::new(conn)));
    }
    Ok(conns)
}

/// Application name of runtime pools, so a wedged run's sessions can be ended.
pub const RUNTIME_APP: &str = "lq-bench-runtime";

/// A runtime's pool: sqlx's default size (10), tagged [`RUNTIME_APP`].
pub async fn runtime_pool(opts: &PgConnectOptions) -> Result<PgPool> {
    pool(&opts.clone().application_name(RUNTIME_APP), 10).await
}

/// Ends every session a runtime left behind (after a run that did not finish).
pub async fn end_runtime_sessions(pool: &PgPool) -> Result<()> {
    sqlx::query(
        "select pg_terminate_backend(pid) from pg_stat_activity
         where datname = current_database() and application_name = $1",
    )
    .bind(RUNTIME_APP)
    .execute(pool)
    .await?;
    Ok(())
}

pub async fn exec(pool: &PgPool, sql: &str) -> Result<()> {
    sqlx::query(sql)
        .execute(pool)
        .await
        .with_context(|| format!("harness statement: {sql}"))?;
    Ok(())
}

/// Empties the tables (or, with `keep_upto`, deletes every job above that id), then
/// vacuums, analyses and checkpoints, so every run starts from the same state.
pub async fn reset(pool: &PgPool, keep_upto: Option<i64>) -> Result<()> {
    match keep_upto {
        None => exec(pool, "truncate lq.jobs, lq.finished_jobs").await?,
        Some(id) => {
            for table in ["lq.jobs", "lq.finished_jobs"] {
                sqlx::query(&format!("delete from {table} where id > $1"))
                    .bind(id)
                    .execute(pool)
                    .await?;
            }
        }
    }
    settle(pool).await
}

/// Vacuums, analyzes and checkpoints, then waits for the kernel to write back
/// dirty pages and for the commit rate to settle, so a run does not pay for the
/// previous run's I/O.
pub async fn settle(pool: &PgPool) -> Result<()> {
    // LQ_BENCH_NO_ANALYZE=1 is a diagnostic only: it shows what stale planner
    // statistics taken on a backlog (no running rows) cost the runtime.
    if std::env::var("LQ_BENCH_NO_ANALYZE").is_ok_and(|v| v == "1") {
        exec(pool, "vacuum lq.jobs, lq.finished_jobs").await?;
    } else {
        exec(pool, "vacuum analyze lq.jobs, lq.finished_jobs").await?;
    }
    settle_server(pool).await
}

/// The server-wide part of [`settle`]: checkpoint, disk writeback, commit rate.
/// `pool` may be on any database of the server.
pub async fn settle_server(pool: &PgPool) -> Result<()> {
    exec(pool, "checkpoint").await?;
    crate::writeback::wait().await;
    wait_commit_rate(pool).await
}

/// Commits per probe of the commit rate.
const PROBE_COMMITS: u32 = 200;

/// Waits (at most 2 minutes) until the server's rate of single-row commits has
/// settled: the last three probes within 15 % of each other. The kernel may
/// report no dirty pages while the (virtual) disk still works off earlier writes:
/// right after the ceiling's run, single-row enqueue measured 247/s, then 566 and
/// 865/s two and four minutes later, while pgbench did 2,648/s before it.
async fn wait_commit_rate(pool: &PgPool) -> Result<()> {
    exec(pool, "create table if not exists bench_probe (n int)").await?;
    let started = std::time::Instant::now();
    let mut rates: Vec<f64> = Vec::new();
    loop {
        let t = std::time::Instant::now();
        for n in 0..PROBE_COMMITS {
            sqlx::query("insert into bench_probe values ($1)")
                .bind(n as i32)
                .execute(pool)
                .await
                .context("commit-rate probe")?;
        }
        rates.push(f64::from(PROBE_COMMITS) / t.elapsed().as_secs_f64());
        let last = &rates[rates.len().saturating_sub(3)..];
        let (lo, hi) = last
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        let settled = last.len() == 3 && hi <= lo * 1.15;
        if settled || started.elapsed() > Duration::from_secs(120) {
            if rates.len() > 3 {
                println!(
                    "    (waited {:.0} s for the commit rate to settle: {} probes, last {:.0}/s)",
                    started.elapsed().as_secs_f64(),
                    rates.len(),
                    rates[rates.len() - 1]
                );
            }
            exec(pool, "truncate bench_probe").await?;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Bulk-inserts `n` queued no-op jobs, as `Noop::enqueue_many` would write them.
pub async fn prefill_noop(pool: &PgPool, n: u64) -> Result<()> {
    sqlx::query(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         select 'bench.noop', 'default', jsonb_build_object('n', g), 20 from generate_series(1, $1) g",
    )
    .bind(n as i64)
    .execute(pool)
    .await?;
    Ok(())
}

/// Inserts `n` succeeded jobs (history kept by `keep_finished`), with ids drawn
/// from the jobs' own sequence as real ones would be; returns the highest id.
pub async fn insert_retained(pool: &PgPool, n: u64) -> Result<i64> {
    sqlx::query(
        "insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at, attempts,
             max_attempts, errors, created_at, started_at, finished_at)
         select nextval(pg_get_serial_sequence('lq.jobs', 'id')), 'bench.noop', 'default', 0,
             jsonb_build_object('n', g), 'succeeded', now(), 1, 20, '[]', now(), now(), now()
         from generate_series(1, $1) g",
    )
    .bind(n as i64)
    .execute(pool)
    .await?;
    Ok(
        sqlx::query_scalar("select coalesce(max(id), 0) from lq.finished_jobs")
            .fetch_one(pool)
            .await?,
    )
}

/// Server-wide WAL position (bytes) and this database's committed transactions.
pub async fn wal_and_commits(pool: &PgPool) -> Result<(f64, i64)> {
    Ok(sqlx::query_as(
        "select (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8,
                (select xact_commit from pg_stat_database where datname = current_database())",
    )
    .fetch_one(pool)
    .await?)
}

/// Jobs in `state = 'queued'`.
pub async fn depth(pool: &PgPool) -> Result<i64> {
    Ok(
        sqlx::query_scalar("select count(*) from lq.jobs where state = 'queued'")
            .fetch_one(pool)
            .await?,
    )
}

/// Counters of `lq.jobs` at one moment, to see what the server did in between.
#[derive(Debug, Default, Clone, Copy, sqlx::FromRow)]
pub struct TableStats {
    pub live: i64,
    pub dead: i64,
    /// Vacuums finished, by the runtime's vacuumer or by autovacuum.
    pub vacuums: i64,
    /// Heap and index blocks found in shared buffers (`hit`) or read from the
    /// kernel (`read`): the table's working set against `shared_buffers`.
    pub heap_hit: i64,
    pub heap_read: i64,
    pub idx_hit: i64,
    pub idx_read: i64,
    /// Rows updated (of them `hot_updated` without new index entries) and
    /// deleted, in all.
    pub updated: i64,
    pub hot_updated: i64,
    pub deleted: i64,
}

pub async fn table_stats(pool: &PgPool) -> Result<TableStats> {
    Ok(sqlx::query_as(
        "select t.n_live_tup as live, t.n_dead_tup as dead,
                t.vacuum_count + t.autovacuum_count as vacuums,
                coalesce(io.heap_blks_hit, 0) as heap_hit, coalesce(io.heap_blks_read, 0) as heap_read,
                coalesce(io.idx_blks_hit, 0) as idx_hit, coalesce(io.idx_blks_read, 0) as idx_read,
                t.n_tup_upd as updated, t.n_tup_hot_upd as hot_updated, t.n_tup_del as deleted
         from pg_stat_user_tables t join pg_statio_user_tables io using (relid)
         where t.schemaname = 'lq' and t.relname = 'jobs'",
    )
    .fetch_optional(pool)
    .await?
    .unwrap_or_default())
}

/// (succeeded rows above `above`, distinct claim statements, distinct completion
/// statements): each claim and each batched completion stamps one `now()`.
pub async fn batches(pool: &PgPool, above: i64) -> Result<(i64, i64, i64)> {
    Ok(sqlx::query_as(
        "select count(*), count(distinct started_at), count(distinct finished_at)
         from lq.finished_jobs where state = 'succeeded' and id > $1",
    )
    .bind(above)
    .fetch_one(pool)
    .await?)
}

pub async fn server_version(pool: &PgPool) -> Result<String> {
    Ok(sqlx::query_scalar("show server_version")
        .fetch_one(pool)
        .await?)
}
