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
