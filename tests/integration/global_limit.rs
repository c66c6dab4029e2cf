//! A global limit: at most N jobs of a queue run at once across every runtime
//! sharing the database, however many handlers each runtime has.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use lq_runtime::{
    EnqueueOptions, Error, Job, JobContext, JobError, Perform, Runtime, RuntimeConfig,
};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(60);

/// How many `LimitedWork` handlers run now, and the most that ever ran at once.
#[derive(Clone, Default)]
struct Gauge(Arc<(AtomicUsize, AtomicUsize)>);

impl Gauge {
    fn most(&self) -> usize {
        self.0 .1.load(Ordering::SeqCst)
    }
}

/// Works for 20 ms (its workload, not a wait for anything), counted by the
/// runtime's [`Gauge`] while it does.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.limited_gauged", queue = "limited")]
struct LimitedWork;

impl Perform for LimitedWork {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let g = ctx.state::<Gauge>();
        let now = g.0 .0.fetch_add(1, Ordering::SeqCst) + 1;
        g.0 .1.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        g.0 .0.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

async fn limited_runtime(db: &TestDb, gauge: &Gauge, limit: u32, config: RuntimeConfig) -> Runtime {
    Runtime::builder(db.pool.clone())
        .config(config)
        .queue("limited", 4)
        .global_limit("limited", limit)
        .state(gauge.clone())
        .start()
        .await
        .unwrap()
}

async fn enqueue_gauged(db: &TestDb, n: usize) {
    LimitedWork::enqueue_many(&db.pool, (0..n).map(|_| LimitedWork), EnqueueOptions::new())
        .await
        .unwrap();
}

/// Three runtimes of four handlers each, twelve in all, run at most three jobs
/// of the queue at once, and every job still succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_runtimes_never_run_more_of_a_queue_than_its_global_limit() {
    let db = TestDb::new().await;
    let gauge = Gauge::default();
    let quick = || RuntimeConfig {
        poll_interval: Duration::from_millis(50),
        ..RuntimeConfig::default()
    };
    let mut runtimes = Vec::new();
    for _ in 0..3 {
        runtimes.push(limited_runtime(&db, &gauge, 3, quick()).await);
    }
    enqueue_gauged(&db, 60).await;
    db.wait_for(
        "every job to succeed",
        "select count(*) = 60 from lq.finished_jobs where state = 'succeeded'",
        LIMIT,
    )
    .await;
    for rt in runtimes {
        rt.shutdown().await.unwrap();
    }
    let most = gauge.most();
    assert!(most <= 3, "{most} jobs ran at once, over the limit of 3");
    assert!(
        most >= 2,
        "the limit allows 3 at once, but at most {most} ran"
    );
}

/// With a limit of 1 the queue's jobs run one after another; each finishing
/// starts the next at once, without waiting for a poll (once a minute here).
#[tokio::test]
async fn a_limit_of_one_runs_the_jobs_one_at_a_time_each_after_the_last() {
    let db = TestDb::new().await;
    let gauge = Gauge::default();
    let rarely = RuntimeConfig {
        poll_interval: Duration::from_secs(60),
        ..RuntimeConfig::default()
    };
    let rt = limited_runtime(&db, &gauge, 1, rarely).await;
    enqueue_gauged(&db, 10).await;
    db.wait_for(
        "every job to succeed",
        "select count(*) = 10 from lq.finished_jobs where state = 'succeeded'",
        Duration::from_secs(20),
    )
    .await;
    rt.shutdown().await.unwrap();
    assert_eq!(gauge.most(), 1);
    // One after another: no two attempts' runs overlapped in the database's
    // record either.
    let overlaps = db
        .number(
            "select count(*) from lq.finished_jobs a join lq.finished_jobs b
                 on a.id < b.id and a.started_at < b.finished_at and b.started_at < a.finished_at",
        )
        .await;
    assert_eq!(overlaps, 0);
}

#[tokio::test]
async fn a_global_limit_on_a_queue_not_served_or_of_zero_fails_start() {
    let db = TestDb::new().await;
    let start = |queue: &'static str, limit: u32| {
        Runtime::builder(db.pool.clone())
            .queue("limited", 2)
            .global_limit(queue, limit)
            .start()
    };
    match start("elsewhere", 2).await {
        Err(e @ Error::GlobalLimit { .. }) => assert_eq!(
            e.to_string(),
            "global limit on queue \"elsewhere\": this runtime does not serve the queue: add it with .queue()"
        ),
        other => panic!("{:?}", other.map(|_| ())),
    }
    match start("limited", 0).await {
        Err(Error::GlobalLimit { queue, reason }) => {
            assert_eq!(queue, "limited");
            assert!(
                reason.starts_with("a limit of 0 would run none"),
                "{reason}"
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}
