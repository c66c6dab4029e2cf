//! The operator role of docs/roles.md: with exactly those grants every `control`
//! call works; with SELECT only, reads work and actions fail with the server's
//! permission error, changing nothing.

use std::time::Duration;

use lq_runtime::{control, CoreError, EnqueueOptions, Job, JobFilter, JobState};
use lq_tests::TestDb;

use crate::{
    jobs::Noop,
    roles::{grant, pool_as, Roles},
};

/// The operator's grants, as docs/roles.md gives them.
const OPERATOR_GRANTS: &str = "
    grant usage on schema lq to {role};
    grant select, insert, update, delete on lq.jobs, lq.finished_jobs to {role};
    grant select, insert, update on lq.queues to {role};
    grant select on lq.id_marks to {role};
    grant select on lq.all_jobs, lq.runtimes, lq.leader, lq.cron_schedules, lq.cron_ticks, lq.stats_minute,
        lq.schema_migrations, lq.rate_limits to {role};
    grant pg_monitor to {role};";

/// A read-only operator: SELECT on every table but `lq.rate_limits` (as
/// docs/roles.md gave them before schema 13), which hides only the rate limits.
const READER_GRANTS: &str = "
    grant usage on schema lq to {role};
    grant select on lq.jobs, lq.finished_jobs, lq.all_jobs, lq.queues, lq.runtimes, lq.leader, lq.stats_minute,
        lq.cron_schedules, lq.cron_ticks, lq.schema_migrations to {role};";

fn is_permission_denied(e: &CoreError) -> bool {
    matches!(e, CoreError::Database { source: sqlx::Error::Database(d), .. }
        if d.code().as_deref() == Some("42501"))
}

