//! Jobs claimed ahead of a free handler: what happens to them while they wait.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use lq_runtime::{
    EnqueueOptions, Job, JobContext, JobError, JobState, Perform, Runtime, RuntimeConfig,
};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::jobs::{jobs_listener, next_note, quick, Ledger, Noop};

/// How many rounds [`block_handlers_with_jobs_waiting`] tries.
const ROUNDS: usize = 30;

/// Gates for [`Gated`] jobs, one per round, closed until the test opens them, and
/// the ids of the gated jobs whose handler has started.
struct Gates {
    rounds: Vec<Semaphore>,
    started: Mutex<Vec<i64>>,
}

impl Gates {
    fn new() -> Arc<Self> {
        Arc::new(Gates {
            rounds: (0..ROUNDS).map(|_| Semaphore::new(0)).collect(),
            started: Mutex::default(),
        })
    }

    fn started(&self) -> Vec<i64> {
        self.started.lock().unwrap().clone()
    }

    fn open(&self, round: usize) {
        self.rounds[round].add_permits(Semaphore::MAX_PERMITS / 2);
    }
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
        gates.started.lock().unwrap().push(ctx.id());
        tokio::select! {
            _ = gates.rounds[self.round].acquire() => Ok(()),
            _ = ctx.cancelled() => Err("stopped by its cancellation signal".into()),
        }
    }
}

/// [`quick`], with jobs claimed ahead waiting for a handler as long as a test
/// needs (no hand-back after `claim_ahead_wait`).
fn patient() -> RuntimeConfig {
    RuntimeConfig {
        claim_ahead_wait: Duration::from_secs(600),
        ..quick()
    }
}

/// [`quick`], with jobs claimed ahead handed back after waiting 300 ms for a
/// handler.
fn impatient() -> RuntimeConfig {
    RuntimeConfig {
        claim_ahead_wait: Duration::from_millis(300),
        ..quick()
    }
}

/// A runtime with two handlers on `default`, config `config`, sharing `gates`.
async fn start(db: &TestDb, gates: &Arc<Gates>, config: RuntimeConfig) -> Runtime {
    Runtime::builder(db.pool.clone())
        .config(config)
        .queue("default", 2)
        .state(gates.clone())
        .state(Ledger::default())
        .start()
        .await
        .unwrap()
}

/// Blocks both handlers of `rt`'s queue with gated jobs while more gated jobs,
/// claimed ahead, wait for a handler; returns the round whose gate holds them and
/// the ids of the waiting jobs.
///
/// Each round lets no-op jobs make the queue claim ahead, then puts ten gated jobs
/// at its head: two take the handlers and block them; if the claim that brought
/// them was larger than two, the rest wait for a handler. Whether it was depends
/// on the free leases, so a round that shows no waiting job opens its gate and
/// tries again.
async fn block_handlers_with_jobs_waiting(db: &TestDb, gates: &Gates) -> (usize, Vec<i64>) {
    // No wake-up NOTIFY: the runtime polls every 50 ms, and the notifier sends
    // its NOTIFYs on a connection of its own, paced, so one sent late (under
    // CI's load) would reach the pause test's listener as a wake-up.
    let quiet = || EnqueueOptions::new().notify(false);
    for round in 0..ROUNDS {
        let noops = (0..500).map(|n| Noop { n });
        Noop::enqueue_many(&db.pool, noops, quiet()).await.unwrap();
        let gated = (0..10).map(|_| Gated { round });
        Gated::enqueue_many(&db.pool, gated, quiet().priority(10))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while gates.started().len() < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "gated jobs never ran"
            );
            tokio::task::yield_now().await;
        }
        // Both handlers are blocked: any other leased gated job is waiting.
        let leased: Vec<i64> = sqlx::query_scalar(
            "select id from lq.all_jobs where kind = 'test.gated' and state = 'running'",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        let started = gates.started();
        let waiting: Vec<i64> = leased
            .into_iter()
            .filter(|id| !started.contains(id))
            .collect();
        if !waiting.is_empty() {
            return (round, waiting);
        }
        gates.open(round);
        db.wait_idle(Duration::from_secs(60)).await;
        gates.started.lock().unwrap().clear();
    }
    panic!("no job claimed ahead waited in {ROUNDS} rounds");
}

