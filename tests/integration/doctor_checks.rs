//! What `control::doctor` judges autovacuum by: the storage option however it
//! was spelt, and `track_counts`.

use lq_core::db::{self, maintenance::JobTable};
use lq_runtime::control;
use lq_tests::TestDb;

/// The doctor's figures, read on a connection of `db`'s pool.
async fn figures(db: &TestDb) -> db::doctor::Figures {
    let mut conn = db.pool.acquire().await.unwrap();
    db::doctor::doctor_figures(&mut conn, 60.0).await.unwrap()
}

/// The doctor's check named `name`.
async fn check(pool: &sqlx::PgPool, name: &str) -> control::Check {
    control::doctor(pool)
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} check"))
}

#[tokio::test]
async fn autovacuum_turned_off_on_lq_jobs_is_seen_however_it_was_spelt() {
    let db = TestDb::new().await;
    for (spelling, off) in [
        ("off", true),
        ("false", true),
        ("0", true),
        ("no", true),
        ("f", true),
        ("'FALSE'", true),
        ("on", false),
        ("1", false),
        ("yes", false),
        ("'TRUE'", false),
    ] {
        sqlx::raw_sql(&format!(
            "alter table lq.jobs set (autovacuum_enabled = {spelling})"
        ))
        .execute(&db.pool)
        .await
        .unwrap();
        assert_eq!(figures(&db).await.jobs_autovacuum_off, off, "{spelling}");
        let mut conn = db.pool.acquire().await.unwrap();
        let stats = db::maintenance::job_table_stats(&mut conn, JobTable::Live)
            .await
            .unwrap();
        if off {
            assert!(stats.autovacuum_off, "{spelling}");
            let autovacuum = check(&db.pool, "autovacuum").await;
            assert!(!autovacuum.ok, "{spelling}: {autovacuum:?}");
        }
    }
}

/// Without `track_counts` autovacuum never finds a table to vacuum: the check
/// fails even where the server's `autovacuum` is on.
#[tokio::test]
async fn autovacuum_without_track_counts_is_reported_as_not_running() {
    let db = TestDb::new().await;
    let server_autovacuum: bool = sqlx::query_scalar("select current_setting('autovacuum')::bool")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(figures(&db).await.autovacuum, server_autovacuum);
    let name: String = sqlx::query_scalar("select current_database()::text")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    sqlx::raw_sql(&format!("alter database {name} set track_counts = off"))
        .execute(&db.pool)
        .await
        .unwrap();
    // Fresh sessions take the database's setting.
    let pool = db.another_pool(2).await;
    let mut conn = pool.acquire().await.unwrap();
    let f = db::doctor::doctor_figures(&mut conn, 60.0).await.unwrap();
    drop(conn);
    assert!(!f.autovacuum, "{f:?}");
    let autovacuum = check(&pool, "autovacuum").await;
    assert!(!autovacuum.ok, "{autovacuum:?}");
    pool.close().await;
}
