//! Job control: cancel, retry, list.

use std::time::Duration;

use lq_runtime::{control, db, CoreError as Error, Job, JobState};
use lq_tests::{finish_job, TestDb};

use crate::jobs::{quick, start_runtime, Doomed, Ledger, Noop, Patient};

const LIMIT: Duration = Duration::from_secs(30);

/// Waits until some session of the test's database waits for a lock.
async fn wait_for_a_lock_wait(db: &TestDb, what: &str) {
    db.wait_for(
        what,
        "select exists (select 1 from pg_stat_activity
                        where datname = current_database() and wait_event_type = 'Lock')",
        LIMIT,
    )
    .await;
}

#[tokio::test]
async fn cancelling_a_queued_job_ends_it_at_once() {
    let db = TestDb::new().await;
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    assert_eq!(
        control::cancel(&db.pool, id).await.unwrap(),
        JobState::Queued
    );
    assert_eq!(
        control::get(&db.pool, id).await.unwrap().state,
        JobState::Cancelled
    );
    let again = control::cancel(&db.pool, id).await.unwrap_err();
    assert!(
        matches!(
            again,
            Error::WrongState {
                state: JobState::Cancelled,
                ..
            }
        ),
        "{again}"
    );
    assert!(matches!(
        control::cancel(&db.pool, 999_999).await.unwrap_err(),
        Error::NotFound { id: 999_999 }
    ));
}

#[tokio::test]
async fn cancelling_a_running_job_signals_its_handler_and_ends_it_cancelled() {
    let db = TestDb::new().await;
    let id = Patient.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 2, quick(), &Ledger::default()).await;
    db.wait_for(
        "the job to run",
        &format!("select state = 'running' from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;
    assert_eq!(
        control::cancel(&db.pool, id).await.unwrap(),
        JobState::Running
    );
    db.wait_for(
        "the job to end",
        &format!("select state = 'cancelled' from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    let row = control::get(&db.pool, id).await.unwrap();
    assert!(row.cancel_requested_at.is_some());
    assert_eq!(row.attempts, 1);
}

/// A cancel that waits for the row while the job's completion commits reports the
/// state the job ended in, not "no such job": the job has left `lq.jobs`, and only a
/// fresh snapshot finds it in the history.
#[tokio::test]
async fn a_cancel_that_waits_out_the_jobs_completion_reports_its_final_state() {
    let db = TestDb::new().await;
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let mut completion = db.pool.begin().await.unwrap();
    finish_job(&mut completion, id, "succeeded", 0.0).await;
    let pool = db.pool.clone();
    let cancel = tokio::spawn(async move { control::cancel(&pool, id).await });
    wait_for_a_lock_wait(&db, "the cancel to wait for the completion's row lock").await;
    completion.commit().await.unwrap();
    let err = cancel.await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            Error::WrongState {
                state: JobState::Succeeded,
                ..
            }
        ),
        "{err}"
    );
}

/// A completion that waits for a cancel request's row lock ends the job
/// `cancelled`: it re-reads the row once the request commits, so the request is
/// not lost to a success acknowledged from an older version of the row.
#[tokio::test]
async fn a_success_written_while_a_cancel_request_commits_ends_the_job_cancelled() {
    let db = TestDb::new().await;
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let kinds = vec!["test.noop".to_owned()];
    let mut worker = db.pool.acquire().await.unwrap();
    let claimed = db::claim::job_claim(&mut worker, "default", &kinds, &[30.0], 1, "w")
        .await
        .unwrap()
        .remove(0);
    // The cancel request's write, held open while the completion runs.
    let mut request = db.pool.begin().await.unwrap();
    sqlx::query("update lq.jobs set cancel_requested_at = now() where id = $1")
        .bind(id)
        .execute(&mut *request)
        .await
        .unwrap();
    let completion = tokio::spawn(async move {
        db::finish::job_complete_many(&mut worker, &[id], &[claimed.lease_token]).await
    });
    wait_for_a_lock_wait(
        &db,
        "the completion to wait for the cancel request's row lock",
    )
    .await;
    request.commit().await.unwrap();
    assert_eq!(completion.await.unwrap().unwrap(), vec![id]);
    let row = control::get(&db.pool, id).await.unwrap();
    assert_eq!(row.state, JobState::Cancelled);
    assert!(row.cancel_requested_at.is_some());
}

#[tokio::test]
async fn a_dead_job_can_be_retried_now_and_runs_again() {
    let db = TestDb::new().await;
    let id = Doomed.enqueue(&db.pool).await.unwrap().id;
    sqlx::query("update lq.jobs set attempts = 3 where id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    db.finish(id, "dead", 0.0).await;
    control::retry_now(&db.pool, id).await.unwrap();
    let row = control::get(&db.pool, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Queued, 0));
    assert!(matches!(
        control::retry_now(&db.pool, id).await.unwrap_err(),
        Error::WrongState { .. }
    ));
}

#[tokio::test]
async fn retrying_a_dead_job_whose_key_is_live_again_is_refused() {
    let db = TestDb::new().await;
    use crate::jobs::UniqueOrder;
    let old = UniqueOrder { order_id: 5 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id;
    db.finish(old, "dead", 0.0).await;
    let live = UniqueOrder { order_id: 5 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id;
    let err = control::retry_now(&db.pool, old).await.unwrap_err();
    assert!(
        matches!(err, Error::UniqueKeyHeld { holder, .. } if holder == live),
        "{err}"
    );
    assert_eq!(
        control::get(&db.pool, old).await.unwrap().state,
        JobState::Dead
    );
}

#[tokio::test]
async fn list_filters_by_state_and_queue() {
    let db = TestDb::new().await;
    let a = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let b = Noop { n: 2 }
        .enqueue_with(&db.pool, lq_runtime::EnqueueOptions::new().queue("other"))
        .await
        .unwrap()
        .id;
    control::cancel(&db.pool, a).await.unwrap();
    let cancelled: Vec<i64> = control::list(&db.pool, Some(JobState::Cancelled), None, 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(cancelled, vec![a]);
    let other: Vec<i64> = control::list(&db.pool, None, Some("other"), 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(other, vec![b]);
}

#[tokio::test]
async fn pruning_removes_only_old_finished_jobs() {
    let db = TestDb::new().await;
    let ids: Vec<i64> = Noop::enqueue_many(
        &db.pool,
        (0..4).map(|n| Noop { n }),
        lq_runtime::EnqueueOptions::new(),
    )
    .await
    .unwrap()
    .ids;
    // old succeeded, recent succeeded, old dead (kept longer), still queued
    db.finish(ids[0], "succeeded", 7200.0).await;
    db.finish(ids[1], "succeeded", 0.0).await;
    db.finish(ids[2], "dead", 7200.0).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let pruned = lq_runtime::db::maintenance::job_prune(&mut conn, 3600.0, 86_400.0, 100)
        .await
        .unwrap();
    assert_eq!(pruned, 1);
    let left: Vec<i64> = sqlx::query_scalar("select id from lq.all_jobs order by id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, ids[1..].to_vec());
}
