//! The test support's own clean-up: databases left behind by ended runs are
//! dropped; those of a live run are kept.

use lq_tests::{admin_url, drop_databases_of_ended_runs};
use sqlx::{Connection, PgConnection};

async fn exists(admin: &mut PgConnection, name: &str) -> bool {
    sqlx::query_scalar("select exists (select from pg_database where datname = $1)")
        .bind(name)
        .fetch_one(admin)
        .await
        .unwrap()
}

#[tokio::test]
async fn databases_of_ended_runs_are_dropped_and_live_ones_kept() {
    // A process that has ended: its pid names no running process.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let ended = child.id();
    child.wait().unwrap();
    let tag = format!("{:04x}", fastrand::u16(..));
    let left = format!("lq_test_{ended}_0_{tag}");
    let live = format!("lq_test_{}_999999_{tag}", std::process::id());
    let mut admin = PgConnection::connect(&admin_url()).await.unwrap();
    for name in [&left, &live] {
        sqlx::raw_sql(&format!("create database {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    drop_databases_of_ended_runs(&mut admin).await;
    let (left_kept, live_kept) = (
        exists(&mut admin, &left).await,
        exists(&mut admin, &live).await,
    );
    for statement in [
        format!("drop database if exists {left}"),
        format!("drop database {live}"),
    ] {
        sqlx::raw_sql(&statement).execute(&mut admin).await.unwrap();
    }
    assert!(!left_kept, "{left}, of a process that ended, was left");
    assert!(live_kept, "{live}, of this running process, was dropped");
}
