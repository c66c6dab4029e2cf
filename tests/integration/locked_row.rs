//! One running job's row locked by another session (an operator's transaction, a
//! bulk action waiting on it) for longer than a lease: the heartbeat skips that row
//! and keeps renewing every other lease, so no other job is rescued and run again.

use std::{sync::Arc, time::Duration};

use lq_runtime::{control, Job, JobContext, JobError, Perform, Runtime};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::jobs::{quick, Ledger};

const LIMIT: Duration = Duration::from_secs(60);

/// Shared with the handlers through the runtime's state.
struct Gate {
    ledger: Ledger,
    /// Set to true to end every handler; each ignores its cancellation signal
    /// until then.
    release: watch::Sender<bool>,
}

/// Runs until the test releases it; its short lease is kept only by heartbeats.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.locked_row", lease = "2s", max_attempts = 5)]
struct Held {
    n: u32,
}

impl Perform for Held {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gate = ctx.state::<Arc<Gate>>();
        gate.ledger.record(ctx.id());
        let _ = gate
            .release
            .subscribe()
            .wait_for(|released| *released)
            .await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_locked_elsewhere_does_not_cost_the_other_jobs_their_leases() {
    let db = TestDb::new().await;
    let locked = Held { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let other = Held { n: 2 }.enqueue(&db.pool).await.unwrap().id;
    let gate = Arc::new(Gate {
        ledger: Ledger::default(),
        release: watch::Sender::new(false),
    });
    let rt = Runtime::builder(db.pool.clone())
        .config(lq_runtime::RuntimeConfig {
            db_timeout: Duration::from_millis(500),
            rescue_interval: Duration::from_millis(100),
            ..quick()
        })
        .queue("default", 4)
        .state(gate.clone())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "both jobs to run",
        "select count(*) = 2 from lq.jobs where state = 'running'",
        LIMIT,
    )
    .await;

    // Another session locks one running job's row for three lease lengths.
    let mut lock = db.lock_row(locked).await;
    sqlx::query("select pg_sleep(6)")
        .execute(&mut *lock)
        .await
        .unwrap();
    lock.commit().await.unwrap();

    gate.release.send_replace(true);
    db.wait_for(
        "both jobs to succeed",
        "select count(*) = 2 from lq.finished_jobs where state = 'succeeded'",
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();

    let job = control::get(&db.pool, other).await.unwrap();
    assert_eq!(
        (job.attempts, job.errors.len()),
        (1, 0),
        "the unlocked job kept its lease on heartbeats alone: {:?}",
        job.errors
    );
    assert_eq!(gate.ledger.counts().get(&other), Some(&1));
    // The locked job's lease could not be extended while it was locked; it may
    // have expired and been rescued, but it is not lost.
    assert!(gate.ledger.counts().get(&locked).is_some_and(|n| *n >= 1));
}

/// Each job waits for its own gate.
struct Gates {
    ledger: Ledger,
    open: [watch::Sender<bool>; 2],
}

#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.locked_success", max_attempts = 5)]
struct Gated {
    gate: usize,
}

impl Perform for Gated {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gates = ctx.state::<Arc<Gates>>();
        gates.ledger.record(ctx.id());
        let _ = gates.open[self.gate]
            .subscribe()
            .wait_for(|open| *open)
            .await;
        Ok(())
    }
}

/// A job succeeds while another session holds its row locked (an operator's
/// open transaction): its success waits, and the successes beside it and after
/// it land meanwhile; once the lock goes it is written too. Each job ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_whose_row_is_locked_elsewhere_does_not_hold_back_the_others() {
    let db = TestDb::new().await;
    let locked = Gated { gate: 0 }.enqueue(&db.pool).await.unwrap().id;
    // Ends with the locked job, so the two are likely written in one batch.
    let beside = Gated { gate: 0 }.enqueue(&db.pool).await.unwrap().id;
    let after = Gated { gate: 1 }.enqueue(&db.pool).await.unwrap().id;
    let gates = Arc::new(Gates {
        ledger: Ledger::default(),
        open: [watch::Sender::new(false), watch::Sender::new(false)],
    });
    let rt = Runtime::builder(db.pool.clone())
        .config(lq_runtime::RuntimeConfig {
            db_timeout: Duration::from_secs(1),
            ..quick()
        })
        .queue("default", 3)
        .state(gates.clone())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the jobs to run",
        "select count(*) = 3 from lq.jobs where state = 'running'",
        LIMIT,
    )
    .await;

    let lock = db.lock_row(locked).await;
    let succeeded = |id: i64| {
        format!(
            "select exists (select from lq.finished_jobs where id = {id} and state = 'succeeded')"
        )
    };
    gates.open[0].send_replace(true);
    db.wait_for(
        "the success beside the locked one to land while the row is still locked",
        &succeeded(beside),
        LIMIT,
    )
    .await;
    gates.open[1].send_replace(true);
    db.wait_for(
        "a later success to land while the row is still locked",
        &succeeded(after),
        LIMIT,
    )
    .await;
    let waiting: bool = sqlx::query_scalar(&format!(
        "select exists (select from lq.jobs where id = {locked} and state = 'running')"
    ))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(waiting, "the locked job's success cannot have landed yet");

    lock.commit().await.unwrap();
    db.wait_for(
        "the locked job's success to land once the lock is gone",
        &succeeded(locked),
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    for id in [locked, beside, after] {
        assert_eq!(
            gates.ledger.counts().get(&id),
            Some(&1),
            "job {id} ran once"
        );
    }
}

