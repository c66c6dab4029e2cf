//! What happens to each kind of attempt outcome.

use std::time::Duration;

use lq_runtime::{Job, RuntimeConfig};
use lq_tests::TestDb;

use crate::jobs::{
    error_texts, quick, start_runtime, Doomed, Flaky, Hopeless, Ledger, Noop, Panicky, Sleepy,
    Slowpoke,
};

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_failing_job_is_retried_until_it_succeeds() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let id = Flaky { fail_times: 2 }.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 8, quick(), &ledger).await;
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(row.state, lq_runtime::JobState::Succeeded);
    assert_eq!(row.attempts, 3);
    assert_eq!(
        error_texts(&db, id).await,
        vec!["flaky failure 1", "flaky failure 2"]
    );
    assert_eq!(ledger.counts()[&id], 3);
}

/// Finished jobs leave the queue table in the statement that ends them, so
/// `lq.jobs` holds only live work however much history is kept; the history
/// names the worker of each job's last attempt.
#[tokio::test]
async fn finished_jobs_leave_the_queue_table_for_the_history() {
    let db = TestDb::new().await;
    let ok = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let dead = Doomed.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 8, quick(), &Ledger::default()).await;
    let rt_owner = rt.owner().to_owned();
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let live: i64 = sqlx::query_scalar("select count(*) from lq.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(live, 0);
    let finished: Vec<(i64, String, i32, bool)> = sqlx::query_as(
        "select id, state::text, attempts, lease_owner = $1
         from lq.finished_jobs where finished_at is not null order by id",
    )
    .bind(rt_owner)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        finished,
        vec![
            (ok, "succeeded".into(), 1, true),
            (dead, "dead".into(), 3, true)
        ]
    );
}

#[tokio::test]
async fn a_job_that_always_fails_is_dead_after_max_attempts_with_every_error_kept() {
    let db = TestDb::new().await;
    let id = Doomed.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 8, quick(), &Ledger::default()).await;
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(row.state, lq_runtime::JobState::Dead);
    assert_eq!(row.attempts, 3);
    assert!(row.finished_at.is_some());
    assert_eq!(
        error_texts(&db, id).await,
        vec!["doomed attempt 1", "doomed attempt 2", "doomed attempt 3"]
    );
    let attempts: Vec<u32> = row.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 3]);
}

#[tokio::test]
async fn a_permanent_error_is_dead_at_once() {
    let db = TestDb::new().await;
    let id = Hopeless.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 8, quick(), &Ledger::default()).await;
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (lq_runtime::JobState::Dead, 1));
    assert_eq!(
        error_texts(&db, id).await,
        vec!["permanent: the account is closed"]
    );
}

#[tokio::test]
async fn a_snooze_requeues_without_spending_an_attempt() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    // max_attempts is 1: if a snooze spent an attempt the job would die.
    let id = Sleepy { times: 3 }.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 8, quick(), &ledger).await;
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(
        (row.state, row.attempts),
        (lq_runtime::JobState::Succeeded, 1)
    );
    assert_eq!(ledger.counts()[&id], 4);
}

/// Snoozes "forever" (`Duration::MAX`).
#[derive(serde::Serialize, serde::Deserialize, lq_runtime::Job)]
#[job(kind = "test.snooze_forever", max_attempts = 1)]
struct SnoozeForever;

impl lq_runtime::Perform for SnoozeForever {
    async fn perform(&self, _: &lq_runtime::JobContext) -> Result<(), lq_runtime::JobError> {
        Err(lq_runtime::JobError::snooze(Duration::MAX))
    }
}

