//! Job types shared by the integration tests. Every kind is distinct: one binary,
//! one registry.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use lq_runtime::{Job, JobContext, JobError, Perform, Runtime, RuntimeConfig, StatsSnapshot};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

/// Counts performances per job id, shared through the runtime's state.
#[derive(Clone, Default)]
pub struct Ledger(Arc<Mutex<HashMap<i64, u32>>>);

impl Ledger {
    pub fn record(&self, id: i64) {
        *self.0.lock().unwrap().entry(id).or_default() += 1;
    }
    pub fn counts(&self) -> HashMap<i64, u32> {
        self.0.lock().unwrap().clone()
    }
}

/// Settings for quick tests: poll every 50 ms, everything else as shipped.
pub fn quick() -> RuntimeConfig {
    RuntimeConfig {
        poll_interval: Duration::from_millis(50),
        ..RuntimeConfig::default()
    }
}

/// `rt`'s counters once `done` holds of them, or a panic naming `what` after a
/// minute. A counter moves just after the write it counts is answered, so a
/// test that saw the write in the database waits for the count.
pub async fn stats_once(
    rt: &Runtime,
    what: &str,
    done: impl Fn(&StatsSnapshot) -> bool,
) -> StatsSnapshot {
    let limit = Duration::from_secs(60);
    let started = Instant::now();
    loop {
        let stats = rt.stats();
        if done(&stats) {
            return stats;
        }
        assert!(
            started.elapsed() < limit,
            "waited {limit:?} for {what}: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The error texts job `id` holds, oldest first.
pub async fn error_texts(db: &TestDb, id: i64) -> Vec<String> {
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    row.errors.into_iter().map(|e| e.error).collect()
}

/// True once a runtime's claim statement waits for a lock (a test holding one).
pub const CLAIM_WAITS_FOR_LOCK: &str = "select exists (select from pg_stat_activity
    where datname = current_database() and wait_event_type = 'Lock'
      and (query like 'with picked%' or query like 'with gate%'))";

/// A started runtime on `db` serving `queue` with `slots`, sharing `ledger`.
pub async fn start_runtime(
    db: &TestDb,
    queue: &str,
    slots: usize,
    config: RuntimeConfig,
    ledger: &Ledger,
) -> Runtime {
    Runtime::builder(db.pool.clone())
        .config(config)
        .queue(queue, slots)
        .state(ledger.clone())
        .start()
        .await
        .unwrap()
}

/// Succeeds at once and records itself.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.noop")]
pub struct Noop {
    pub n: u64,
}

impl Perform for Noop {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>().record(ctx.id());
        Ok(())
    }
}

/// Fails `fail_times` attempts with an io error, then succeeds.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.flaky", max_attempts = 5, backoff = fixed("10ms"))]
pub struct Flaky {
    pub fail_times: u32,
}

impl Perform for Flaky {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>().record(ctx.id());
        if ctx.attempt() <= self.fail_times {
            let e = std::io::Error::other(format!("flaky failure {}", ctx.attempt()));
            return Err(e.into());
        }
        Ok(())
    }
}

/// Always fails: goes dead after its 3 attempts.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.doomed", max_attempts = 3, backoff = linear(step = "5ms", max = "20ms"))]
pub struct Doomed;

impl Perform for Doomed {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        Err(format!("doomed attempt {}", ctx.attempt()).into())
    }
}

/// Fails permanently on the first attempt.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.hopeless", max_attempts = 10)]
pub struct Hopeless;

impl Perform for Hopeless {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Err(JobError::permanent("the account is closed"))
    }
}

/// Snoozes `times` times, then succeeds.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.sleepy", max_attempts = 1)]
pub struct Sleepy {
    pub times: u32,
}

impl Perform for Sleepy {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let ledger = ctx.state::<Ledger>();
        ledger.record(ctx.id());
        if ledger.counts()[&ctx.id()] <= self.times {
            return Err(JobError::snooze(Duration::from_millis(10)));
        }
        Ok(())
    }
}

/// Panics on its first attempt, then succeeds.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.panicky", backoff = fixed("10ms"))]
pub struct Panicky;

impl Perform for Panicky {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.attempt() == 1 {
            panic!("boom on attempt 1");
        }
        Ok(())
    }
}

/// Runs longer than its timeout.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.slowpoke", timeout = "50ms", max_attempts = 2, backoff = fixed("10ms"))]
pub struct Slowpoke;

impl Perform for Slowpoke {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(())
    }
}

/// Waits for its cancellation signal, then reports it; a stand-in for long work.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.patient", max_attempts = 3)]
pub struct Patient;

impl Perform for Patient {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>().record(ctx.id());
        ctx.cancelled().await;
        Err("stopped by its cancellation signal".into())
    }
}

/// Has a unique key over its field.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.unique", unique_key = "order:{order_id}")]
pub struct UniqueOrder {
    pub order_id: i64,
}

impl Perform for UniqueOrder {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A producer-only type: derives Job without Perform, so no runtime claims it.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.producer_only", queue = "elsewhere")]
pub struct ProducerOnly {
    pub note: String,
}

/// Carries a big payload, for the size limit.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.blob")]
pub struct Blob {
    pub data: String,
}

impl Perform for Blob {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A LISTEN on the jobs channel of `db`.
pub async fn jobs_listener(db: &TestDb) -> sqlx::postgres::PgListener {
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    listener.listen("lq_jobs").await.unwrap();
    listener
}

/// The payload of the next NOTIFY on `listener`; panics with `what` if none
/// arrives within 5 s.
pub async fn next_note(listener: &mut sqlx::postgres::PgListener, what: &str) -> String {
    tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .unwrap_or_else(|_| panic!("no NOTIFY: {what}"))
        .unwrap()
        .payload()
        .to_owned()
}
