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

/// Version 3 moves finished jobs out of `lq.jobs`: an upgrade carries every
/// existing job over, live ones staying and finished ones moving, ids kept.
#[tokio::test]
async fn upgrading_to_version_3_moves_finished_jobs_to_the_history() {
    let db = TestDb::new().await;
    sqlx::raw_sql(concat!(
        "drop schema lq cascade;
         create schema lq;
         create table lq.schema_migrations (
             version integer primary key, name text not null, applied_at timestamptz not null default now());
         insert into lq.schema_migrations (version, name) values (1, '0001_jobs'), (2, '0002_cron');
         ",
        include_str!("../../migrations/0001_jobs.sql"),
        include_str!("../../migrations/0002_cron.sql"),
        "
         insert into lq.jobs (kind, queue, payload, max_attempts, state, attempts, finished_at)
         values ('a', 'default', '{}', 3, 'queued', 0, null),
                ('b', 'default', '{}', 3, 'succeeded', 1, now()),
                ('c', 'default', '{}', 3, 'dead', 3, now());"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    lq_runtime::migrate(&db.pool).await.unwrap();
    assert_eq!(
        lq_runtime::schema_version(&db.pool).await.unwrap(),
        lq_runtime::SCHEMA_VERSION
    );
    let live: Vec<(i64, String)> = sqlx::query_as("select id, kind from lq.jobs")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(live, vec![(1, "a".to_owned())]);
    let finished: Vec<(i64, String, String)> =
        sqlx::query_as("select id, kind, state::text from lq.finished_jobs order by id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        finished,
        vec![
            (2, "b".to_owned(), "succeeded".to_owned()),
            (3, "c".to_owned(), "dead".to_owned())
        ]
    );
    let all: i64 = sqlx::query_scalar("select count(*) from lq.all_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(all, 3);
}
