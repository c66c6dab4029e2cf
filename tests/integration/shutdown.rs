//! Graceful shutdown: finish within the grace period or hand back at once.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering::SeqCst},
        Arc,
    },
    time::Duration,
};

use lq_runtime::{
    EnqueueOptions, Job, JobContext, JobError, JobState, Perform, Runtime, RuntimeConfig,
};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::jobs::{quick, start_runtime, Ledger, Noop, Patient};

#[tokio::test]
async fn unfinished_jobs_go_back_to_the_queue_without_spending_an_attempt() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let ids: Vec<i64> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(Patient.enqueue(&db.pool).await.unwrap().id);
        }
        v
    };
    let config = RuntimeConfig {
        shutdown_grace: Duration::from_millis(200),
        ..quick()
    };
    let rt = start_runtime(&db, "default", 8, config, &ledger).await;
    db.wait_for(
        "all three running",
        "select count(*) = 3 from lq.all_jobs where state = 'running'",
        Duration::from_secs(30),
    )
    .await;
    rt.shutdown().await.unwrap();
    for id in ids {
        let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
        assert_eq!((row.state, row.attempts), (JobState::Queued, 0), "job {id}");
        assert!(row.lease_owner.is_none());
        assert!(row.errors.as_array().unwrap().is_empty());
    }
}

#[tokio::test]
async fn jobs_that_finish_within_the_grace_period_are_recorded() {
    let db = TestDb::new().await;
    for n in 0..100 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    let rt = Runtime::builder(db.pool.clone())
        .queue("default", 4)
        .state(Ledger::default())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "some progress",
        "select count(*) > 0 from lq.all_jobs where state = 'succeeded'",
        Duration::from_secs(30),
    )
    .await;
    rt.shutdown().await.unwrap();
    // Nothing is left running, nothing holds a lease.
    assert_eq!(db.count("running").await, 0);
    let leased: i64 =
        sqlx::query_scalar("select count(*) from lq.all_jobs where lease_token is not null")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(leased, 0);
    assert_eq!(db.count("succeeded").await + db.count("queued").await, 100);
}

/// Gates for [`Gated`] jobs, one per round, closed until the test opens them, and
/// how many gated jobs have reached their gate.
#[derive(Default)]
struct Gates {
    rounds: Vec<Semaphore>,
    arrived: AtomicUsize,
}

/// Waits at its round's gate (or for its cancellation signal), then succeeds.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.gated")]
struct Gated {
    round: usize,
}

impl Perform for Gated {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gates = ctx.state::<Arc<Gates>>();
        gates.arrived.fetch_add(1, SeqCst);
        tokio::select! {
            _ = gates.rounds[self.round].acquire() => Ok(()),
            _ = ctx.cancelled() => Err("stopped by its cancellation signal".into()),
        }
    }
}

/// Stops a runtime while jobs it claimed ahead wait for a handler, and checks that
/// they go back to the queue with their attempt unspent. Each round lets no-op
/// jobs make the queue claim ahead, then puts ten gated jobs at its head: two take
/// the handlers and block them; if the claim that brought them was larger than two,
/// the rest wait for a handler. Whether it was depends on the free leases, so a
/// round that shows no waiting job opens its gate and tries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_claimed_ahead_go_back_to_the_queue_unspent_at_shutdown() {
    const ROUNDS: usize = 30;
    let db = TestDb::new().await;
    let gates = Arc::new(Gates {
        rounds: (0..ROUNDS).map(|_| Semaphore::new(0)).collect(),
        ..Gates::default()
    });
    let config = RuntimeConfig {
        shutdown_grace: Duration::from_millis(100),
        ..quick()
    };
    let rt = Runtime::builder(db.pool.clone())
        .config(config)
        .queue("default", 2)
        .state(gates.clone())
        .state(Ledger::default())
        .start()
        .await
        .unwrap();
    let mut waited = false;
    for round in 0..ROUNDS {
        let noops = (0..500).map(|n| Noop { n });
        Noop::enqueue_many(&db.pool, noops, EnqueueOptions::new())
            .await
            .unwrap();
        let gated = (0..10).map(|_| Gated { round });
        Gated::enqueue_many(&db.pool, gated, EnqueueOptions::new().priority(10))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while gates.arrived.load(SeqCst) < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "gated jobs never ran"
            );
            tokio::task::yield_now().await;
        }
        // Both handlers are blocked: any other leased gated job is waiting.
        let leased: i64 = sqlx::query_scalar(
            "select count(*) from lq.all_jobs where kind = 'test.gated' and state = 'running'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if leased > 2 {
            waited = true;
            break;
        }
        gates.rounds[round].add_permits(Semaphore::MAX_PERMITS / 2);
        db.wait_idle(Duration::from_secs(60)).await;
        gates.arrived.store(0, SeqCst);
    }
    assert!(waited, "no job claimed ahead waited in {ROUNDS} rounds");
    rt.shutdown().await.unwrap();
    let (succeeded_once, queued_unspent, other): (i64, i64, i64) = sqlx::query_as(
        "select count(*) filter (where state = 'succeeded' and attempts = 1),
                count(*) filter (where state = 'queued' and attempts = 0 and lease_token is null),
                count(*) filter (where not (state in ('succeeded', 'queued')))
         from lq.all_jobs",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(other, 0, "jobs left leased after shutdown");
    let total: i64 = sqlx::query_scalar("select count(*) from lq.all_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(succeeded_once + queued_unspent, total);
}
