//! Test support: one fresh database per test, and waits on database state.
//!
//! `DATABASE_URL` names a server where tests may create databases (the default is
//! `postgres://postgres@127.0.0.1:5432/postgres`; `scripts/with-postgres` sets it).

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use sqlx::{postgres::PgPoolOptions, Connection, PgConnection, PgPool};

pub mod logs;

/// The admin URL tests create their databases through.
pub fn admin_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// `base` with its database name replaced by `db`.
pub fn url_for(base: &str, db: &str) -> String {
    let (head, tail) = match base.find('?') {
        Some(i) => base.split_at(i),
        None => (base, ""),
    };
    let slash = head.rfind('/').expect("DATABASE_URL has a path");
    format!("{}/{db}{tail}", &head[..slash])
}

/// A database of its own for one test, migrated, dropped when the value drops.
pub struct TestDb {
    /// Pool on the test's database.
    pub pool: PgPool,
    /// The database's URL.
    pub url: String,
    name: String,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Set once this process has looked for databases that ended runs left behind.
static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Drops the test databases (`lq_test_PID_…`) of test processes that no longer
/// run on this machine: a run killed midway, or one whose drops found the
/// server's connections all taken, leaves them behind. Linux only (a process is
/// judged gone by `/proc/PID`); without `force`, so a database still in use (a
/// run on another machine sharing the server) stays. Best effort.
pub async fn drop_databases_of_ended_runs(admin: &mut PgConnection) {
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    let names: Vec<String> = sqlx::query_scalar(
        r"select datname from pg_database where datname ~ '^lq_test_[0-9]+_[0-9]+_[0-9a-f]{4}$'",
    )
    .fetch_all(&mut *admin)
    .await
    .unwrap_or_default();
    for name in names {
        let Some(pid) = name.split('_').nth(2) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = sqlx::raw_sql(&format!("drop database if exists {name}"))
                .execute(&mut *admin)
                .await;
        }
    }
}

impl TestDb {
    /// Creates and migrates a fresh database.
    pub async fn new() -> Self {
        let name = format!(
            "lq_test_{}_{}_{:04x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            fastrand::u16(..)
        );
        let mut admin = PgConnection::connect(&admin_url())
            .await
            .expect("connect to DATABASE_URL");
        SWEPT
            .get_or_init(|| drop_databases_of_ended_runs(&mut admin))
            .await;
        sqlx::raw_sql(&format!("create database {name}"))
            .execute(&mut admin)
            .await
            .expect("create database");
        admin.close().await.ok();
        let url = url_for(&admin_url(), &name);
        let pool = PgPoolOptions::new()
            .max_connections(20)
            .connect(&url)
            .await
            .expect("connect test db");
        lq_runtime::migrate(&pool).await.expect("migrate");
        Self { pool, url, name }
    }

    /// A second pool on the same database (another "process").
    pub async fn another_pool(&self, max: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(max)
            .connect(&self.url)
            .await
            .expect("connect")
    }

    /// `select count(*) from lq.all_jobs where state = $state`.
    pub async fn count(&self, state: &str) -> i64 {
        sqlx::query_scalar("select count(*) from lq.all_jobs where state::text = $1")
            .bind(state)
            .fetch_one(&self.pool)
            .await
            .expect("count")
    }

