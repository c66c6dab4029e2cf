//! The testing helpers that run handlers: `perform` (no database), `work` and
//! `drain` (the real claim and outcome writes, in the calling task), and the
//! assertions and waits that go with them.

use std::time::Duration;

use lq_runtime::{
    control,
    testing::{self, Drain, Performed, TestContext},
    EnqueueOptions, Job, JobContext, JobError, JobState, Perform, Runtime,
};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

/// Does what it is told; `spawn` enqueues that many children from its handler.
#[derive(Serialize, Deserialize, Job, PartialEq, Debug, Clone)]
#[job(kind = "test.runner_step", queue = "runner-q", max_attempts = 3, backoff = fixed("2s"))]
struct Step {
    n: i64,
    then: Then,
}

#[derive(Serialize, Deserialize, PartialEq, Debug, Clone, Copy)]
enum Then {
    Succeed,
    Fail,
    Panic,
    Snooze,
    Cancel,
    Give(u8),
}

impl Perform for Step {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        match self.then {
            Then::Succeed => Ok(()),
            Then::Fail => {
                Err(format!("step {} failed at attempt {}", self.n, ctx.attempt()).into())
            }
            Then::Panic => panic!("step {} panicked", self.n),
            Then::Snooze => Err(JobError::snooze(Duration::from_secs(90))),
            Then::Cancel => Err(JobError::cancel("not needed")),
            Then::Give(children) => {
                let pool = ctx.state::<sqlx::PgPool>();
                for k in 0..children {
                    let child = Step {
                        n: self.n * 10 + i64::from(k),
                        then: Then::Give(children - 1),
                    };
                    child.enqueue(pool).await?;
                }
                Ok(())
            }
        }
    }
}

/// Sleeps past its timeout.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.runner_slow", timeout = "50ms")]
struct Slow;

impl Perform for Slow {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.cancelled().await;
        Ok(())
    }
}

fn step(n: i64, then: Then) -> Step {
    Step { n, then }
}

#[tokio::test]
async fn perform_says_what_the_runtime_would_do_next() {
    let ctx = TestContext::new::<Step>();
    assert_eq!(
        testing::perform(&step(1, Then::Succeed), &ctx).await,
        Performed::Succeeded
    );
    assert_eq!(
        testing::perform(&step(1, Then::Fail), &ctx).await,
        Performed::Retry {
            error: "step 1 failed at attempt 1".into(),
            after: Duration::from_secs(2)
        }
    );
    assert_eq!(
        testing::perform(&step(1, Then::Fail), &ctx.clone().attempt(3)).await,
        Performed::Dead {
            error: "step 1 failed at attempt 3".into()
        }
    );
    assert!(matches!(
        testing::perform(&step(2, Then::Panic), &ctx).await,
        Performed::Retry { error, .. } if error == "panicked: step 2 panicked"
    ));
    assert_eq!(
        testing::perform(&step(1, Then::Snooze), &ctx).await,
        Performed::Snoozed {
            after: Duration::from_secs(90)
        }
    );
    assert_eq!(
        testing::perform(&step(1, Then::Cancel), &ctx).await,
        Performed::Cancelled {
            reason: "cancelled: not needed".into()
        }
    );
    assert!(matches!(
        testing::perform(&Slow, &TestContext::new::<Slow>()).await,
        Performed::Retry { error, .. } if error.starts_with("timed out after 50ms")
    ));
}

