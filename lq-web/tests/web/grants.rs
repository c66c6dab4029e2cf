//! A dashboard whose database refuses writes: a read-only operator's role
//! (SELECT only), or a read-only session (a standby), with actions switched on.
//! Pages work; an action is a 403 page saying why, and nothing changes.

use std::str::FromStr;

use axum::http::StatusCode;
use lq_tests::{admin_url, TestDb};
use lq_web::WebConfig;
use sqlx::{postgres::PgConnectOptions, Connection, PgConnection};

use crate::support::{get, mails, post, snapshot};

/// SELECT on every table, as docs/roles.md's read-only operator.
const READER_GRANTS: &str = "
    grant usage on schema lq to {role};
    grant select on lq.jobs, lq.finished_jobs, lq.all_jobs, lq.queues, lq.runtimes, lq.leader,
        lq.stats_minute, lq.cron_schedules, lq.cron_ticks, lq.schema_migrations to {role};";

/// A login role dropped (with its grants) when the value drops: its grants in
/// the test's database first, since a role holding any cannot be dropped, and
/// the database is still there when this drops.
struct Role(String, String);

impl Role {
    async fn create(db: &TestDb) -> Self {
        let name = format!("lq_web_ro_{:08x}", fastrand::u32(..));
        let mut admin = PgConnection::connect(&admin_url()).await.unwrap();
        sqlx::raw_sql(&format!("create role {name} login"))
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.ok();
        sqlx::raw_sql(&READER_GRANTS.replace("{role}", &name))
            .execute(&db.pool)
            .await
            .unwrap();
        Self(name, db.url.clone())
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        lq_tests::run_from_drop(self.1.clone(), vec![format!("drop owned by {}", self.0)]);
        lq_tests::run_as_admin_from_drop(vec![format!("drop role if exists {}", self.0)]);
    }
}

#[tokio::test]
async fn a_role_with_select_only_sees_everything_and_its_actions_are_refused_with_the_grant_named()
{
    let db = TestDb::new().await;
    let role = Role::create(&db).await;
    let ids = mails(&db, 3).await;
    db.finish(ids[0], "dead", 1.0).await;
    crate::support::declare_schedule(&db, "mail.digest", "mail").await;
    let reader = sqlx::PgPool::connect_with(
        PgConnectOptions::from_str(&db.url)
            .unwrap()
            .username(&role.0),
    )
    .await
    .unwrap();
    let app = lq_web::router(reader.clone(), WebConfig::new().actions(true));

    for page in [
        "/",
        "/jobs",
        &format!("/jobs/{}", ids[0]),
        "/queues",
        "/cron",
        "/runtimes",
        "/doctor",
    ] {
        get(&app, page).await.expect(StatusCode::OK);
    }
    let before = snapshot(&db).await;
    let (second, third) = (ids[1].to_string(), ids[2].to_string());
    for (path, fields) in [
        (format!("/jobs/{}/retry", ids[0]), vec![]),
        (format!("/jobs/{}/cancel", ids[1]), vec![]),
        (
            "/jobs/bulk".to_owned(),
            vec![
                ("action", "delete"),
                ("ids", &second),
                ("ids", &third),
                ("confirm", "2"),
            ],
        ),
        ("/queues/mail/pause".to_owned(), vec![]),
        ("/cron/mail.digest/run".to_owned(), vec![]),
    ] {
        post(&app, &path, &fields)
            .await
            .expect(StatusCode::FORBIDDEN)
            .has("permission denied")
            .has("docs/roles.md");
    }
    assert_eq!(
        snapshot(&db).await,
        before,
        "a refused action changed something"
    );
    reader.close().await;
}

#[tokio::test]
async fn a_read_only_database_session_refuses_actions_with_a_page_that_says_so() {
    let db = TestDb::new().await;
    let ids = mails(&db, 2).await;
    db.finish(ids[0], "dead", 1.0).await;
    // As on a standby, or a role with default_transaction_read_only.
    let read_only = sqlx::PgPool::connect_with(
        PgConnectOptions::from_str(&db.url)
            .unwrap()
            .options([("default_transaction_read_only", "on")]),
    )
    .await
    .unwrap();
    let app = lq_web::router(read_only.clone(), WebConfig::new().actions(true));
    get(&app, "/jobs?state=dead").await.expect(StatusCode::OK);
    let before = snapshot(&db).await;
    post(&app, &format!("/jobs/{}/retry", ids[0]), &[])
        .await
        .expect(StatusCode::FORBIDDEN)
        .has("the database is read-only here");
    post(&app, "/queues/mail/pause", &[])
        .await
        .expect(StatusCode::FORBIDDEN)
        .has("read-only");
    assert_eq!(snapshot(&db).await, before);
    read_only.close().await;
}
