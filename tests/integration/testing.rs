//! The testing helpers, used as an application's tests would use them.

use std::time::Duration;

use lq_runtime::{
    testing::{self, TestContext},
    CronTick, EnqueueOptions, Job, JobContext, JobError, Perform, Runtime,
};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

use crate::jobs::{Hopeless, Ledger, Noop};

/// A job a sign-up flow enqueues; its handler reports what it saw.
#[derive(Serialize, Deserialize, Job, PartialEq, Debug)]
#[job(kind = "test.testing_welcome", queue = "testing-q", max_attempts = 4)]
struct Welcome {
    user_id: i64,
}

impl Perform for Welcome {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.is_cancelled() {
            return Err(JobError::cancel("stopped early"));
        }
        if ctx.is_last_attempt() {
            return Err(JobError::permanent(format!(
                "giving up on {} at attempt {}",
                self.user_id,
                ctx.attempt()
            )));
        }
        let prefix = ctx.state::<String>();
        match ctx.cron() {
            Some(tick) => Err(format!("{prefix} cron {}", tick.ticks_covered).into()),
            None => Err(format!("{prefix} {}", self.user_id).into()),
        }
    }
}

/// The application code under test: writes its rows and enqueues in one transaction.
async fn sign_up(tx: &mut sqlx::PgConnection, user_id: i64) {
    Welcome { user_id }.enqueue(&mut *tx).await.unwrap();
}

#[tokio::test]
async fn assertions_see_a_transactions_own_jobs_and_name_what_is_there() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    sign_up(&mut tx, 7).await;
    let found = testing::assert_enqueued(&mut *tx, &Welcome { user_id: 7 }).await;
    assert_eq!(
        (found.queue.as_str(), found.max_attempts, found.priority),
        ("testing-q", 4, 0)
    );
    testing::refute_enqueued(&mut *tx, &Welcome { user_id: 8 }).await;
    // Outside the transaction, nothing is there yet.
    testing::refute_enqueued(&db.pool, &Welcome { user_id: 7 }).await;
    tx.rollback().await.unwrap();
    assert!(testing::all_enqueued::<Welcome, _>(&db.pool)
        .await
        .unwrap()
        .is_empty());

    sign_up(&mut db.pool.acquire().await.unwrap(), 9).await;
    let missing = tokio::spawn({
        let pool = db.pool.clone();
        async move { testing::assert_enqueued(&pool, &Welcome { user_id: 10 }).await }
    })
    .await
    .unwrap_err();
    let message = *missing.into_panic().downcast::<String>().unwrap();
    assert!(message.contains("test.testing_welcome"), "{message}");
    assert!(message.contains("user_id: 9"), "{message}");
    let present = tokio::spawn({
        let pool = db.pool.clone();
        async move { testing::refute_enqueued(&pool, &Welcome { user_id: 9 }).await }
    })
    .await
    .unwrap_err();
    let message = *present.into_panic().downcast::<String>().unwrap();
    assert!(message.contains("found job"), "{message}");

    // A payload that no longer decodes into the type is a typed error.
    sqlx::query(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         values ('test.testing_welcome', 'testing-q', '{\"user\": \"renamed\"}', 1)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let e = testing::all_enqueued::<Welcome, _>(&db.pool)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            lq_runtime::CoreError::Decode {
                kind: "test.testing_welcome",
                ..
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_handler_runs_with_a_context_built_by_hand() {
    let job = Welcome { user_id: 3 };
    let base = TestContext::new::<Welcome>().state(String::from("failed"));
    let err = testing::perform_job(&job, &base.clone().build())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "failed 3");

    let last = base.clone().attempt(4).build();
    assert_eq!((last.queue(), last.max_attempts()), ("testing-q", 4));
    let err = testing::perform_job(&job, &last).await.unwrap_err();
    assert!(
        err.to_string().contains("giving up on 3 at attempt 4"),
        "{err}"
    );

    let tick = CronTick::new("2026-01-01T00:00:00Z".parse().unwrap(), true, 12);
    let err = testing::perform_job(&job, &base.clone().cron(tick).build())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "failed cron 12");

    let cancelled = base.clone();
    cancelled.cancellation().cancel();
    let err = testing::perform_job(&job, &cancelled.build())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("stopped early"), "{err}");
}

#[tokio::test]
async fn drain_runs_what_is_ready_and_leaves_what_is_due_later() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let ready = Noop::enqueue_many(&db.pool, (0..20).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    let later = Noop { n: 99 }
        .enqueue_with(
            &db.pool,
            EnqueueOptions::new().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .id;
    Hopeless.enqueue(&db.pool).await.unwrap();
    let stats = Runtime::builder(db.pool.clone())
        .queue("default", 4)
        .state(ledger.clone())
        .drain()
        .await
        .unwrap();
    let ran = ledger.counts();
    assert!(ready.iter().all(|id| ran[id] == 1));
    assert!(!ran.contains_key(&later));
    assert_eq!(stats.succeeded, 20);
    assert_eq!((stats.retried, stats.dead), (0, 1));
    assert_eq!(db.count("queued").await, 1);
}
