//! A job whose lease lapsed and that the same runtime claimed again while the
//! stale attempt's task still ran: that task's end must leave the new attempt's
//! lease alone (renewed by the heartbeat, reachable by a cancel).

use std::{sync::Arc, time::Duration};

use lq_core::db;
use lq_runtime::{control, Job, JobContext, JobError, JobState, Perform, Runtime};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::jobs::quick;

const LIMIT: Duration = Duration::from_secs(60);

/// Lets the test order the two attempts.
#[derive(Default)]
struct Gate {
    /// Ends the first attempt's handler (it ignores its cancellation signal).
    release_first: Notify,
    /// The first attempt's handler returned.
    first_returned: Notify,
}

/// Attempt 1 runs until the test releases it; later attempts until cancelled.
/// Its lease is short, so only the heartbeat keeps a later attempt leased.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.reclaimed", lease = "2s", max_attempts = 5)]
struct Reclaimed;

impl Perform for Reclaimed {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gate = ctx.state::<Arc<Gate>>();
        if ctx.attempt() == 1 {
            gate.release_first.notified().await;
            gate.first_returned.notify_one();
            return Err("the stale attempt ends".into());
        }
        ctx.cancelled().await;
        Err("cancelled".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_attempt_ending_leaves_the_new_attempts_lease_renewed_and_cancellable() {
    let db = TestDb::new().await;
    let id = Reclaimed.enqueue(&db.pool).await.unwrap().id;
    let gate = Arc::new(Gate::default());
    let rt = Runtime::builder(db.pool.clone())
        .config(lq_runtime::RuntimeConfig {
            rescue_interval: Duration::from_millis(100),
            shutdown_grace: Duration::from_millis(10),
            ..quick()
        })
        .queue("default", 2)
        .state(gate.clone())
        .start()
        .await
        .unwrap();
    let row = |cond: &str| format!("select {cond} from lq.all_jobs where id = {id}");
    db.wait_for(
        "the first attempt",
        &row("state = 'running' and attempts = 1"),
        LIMIT,
    )
    .await;

    // Its lease lapses (a freeze, a partition) and the job is rescued, in one
    // transaction so no heartbeat renews it in between.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("update lq.jobs set lease_expires_at = now() - interval '1 second' where id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    db::lease::job_rescue_expired(&mut tx, 10, None)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // This runtime claims it again while the first attempt's handler still runs.
    db.wait_for(
        "the second attempt",
        &row("state = 'running' and attempts = 2"),
        LIMIT,
    )
    .await;
    gate.release_first.notify_one();
    gate.first_returned.notified().await;

    // The second attempt outlives three of its leases on the heartbeat alone:
    // the first attempt's end did not drop it from the leases this runtime renews.
    db.wait_for(
        "the second attempt to outlive three leases",
        &row(
            "state = 'running' and attempts = 2 and lease_expires_at > now()
             and now() - started_at > interval '6 seconds'",
        ),
        LIMIT,
    )
    .await;
    // And a cancel reaches its handler.
    control::cancel(&db.pool, id).await.unwrap();
    db.wait_for("the job to end", &row("state = 'cancelled'"), LIMIT)
        .await;
    rt.shutdown().await.unwrap();
    let job = control::get(&db.pool, id).await.unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Cancelled, 2));
}
