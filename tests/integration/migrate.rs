//! The migration runner: idempotent and safe when run concurrently.

use std::time::Duration;

use lq_tests::TestDb;

#[tokio::test]
async fn migrate_is_idempotent_and_concurrent_safe() {
    let db = TestDb::new().await; // already migrated once
    migrate_from_four_processes(&db).await;
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
    migrate_from_four_processes(&db).await;
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
    let err = start_error(&db).await;
    assert!(err.to_string().contains("migrate"), "{err}");
}

/// Why a runtime serving `default` refuses to start on `db`.
async fn start_error(db: &TestDb) -> lq_runtime::Error {
    lq_runtime::Runtime::builder(db.pool.clone())
        .queue("default", 1)
        .start()
        .await
        .err()
        .expect("the runtime started")
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

/// Version 8 moves two of `lq.jobs`'s checks into types (`lq.live_state`,
/// `lq.attempt_limit`). An upgrade keeps every live job and its lease and the
/// grants on `lq.all_jobs`, and a statement written for version 7 (states typed
/// `lq.job_state`) still works, so runtimes not yet replaced keep finishing their
/// jobs.
#[tokio::test]
async fn upgrading_to_version_8_keeps_live_jobs_leases_and_version_7_statements() {
    let db = TestDb::new().await;
    let mut v7 = version_7_schema();
    v7.push_str(
        "insert into lq.jobs (kind, queue, payload, max_attempts, state, attempts, unique_key,
             lease_token, lease_owner, lease_expires_at)
         values ('a', 'default', '{}', 3, 'queued', 0, 'key-a', null, null, null),
                ('b', 'default', '{}', 3, 'running', 1, null,
                 'a5f2c9a4-51c4-4a43-8d7e-0c7a4f0d9a11', 'worker-1', now() + interval '1 hour');",
    );
    // docs/roles.md grants the operator role read on the view.
    v7.push_str("grant select on lq.all_jobs to public;");
    sqlx::raw_sql(&v7).execute(&db.pool).await.unwrap();
    let view_before = view_oid_and_grants(&db.pool).await;
    lq_runtime::migrate(&db.pool).await.unwrap();
    assert_eq!(
        lq_runtime::schema_version(&db.pool).await.unwrap(),
        lq_runtime::SCHEMA_VERSION
    );
    // The view was replaced in place: the same object, its grants kept.
    let view_after = view_oid_and_grants(&db.pool).await;
    assert_eq!(view_after, view_before);
    assert!(view_after.1.contains("=r/"), "{view_after:?}");

    let live: Vec<(i64, String, Option<String>, Option<String>)> = sqlx::query_as(
        "select id, state::text, unique_key, lease_token::text from lq.jobs order by id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        live,
        vec![
            (1, "queued".to_owned(), Some("key-a".to_owned()), None),
            (
                2,
                "running".to_owned(),
                None,
                Some("a5f2c9a4-51c4-4a43-8d7e-0c7a4f0d9a11".to_owned())
            ),
        ]
    );
    // The view still reads states as `lq.job_state`, so its callers see no change.
    let state: lq_runtime::JobState =
        sqlx::query_scalar("select state from lq.all_jobs where id = 2")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(state, lq_runtime::JobState::Running);

    // A version-7 runtime's retry: the next state typed `lq.job_state`, and the
    // requeued row's state (now `lq.live_state`) in a union with the history's.
    let requeued: Option<lq_runtime::JobState> = sqlx::query_scalar(
        "with cur as materialized (
             select id, case when attempts >= max_attempts then 'dead' else 'queued' end::lq.job_state as next
             from lq.jobs
             where id = 2 and lease_token = 'a5f2c9a4-51c4-4a43-8d7e-0c7a4f0d9a11' and state = 'running'
             for update
         ),
         requeued as (
             update lq.jobs j set state = 'queued', lease_token = null, lease_owner = null,
                 lease_expires_at = null
             from cur where j.id = cur.id and cur.next = 'queued'
             returning j.id, j.state
         ),
         archived as (select id, state from lq.finished_jobs where false)
         select state from requeued union all select state from archived",
    )
    .fetch_optional(&db.pool)
    .await
    .unwrap();
    assert_eq!(requeued, Some(lq_runtime::JobState::Queued));
    // A final state typed `lq.job_state` is still assignable, and still refused.
    let final_state = sqlx::query("update lq.jobs set state = 'dead'::lq.job_state where id = 1")
        .execute(&db.pool)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        final_state.contains("invalid input value for enum lq.live_state: \"dead\""),
        "{final_state}"
    );

    // The `max_attempts >= 1` check is the domain's now.
    let zero = sqlx::query(
        "insert into lq.jobs (kind, queue, payload, max_attempts) values ('z', 'default', '{}', 0)",
    )
    .execute(&db.pool)
    .await
    .unwrap_err()
    .to_string();
    assert!(
        zero.contains("violates check constraint \"attempt_limit_at_least_one\""),
        "{zero}"
    );
    // The lease check is still a constraint.
    let leaseless = sqlx::query("update lq.jobs set state = 'running' where id = 1")
        .execute(&db.pool)
        .await
        .unwrap_err()
        .to_string();
    assert!(leaseless.contains("jobs_lease_iff_running"), "{leaseless}");
}

