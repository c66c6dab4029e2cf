//! Graceful shutdown: finish within the grace period or hand back at once.

use std::time::Duration;

use lq_runtime::{Job, JobState, Runtime, RuntimeConfig};
use lq_tests::TestDb;

use crate::jobs::{quick, start_runtime, Ledger, Noop, Patient, CLAIM_WAITS_FOR_LOCK};

#[tokio::test]
async fn unfinished_jobs_go_back_to_the_queue_without_spending_an_attempt() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let ids: Vec<i64> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(Patient.enqueue(&db.pool).await.unwrap().id);
        }
        v
    };
    let config = RuntimeConfig {
        shutdown_grace: Duration::from_millis(200),
        ..quick()
    };
    let rt = start_runtime(&db, "default", 8, config, &ledger).await;
    db.wait_for(
        "all three running",
        "select count(*) = 3 from lq.all_jobs where state = 'running'",
        Duration::from_secs(30),
    )
    .await;
    rt.shutdown().await.unwrap();
    for id in ids {
        let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
        assert_eq!((row.state, row.attempts), (JobState::Queued, 0), "job {id}");
        assert!(row.lease_owner.is_none());
        assert!(row.errors.is_empty());
    }
}

#[tokio::test]
async fn jobs_that_finish_within_the_grace_period_are_recorded() {
    let db = TestDb::new().await;
    for n in 0..100 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    let rt = Runtime::builder(db.pool.clone())
        .queue("default", 4)
        .state(Ledger::default())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "some progress",
        "select count(*) > 0 from lq.all_jobs where state = 'succeeded'",
        Duration::from_secs(30),
    )
    .await;
    rt.shutdown().await.unwrap();
    // Nothing is left running, nothing holds a lease.
    assert_eq!(db.count("running").await, 0);
    let leased: i64 =
        sqlx::query_scalar("select count(*) from lq.all_jobs where lease_token is not null")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(leased, 0);
    assert_eq!(db.count("succeeded").await + db.count("queued").await, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_still_in_flight_when_the_grace_period_ends_hands_its_jobs_back() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    for n in 0..5 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    // Writes to the queue table wait behind this lock (as behind a migration), so
    // the runtime's first claim is held up on the server.
    let mut stall = db.pool.begin().await.unwrap();
    sqlx::query("lock table lq.jobs in share mode")
        .execute(&mut *stall)
        .await
        .unwrap();
    let config = RuntimeConfig {
        db_timeout: Duration::from_secs(5),
        shutdown_grace: Duration::from_millis(10),
        ..quick()
    };
    let rt = start_runtime(&db, "default", 4, config, &ledger).await;
    db.wait_for(
        "the runtime's claim to wait for the lock",
        CLAIM_WAITS_FOR_LOCK,
        Duration::from_secs(30),
    )
    .await;
    let stopped = tokio::spawn(rt.shutdown());
    // The claim returns fifty grace periods after shutdown began.
    sqlx::query("select pg_sleep(0.5)")
        .execute(&mut *stall)
        .await
        .unwrap();
    stall.commit().await.unwrap();
    stopped.await.unwrap().unwrap();

    let rows: Vec<(String, i32, bool)> = sqlx::query_as(
        "select state::text, attempts, lease_token is null from lq.all_jobs order by id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![("queued".to_owned(), 0, true); 5],
        "every job the late claim took went back, its attempt unspent"
    );
    assert!(ledger.counts().is_empty(), "{:?}", ledger.counts());
}

/// True once the runtime's analyze of the history waits on the test's advisory lock.
const ANALYZE_WAITS: &str = "select exists (select from pg_stat_activity
    where datname = current_database() and wait_event_type = 'Lock'
      and query like 'analyze%lq.finished_jobs')";

#[tokio::test]
async fn a_vacuum_running_when_shutdown_begins_is_cancelled_not_waited_for() {
    let db = TestDb::new().await;
    // An index whose expression waits for an advisory lock: analyzing the history
    // evaluates it on sampled rows, so the leader's analyze runs as long as the
    // test holds the lock. 2,000 rows never analyzed make the leader analyze.
    sqlx::raw_sql(
        "create function lq.test_gate(bigint) returns bigint language plpgsql immutable as $$
         begin
             perform pg_advisory_lock_shared(4242);
             perform pg_advisory_unlock_shared(4242);
             return $1;
         end $$;
         create index finished_jobs_gate on lq.finished_jobs (lq.test_gate(id));
         alter table lq.finished_jobs set (autovacuum_enabled = off);
         insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at,
             attempts, max_attempts, errors, created_at, finished_at)
         select n, 'test.noop', 'default', 0, '{}', 'succeeded', now(), 1, 1, '[]', now(), now()
         from generate_series(1, 2000) as n",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut gate = db.pool.acquire().await.unwrap();
    sqlx::query("select pg_advisory_lock(4242)")
        .execute(&mut *gate)
        .await
        .unwrap();
    // The vacuum's own bound (six db timeouts) is far past the grace period, so
    // without a cancel shutdown would wait the whole grace period and leave the
    // analyze running behind it.
    let config = RuntimeConfig {
        db_timeout: Duration::from_secs(30),
        shutdown_grace: Duration::from_secs(60),
        ..quick()
    };
    let rt = start_runtime(&db, "default", 2, config, &Ledger::default()).await;
    db.wait_for(
        "the leader's analyze to wait for the lock",
        ANALYZE_WAITS,
        Duration::from_secs(30),
    )
    .await;
    rt.shutdown().await.unwrap();

    let still_running: bool = sqlx::query_scalar(
        "select exists (select from pg_stat_activity
         where datname = current_database() and query like 'analyze%lq.finished_jobs'
           and state = 'active')",
    )
    .fetch_one(&mut *gate)
    .await
    .unwrap();
    assert!(!still_running, "shutdown left the analyze running");
    let analyzed: bool = sqlx::query_scalar(
        "select last_analyze is not null from pg_stat_user_tables
         where relid = 'lq.finished_jobs'::regclass",
    )
    .fetch_one(&mut *gate)
    .await
    .unwrap();
    assert!(!analyzed, "the analyze was cancelled, not finished");
    sqlx::query("select pg_advisory_unlock(4242)")
        .execute(&mut *gate)
        .await
        .unwrap();
}
