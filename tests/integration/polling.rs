//! Idle polling: the queues waiting for work share one poll statement a poll
//! interval, which wakes exactly the queues a claim would find work in.

use std::time::Duration;

use chrono::Utc;
use lq_core::db;
use lq_runtime::{control, EnqueueOptions, Job, Runtime, StatsSnapshot};
use lq_tests::TestDb;

use crate::jobs::{quick, Ledger, Noop};

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn the_poll_names_the_queues_a_claim_would_find_work_in() {
    let db = TestDb::new().await;
    let on = |queue: &str| EnqueueOptions::new().queue(queue).notify(false);
    Noop { n: 1 }
        .enqueue_with(&db.pool, on("ready"))
        .await
        .unwrap();
    let later = Utc::now() + chrono::Duration::hours(1);
    Noop { n: 2 }
        .enqueue_with(&db.pool, on("scheduled").run_at(later))
        .await
        .unwrap();
    Noop { n: 3 }
        .enqueue_with(&db.pool, on("paused"))
        .await
        .unwrap();
    assert!(control::pause_queue(&db.pool, "paused", "test")
        .await
        .unwrap());
    // A kind the caller cannot run is no work for it.
    sqlx::query(
        "insert into lq.jobs (kind, queue, payload, max_attempts) values ('other', 'foreign', '{}', 1)",
    )
    .execute(&db.pool)
    .await
    .unwrap();

    let queues: Vec<String> = ["ready", "scheduled", "paused", "foreign", "empty"]
        .map(String::from)
        .into();
    let kinds = vec![Noop::KIND.to_owned()];
    let mut conn = db.pool.acquire().await.unwrap();
    let ready = db::claim::queues_ready(&mut conn, &queues, &kinds)
        .await
        .unwrap();
    assert_eq!(ready, ["ready"]);

    assert!(control::resume_queue(&db.pool, "paused").await.unwrap());
    let mut ready = db::claim::queues_ready(&mut conn, &queues, &kinds)
        .await
        .unwrap();
    ready.sort();
    assert_eq!(ready, ["paused", "ready"]);
}

/// Waits until `rt` has run `n` more idle polls than `from` shows, then returns its counters.
async fn after_polls(rt: &Runtime, from: StatsSnapshot, n: u64) -> StatsSnapshot {
    let start = std::time::Instant::now();
    loop {
        let now = rt.stats();
        if now.idle_polls >= from.idle_polls + n {
            return now;
        }
        assert!(
            start.elapsed() < LIMIT,
            "the runtime stopped polling: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_queues_send_no_claims_and_the_poll_finds_a_job_enqueued_without_notify() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let mut builder = Runtime::builder(db.pool.clone())
        .config(quick())
        .state(ledger.clone());
    for q in 0..30 {
        builder = builder.queue(format!("q{q}"), 2);
    }
    let rt = builder.start().await.unwrap();
    // The listener wakes every queue once it has subscribed; let that pass first.
    db.wait_for(
        "the listener to subscribe",
        "select exists (select 1 from pg_stat_activity where datname = current_database() and query like 'LISTEN%')",
        LIMIT,
    )
    .await;

    // Once every queue has made its first claim and waits, ten polls pass without
    // a claim: before the poller each queue claimed once a poll interval (300 here).
    let settled = after_polls(&rt, StatsSnapshot::default(), 3).await;
    let idle = after_polls(&rt, settled, 10).await;
    assert_eq!(idle.claims, settled.claims, "claims while idle: {idle:?}");

    // A job without NOTIFY on one queue wakes that queue alone.
    Noop { n: 1 }
        .enqueue_with(&db.pool, EnqueueOptions::new().queue("q17").notify(false))
        .await
        .unwrap();
    db.wait_idle(LIMIT).await;
    let after = after_polls(&rt, rt.stats(), 1).await;
    assert_eq!(ledger.counts().len(), 1);
    // Woken once by the poll; claims while a job is found are bounded by the
    // queue and a poll or two, never by the number of queues.
    let claims = after.claims - idle.claims;
    assert!((1..=3).contains(&claims), "{claims} claims for one job");

    // A paused queue with work is not woken by the poll.
    assert!(control::pause_queue(&db.pool, "q3", "test").await.unwrap());
    Noop { n: 2 }
        .enqueue_with(&db.pool, EnqueueOptions::new().queue("q3").notify(false))
        .await
        .unwrap();
    let paused = after_polls(&rt, after, 10).await;
    assert_eq!(paused.claims, after.claims, "claims of a paused queue");
    assert_eq!(ledger.counts().len(), 1);
    assert!(control::resume_queue(&db.pool, "q3").await.unwrap());
    db.wait_idle(LIMIT).await;
    assert_eq!(ledger.counts().len(), 2);
    rt.shutdown().await.unwrap();
}