/// `lq.all_jobs`'s object id and its access list.
async fn view_oid_and_grants(pool: &sqlx::PgPool) -> (i64, String) {
    sqlx::query_as(
        "select oid::int8, coalesce(relacl::text, '') from pg_class where oid = 'lq.all_jobs'::regclass",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Four `migrate()` calls at once, each on a pool of its own (as four processes
/// starting together would); each must succeed.
async fn migrate_from_four_processes(db: &TestDb) {
    let pools: Vec<_> = futures_util::future::join_all((0..4).map(|_| db.another_pool(2))).await;
    let runs = futures_util::future::join_all(pools.iter().map(lq_runtime::migrate)).await;
    for r in runs {
        r.unwrap();
    }
}

/// Replaces `db`'s schema with version 7's ([`version_7_schema`]).
async fn back_to_version_7(db: &TestDb) {
    sqlx::raw_sql(&version_7_schema())
        .execute(&db.pool)
        .await
        .unwrap();
}

/// SQL that replaces the `lq` schema with version 7's, as a database migrated
/// before version 8 has it.
fn version_7_schema() -> String {
    let mut v7 = String::from(
        "drop schema lq cascade;
         create schema lq;
         create table lq.schema_migrations (
             version integer primary key, name text not null, applied_at timestamptz not null default now());
         insert into lq.schema_migrations (version, name) values
             (1, '0001_jobs'), (2, '0002_cron'), (3, '0003_finished_jobs'), (4, '0004_unique_per_kind'),
             (5, '0005_operations'), (6, '0006_stats'), (7, '0007_claim_room');
         ",
    );
    for sql in [
        include_str!("../../migrations/0001_jobs.sql"),
        include_str!("../../migrations/0002_cron.sql"),
        include_str!("../../migrations/0003_finished_jobs.sql"),
        include_str!("../../migrations/0004_unique_per_kind.sql"),
        include_str!("../../migrations/0005_operations.sql"),
        include_str!("../../migrations/0006_stats.sql"),
        include_str!("../../migrations/0007_claim_room.sql"),
    ] {
        v7.push_str(sql);
        v7.push('\n');
    }
    v7
}

/// An upgrade that rewrites `lq.jobs` waits for an application's transaction
/// left open on it. Every statement on the table queues behind that wait, so the
/// migration gives way after a short wait and tries again: an enqueue made
/// meanwhile goes through, and the migration applies once the transaction ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_waiting_for_a_lock_lets_the_queue_work_meanwhile() {
    let db = TestDb::new().await;
    back_to_version_7(&db).await;
    let insert =
        "insert into lq.jobs (kind, queue, payload, max_attempts) values ('a', 'default', '{}', 3)";
    let mut open = db.pool.begin().await.unwrap();
    sqlx::query(insert).execute(&mut *open).await.unwrap();

    let meanwhile = async {
        db.wait_for(
            "the migration to wait for the open transaction's lock",
            "select exists (select from pg_stat_activity
               where datname = current_database() and wait_event_type = 'Lock'
                 and query like '-- litequeue schema, version 8%')",
            Duration::from_secs(60),
        )
        .await;
        // Queued behind the migration's lock request until the migration gives way.
        tokio::time::timeout(
            Duration::from_secs(30),
            sqlx::query(insert).execute(&db.pool),
        )
        .await
        .expect("an enqueue waited behind the migration as long as the transaction stayed open")
        .unwrap();
        open.commit().await.unwrap();
    };
    let (migrated, ()) = tokio::join!(lq_runtime::migrate(&db.pool), meanwhile);
    migrated.unwrap();
    assert_eq!(
        lq_runtime::schema_version(&db.pool).await.unwrap(),
        lq_runtime::SCHEMA_VERSION
    );
    let jobs: i64 = sqlx::query_scalar("select count(*) from lq.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 2);
}

/// Records a migration a later build would have applied, serving builds from
/// `serves_from` on, as that build's `migrate()` would.
async fn record_future_migration(db: &TestDb, version: i32, serves_from: i32) {
    sqlx::query(
        "insert into lq.schema_migrations (version, name, serves_from) values ($1, $2, $3)",
    )
    .bind(version)
    .bind(format!("{version:04}_from_a_later_build"))
    .bind(serves_from)
    .execute(&db.pool)
    .await
    .unwrap();
}

/// A rolling deploy: a newer build has migrated, and its migration records that
/// it still serves this build (an index, say). This build's processes keep
/// starting and running jobs; `migrate()` changes nothing, nothing is pending,
/// and the doctor says the build is behind without failing the check.
#[tokio::test]
async fn a_newer_schema_that_still_serves_this_build_lets_it_run() {
    let db = TestDb::new().await;
    let known = lq_runtime::SCHEMA_VERSION;
    record_future_migration(&db, known + 1, known).await;
    record_future_migration(&db, known + 2, known - 1).await;

    lq_runtime::migrate(&db.pool).await.unwrap();
    assert_eq!(
        lq_runtime::schema_version(&db.pool).await.unwrap(),
        known + 2
    );
    assert!(lq_runtime::pending_migrations(&db.pool)
        .await
        .unwrap()
        .is_empty());
    let schema = lq_core::control::doctor(&db.pool).await.unwrap();
    assert!(schema[0].ok, "{:?}", schema[0]);
    assert!(
        schema[0].detail.contains("still serving"),
        "{:?}",
        schema[0]
    );
    assert!(schema.len() > 1, "the doctor stopped at the schema check");

    let id = lq_runtime::Job::enqueue(&crate::jobs::Noop { n: 1 }, &db.pool)
        .await
        .unwrap()
        .id;
    let stats = lq_runtime::Runtime::builder(db.pool.clone())
        .queue("default", 2)
        .state(crate::jobs::Ledger::default())
        .drain()
        .await
        .unwrap();
    assert_eq!(stats.succeeded, 1);
    let state: String = sqlx::query_scalar("select state::text from lq.all_jobs where id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(state, "succeeded");
}

/// A newer schema with one migration above this build that no longer serves it
/// (it changed what this build's statements read or write): the runtime refuses
/// to start, `migrate()` and the dry run refuse, and the doctor fails the check.
#[tokio::test]
async fn a_newer_schema_that_no_longer_serves_this_build_is_refused() {
    let db = TestDb::new().await;
    let known = lq_runtime::SCHEMA_VERSION;
    record_future_migration(&db, known + 1, known).await;
    record_future_migration(&db, known + 2, known + 1).await;

    let too_new = |e: &lq_core::Error| {
        matches!(e, lq_core::Error::SchemaTooNew { found, known: k }
            if *found == known + 2 && *k == known)
    };
    let e = lq_runtime::migrate(&db.pool).await.unwrap_err();
    assert!(too_new(&e), "{e:?}");
    let e = lq_runtime::pending_migrations(&db.pool).await.unwrap_err();
    assert!(too_new(&e), "{e:?}");
    let err = start_error(&db).await;
    assert!(
        matches!(&err, lq_runtime::Error::Core(e) if too_new(e)),
        "{err:?}"
    );
    let schema = lq_core::control::doctor(&db.pool).await.unwrap();
    assert_eq!(schema.len(), 1);
    assert!(!schema[0].ok);
    assert!(
        schema[0].detail.contains("no longer serves"),
        "{:?}",
        schema[0]
    );
    let versions: i64 = sqlx::query_scalar("select count(*) from lq.schema_migrations")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        versions,
        i64::from(known + 2),
        "a refused migrate changed the table"
    );
}

/// Several processes upgrading one database at once (a rolling deploy, each
/// calling `migrate()` at start), from a version before 10, which alters the
/// version table itself: every call succeeds, and the versions are recorded
/// once each. A migrator that read the version inside its transaction kept a
/// lock on that table while it waited for the migration lock, and deadlocked
/// with the one applying version 10.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_upgrades_across_the_version_table_change_all_succeed() {
    let db = TestDb::new().await;
    back_to_version_7(&db).await;
    migrate_from_four_processes(&db).await;
    let versions: Vec<i32> =
        sqlx::query_scalar("select version from lq.schema_migrations order by version")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        versions,
        (1..=lq_runtime::SCHEMA_VERSION).collect::<Vec<_>>()
    );
}