/// Fails its first attempt once its gate opens; succeeds after.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.locked_failure", max_attempts = 3, backoff = fixed("10ms"))]
struct FailsOnce;

impl Perform for FailsOnce {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gates = ctx.state::<Arc<Gates>>();
        gates.ledger.record(ctx.id());
        let _ = gates.open[0].subscribe().wait_for(|open| *open).await;
        if ctx.attempt() == 1 {
            return Err("the first attempt fails".into());
        }
        Ok(())
    }
}

/// A failure's write held up by a lock elsewhere does not hold its handler:
/// on a queue of one handler, the next job runs (and succeeds) while that
/// write still waits, as it would after a success. Once the lock goes the
/// failure lands, and the retry runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_whose_row_is_locked_elsewhere_frees_its_handler() {
    let db = TestDb::new().await;
    let failing = FailsOnce.enqueue(&db.pool).await.unwrap().id;
    let gates = Arc::new(Gates {
        ledger: Ledger::default(),
        open: [watch::Sender::new(false), watch::Sender::new(true)],
    });
    let rt = Runtime::builder(db.pool.clone())
        .config(lq_runtime::RuntimeConfig {
            // The failure's write waits on the lock rather than timing out and
            // giving the job up to its lease meanwhile.
            db_timeout: Duration::from_secs(120),
            ..quick()
        })
        .queue("default", 1)
        .state(gates.clone())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the failing job to run",
        &format!("select exists (select from lq.jobs where id = {failing} and state = 'running')"),
        LIMIT,
    )
    .await;
    let lock = db.lock_row(failing).await;
    // Enqueued only now, so the one handler is the failing job's first.
    let next = Gated { gate: 1 }.enqueue(&db.pool).await.unwrap().id;
    gates.open[0].send_replace(true);

    db.wait_for(
        "the next job to succeed while the failure's write waits on the lock",
        &format!("select exists (select from lq.finished_jobs where id = {next} and state = 'succeeded')"),
        LIMIT,
    )
    .await;
    let (state, attempts): (String, i32) =
        sqlx::query_as("select state::text, attempts from lq.jobs where id = $1")
            .bind(failing)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (state.as_str(), attempts),
        ("running", 1),
        "the failure cannot have landed while its row is locked"
    );

    lock.commit().await.unwrap();
    db.wait_for(
        "the failed job's retry to succeed once the lock is gone",
        &format!("select exists (select from lq.finished_jobs where id = {failing} and state = 'succeeded' and attempts = 2)"),
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    let counts = gates.ledger.counts();
    assert_eq!(
        counts.get(&failing),
        Some(&2),
        "two attempts of the failing job"
    );
    assert_eq!(counts.get(&next), Some(&1), "the next job ran once");
}
