//! A statement the runtime gave up on is cancelled by the server, not left
//! running: an abandoned statement keeps its pooled connection until it ends
//! (sqlx pings a connection as it takes it back, and the ping waits), so a few of
//! them, held up by rows locked elsewhere, could leave the leader's rescuer
//! without a connection; and once unblocked it would still commit, after the
//! runtime had given up on it.

use std::{sync::Arc, time::Duration};

use lq_runtime::{Job, JobContext, JobError, Perform, Runtime};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::jobs::quick;

const LIMIT: Duration = Duration::from_secs(60);

/// Fails once the test opens the gate, so its outcome write (which locks its
/// row) is sent while the test holds that row locked.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.abandoned_statement", max_attempts = 5)]
struct FailsOnCue;

impl Perform for FailsOnCue {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gate = ctx.state::<Arc<watch::Sender<bool>>>();
        let _ = gate.subscribe().wait_for(|open| *open).await;
        Err("failing on cue".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_write_held_up_by_a_locked_row_is_cancelled_on_the_server() {
    let db = TestDb::new().await;
    let failing = FailsOnCue.enqueue(&db.pool).await.unwrap().id;
    let gate = Arc::new(watch::Sender::new(false));
    let rt = Runtime::builder(db.pool.clone())
        .config(lq_runtime::RuntimeConfig {
            db_timeout: Duration::from_millis(500),
            ..quick()
        })
        .queue("default", 1)
        .state(gate.clone())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the job to run",
        &format!("select exists (select from lq.jobs where id = {failing} and state = 'running')"),
        LIMIT,
    )
    .await;

    // Another session locks the running job's row, then the job fails: its
    // outcome write waits for the lock past the runtime's db_timeout.
    let lock = db.lock_row(failing).await;
    gate.send_replace(true);
    let waiting = "select pid, query_start from pg_stat_activity
                   where datname = current_database() and wait_event_type = 'Lock'
                     and query like 'with cur as materialized%'";
    // Found and read in one statement: each try of the write waits for under a
    // second, and the next starts after a backoff.
    let looking = std::time::Instant::now();
    let (pid, started): (i32, chrono::DateTime<chrono::Utc>) = loop {
        let found = sqlx::query_as(waiting)
            .fetch_optional(&db.pool)
            .await
            .unwrap();
        if let Some(found) = found {
            break found;
        }
        assert!(
            looking.elapsed() < LIMIT,
            "no outcome write waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // While the row is still locked, the server ends that statement.
    db.wait_for(
        "the held-up statement to be cancelled while the row is still locked",
        &format!(
            "select not exists (select from pg_stat_activity
               where pid = {pid} and wait_event_type = 'Lock'
                 and query_start = '{}'::timestamptz)",
            started.to_rfc3339()
        ),
        LIMIT,
    )
    .await;

    lock.commit().await.unwrap();
    db.wait_for(
        "the failed attempt to be recorded",
        &format!(
            "select exists (select from lq.all_jobs
               where id = {failing} and jsonb_array_length(errors) >= 1)"
        ),
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
}