    /// The one `bigint` that `sql` selects (a count, say).
    pub async fn number(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Whether live job `id` is due: its run time has come.
    pub async fn is_due(&self, id: i64) -> bool {
        sqlx::query_scalar("select run_at <= now() from lq.jobs where id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .expect("a live job")
    }

    /// Ends live job `id` in final `state` as if it finished `ago_secs` seconds ago,
    /// moving it to `lq.finished_jobs` as the runtime does.
    pub async fn finish(&self, id: i64, state: &str, ago_secs: f64) {
        let mut conn = self.pool.acquire().await.expect("connection");
        finish_job(&mut conn, id, state, ago_secs).await;
    }

    /// Makes running job `id`'s lease expire a second ago, as if its worker had
    /// stopped heartbeating (the rescuer may then take it).
    pub async fn expire_lease(&self, id: i64) {
        let expired = sqlx::query(
            "update lq.jobs set lease_expires_at = now() - interval '1 second'
             where id = $1 and state = 'running'",
        )
        .bind(id)
        .execute(&self.pool)
        .await
        .expect("expire a lease");
        assert_eq!(expired.rows_affected(), 1, "job {id} is not running");
    }

    /// Declares recurring `kind` on `queue` as a runtime built before schema 12
    /// leaves it: the expression and the queue, not the job its ticks enqueue,
    /// so it cannot be run now.
    pub async fn declare_schedule_without_job(&self, kind: &str, queue: &str) {
        sqlx::query(
            "insert into lq.cron_schedules (kind, last_tick, expr, tz, catch_up, queue, declared_by)
             values ($1, now(), '0 3 * * *', 'UTC', 'once', $2, 'rt-11')",
        )
        .bind(kind)
        .bind(queue)
        .execute(&self.pool)
        .await
        .expect("declare a schedule without its job");
    }

    /// Puts `n` finished jobs in the history, succeeded two days ago, and makes the
    /// server refuse every delete statement on it after the first (a statement
    /// trigger raising "the second batch is refused"): a prune of more than one
    /// batch then fails after its first batch committed.
    pub async fn stage_prune_refused_after_first_batch(&self, n: i64) {
        sqlx::query(
            "insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at,
                 attempts, max_attempts, errors, created_at, finished_at)
             select g, 'test.noop', 'default', 0, '{}', 'succeeded', now(), 1, 1, '[]',
                    now() - interval '2 days', now() - interval '2 days'
             from generate_series(1, $1) as g",
        )
        .bind(n)
        .execute(&self.pool)
        .await
        .expect("insert finished jobs");
        sqlx::raw_sql(
            "create sequence lq.test_prunes;
             create function lq.test_refuse_second_prune() returns trigger language plpgsql as $$
             begin
                 if nextval('lq.test_prunes') > 1 then
                     raise exception 'test: the second batch is refused';
                 end if;
                 return null;
             end $$;
             create trigger refuse_second_prune before delete on lq.finished_jobs
                 for each statement execute function lq.test_refuse_second_prune();",
        )
        .execute(&self.pool)
        .await
        .expect("create the refusing trigger");
    }

    /// Locks live job `id`'s row (`for update`) in a transaction of its own, as a
    /// claim or a slow statement elsewhere would; the lock holds until the
    /// returned transaction ends.
    pub async fn lock_row(&self, id: i64) -> sqlx::Transaction<'static, sqlx::Postgres> {
        let mut tx = self.pool.begin().await.expect("begin");
        sqlx::query("select 1 from lq.jobs where id = $1 for update")
            .bind(id)
            .execute(&mut *tx)
            .await
            .expect("lock the row");
        tx
    }

    /// Locks `table` (`access exclusive`) in a transaction of its own, as a
    /// migration or an operator's `lock table` would; every statement reading
    /// it waits until the returned transaction ends.
    pub async fn lock_table(&self, table: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
        let mut tx = self.pool.begin().await.expect("begin");
        sqlx::raw_sql(&format!("lock table {table} in access exclusive mode"))
            .execute(&mut *tx)
            .await
            .expect("lock the table");
        tx
    }

    /// How many sessions on this database wait for a lock now: zero once a
    /// statement given up on was cancelled on the server, not left waiting.
    pub async fn sessions_waiting_on_locks(&self) -> i64 {
        self.number(
            "select count(*) from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock'",
        )
        .await
    }

    /// Makes the server refuse to take live job `id` out of `lq.jobs` (a trigger
    /// raising "refused by the test"), so a statement that moves it fails;
    /// [`TestDb::allow_rows`] lifts it.
    pub async fn refuse_delete(&self, id: i64) {
        // P0001: a plain `raise exception`, not a data error.
        self.refuse_rows("lq.jobs", "delete", &format!("old.id = {id}"), "P0001")
            .await;
    }

    /// Makes the server refuse, with SQLSTATE `sqlstate`, every `event`
    /// (`insert`, `update` or `delete`) on `table` whose row matches
    /// `condition` (a trigger's `when`, over `new` and `old` as the event has
    /// them), as a constraint or a value the server cannot store would; the
    /// error says "refused by the test". One such refusal per database;
    /// [`TestDb::allow_rows`] lifts it.
    pub async fn refuse_rows(&self, table: &str, event: &str, condition: &str, sqlstate: &str) {
        sqlx::raw_sql(&format!(
            "create function lq.refuse_rows() returns trigger language plpgsql as
                 $$ begin raise exception 'refused by the test' using errcode = '{sqlstate}'; end $$;
             create trigger refuse_rows before {event} on {table}
                 for each row when ({condition}) execute function lq.refuse_rows();"
        ))
        .execute(&self.pool)
        .await
        .expect("create the refusing trigger");
    }