/// A delay past PostgreSQL's last timestamp is put off a hundred years, not
/// refused: the job stays queued with its attempt unspent, not `dead`.
#[tokio::test]
async fn a_snooze_forever_puts_the_job_off_a_hundred_years_not_dead() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let id = SnoozeForever.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 1, quick(), &ledger).await;
    db.wait_for(
        "the job to be snoozed",
        &format!("select state = 'queued' and run_at > now() + interval '99 years' from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (lq_runtime::JobState::Queued, 0));
    assert!(row.errors.is_empty(), "{:?}", row.errors);
}

/// Three centuries: past PostgreSQL's last timestamp from now on.
fn three_centuries(_attempt: u32) -> Duration {
    Duration::from_secs(300 * 365 * 24 * 3600)
}

/// Fails, with a backoff of centuries.
#[derive(serde::Serialize, serde::Deserialize, lq_runtime::Job)]
#[job(kind = "test.backoff_centuries", max_attempts = 3, backoff = three_centuries)]
struct BackoffCenturies;

impl lq_runtime::Perform for BackoffCenturies {
    async fn perform(&self, _: &lq_runtime::JobContext) -> Result<(), lq_runtime::JobError> {
        Err("not yet".into())
    }
}

/// A backoff past PostgreSQL's last timestamp, like a snooze, puts the retry
/// off a hundred years: the failure is recorded and the job stays queued with
/// its attempt spent, not `dead` or stuck `running`.
#[tokio::test]
async fn a_backoff_of_centuries_puts_the_retry_off_a_hundred_years_not_dead() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let id = BackoffCenturies.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 1, quick(), &ledger).await;
    db.wait_for(
        "the retry to be put off",
        &format!("select state = 'queued' and run_at > now() + interval '99 years' from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (lq_runtime::JobState::Queued, 1));
    assert!(
        row.run_at < chrono::Utc::now() + chrono::Duration::days(101 * 365),
        "put off a hundred years, not more: {}",
        row.run_at
    );
    assert_eq!(error_texts(&db, id).await, vec!["not yet"]);
}

#[tokio::test]
async fn a_panic_is_recorded_as_the_attempts_error_and_the_slot_survives() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let id = Panicky.enqueue(&db.pool).await.unwrap().id;
    // One slot: if the panic leaked it, the Noop jobs would never run.
    let rt = start_runtime(&db, "default", 1, quick(), &ledger).await;
    db.wait_for(
        "the panicky job to succeed",
        &format!("select state = 'succeeded' from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;
    for n in 0..5 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    assert_eq!(
        error_texts(&db, id).await,
        vec!["panicked: boom on attempt 1"]
    );
    assert_eq!(db.count("succeeded").await, 6);
}

#[tokio::test]
async fn an_attempt_over_its_timeout_fails_with_a_timeout_error() {
    let db = TestDb::new().await;
    let id = Slowpoke.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 8, quick(), &Ledger::default()).await;
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(row.state, lq_runtime::JobState::Dead);
    assert_eq!(
        error_texts(&db, id).await,
        vec!["timed out after 50ms", "timed out after 50ms"]
    );
}

#[tokio::test]
async fn a_bad_payload_ends_dead_with_its_reason_while_other_jobs_flow() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let bad: i64 = sqlx::query_scalar(
        "insert into lq.jobs (kind, queue, payload, max_attempts) values ('test.noop', 'default', '{\"n\": \"not a number\"}', 5) returning id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    for n in 0..20 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    let rt = start_runtime(&db, "default", 8, quick(), &ledger).await;
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, bad).await.unwrap();
    assert_eq!(row.state, lq_runtime::JobState::Dead);
    assert_eq!(row.attempts, 1, "no retry can fix a payload");
    assert_eq!(
        row.payload_value().unwrap(),
        serde_json::json!({ "n": "not a number" }),
        "payload kept unchanged"
    );
    let reason = &error_texts(&db, bad).await[0];
    assert!(
        reason.starts_with("payload does not deserialise into"),
        "{reason}"
    );
    assert!(reason.contains("Noop"), "{reason}");
    // The value that did not fit is named by its type, not shown: the reason
    // is read by every operator, whatever the dashboard redacts.
    assert!(
        reason.contains("invalid type: string (value hidden)") && !reason.contains("not a number"),
        "{reason}"
    );
    assert_eq!(db.count("succeeded").await, 20);
    assert!(!ledger.counts().contains_key(&bad));
}

#[tokio::test]
async fn a_job_of_an_unknown_kind_is_left_alone_then_buried_with_its_reason() {
    let db = TestDb::new().await;
    let ghost: i64 = sqlx::query_scalar(
        "insert into lq.jobs (kind, queue, payload, max_attempts) values ('test.ghost', 'default', '{\"a\": 1}', 5) returning id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    Noop { n: 1 }.enqueue(&db.pool).await.unwrap();
    let config = RuntimeConfig {
        rescue_interval: Duration::from_millis(100),
        unknown_kind_grace: Some(Duration::ZERO),
        ..quick()
    };
    let rt = start_runtime(&db, "default", 4, config, &Ledger::default()).await;
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, ghost).await.unwrap();
    assert_eq!(
        (row.state, row.attempts),
        (lq_runtime::JobState::Dead, 0),
        "never claimed"
    );
    assert_eq!(row.payload_value().unwrap(), serde_json::json!({ "a": 1 }));
    assert!(error_texts(&db, ghost).await[0].starts_with("unknown kind test.ghost"));
}

#[tokio::test]
async fn a_delayed_job_never_starts_before_its_run_time() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let opts = lq_runtime::EnqueueOptions::new().delay(Duration::from_millis(400));
    let late = Noop { n: 1 }.enqueue_with(&db.pool, opts).await.unwrap().id;
    let now = Noop { n: 2 }.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 8, quick(), &ledger).await;
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let early: bool =
        sqlx::query_scalar("select started_at < run_at from lq.all_jobs where id = $1")
            .bind(late)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(!early, "started before run_at");
    let order: bool = sqlx::query_scalar("select a.started_at < b.started_at from lq.all_jobs a, lq.all_jobs b where a.id = $1 and b.id = $2")
        .bind(now)
        .bind(late)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(order, "the undelayed job ran first");
}
