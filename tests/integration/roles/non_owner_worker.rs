//! What a worker that does not own the tables cannot do, it says.

use super::*;

/// With autovacuum off on `lq.jobs`, a worker that does not own the table cannot
/// vacuum it either: nothing would, so the runtime says so at its first check.
#[tokio::test]
async fn a_worker_that_cannot_vacuum_warns_when_autovacuum_is_off() {
    lq_tests::init_tracing();
    let mut roles = Roles::default();
    let worker = roles.create("lq_novac", "").await;
    let db = TestDb::new().await;
    grant(&db.pool, WORKER_GRANTS, &worker).await;
    sqlx::raw_sql("alter table lq.jobs set (autovacuum_enabled = false)")
        .execute(&db.pool)
        .await
        .unwrap();
    let pool = pool_as(&db, &worker, 2).await;
    let rt = Runtime::builder(pool.clone())
        .config(quick())
        .queue("roles_vacuum_q", 1)
        .start()
        .await
        .unwrap();
    let warned = lq_tests::logs::wait_logged(1, LIMIT, |e| {
        e.target == "lq_runtime::vacuumer"
            && e.field("table") == Some("lq.jobs")
            && e.message.contains("does not own it")
    })
    .await;
    assert!(
        warned[0].message.contains("autovacuum is off"),
        "{warned:#?}"
    );
    rt.shutdown().await.unwrap();
    drop(pool);
    drop(db);
}