    /// Lifts [`TestDb::refuse_rows`] (and so [`TestDb::refuse_delete`]).
    pub async fn allow_rows(&self) {
        sqlx::raw_sql("drop function lq.refuse_rows() cascade")
            .execute(&self.pool)
            .await
            .expect("drop the refusing trigger");
    }

    /// Turns autovacuum off for the history and writes `n` succeeded jobs of
    /// kind `kind` (ids 1 to `n`) straight into it: the first `old` finished two
    /// days ago, the rest now. Nothing vacuums or analyzes it but the runtime.
    pub async fn fill_history(&self, kind: &str, n: i64, old: i64) {
        sqlx::raw_sql("alter table lq.finished_jobs set (autovacuum_enabled = false)")
            .execute(&self.pool)
            .await
            .expect("autovacuum off for the history");
        sqlx::query(
            "insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at,
                 attempts, max_attempts, errors, created_at, finished_at)
             select g, $1, 'default', 0, '{}', 'succeeded', now(), 1, 3, '[]',
                 now() - interval '3 days',
                 case when g <= $3 then now() - interval '2 days' else now() end
             from generate_series(1, $2) g",
        )
        .bind(kind)
        .bind(n)
        .bind(old)
        .execute(&self.pool)
        .await
        .expect("fill the history");
    }

    /// Waits until `sql` (a query returning one boolean) is true, or panics after `limit`.
    pub async fn wait_for(&self, what: &str, sql: &str, limit: Duration) {
        let start = Instant::now();
        loop {
            let ok: bool = sqlx::query_scalar(sql)
                .fetch_one(&self.pool)
                .await
                .expect("wait query");
            if ok {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until no job is queued or running.
    pub async fn wait_idle(&self, limit: Duration) {
        self.wait_for(
            "every job to finish",
            "select not exists (select 1 from lq.all_jobs where state in ('queued', 'running'))",
            limit,
        )
        .await;
    }
}

/// [`TestDb::finish`] on a connection of the caller's, such as an open transaction.
pub async fn finish_job(conn: &mut PgConnection, id: i64, state: &str, ago_secs: f64) {
    let moved = sqlx::query(
        "with moved as (delete from lq.jobs where id = $1 returning *)
         insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at,
             attempts, max_attempts, unique_key, lease_owner, cancel_requested_at, errors, created_at,
             started_at, finished_at)
         select id, kind, queue, priority, payload, $2::text::lq.job_state, run_at,
             attempts, max_attempts, unique_key, lease_owner, cancel_requested_at, errors, created_at,
             started_at, now() - make_interval(secs => $3)
         from moved",
    )
    .bind(id)
    .bind(state)
    .bind(ago_secs)
    .execute(conn)
    .await
    .expect("finish a job");
    assert_eq!(moved.rows_affected(), 1, "job {id} is not live");
}

impl Drop for TestDb {
    fn drop(&mut self) {
        run_as_admin_from_drop(vec![format!(
            "drop database if exists {} with (force)",
            self.name
        )]);
    }
}

/// Logs to the test output at `RUST_LOG`'s levels, and captures litequeue's events
/// at info and above for [`logs::logged`].
pub fn init_tracing() {
    use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt, Layer};
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(tracing_subscriber::EnvFilter::from_default_env()),
        )
        .with(logs::Capture)
        .try_init();
}

/// Runs `statements` as the admin, best effort, from a `Drop` (which cannot
/// await): on a thread and runtime of their own, waited for.
pub fn run_as_admin_from_drop(statements: Vec<String>) {
    run_from_drop(admin_url(), statements);
}

/// Runs `statements` on the database at `url`, best effort, from a `Drop`, as
/// [`run_as_admin_from_drop`] does on the admin database.
pub fn run_from_drop(url: String, statements: Vec<String>) {
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            // A run that filled the server's connection slots is refused for a
            // moment; give up only after about ten seconds, so that a busy
            // server does not leave a test's database behind.
            for attempt in 1..=20u64 {
                match PgConnection::connect(&url).await {
                    Ok(mut conn) => {
                        for statement in statements {
                            let _ = sqlx::raw_sql(&statement).execute(&mut conn).await;
                        }
                        return;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50 * attempt)).await,
                }
            }
        });
    })
    .join();
}