#[tokio::test]
async fn an_operator_with_the_documented_grants_can_do_everything_and_a_reader_only_read() {
    let mut roles = Roles::default();
    let operator = roles.create("lq_op", "").await;
    let reader = roles.create("lq_ro", "").await;
    let db = TestDb::new().await;
    grant(&db.pool, OPERATOR_GRANTS, &operator).await;
    grant(&db.pool, READER_GRANTS, &reader).await;
    let ids = Noop::enqueue_many(&db.pool, (0..4).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    db.finish(ids[0], "dead", 1.0).await;
    // A schedule as a runtime declares it, to run now.
    sqlx::query(
        "insert into lq.cron_schedules (kind, last_tick, queue, payload, priority, max_attempts)
         values ('test.noop', now(), 'reports', '{\"n\": 9}', 0, 3)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // A rate limit's bucket, as a runtime with one leaves it.
    sqlx::query("insert into lq.rate_limits values ('default', 2.5, 5, 1, now())")
        .execute(&db.pool)
        .await
        .unwrap();
    let ops = pool_as(&db, &operator, 2).await;
    let ro = pool_as(&db, &reader, 2).await;

    for pool in [&ops, &ro] {
        assert_eq!(
            control::list(pool, &JobFilter::new(), 10)
                .await
                .unwrap()
                .len(),
            4
        );
        assert!(!control::count(pool, &JobFilter::new())
            .await
            .unwrap()
            .is_empty());
        control::get(pool, ids[0]).await.unwrap();
        let queues = control::queues(pool).await.unwrap();
        let rate = queues
            .iter()
            .find(|q| q.name == "default")
            .unwrap()
            .rate_limit
            .as_ref();
        if std::ptr::eq(pool, &ops) {
            let rate = rate.expect("the operator reads the rate limit");
            assert_eq!(rate.limit, lq_runtime::RateLimit::per_second(5));
            assert!(rate.tokens >= 2.5, "{rate:?}");
        } else {
            assert_eq!(rate, None, "the reader may not read lq.rate_limits");
        }
        control::runtimes(pool).await.unwrap();
        control::cron_schedules(pool).await.unwrap();
        control::stats(pool, Duration::from_secs(3600))
            .await
            .unwrap();
        control::doctor(pool).await.unwrap();
    }

    // The reader's actions are refused by the server, and change nothing.
    let dead = JobFilter::new().state(JobState::Dead);
    let refused = [
        control::pause_queue(&ro, "default", "ro").await.map(drop),
        control::retry_matching(&ro, &dead, None).await.map(drop),
        control::cancel(&ro, ids[1]).await.map(drop),
        control::delete_matching(&ro, &JobFilter::new(), None)
            .await
            .map(drop),
        control::prune(&ro, Duration::ZERO, Duration::ZERO)
            .await
            .map(drop),
        control::cron_run_now(&ro, "test.noop", "ro")
            .await
            .map(drop),
    ];
    for r in refused {
        let e = r.unwrap_err();
        assert!(is_permission_denied(&e), "{e:?}");
    }
    assert_eq!(db.count("queued").await, 3);
    assert_eq!(db.count("dead").await, 1);

    // The operator's go through.
    let ran = control::cron_run_now(&ops, "test.noop", "op")
        .await
        .unwrap();
    assert_eq!(control::get(&ops, ran).await.unwrap().queue, "reports");
    assert!(control::pause_queue(&ops, "default", "op").await.unwrap());
    assert!(control::resume_queue(&ops, "default").await.unwrap());
    let r = control::retry_matching(&ops, &dead, None).await.unwrap();
    assert_eq!(r.done, vec![ids[0]]);
    assert_eq!(
        control::cancel(&ops, ids[1]).await.unwrap(),
        JobState::Queued
    );
    let r = control::delete_matching(&ops, &JobFilter::new().state(JobState::Cancelled), None)
        .await
        .unwrap();
    assert_eq!(r.done, vec![ids[1]]);
    db.finish(ids[2], "succeeded", 3600.0).await;
    assert_eq!(
        control::prune(&ops, Duration::from_secs(60), Duration::from_secs(60))
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn the_doctor_says_when_it_cannot_see_other_roles_transactions() {
    // PostgreSQL hides when another role's transaction began from a role
    // without pg_read_all_stats: a transaction the application left open would
    // read as none, and the check pass.
    let mut roles = Roles::default();
    let operator = roles.create("lq_op", "").await;
    let reader = roles.create("lq_ro", "").await;
    let db = TestDb::new().await;
    grant(&db.pool, OPERATOR_GRANTS, &operator).await;
    grant(&db.pool, READER_GRANTS, &reader).await;
    let mut open = db.pool.begin().await.unwrap();
    sqlx::query("select pg_current_xact_id()")
        .execute(&mut *open)
        .await
        .unwrap();
    let transactions = |checks: Vec<control::Check>| {
        checks
            .into_iter()
            .find(|c| c.name == "transactions")
            .expect("a transactions check")
    };
    let blind = transactions(
        control::doctor(&pool_as(&db, &reader, 1).await)
            .await
            .unwrap(),
    );
    assert!(!blind.ok, "{blind:?}");
    assert!(blind.detail.contains("pg_monitor"), "{blind:?}");
    let seeing = transactions(
        control::doctor(&pool_as(&db, &operator, 1).await)
            .await
            .unwrap(),
    );
    assert!(seeing.ok, "{seeing:?}");
    open.rollback().await.unwrap();
}

/// PostgreSQL hides another role's session type from a role without
/// pg_read_all_stats; the connections check still counts those sessions, so
/// a reader's doctor does not read a full server as an empty one.
#[tokio::test]
async fn the_doctor_counts_other_roles_connections_for_a_role_that_cannot_see_them() {
    let mut roles = Roles::default();
    let reader = roles.create("lq_ro", "").await;
    let db = TestDb::new().await;
    grant(&db.pool, READER_GRANTS, &reader).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(db.pool.acquire().await.unwrap());
    }
    let checks = control::doctor(&pool_as(&db, &reader, 1).await)
        .await
        .unwrap();
    let connections = checks
        .into_iter()
        .find(|c| c.name == "connections")
        .expect("a connections check");
    let in_use: i64 = connections
        .detail
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{connections:?}"));
    assert!(
        in_use >= 4,
        "three held as another role and the reader's own: {connections:?}"
    );
    drop(held);
}
