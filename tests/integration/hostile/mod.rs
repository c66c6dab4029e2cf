//! Hostile input and hostile conditions: every job still reaches an end state
//! (or a visible, typed refusal), nothing stays `running`, nothing is lost, and
//! the runtime keeps working and shuts down.
//!
//! Every type here has a queue of its own, and each test's runtime serves only
//! that queue: runtimes of other tests never claim these jobs, nor these tests'
//! runtimes theirs.

use std::{fmt, time::Duration};

use lq_core::db;
use lq_runtime::{
    CoreError, EnqueueOptions, Error, Job, JobContext, JobError, JobState, Perform, Runtime,
    RuntimeConfig, MAX_ERRORS_KEPT, MAX_ERROR_BYTES, MAX_UNIQUE_KEY_BYTES,
};
use lq_tests::TestDb;
use serde::{Deserialize, Deserializer, Serialize};

use crate::jobs::quick;

mod deep_payloads;
mod error_text;
mod history_ids;
mod panics_outside_handler;
mod settings;
mod shutdown;
mod unique_keys;
mod unstorable;

const LIMIT: Duration = Duration::from_secs(60);

/// A started runtime on `db` serving only `queue` with `slots`.
async fn start(db: &TestDb, queue: &str, slots: usize, config: RuntimeConfig) -> Runtime {
    Runtime::builder(db.pool.clone())
        .config(config)
        .queue(queue, slots)
        .start()
        .await
        .unwrap()
}

/// Waits until `rt` holds no lease (its last outcome writes may land in the
/// database just before it lets go of their jobs), or panics after `LIMIT`.
async fn wait_until_holding_nothing(rt: &Runtime) {
    let start = std::time::Instant::now();
    while rt.running() != 0 {
        assert!(
            start.elapsed() < LIMIT,
            "the runtime still holds {} leases after {LIMIT:?}",
            rt.running()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for every job to end, checks the runtime let go of every lease, and
/// shuts it down.
async fn drain_and_stop(db: &TestDb, rt: Runtime) {
    db.wait_idle(LIMIT).await;
    wait_until_holding_nothing(&rt).await;
    rt.shutdown().await.unwrap();
    assert_eq!(db.count("running").await, 0, "a job was left running");
}

/// `(attempt, error)` of each stored error entry of job `id`, oldest first.
async fn errors_of(db: &TestDb, id: i64) -> Vec<(i64, String)> {
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    row.errors
        .into_iter()
        .map(|e| (i64::from(e.attempt), e.error))
        .collect()
}

async fn state_and_attempts(db: &TestDb, id: i64) -> (JobState, i32) {
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    (row.state, row.attempts)
}
