//! Bulk actions by filter: every matching job acted on, batch after batch, each
//! refusal reported with its reason, nothing else touched.

use lq_runtime::{control, CoreError, EnqueueOptions, Job, JobFilter, JobState};
use lq_tests::TestDb;

use crate::jobs::{Noop, UniqueOrder};

async fn enqueue_noops(db: &TestDb, n: u64, queue: &str) -> Vec<i64> {
    let jobs = (0..n).map(|n| Noop { n });
    Noop::enqueue_many(&db.pool, jobs, EnqueueOptions::new().queue(queue))
        .await
        .unwrap()
        .ids
}

async fn state_of(db: &TestDb, id: i64) -> JobState {
    control::get(&db.pool, id).await.unwrap().state
}

#[tokio::test]
async fn retry_by_filter_requeues_every_match_across_batches_and_reports_held_keys() {
    let db = TestDb::new().await;
    // 1,200 dead jobs: more than two batches.
    let dead = enqueue_noops(&db, 1200, "default").await;
    for id in &dead {
        db.finish(*id, "dead", 60.0).await;
    }
    let untouched = enqueue_noops(&db, 3, "other").await;
    db.finish(untouched[0], "dead", 60.0).await;
    // A dead job whose key a live job holds again, and two dead jobs sharing a key.
    let held = UniqueOrder { order_id: 1 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id;
    db.finish(held, "dead", 60.0).await;
    let holder = UniqueOrder { order_id: 1 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id;
    let twin_a = UniqueOrder { order_id: 2 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id;
    db.finish(twin_a, "dead", 60.0).await;
    let twin_b = UniqueOrder { order_id: 2 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id;
    db.finish(twin_b, "dead", 60.0).await;

    let noops = JobFilter::new()
        .state(JobState::Dead)
        .queue("default")
        .kind(Noop::KIND);
    let counted: u64 = control::count(&db.pool, &noops)
        .await
        .unwrap()
        .iter()
        .map(|c| c.count)
        .sum();
    assert_eq!(counted, 1200);
    let report = control::retry_matching(&db.pool, &noops, None)
        .await
        .unwrap();
    assert_eq!(report.matched, 1200);
    assert_eq!(report.done, dead);
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    assert_eq!(db.count("queued").await, 1200 + 2 + 1);
    assert_eq!(state_of(&db, untouched[0]).await, JobState::Dead);

    let orders = JobFilter::new().kind(UniqueOrder::KIND);
    let report = control::retry_matching(&db.pool, &orders, None)
        .await
        .unwrap();
    assert_eq!(report.matched, 4);
    // Within a batch the oldest twin goes first and takes the key.
    assert_eq!(report.done, vec![twin_a]);
    let mut refused: Vec<(i64, String)> = report
        .refused
        .iter()
        .map(|(id, e)| (*id, e.to_string()))
        .collect();
    refused.sort();
    assert_eq!(refused.len(), 3, "{refused:?}");
    let reason = |id| &refused.iter().find(|r| r.0 == id).unwrap().1;
    assert!(
        matches!(report.refused.iter().find(|r| r.0 == held).unwrap().1,
            CoreError::UniqueKeyHeld { holder: h, .. } if h == holder),
        "{}",
        reason(held)
    );
    assert!(
        matches!(report.refused.iter().find(|r| r.0 == twin_b).unwrap().1,
            CoreError::UniqueKeyHeld { holder: h, .. } if h == twin_a),
        "{}",
        reason(twin_b)
    );
    assert!(reason(holder).contains("queued"), "{}", reason(holder));
    assert_eq!(state_of(&db, held).await, JobState::Dead);
    assert_eq!(state_of(&db, twin_b).await, JobState::Dead);
}

#[tokio::test]
async fn cancel_and_delete_by_filter_honour_the_limit_and_refuse_what_they_cannot_do() {
    let db = TestDb::new().await;
    let queued = enqueue_noops(&db, 10, "bulk-q").await;
    let finished = enqueue_noops(&db, 2, "bulk-q").await;
    db.finish(finished[0], "succeeded", 1.0).await;
    db.finish(finished[1], "dead", 1.0).await;
    let on_q = JobFilter::new().queue("bulk-q");

    // A limit stops after that many matches, newest first.
    let report = control::cancel_matching(&db.pool, &on_q.clone().state(JobState::Queued), Some(4))
        .await
        .unwrap();
    assert_eq!(report.matched, 4);
    assert_eq!(report.done, queued[6..].to_vec());
    for id in &queued[6..] {
        assert_eq!(state_of(&db, *id).await, JobState::Cancelled);
    }
    // Without a state, finished jobs match and are refused.
    let report = control::cancel_matching(&db.pool, &on_q, None)
        .await
        .unwrap();
    assert_eq!(report.matched, 12);
    assert_eq!(report.done, queued[..6].to_vec());
    assert_eq!(report.refused.len(), 6);
    assert!(report.refused.iter().all(|(_, e)| matches!(
        e,
        CoreError::WrongState {
            action: "cancelled",
            ..
        }
    )));

    // Delete removes them for good, live and finished.
    let keep = enqueue_noops(&db, 1, "kept-q").await[0];
    let report = control::delete_matching(&db.pool, &on_q, None)
        .await
        .unwrap();
    assert_eq!((report.matched, report.done.len()), (12, 12));
    assert!(report.refused.is_empty());
    assert_eq!(control::list(&db.pool, &on_q, 100).await.unwrap().len(), 0);
    assert_eq!(state_of(&db, keep).await, JobState::Queued);
    let empty = control::delete_matching(&db.pool, &on_q, None)
        .await
        .unwrap();
    assert_eq!((empty.matched, empty.done.len()), (0, 0));
}

/// Marks the jobs of `$1` running, as a worker's claim would (lease held, one attempt).
const START_RUNNING: &str = "update lq.jobs set state = 'running', lease_token = gen_random_uuid(),
         lease_owner = 'test', lease_expires_at = now() + interval '1 hour',
         attempts = 1, started_at = now()
     where id = any($1)";

async fn start_running(db: &TestDb, ids: &[i64]) {
    sqlx::query(START_RUNNING)
        .bind(ids)
        .execute(&db.pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_cancel_by_state_leaves_a_job_that_started_running_after_it_was_chosen() {
    let db = TestDb::new().await;
    let ids = enqueue_noops(&db, 3, "default").await;
    // All three chosen as queued (what a filter on `queued` returns); one is
    // claimed before the cancel statement runs.
    start_running(&db, &ids[..1]).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let seen = lq_core::db::bulk::jobs_cancel_many(&mut conn, &ids, &[JobState::Queued])
        .await
        .unwrap();
    assert_eq!(
        seen,
        [
            (ids[0], JobState::Running, false),
            (ids[1], JobState::Queued, true),
            (ids[2], JobState::Queued, true),
        ]
    );
    let flagged: bool =
        sqlx::query_scalar("select cancel_requested_at is not null from lq.jobs where id = $1")
            .bind(ids[0])
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(!flagged, "the running job was not asked to stop");
    assert_eq!(state_of(&db, ids[1]).await, JobState::Cancelled);
    // Without states (a filter on ids or kinds only) a running job is cancelled.
    let seen = lq_core::db::bulk::jobs_cancel_many(&mut conn, &ids[..1], &[])
        .await
        .unwrap();
    assert_eq!(seen, [(ids[0], JobState::Running, true)]);
}

#[tokio::test]
async fn a_retry_by_state_leaves_a_job_that_changed_state_after_it_was_chosen() {
    let db = TestDb::new().await;
    let ids = enqueue_noops(&db, 2, "default").await;
    // Both chosen as dead; one was retried and cancelled again before the
    // retry statement ran, so it is cancelled now.
    db.finish(ids[0], "cancelled", 1.0).await;
    db.finish(ids[1], "dead", 1.0).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let seen = lq_core::db::bulk::jobs_retry_many(&mut conn, &ids, &[JobState::Dead])
        .await
        .unwrap();
    assert_eq!(
        seen,
        [
            (ids[0], JobState::Cancelled, false),
            (ids[1], JobState::Dead, true)
        ]
    );
    assert_eq!(state_of(&db, ids[0]).await, JobState::Cancelled);
    assert_eq!(state_of(&db, ids[1]).await, JobState::Queued);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_by_state_reports_a_job_claimed_while_it_waited_as_left_by_the_filter() {
    let db = TestDb::new().await;
    let ids = enqueue_noops(&db, 2, "left-q").await;
    let queued = JobFilter::new().queue("left-q").state(JobState::Queued);
    cancel_while_the_first_is_claimed(&db, &ids, queued).await;
}

/// Cancels the jobs `filter` matches, `ids` (queued, newest last), while a
/// worker's claim holds the first one's row lock and then starts it: the
/// cancel must take the others and report the first as having left the
/// filter, still running and not asked to stop.
pub(crate) async fn cancel_while_the_first_is_claimed(db: &TestDb, ids: &[i64], filter: JobFilter) {
    let mut claim = db.lock_row(ids[0]).await;
    let pool = db.pool.clone();
    let cancel = tokio::spawn(async move { control::cancel_matching(&pool, &filter, None).await });
    db.wait_for(
        "the cancel to wait for the row lock",
        "select exists (select from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock')",
        std::time::Duration::from_secs(10),
    )
    .await;
    sqlx::query(START_RUNNING)
        .bind(&ids[..1])
        .execute(&mut *claim)
        .await
        .unwrap();
    claim.commit().await.unwrap();
    let report = cancel.await.unwrap().unwrap();
    assert_eq!(
        (report.matched, report.done.clone()),
        (ids.len() as u64, ids[1..].to_vec())
    );
    let [(id, err)] = &report.refused[..] else {
        panic!("{:?}", report.refused)
    };
    assert_eq!(*id, ids[0]);
    assert!(
        matches!(
            err,
            CoreError::LeftFilter {
                state: JobState::Running,
                action: "cancelled",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "job {} became running after the filter chose it, so it was not cancelled",
            ids[0]
        )
    );
    let row = control::get(&db.pool, ids[0]).await.unwrap();
    assert_eq!(
        (row.state, row.cancel_requested_at),
        (JobState::Running, None),
        "the running job was not asked to stop"
    );
}

#[tokio::test]
async fn a_delete_by_state_leaves_a_job_that_changed_state_after_it_was_chosen() {
    let db = TestDb::new().await;
    let ids = enqueue_noops(&db, 3, "default").await;
    for id in &ids {
        db.finish(*id, "dead", 60.0).await;
    }
    // All three chosen as dead (the ids a filter on `dead` returns); one is
    // retried before the delete statement runs.
    control::retry_now(&db.pool, ids[0]).await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let seen = lq_core::db::bulk::jobs_delete_many(&mut conn, &ids, &[JobState::Dead])
        .await
        .unwrap();
    let deleted: Vec<i64> = seen.iter().filter(|s| s.2).map(|s| s.0).collect();
    assert_eq!(deleted, ids[1..]);
    assert_eq!(state_of(&db, ids[0]).await, JobState::Queued);
    // Without states (a filter on ids or kinds only) a queued job is deleted.
    let seen = lq_core::db::bulk::jobs_delete_many(&mut conn, &ids[..1], &[])
        .await
        .unwrap();
    assert_eq!(seen, [(ids[0], JobState::Queued, true)]);
}

#[tokio::test]
async fn a_bulk_action_that_fails_partway_reports_the_batches_it_committed() {
    let db = TestDb::new().await;
    // 600 queued jobs: a first batch of 500 (newest first), then the oldest 100.
    let ids = enqueue_noops(&db, 600, "stop-q").await;
    let oldest = *ids.iter().min().unwrap();
    // The server refuses to remove the oldest job, so the second batch fails.
    db.refuse_delete(oldest).await;
    let queued = JobFilter::new().queue("stop-q").state(JobState::Queued);

    let err = control::cancel_matching(&db.pool, &queued, None)
        .await
        .unwrap_err();
    let CoreError::BulkStopped {
        action,
        report,
        source,
    } = err
    else {
        panic!("{err:?}")
    };
    let mut newest: Vec<i64> = ids.clone();
    newest.sort_unstable();
    let newest = newest.split_off(100);
    assert_eq!(action, "cancelled");
    assert_eq!((report.matched, &report.done), (500, &newest));
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    assert!(
        matches!(
            *source,
            CoreError::Database {
                op: "jobs_cancel_many",
                ..
            }
        ),
        "{source:?}"
    );
    // What the report says is what the database holds.
    for id in &ids {
        let want = if newest.contains(id) {
            JobState::Cancelled
        } else {
            JobState::Queued
        };
        assert_eq!(state_of(&db, *id).await, want, "job {id}");
    }

    // Once the cause is gone, the same action takes up the rest.
    db.allow_rows().await;
    let rest = control::cancel_matching(&db.pool, &queued, None)
        .await
        .unwrap();
    assert_eq!(rest.done.len(), 100);
}

#[tokio::test]
async fn a_delete_by_an_id_two_jobs_share_deletes_neither_until_a_state_says_which() {
    // Ids restarted by `TRUNCATE … RESTART IDENTITY`: a dead job in the history
    // and a queued job both have id 1. Deleting "job 1" from the dead list must
    // not delete the queued job too.
    let db = TestDb::new().await;
    let old = enqueue_noops(&db, 1, "q").await[0];
    db.finish(old, "dead", 1.0).await;
    sqlx::query("truncate lq.jobs restart identity")
        .execute(&db.pool)
        .await
        .unwrap();
    let live = enqueue_noops(&db, 1, "q").await[0];
    assert_eq!(live, old, "the ids collide");

    let by_id = JobFilter::new().id(live);
    let report = control::delete_matching(&db.pool, &by_id, None)
        .await
        .unwrap();
    assert!(report.done.is_empty(), "{report:?}");
    assert_eq!(report.matched, 1, "one id asked about");
    match &report.refused[..] {
        [(
            id,
            CoreError::AmbiguousId {
                live: JobState::Queued,
                finished: JobState::Dead,
                ..
            },
        )] => assert_eq!(*id, live),
        other => panic!("{other:?}"),
    }
    assert_eq!(db.number("select count(*) from lq.jobs").await, 1);
    assert_eq!(db.number("select count(*) from lq.finished_jobs").await, 1);

    // A state says which: the dead one goes, the queued one stays.
    let dead = by_id.clone().state(JobState::Dead);
    let report = control::delete_matching(&db.pool, &dead, None)
        .await
        .unwrap();
    assert_eq!(report.done, vec![live]);
    assert!(report.refused.is_empty(), "{report:?}");
    assert_eq!(db.number("select count(*) from lq.finished_jobs").await, 0);
    assert_eq!(state_of(&db, live).await, JobState::Queued);
}
