//! A grant revoked from the runtime's role while it runs (a careless operator,
//! a migration tool resetting privileges): the writes it needs are refused and
//! retried, nothing is lost, ended early or run twice, and once the grant is
//! back every job ends.

use std::time::{Duration, Instant};

use lq_runtime::{EnqueueOptions, Job, Runtime};
use lq_tests::{logs::wait_logged, TestDb};

use crate::{
    jobs::{quick, Ledger, Noop},
    roles::{grant, pool_as, Roles, WORKER_GRANTS},
};

const JOBS: usize = 4;
const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn completions_refused_while_a_grant_is_revoked_land_once_it_is_back() {
    let mut roles = Roles::default();
    let db = TestDb::new().await;
    let worker = roles.create("lq_revoked", "").await;
    grant(&db.pool, WORKER_GRANTS, &worker).await;
    let ledger = Ledger::default();
    let rt = Runtime::builder(pool_as(&db, &worker, 10).await)
        .config(quick())
        .queue("default", JOBS)
        .state(ledger.clone())
        .start()
        .await
        .unwrap();

    // Every outcome is written into the history: without INSERT there, none lands.
    sqlx::raw_sql(&format!("revoke insert on lq.finished_jobs from {worker}"))
        .execute(&db.pool)
        .await
        .unwrap();
    let ids = Noop::enqueue_many(
        &db.pool,
        (0..JOBS as u64).map(|n| Noop { n }),
        EnqueueOptions::new(),
    )
    .await
    .unwrap()
    .ids;
    let started = Instant::now();
    while ledger.counts().len() < JOBS {
        assert!(
            started.elapsed() < LIMIT,
            "the handlers ran: {:?}",
            ledger.counts()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The completer's write was refused (no other test revokes this grant).
    wait_logged(1, LIMIT, |e| {
        e.message.starts_with("could not mark jobs succeeded")
            && e.field("error")
                .is_some_and(|m| m.contains("permission denied for table finished_jobs"))
    })
    .await;
    let running: i64 =
        sqlx::query_scalar("select count(*) from lq.jobs where state = 'running' and id = any($1)")
            .bind(&ids)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        running, JOBS as i64,
        "refused completions leave the jobs leased"
    );

    grant(
        &db.pool,
        "grant insert on lq.finished_jobs to {role};",
        &worker,
    )
    .await;
    db.wait_idle(LIMIT).await;
    let stats = rt.shutdown_with_stats().await.unwrap();
    let succeeded: i64 = sqlx::query_scalar(
        "select count(*) from lq.finished_jobs where state = 'succeeded' and id = any($1)",
    )
    .bind(&ids)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(succeeded, JOBS as i64, "{stats:?}");
    assert!(
        ledger.counts().values().all(|n| *n == 1),
        "each job ran once: {:?}",
        ledger.counts()
    );
    assert_eq!((stats.lease_lost, stats.dead), (0, 0), "{stats:?}");
}