#[tokio::test]
async fn predicate_and_many_assertions_see_the_transaction_and_list_what_is_there() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    step(1, Then::Succeed).enqueue(&mut tx).await.unwrap();
    step(1, Then::Succeed).enqueue(&mut tx).await.unwrap();
    step(2, Then::Fail)
        .enqueue_with(
            &mut tx,
            EnqueueOptions::new()
                .priority(7)
                .delay(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let found = testing::assert_enqueued_where(&mut *tx, |e: &testing::EnqueuedJob<Step>| {
        e.job.n == 2 && e.priority == 7 && e.queue == "runner-q"
    })
    .await;
    assert_eq!(found.job.then, Then::Fail);
    let both = testing::assert_enqueued_many(
        &mut *tx,
        &[
            step(1, Then::Succeed),
            step(2, Then::Fail),
            step(1, Then::Succeed),
        ],
    )
    .await;
    assert_eq!(both.len(), 3);
    assert_ne!(both[0].id, both[2].id);

    // Three of one job where two are queued: the failure says which and lists them.
    let pool = db.pool.clone();
    tx.commit().await.unwrap();
    let missing = tokio::spawn(async move {
        let three = vec![step(1, Then::Succeed); 3];
        testing::assert_enqueued_many(&pool, &three).await
    })
    .await
    .unwrap_err();
    let message = *missing.into_panic().downcast::<String>().unwrap();
    assert!(message.contains("expected job 2 of 3"), "{message}");
    assert!(message.contains("Fail"), "{message}");
}

#[tokio::test]
async fn drain_is_one_pass_unless_recursive_and_writes_real_outcomes() {
    let db = TestDb::new().await;
    let parent = step(1, Then::Give(2)).enqueue(&db.pool).await.unwrap().id;
    let failing = step(5, Then::Fail).enqueue(&db.pool).await.unwrap().id;
    let later = step(6, Then::Succeed)
        .enqueue_with(
            &db.pool,
            EnqueueOptions::new().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .id;

    // One pass: the parent and the failing job run once each; the children wait.
    let report = testing::drain(&db.pool, Drain::queue("runner-q").state(db.pool.clone()))
        .await
        .unwrap();
    assert_eq!(
        report.attempts,
        vec![(parent, JobState::Succeeded), (failing, JobState::Queued)]
    );
    assert_eq!((report.succeeded, report.requeued), (1, 1));
    let row = control::get(&db.pool, failing).await.unwrap();
    assert_eq!((row.attempts, row.errors.len()), (1, 1));
    assert_eq!(row.errors[0].error, "step 5 failed at attempt 1");
    assert_eq!(
        testing::all_enqueued::<Step, _>(&db.pool)
            .await
            .unwrap()
            .len(),
        4
    );

    // Recursive with scheduled jobs: children of children, retries until dead, the
    // scheduled job, all in this call.
    let report = testing::drain(
        &db.pool,
        Drain::queue("runner-q")
            .recursive()
            .with_scheduled()
            .state(db.pool.clone()),
    )
    .await
    .unwrap();
    assert_eq!(
        report.succeeded,
        2 + 2 + 1,
        "2 children, 2 grandchildren, the scheduled one"
    );
    assert_eq!((report.requeued, report.dead), (1, 1));
    assert!(report.attempts.contains(&(later, JobState::Succeeded)));
    assert_eq!(
        control::get(&db.pool, failing).await.unwrap().state,
        JobState::Dead
    );
    assert_eq!(db.count("queued").await + db.count("running").await, 0);
}

#[tokio::test]
async fn drain_stops_at_its_limit_and_work_runs_one_job() {
    let db = TestDb::new().await;
    Step::enqueue_many(
        &db.pool,
        (0..5).map(|n| step(n, Then::Succeed)),
        EnqueueOptions::new(),
    )
    .await
    .unwrap();
    let report = testing::drain(&db.pool, Drain::queue("runner-q").limit(3))
        .await
        .unwrap();
    assert_eq!(report.succeeded, 3);
    assert_eq!(db.count("queued").await, 2);

    // `work` runs its own job, not the two still queued ahead of it.
    let row = testing::work(&db.pool, step(9, Then::Cancel))
        .await
        .unwrap();
    assert_eq!(row.state, JobState::Cancelled);
    assert_eq!(row.errors.last().unwrap().error, "cancelled: not needed");
    assert_eq!(db.count("queued").await, 2);
    let row = testing::work(&db.pool, step(8, Then::Panic)).await.unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Queued, 1));
    assert_eq!(row.errors[0].error, "panicked: step 8 panicked");
}

#[tokio::test]
async fn wait_for_job_waits_on_the_database_and_times_out_typed() {
    let db = TestDb::new().await;
    let id = step(1, Then::Succeed).enqueue(&db.pool).await.unwrap().id;
    let later = step(2, Then::Succeed)
        .enqueue_with(
            &db.pool,
            EnqueueOptions::new().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .id;
    let runtime = Runtime::builder(db.pool.clone())
        .queue("runner-q", 2)
        .poll_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let row = testing::wait_for_job(&db.pool, id, JobState::Succeeded, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(row.attempts, 1);
    let e = testing::wait_for_job(
        &db.pool,
        later,
        JobState::Succeeded,
        Duration::from_millis(200),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            lq_runtime::CoreError::WaitTimedOut {
                last: JobState::Queued,
                ..
            }
        ),
        "{e}"
    );
    runtime.shutdown().await.unwrap();
}

/// The shape the testing module's docs give for `#[sqlx::test]`: a fresh
/// database from sqlx, litequeue's schema applied by `migrate`.
#[sqlx::test(migrations = false)]
async fn fits_sqlx_test(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
    lq_runtime::migrate(&pool).await?;
    let row = testing::work(&pool, step(3, Then::Succeed)).await?;
    assert_eq!(row.state, JobState::Succeeded);
    Ok(())
}