/// Stops a runtime while jobs it claimed ahead wait for a handler, and checks that
/// they go back to the queue with their attempt unspent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_claimed_ahead_go_back_to_the_queue_unspent_at_shutdown() {
    let db = TestDb::new().await;
    let gates = Gates::new();
    let config = RuntimeConfig {
        shutdown_grace: Duration::from_millis(100),
        ..patient()
    };
    let rt = start(&db, &gates, config).await;
    let (_, waiting) = block_handlers_with_jobs_waiting(&db, &gates).await;
    rt.shutdown().await.unwrap();
    for id in waiting {
        let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
        assert_eq!((row.state, row.attempts), (JobState::Queued, 0), "job {id}");
        assert!(row.lease_expires_at.is_none(), "job {id} still leased");
    }
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

/// A job cancelled while it waits for a handler ends `cancelled` at once, while
/// both handlers are still blocked, and its handler never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cancelled_while_it_waits_for_a_handler_ends_without_running() {
    let db = TestDb::new().await;
    let gates = Gates::new();
    let rt = start(&db, &gates, patient()).await;
    let (round, waiting) = block_handlers_with_jobs_waiting(&db, &gates).await;
    let victim = waiting[0];
    let before = lq_runtime::control::cancel(&db.pool, victim).await.unwrap();
    assert_eq!(before, JobState::Running);
    db.wait_for(
        "the waiting job to end cancelled",
        &format!("select state = 'cancelled' from lq.all_jobs where id = {victim}"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(gates.started().len(), 2, "a handler was freed meanwhile");
    gates.open(round);
    db.wait_idle(Duration::from_secs(60)).await;
    let stats = rt.shutdown_with_stats().await.unwrap();
    assert!(
        !gates.started().contains(&victim),
        "the cancelled job's handler ran"
    );
    let row = lq_runtime::control::get(&db.pool, victim).await.unwrap();
    assert_eq!(row.state, JobState::Cancelled);
    assert!(row.errors.is_empty(), "{:?}", row.errors);
    assert_eq!(stats.cancelled, 1);
    assert_eq!(db.count("cancelled").await, 1);
}

/// A job claimed ahead that waits `claim_ahead_wait` for a handler goes back to
/// the queue with its attempt unspent while both handlers stay blocked, and is
/// not claimed ahead again meanwhile; once the handlers are free it runs, on
/// its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_claimed_ahead_that_waits_too_long_goes_back_unspent() {
    let db = TestDb::new().await;
    let gates = Gates::new();
    let rt = start(&db, &gates, impatient()).await;
    let (round, waiting) = block_handlers_with_jobs_waiting(&db, &gates).await;
    let ids = waiting
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    // Handed back, the queue stops claiming ahead: with both handlers blocked,
    // no gated job is leased but the two running.
    db.wait_for(
        "the jobs waiting for a handler to go back to the queue, unspent",
        &format!(
            "select bool_and(state = 'queued' and attempts = 0 and lease_token is null)
                    and (select count(*) from lq.all_jobs
                         where kind = 'test.gated' and state = 'running') = 2
             from lq.all_jobs where id in ({ids})"
        ),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(gates.started().len(), 2, "a handler was freed meanwhile");
    gates.open(round);
    db.wait_idle(Duration::from_secs(60)).await;
    assert!(rt.stats().released >= waiting.len() as u64);
    rt.shutdown().await.unwrap();
    for id in waiting {
        succeeded_on_its_first_attempt(&db, id).await;
    }
}

/// Pausing the queue hands back the jobs claimed ahead that wait for a handler,
/// their attempt unspent and with no wake-up (no runtime claims from a paused
/// queue), while both handlers stay blocked; freed handlers then start none of
/// them; resumed, they run on their first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_the_queue_hands_back_the_jobs_claimed_ahead_instead_of_starting_them() {
    let db = TestDb::new().await;
    let gates = Gates::new();
    let rt = start(&db, &gates, patient()).await;
    let (round, waiting) = block_handlers_with_jobs_waiting(&db, &gates).await;
    let ids = waiting
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut listener = jobs_listener(&db).await;
    assert!(
        lq_runtime::control::pause_queue(&db.pool, "default", "test")
            .await
            .unwrap()
    );
    db.wait_for(
        "the jobs waiting for a handler to go back to the queue, unspent",
        &format!(
            "select bool_and(state = 'queued' and attempts = 0 and lease_token is null)
             from lq.all_jobs where id in ({ids})"
        ),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(gates.started().len(), 2, "a handler was freed meanwhile");
    // A hand-back is counted once its wake-up, if any, was sent; wake-ups
    // arrive in commit order, so all of them come before a NOTIFY sent now.
    let started = std::time::Instant::now();
    while rt.stats().released < waiting.len() as u64 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            rt.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sqlx::query("select pg_notify('lq_jobs', 'sentinel')")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut wake_ups = 0;
    while next_note(&mut listener, "the sentinel").await != "sentinel" {
        wake_ups += 1;
    }
    assert_eq!(wake_ups, 0, "hand-backs to a paused queue woke runtimes");
    gates.open(round);
    // The two blocked jobs finish; nothing else of the queue starts.
    db.wait_for(
        "the running jobs to finish",
        "select not exists (select from lq.jobs where state = 'running')",
        Duration::from_secs(30),
    )
    .await;
    let started = gates.started();
    assert!(
        waiting.iter().all(|id| !started.contains(id)),
        "a job claimed ahead started after the pause"
    );
    assert!(lq_runtime::control::resume_queue(&db.pool, "default")
        .await
        .unwrap());
    db.wait_idle(Duration::from_secs(60)).await;
    rt.shutdown().await.unwrap();
    for id in waiting {
        succeeded_on_its_first_attempt(&db, id).await;
    }
}

/// A hand-back the database refuses leaves the job waiting with its lease (the
/// heartbeat renews it), not leased by nobody with its attempt spent: it runs
/// here once a handler is free, on its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_back_the_database_refuses_keeps_the_job_waiting_here() {
    lq_tests::init_tracing();
    let db = TestDb::new().await;
    // Refused as a plain `raise exception` (P0001), not a data error.
    let hand_back = "old.state = 'running' and new.state = 'queued'";
    db.refuse_rows("lq.jobs", "update", hand_back, "P0001")
        .await;
    let gates = Gates::new();
    let rt = start(&db, &gates, impatient()).await;
    let (round, waiting) = block_handlers_with_jobs_waiting(&db, &gates).await;
    let first = waiting[0].to_string();
    lq_tests::logs::wait_logged(1, Duration::from_secs(30), |e| {
        e.message.contains("could not hand the job back") && e.field("id") == Some(first.as_str())
    })
    .await;
    assert_eq!(gates.started().len(), 2, "a handler was freed meanwhile");
    gates.open(round);
    db.wait_idle(Duration::from_secs(60)).await;
    let released = rt.stats().released;
    rt.shutdown().await.unwrap();
    assert_eq!(released, 0);
    for id in waiting {
        let row = succeeded_on_its_first_attempt(&db, id).await;
        assert!(row.errors.is_empty(), "job {id}: {:?}", row.errors);
    }
}

/// Asserts job `id` succeeded on attempt 1 (a hand-back spent no attempt), and
/// returns its row.
async fn succeeded_on_its_first_attempt(db: &TestDb, id: i64) -> lq_runtime::control::JobRow {
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(
        (row.state, row.attempts),
        (JobState::Succeeded, 1),
        "job {id}"
    );
    row
}
