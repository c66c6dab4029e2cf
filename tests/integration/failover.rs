//! A failover that leaves the runtime's new connections on a read-only server
//! for a while (a standby not yet promoted, a writer endpoint still pointing at
//! the old primary): once the server takes writes again, every job ends.

use std::{sync::Arc, time::Duration};

use lq_runtime::{EnqueueOptions, Job, JobContext, JobError, Perform, Runtime};
use lq_tests::{logs::wait_logged, TestDb};
use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection};
use tokio::sync::Semaphore;
use tracing::Level;

use crate::jobs::quick;

const LIMIT: Duration = Duration::from_secs(60);

/// Holds its job running until the test lets it finish.
struct Gate(Semaphore);

#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.failover_held", queue = "failover")]
struct Held {
    n: u32,
}

impl Perform for Held {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gate = ctx.state::<Arc<Gate>>();
        gate.0.acquire().await.expect("never closed").forget();
        Ok(())
    }
}

/// Fails once the test lets it finish, with one attempt: its outcome is written
/// on a pooled connection (the completer writes only successes).
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.failover_fails", queue = "failover", max_attempts = 1)]
struct FailsHeld {
    n: u32,
}

impl Perform for FailsHeld {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gate = ctx.state::<Arc<Gate>>();
        gate.0.acquire().await.expect("never closed").forget();
        Err("fails on purpose".into())
    }
}

/// Runs `sql` on `conn` for the test's database, named by `current_database()`.
async fn alter_database(conn: &mut PgConnection, setting: &str) {
    let sql = format!(
        "do $$ begin execute format('alter database %I {setting}', current_database()); end $$"
    );
    sqlx::raw_sql(&sql).execute(&mut *conn).await.unwrap();
}

/// A runtime on a pool of its own whose sessions are named `app`, serving
/// `failover` with `gate`, returned once three jobs run.
async fn start_named(db: &TestDb, app: &str, gate: &Arc<Gate>) -> Runtime {
    let opts = db
        .pool
        .connect_options()
        .as_ref()
        .clone()
        .application_name(app);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_lazy_with(opts);
    let rt = Runtime::builder(pool)
        .config(quick())
        .queue("failover", 4)
        .state(gate.clone())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the three jobs to run",
        "select count(*) = 3 from lq.jobs where state = 'running'",
        LIMIT,
    )
    .await;
    rt
}

/// The failover, run on `admin`: new sessions are read-only, and those named
/// `app` are cut.
async fn fail_over(admin: &mut PgConnection, app: &str) {
    alter_database(admin, "set default_transaction_read_only = on").await;
    sqlx::query(
        "select pg_terminate_backend(pid) from pg_stat_activity
         where datname = current_database() and application_name = $1",
    )
    .bind(app)
    .execute(&mut *admin)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn successes_written_during_a_failover_land_once_the_server_takes_writes_again() {
    lq_tests::init_tracing();
    let db = TestDb::new().await;
    // Opened while the server takes writes, so it keeps taking them.
    let mut admin = PgConnection::connect(&db.url).await.unwrap();
    Held::enqueue_many(&db.pool, (0..3).map(|n| Held { n }), EnqueueOptions::new())
        .await
        .unwrap();
    let gate = Arc::new(Gate(Semaphore::new(0)));
    let rt = start_named(&db, "lq-test-failover", &gate).await;

    // The failover: new sessions are read-only, and the runtime's are cut.
    fail_over(&mut admin, "lq-test-failover").await;
    gate.0.add_permits(3);
    wait_logged(1, LIMIT, |e| {
        e.level == Level::WARN
            && e.message.contains("could not mark jobs succeeded")
            && e.field("error").is_some_and(|m| m.contains("read-only"))
    })
    .await;

    // Promoted: the server takes writes again.
    alter_database(&mut admin, "reset default_transaction_read_only").await;
    db.wait_for(
        "every job to succeed",
        "select count(*) = 3 from lq.finished_jobs where state = 'succeeded'",
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_batch_cancelled_at_the_statement_bound_is_written_in_halves() {
    // A batch too slow for the statement bound (here: a trigger that stalls any
    // write of more than one row into the history) would be cancelled again
    // every time it was sent whole.
    let db = TestDb::new().await;
    sqlx::raw_sql(
        "create sequence public.multi_row_writes;
         create function public.stall_batches() returns trigger language plpgsql as $$
         begin
             if (select count(*) from inserted) > 1 then
                 perform nextval('public.multi_row_writes');
                 perform pg_sleep(5);
             end if;
             return null;
         end $$;
         create trigger stall_batches after insert on lq.finished_jobs
             referencing new table as inserted
             for each statement execute function public.stall_batches();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    Held::enqueue_many(&db.pool, (0..8).map(|n| Held { n }), EnqueueOptions::new())
        .await
        .unwrap();
    let gate = Arc::new(Gate(Semaphore::new(0)));
    let rt = Runtime::builder(db.pool.clone())
        .config(lq_runtime::RuntimeConfig {
            db_timeout: Duration::from_secs(1),
            ..quick()
        })
        .queue("failover", 8)
        .state(gate.clone())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the eight jobs to run",
        "select count(*) = 8 from lq.jobs where state = 'running'",
        LIMIT,
    )
    .await;
    gate.0.add_permits(8);
    db.wait_for(
        "every job to succeed",
        "select count(*) = 8 from lq.finished_jobs where state = 'succeeded'",
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    let stalled: i64 = sqlx::query_scalar(
        "select case when is_called then last_value else 0 end from public.multi_row_writes",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        stalled >= 1,
        "a batch of several jobs was sent and cancelled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connections_opened_read_only_during_a_failover_are_not_reused_after_it() {
    // Sessions opened while the server is read-only stay read-only. The
    // failures, rescue and maintenance run on the runtime's pool: once the
    // server takes writes again, they must not keep failing on those sessions.
    lq_tests::init_tracing();
    let db = TestDb::new().await;
    let mut admin = PgConnection::connect(&db.url).await.unwrap();
    FailsHeld::enqueue_many(
        &db.pool,
        (0..3).map(|n| FailsHeld { n }),
        EnqueueOptions::new(),
    )
    .await
    .unwrap();
    let gate = Arc::new(Gate(Semaphore::new(0)));
    let rt = start_named(&db, "lq-test-failover-pool", &gate).await;
    fail_over(&mut admin, "lq-test-failover-pool").await;
    gate.0.add_permits(3);
    wait_logged(1, LIMIT, |e| {
        e.level == Level::WARN
            && e.message.contains("could not record the outcome")
            && e.field("error").is_some_and(|m| m.contains("read-only"))
    })
    .await;
    alter_database(&mut admin, "reset default_transaction_read_only").await;
    db.wait_for(
        "every failure to be written: three dead jobs",
        "select count(*) = 3 from lq.finished_jobs where state = 'dead'",
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
}
