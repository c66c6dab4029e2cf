//! The history is pruned through its primary key, bounded by marks of the job
//! id sequence (schema version 15): a prune reads no id above the first mark
//! after its cutoff and none it tested in an earlier batch, the leader keeps the
//! marks, a role refused them still prunes, and an upgrade gives the marks to
//! the roles that already pruned.

use std::time::Duration;

use lq_core::db::maintenance::{id_mark, job_prune, prune_ids, PruneIds};
use lq_runtime::{EnqueueOptions, Job, Runtime, RuntimeConfig};
use lq_tests::{logs::wait_logged, TestDb};

use crate::{
    jobs::{quick, Noop},
    roles::{grant, pool_as, Roles, WORKER_GRANTS},
};

const LIMIT: Duration = Duration::from_secs(60);
const HOUR: f64 = 3600.0;
const WEEK: f64 = 7.0 * 86_400.0;

/// Enqueues `n` jobs and moves each into the history as `state`, finished
/// `ago_secs` ago; returns their ids, lowest first.
async fn finished(db: &TestDb, n: u64, state: &str, ago_secs: f64) -> Vec<i64> {
    let ids = Noop::enqueue_many(&db.pool, (0..n).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    for id in &ids {
        db.finish(*id, state, ago_secs).await;
    }
    ids
}

async fn history(db: &TestDb) -> Vec<i64> {
    sqlx::query_scalar("select id from lq.finished_jobs order by id")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_prune_reads_no_id_above_its_bound_nor_at_or_below_its_last_batch() {
    let db = TestDb::new().await;
    let ids = finished(&db, 4, "succeeded", 2.0 * HOUR).await;
    let (b, c, d) = (ids[1], ids[2], ids[3]);
    let mut conn = db.pool.acquire().await.unwrap();

    let upto_b = PruneIds {
        upto: Some(b),
        ..PruneIds::default()
    };
    let r = job_prune(&mut conn, HOUR, WEEK, None, upto_b, 100)
        .await
        .unwrap();
    assert_eq!(r, (2, Some(b)), "the first two, at or below the bound");
    assert_eq!(history(&db).await, vec![c, d]);

    let above_c = PruneIds {
        after: c,
        ..PruneIds::default()
    };
    let r = job_prune(&mut conn, HOUR, WEEK, None, above_c, 100)
        .await
        .unwrap();
    assert_eq!(r, (1, Some(d)), "d only: c was tested by an earlier batch");
    assert_eq!(history(&db).await, vec![c]);

    let r = job_prune(&mut conn, HOUR, WEEK, None, PruneIds::default(), 100)
        .await
        .unwrap();
    assert_eq!(r, (1, Some(c)));
    assert!(history(&db).await.is_empty());
    let r = job_prune(&mut conn, HOUR, WEEK, None, PruneIds::default(), 100)
        .await
        .unwrap();
    assert_eq!(r, (0, None));
}

#[tokio::test]
async fn a_prune_also_reads_the_ids_above_the_newest_mark() {
    let db = TestDb::new().await;
    let ids = finished(&db, 4, "succeeded", 2.0 * HOUR).await;
    let mut conn = db.pool.acquire().await.unwrap();
    // Up to the first and above the third: the two between are not read.
    let split = PruneIds {
        after: 0,
        upto: Some(ids[0]),
        drawn: Some(ids[2]),
    };
    let r = job_prune(&mut conn, HOUR, WEEK, None, split, 100)
        .await
        .unwrap();
    assert_eq!(r, (2, Some(ids[3])));
    assert_eq!(history(&db).await, ids[1..3].to_vec());
}

#[tokio::test]
async fn within_its_bound_a_prune_still_keeps_every_job_inside_its_retention() {
    let db = TestDb::new().await;
    let recent = finished(&db, 2, "succeeded", 60.0).await;
    let dead = finished(&db, 2, "dead", 2.0 * HOUR).await;
    let old = finished(&db, 2, "succeeded", 2.0 * HOUR).await;
    let mut conn = db.pool.acquire().await.unwrap();
    // A bound above every id (as a mark recorded long after would give).
    let all = PruneIds {
        upto: Some(i64::MAX),
        ..PruneIds::default()
    };
    let r = job_prune(&mut conn, HOUR, WEEK, None, all, 100)
        .await
        .unwrap();
    assert_eq!(r, (2, Some(old[1])));
    let mut kept = recent.clone();
    kept.extend(&dead);
    assert_eq!(
        history(&db).await,
        kept,
        "the recent ones and the dead, kept a week"
    );
}

#[tokio::test]
async fn a_mark_bounds_the_ids_of_jobs_that_finished_before_it() {
    let db = TestDb::new().await;
    let first = finished(&db, 2, "succeeded", 0.0).await;
    let mut conn = db.pool.acquire().await.unwrap();
    // A mark older than the retention the leader keeps marks for.
    sqlx::query("insert into lq.id_marks values (now() - interval '2 hours', 0)")
        .execute(&mut *conn)
        .await
        .unwrap();

    id_mark(&mut conn, HOUR).await.unwrap();
    let marks: Vec<i64> = sqlx::query_scalar("select last_id from lq.id_marks order by at")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    assert_eq!(
        marks,
        vec![first[1]],
        "the old mark dropped, the sequence's value kept"
    );

    // Jobs enqueued after the mark are above it; the bound stays the mark's.
    let later = finished(&db, 1, "succeeded", 0.0).await;
    assert!(later[0] > first[1]);
    let ids = prune_ids(&mut conn, None, HOUR).await.unwrap();
    assert_eq!((ids.upto, ids.drawn), (Some(first[1]), Some(first[1])));
    // No mark at or after a cutoff of now: no bound.
    let ids = prune_ids(&mut conn, None, 0.0).await.unwrap();
    assert_eq!((ids.upto, ids.drawn), (None, Some(first[1])));
}

/// A runtime on `pool` that prunes every 100 ms, keeping finished jobs an hour.
async fn pruning(pool: sqlx::PgPool) -> Runtime {
    Runtime::builder(pool)
        .config(RuntimeConfig {
            prune_interval: Duration::from_millis(100),
            keep_finished: Duration::from_secs(3600),
            ..quick()
        })
        .queue("default", 1)
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_marks_the_sequence_and_prunes_past_retention() {
    let db = TestDb::new().await;
    finished(&db, 3, "succeeded", 2.0 * HOUR).await;
    let kept = finished(&db, 2, "succeeded", 0.0).await;
    // Rows written into the history by hand, with ids the sequence never
    // gave (an import, a restore): above every mark, and pruned all the same.
    sqlx::query(
        "insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at, attempts,
             max_attempts, errors, created_at, finished_at)
         select 900000000 + g, 'test.imported', 'default', 0, '{}', 'succeeded', now(), 1, 1, '[]',
             now() - interval '3 hours', now() - interval '2 hours'
         from generate_series(1, 3) g",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let rt = pruning(db.pool.clone()).await;
    db.wait_for(
        "the old history pruned and a mark recorded",
        "select (select count(*) from lq.finished_jobs) = 2
             and exists (select from lq.id_marks)",
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    assert_eq!(history(&db).await, kept);
    let newest: i64 = db.number("select max(last_id) from lq.id_marks").await;
    assert!(
        newest >= kept[1],
        "a mark holds the sequence's value: {newest}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refused_the_marks_prunes_the_whole_history_and_names_the_grant() {
    lq_tests::init_tracing();
    let mut roles = Roles::default();
    let db = TestDb::new().await;
    let worker = roles.create("lq_nomarks", "").await;
    grant(&db.pool, WORKER_GRANTS, &worker).await;
    grant(&db.pool, "revoke all on lq.id_marks from {role};", &worker).await;
    finished(&db, 3, "succeeded", 2.0 * HOUR).await;
    let kept = finished(&db, 1, "succeeded", 0.0).await;

    let rt = pruning(pool_as(&db, &worker, 10).await).await;
    db.wait_for(
        "the old history pruned without marks",
        "select (select count(*) from lq.finished_jobs) = 1",
        LIMIT,
    )
    .await;
    wait_logged(1, LIMIT, |e| {
        e.message.contains("lq.id_marks")
            && e.field("error").is_some_and(|m| m.contains("id_marks"))
    })
    .await;
    rt.shutdown().await.unwrap();
    assert_eq!(history(&db).await, kept);
    assert_eq!(db.number("select count(*) from lq.id_marks").await, 0);
}

/// Takes `db`'s schema back to version 14 where versions 15 and 16 changed it
/// (the marks, the history's index and primary key; the runtimes' connection
/// budgets), as a database migrated before version 15 has it.
pub(crate) async fn back_to_version_14(db: &TestDb) {
    sqlx::raw_sql(
        "alter table lq.runtimes drop column connections;
         drop table lq.id_marks;
         alter table lq.finished_jobs drop constraint finished_jobs_pkey,
             add constraint finished_jobs_pkey primary key (id);
         create index finished_jobs_finished_at on lq.finished_jobs (finished_at);
         delete from lq.schema_migrations where version >= 15;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn upgrading_to_version_15_gives_the_marks_to_the_roles_that_prune() {
    let mut roles = Roles::default();
    let db = TestDb::new().await;
    let ids = finished(&db, 2, "succeeded", 2.0 * HOUR).await;
    back_to_version_14(&db).await;
    let pruner = roles.create("lq_pruner", "").await;
    let reader = roles.create("lq_reader", "").await;
    grant(
        &db.pool,
        "grant select, delete on lq.finished_jobs to {role};",
        &pruner,
    )
    .await;
    grant(
        &db.pool,
        "grant select on lq.finished_jobs to {role};",
        &reader,
    )
    .await;

    lq_runtime::migrate(&db.pool).await.unwrap();
    assert_eq!(
        lq_runtime::schema_version(&db.pool).await.unwrap(),
        lq_runtime::SCHEMA_VERSION
    );
    let may = |role: &str, privilege: &str| {
        let sql = format!(
            "select has_table_privilege('{role}', 'lq.id_marks', '{privilege}')::int::int8"
        );
        let db = &db;
        async move { db.number(&sql).await == 1 }
    };
    for privilege in ["select", "insert", "delete"] {
        assert!(may(&pruner, privilege).await, "{pruner} may {privilege}");
        assert!(
            !may(&reader, privilege).await,
            "{reader} may not {privilege}"
        );
    }
    assert_eq!(history(&db).await, ids, "the history kept");
    let key: String =
        sqlx::query_scalar("select pg_get_indexdef('lq.finished_jobs_pkey'::regclass)")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(key.ends_with("(id) INCLUDE (state, finished_at)"), "{key}");
    assert_eq!(
        db.number("select count(*) from pg_indexes where indexname = 'finished_jobs_finished_at'")
            .await,
        0
    );
}
