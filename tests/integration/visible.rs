//! Failures an operator can see: each failed attempt at warn, each dead job at
//! error, and warnings at start for jobs no runtime would run. Log events are
//! captured in memory (`lq_tests::logs`) and matched on this file's own kinds.

use std::time::Duration;

use lq_runtime::{Job, JobContext, JobError, Perform, Runtime, RuntimeConfig};
use lq_tests::{
    logs::{logged, wait_logged, LogEvent},
    TestDb,
};
use serde::{Deserialize, Serialize};
use tracing::Level;

use crate::jobs::quick;

const LIMIT: Duration = Duration::from_secs(30);

/// Fails every attempt with a message naming the attempt.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "visible.doomed", queue = "visible_fail", max_attempts = 3, backoff = fixed("10ms"))]
struct Doomed;

impl Perform for Doomed {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        Err(format!("boom on attempt {}", ctx.attempt()).into())
    }
}

fn of_kind<'a>(kind: &'a str, level: Level) -> impl Fn(&LogEvent) -> bool + 'a {
    move |e| e.level == level && e.field("kind") == Some(kind)
}

#[tokio::test]
async fn each_failed_attempt_is_a_warning_and_the_dead_job_an_error() {
    lq_tests::init_tracing();
    let db = TestDb::new().await;
    let id = Doomed.enqueue(&db.pool).await.unwrap().id;
    let rt = Runtime::builder(db.pool.clone())
        .config(quick())
        .queue("visible_fail", 1)
        .start()
        .await
        .unwrap();
    let dead = wait_logged(1, LIMIT, of_kind("visible.doomed", Level::ERROR)).await;
    rt.shutdown().await.unwrap();

    let warned = logged(of_kind("visible.doomed", Level::WARN));
    let attempts: Vec<(&str, &str, &str)> = warned
        .iter()
        .map(|e| {
            (
                e.field("id").unwrap(),
                e.field("attempt").unwrap(),
                e.field("error").unwrap(),
            )
        })
        .collect();
    let id = id.to_string();
    assert_eq!(
        attempts,
        vec![
            (id.as_str(), "1", "boom on attempt 1"),
            (id.as_str(), "2", "boom on attempt 2")
        ]
    );
    assert_eq!(dead.len(), 1, "{dead:#?}");
    assert_eq!(dead[0].field("id"), Some(id.as_str()));
    assert_eq!(dead[0].field("attempt"), Some("3"));
    assert_eq!(dead[0].field("error"), Some("boom on attempt 3"));
    assert!(dead[0].message.contains("dead"), "{:?}", dead[0]);
}

/// Declared, never implemented: no runtime in this binary can run it.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "visible.no_handler", queue = "visible_warn")]
struct NoHandler;

/// Needed so the queue has a runnable kind besides the unrunnable one.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "visible.fine", queue = "visible_warn")]
struct Fine;

impl Perform for Fine {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn start_warns_about_a_served_kind_without_a_handler_and_an_unserved_cron_queue() {
    lq_tests::init_tracing();
    let db = TestDb::new().await;
    let no_handler = NoHandler.enqueue(&db.pool).await.unwrap().id;
    let rt = Runtime::builder(db.pool.clone())
        .config(RuntimeConfig {
            rescue_interval: Duration::from_millis(100),
            unknown_kind_grace: Some(Duration::ZERO),
            ..quick()
        })
        .queue("visible_warn", 1)
        .start()
        .await
        .unwrap();
    // Logged by start() itself, before it returned.
    let warned =
        logged(|e| e.level == Level::WARN && e.field("kind") == Some("visible.no_handler"));
    assert!(
        warned
            .iter()
            .any(|e| e.field("queue") == Some("visible_warn")
                && e.message.contains("no Perform implementation")),
        "{warned:#?}"
    );
    let cron = logged(|e| e.level == Level::WARN && e.field("kind") == Some("test.every_second"));
    assert!(
        cron.iter()
            .any(|e| e.field("queue") == Some("cron-test") && e.message.contains("not served")),
        "{cron:#?}"
    );
    // Linked is not declared: the runtime tells the cluster the kinds it can run,
    // so a leader that links a recurring kind it cannot run does not hold back the
    // runtimes that can, and a job no live runtime can run is buried as unknown.
    db.wait_for(
        "the runtime's first beat",
        "select exists (select from lq.runtimes)",
        Duration::from_secs(60),
    )
    .await;
    let declared: Vec<String> = sqlx::query_scalar("select kinds from lq.runtimes")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(declared.iter().any(|k| k == "visible.fine"), "{declared:?}");
    assert!(
        !declared.iter().any(|k| k == "visible.no_handler"),
        "{declared:?}"
    );
    db.wait_for(
        "the job no runtime can run to be buried",
        &format!("select exists (select from lq.finished_jobs where id = {no_handler} and state = 'dead')"),
        Duration::from_secs(60),
    )
    .await;
    rt.shutdown().await.unwrap();
}

/// A lease short for the database bound: 2 s.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "visible.short_lease", queue = "visible_lease", lease = "2s")]
struct ShortLease;

impl Perform for ShortLease {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn start_warns_about_a_served_kind_whose_lease_a_slow_heartbeat_could_outlast() {
    lq_tests::init_tracing();
    let db = TestDb::new().await;
    let start = |db_timeout| {
        Runtime::builder(db.pool.clone())
            .config(RuntimeConfig {
                db_timeout,
                ..quick()
            })
            .queue("visible_lease", 1)
            .start()
    };
    let short_lease = |e: &LogEvent| {
        e.level == Level::WARN
            && e.field("kind") == Some("visible.short_lease")
            && e.message.contains("lease is shorter")
    };
    // Logged by start() itself, before it returned.
    let rt = start(Duration::from_millis(500)).await.unwrap();
    assert!(logged(short_lease).is_empty(), "2 s is over 3 × 500 ms");
    rt.shutdown().await.unwrap();
    let rt = start(Duration::from_secs(10)).await.unwrap();
    assert_eq!(logged(short_lease).len(), 1);
    rt.shutdown().await.unwrap();
}

/// A stored last tick in the future (a host whose clock ran ahead, a hand edit)
/// would stall its schedule until then: the runtime moves it back to now, warns
/// with the kind and the stored tick, and the schedule fires again.
#[tokio::test]
async fn a_cron_last_tick_in_the_future_is_moved_back_with_a_warning() {
    lq_tests::init_tracing();
    let db = TestDb::new().await;
    let kind = crate::cron::EverySecond::KIND;
    sqlx::query(
        "insert into lq.cron_schedules (kind, last_tick) values ($1, '2100-01-01T00:00:00Z')",
    )
    .bind(kind)
    .execute(&db.pool)
    .await
    .unwrap();
    let rt = Runtime::builder(db.pool.clone())
        .config(quick())
        .queue(crate::cron::EverySecond::OPTIONS.queue, 1)
        .start()
        .await
        .unwrap();
    let warned = wait_logged(1, LIMIT, |e| {
        e.level == Level::WARN
            && e.field("kind") == Some(kind)
            && e.field("stored") == Some("2100-01-01 00:00:00 UTC")
    })
    .await;
    db.wait_for(
        "a tick fired after the rewind",
        "select exists (select from lq.cron_ticks where tick <= now())",
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    assert!(
        warned[0].message.contains("moved it back to now"),
        "{:?}",
        warned[0]
    );
}
