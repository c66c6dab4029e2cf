//! Shutdown returns while the database refuses writes, and the job is not lost.

use super::{settings::SettingsProbe, *};

/// Holds its (1 s) lease until cancelled.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.holder",
    queue = "hostile_shutdown",
    lease = "1s",
    max_attempts = 3
)]
struct Holder;

impl Perform for Holder {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.cancelled().await;
        Err("stopped by its cancellation signal".into())
    }
}

#[tokio::test]
async fn shutdown_returns_while_the_queue_table_is_locked_and_the_job_is_not_lost() {
    let db = TestDb::new().await;
    let id = Holder.enqueue(&db.pool).await.unwrap().id;
    let config = RuntimeConfig {
        shutdown_grace: Duration::from_millis(200),
        db_timeout: Duration::from_secs(2),
        ..quick()
    };
    let rt = start(&db, "hostile_shutdown", 1, config).await;
    db.wait_for(
        "the job to run",
        &format!("select state = 'running' from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;

    // Every write (and read) of lq.jobs now waits for this transaction.
    let mut locker = db.pool.begin().await.unwrap();
    sqlx::query("lock table lq.jobs in access exclusive mode")
        .execute(&mut *locker)
        .await
        .unwrap();
    // Not a timed assertion: only a net so a hang fails instead of blocking forever.
    let stopped = tokio::time::timeout(Duration::from_secs(30), rt.shutdown()).await;
    locker.rollback().await.unwrap();
    stopped
        .expect("shutdown() never returned while the table was locked")
        .unwrap();

    // The job comes back: handed back by a write that waited for the lock, or
    // rescued when its lease expires (a runtime on an idle queue of its own
    // rescues every queue's expired leases).
    let config = RuntimeConfig {
        rescue_interval: Duration::from_millis(100),
        unknown_kind_grace: None,
        ..quick()
    };
    let rescuer = start(&db, "hostile_shutdown_idle", 1, config).await;
    db.wait_for(
        "the job to be queued again",
        &format!("select state = 'queued' from lq.jobs where id = {id}"),
        LIMIT,
    )
    .await;
    rescuer.shutdown().await.unwrap();

    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(row.state, JobState::Queued);
    assert!(row.lease_owner.is_none());
    let errors = errors_of(&db, id).await;
    match row.attempts {
        // Handed back by the shutdown's write, its attempt refunded.
        0 => assert!(errors.is_empty(), "{errors:?}"),
        // Rescued after its lease expired.
        1 => {
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].1.starts_with("lease expired"), "{errors:?}");
        }
        n => panic!("job {id} came back with {n} attempts: {errors:?}"),
    }
}

/// A shutdown grace meant as "wait forever" is honoured, not an overflow panic
/// in `shutdown()` (which would stop running jobs with no grace at all).
#[tokio::test]
async fn a_shutdown_grace_of_forever_shuts_down_cleanly() {
    let db = TestDb::new().await;
    let rt = Runtime::builder(db.pool.clone())
        .queue("hostile_settings", 1)
        .config(RuntimeConfig {
            shutdown_grace: Duration::MAX,
            ..RuntimeConfig::default()
        })
        .start()
        .await
        .unwrap();
    let id = SettingsProbe.enqueue(&db.pool).await.unwrap().id;
    db.wait_for(
        "the probe to succeed",
        &format!("select state = 'succeeded' from lq.all_jobs where id = {id}"),
        Duration::from_secs(30),
    )
    .await;
    rt.shutdown().await.unwrap();
}
