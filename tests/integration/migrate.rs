//! The migration runner: idempotent and safe when run concurrently.

use lq_tests::TestDb;

#[tokio::test]
async fn migrate_is_idempotent_and_concurrent_safe() {
    let db = TestDb::new().await; // already migrated once
    let pools: Vec<_> = futures_util::future::join_all((0..4).map(|_| db.another_pool(2))).await;
    let runs = futures_util::future::join_all(pools.iter().map(lq_runtime::migrate)).await;
    for r in runs {
        r.unwrap();
    }
    assert_eq!(
        lq_runtime::schema_version(&db.pool).await.unwrap(),
        lq_runtime::SCHEMA_VERSION
    );
    let versions: i64 = sqlx::query_scalar("select count(*) from lq.schema_migrations")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(versions, i64::from(lq_runtime::SCHEMA_VERSION));
}

#[tokio::test]
async fn fresh_databases_migrate_concurrently() {
    let db = TestDb::new().await;
    sqlx::raw_sql("drop schema lq cascade")
        .execute(&db.pool)
        .await
        .unwrap();
    let pools: Vec<_> = futures_util::future::join_all((0..4).map(|_| db.another_pool(2))).await;
    let runs = futures_util::future::join_all(pools.iter().map(lq_runtime::migrate)).await;
    for r in runs {
        r.unwrap();
    }
    assert_eq!(
        lq_runtime::schema_version(&db.pool).await.unwrap(),
        lq_runtime::SCHEMA_VERSION
    );
}

#[tokio::test]
async fn runtime_refuses_an_unmigrated_database() {
    let db = TestDb::new().await;
    sqlx::raw_sql("drop schema lq cascade")
        .execute(&db.pool)
        .await
        .unwrap();
    let err = lq_runtime::Runtime::builder(db.pool.clone())
        .queue("default", 1)
        .start()
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("migrate"), "{err}");
}