/// Every migration records the oldest build it serves, as this build declares
/// it, whether the database was migrated fresh or upgraded from a version that
/// had no such column: each
/// serves only its own version, except 9 and 11 (indexes), 10 (the column
/// itself), 12 (columns on the cron schedules, named by every statement) and
/// 13 (a table only rate limits use), 14 (views only newer claims lock), 15
/// (a table only newer prunes use, an index the old prune only sped up) and 16
/// (a column on the runtimes' rows that older statements do not name).
#[tokio::test]
async fn each_migration_records_the_oldest_build_it_serves() {
    let expected: Vec<(i32, i32)> = (1..=lq_runtime::SCHEMA_VERSION)
        .map(|v| match v {
            9 => (9, 8),
            10 => (10, 9),
            11 => (11, 10),
            12 => (12, 11),
            13 => (13, 11),
            14 => (14, 11),
            15 => (15, 11),
            16 => (16, 11),
            v => (v, v),
        })
        .collect();
    // What the build declares beside each migration, which version 10's SQL
    // repeats for 1 to 9.
    assert_eq!(lq_core::declared_serves_from(), expected);
    let fresh = TestDb::new().await;
    let upgraded = TestDb::new().await;
    back_to_version_7(&upgraded).await;
    lq_runtime::migrate(&upgraded.pool).await.unwrap();
    for db in [&fresh, &upgraded] {
        let found: Vec<(i32, i32)> = sqlx::query_as(
            "select version, serves_from from lq.schema_migrations order by version",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(found, expected);
    }
}
