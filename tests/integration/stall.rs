//! A claim the server holds up past the runtime's `db_timeout` (a lock, a stall)
//! commits nothing: the server cancels it before the client gives up on it, so no
//! job is left leased by nobody with an attempt spent.

use std::time::Duration;

use lq_runtime::{control, EnqueueOptions, Job, JobContext, JobError, Perform, Runtime};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

use crate::jobs::{quick, Ledger, CLAIM_WAITS_FOR_LOCK};

const LIMIT: Duration = Duration::from_secs(60);

/// Records itself; its short lease would let a job leased by nobody be rescued
/// (and run on a second attempt) within the test's time.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.stalled", lease = "2s", max_attempts = 5)]
struct Stalled {
    n: u32,
}

impl Perform for Stalled {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>().record(ctx.id());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_held_up_past_the_db_timeout_leaves_no_job_leased_by_nobody() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let rt = Runtime::builder(db.pool.clone())
        .config(lq_runtime::RuntimeConfig {
            db_timeout: Duration::from_millis(500),
            rescue_interval: Duration::from_millis(100),
            ..quick()
        })
        .queue("default", 4)
        .state(ledger.clone())
        .start()
        .await
        .unwrap();
    // A first job, so the claimer's kept connection has its claim prepared: a
    // claim held up later is then sent whole (bind, execute, sync) and would
    // commit once unblocked even after the client gave up on it.
    let first = Stalled { n: 0 }.enqueue(&db.pool).await.unwrap().id;
    db.wait_for(
        "the first job",
        &format!("select exists (select from lq.finished_jobs where id = {first})"),
        LIMIT,
    )
    .await;
    control::pause_queue(&db.pool, "default", "test")
        .await
        .unwrap();
    let jobs = (1..6).map(|n| Stalled { n });
    let ids = Stalled::enqueue_many(&db.pool, jobs, EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    // A transaction that blocks writes to the queue table (as a migration or an
    // operator's lock would) for six times the runtime's db_timeout, while the
    // queue resumes and its claims wait behind it.
    let mut stall = db.pool.begin().await.unwrap();
    sqlx::query("lock table lq.jobs in share mode")
        .execute(&mut *stall)
        .await
        .unwrap();
    control::resume_queue(&db.pool, "default").await.unwrap();
    db.wait_for(
        "the runtime's claim to wait for the lock",
        CLAIM_WAITS_FOR_LOCK,
        LIMIT,
    )
    .await;
    sqlx::query("select pg_sleep(3)")
        .execute(&mut *stall)
        .await
        .unwrap();
    stall.commit().await.unwrap();

    db.wait_for(
        "every job to succeed",
        "select count(*) = 6 from lq.finished_jobs where state = 'succeeded'",
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    for id in ids {
        let job = control::get(&db.pool, id).await.unwrap();
        assert_eq!(
            (job.attempts, job.errors.len()),
            (1, 0),
            "job {id} ran on its first attempt, never rescued: {:?}",
            job.errors
        );
    }
    assert!(
        ledger.counts().values().all(|n| *n == 1),
        "{:?}",
        ledger.counts()
    );
}
