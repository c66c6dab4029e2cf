//! Retries with backoff, a permanent failure, and a job that ends dead with every
//! attempt's error kept.

use std::time::Duration;

use lq_runtime::{control, Job, JobContext, JobError, JobState, Perform, Runtime};
use serde::{Deserialize, Serialize};

/// Fails twice, then succeeds: retried after 100 ms, 200 ms.
#[derive(Serialize, Deserialize, Job)]
#[job(max_attempts = 5, backoff = exponential(base = "100ms", max = "1s", jitter = 0.0))]
struct CallFlakyApi;

impl Perform for CallFlakyApi {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.attempt() < 3 {
            return Err(std::io::Error::other("503 from upstream").into()); // `?`-style: retried
        }
        Ok(())
    }
}

/// A failure no retry fixes: dead at once.
#[derive(Serialize, Deserialize, Job)]
struct ChargeClosedAccount;

impl Perform for ChargeClosedAccount {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Err(JobError::permanent("account is closed"))
    }
}

/// Always fails; dead after 3 attempts.
#[derive(Serialize, Deserialize, Job)]
#[job(max_attempts = 3, backoff = fixed("50ms"))]
struct AlwaysFails;

impl Perform for AlwaysFails {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        Err(format!("attempt {} failed", ctx.attempt()).into())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lq_examples::init_logging();
    let pool = lq_examples::fresh_database("lq_ex_retries").await?;
    CallFlakyApi.enqueue(&pool).await?;
    ChargeClosedAccount.enqueue(&pool).await?;
    AlwaysFails.enqueue(&pool).await?;

    let runtime = Runtime::builder(pool.clone())
        .queue("default", 4)
        .start()
        .await?;
    while !control::list(
        &pool,
        &lq_runtime::JobFilter::new().state(JobState::Queued),
        1,
    )
    .await?
    .is_empty()
        || !control::list(
            &pool,
            &lq_runtime::JobFilter::new().state(JobState::Running),
            1,
        )
        .await?
        .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    runtime.shutdown().await?;
    for job in control::list(&pool, &lq_runtime::JobFilter::new(), 10).await? {
        println!(
            "{:<20} {:<9} attempts={} errors={:?}",
            job.kind,
            job.state,
            job.attempts,
            job.errors.iter().map(|e| &e.error).collect::<Vec<_>>()
        );
    }
    Ok(())
}
