//! Job control as library calls: list, cancel (queued or running), retry a dead job.

use std::time::Duration;

use lq_runtime::{control, Job, JobContext, JobError, JobState, Perform, Runtime};
use serde::{Deserialize, Serialize};

/// Long work that honours its cancellation signal.
#[derive(Serialize, Deserialize, Job)]
struct Reindex;

impl Perform for Reindex {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(3600)) => Ok(()),
            _ = ctx.cancelled() => Err("stopped on request".into()),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = lq_examples::fresh_database("lq_ex_control").await?;
    let running = Reindex.enqueue(&pool).await?.id;
    let runtime = Runtime::builder(pool.clone())
        .queue("default", 1)
        .start()
        .await?;
    while control::get(&pool, running).await?.state != JobState::Running {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let queued = Reindex.enqueue(&pool).await?.id; // waits: the only slot is busy
    control::cancel(&pool, queued).await?; // queued: cancelled at once
    control::cancel(&pool, running).await?; // running: its handler is signalled via NOTIFY
    while control::get(&pool, running).await?.state == JobState::Running {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runtime.shutdown().await?;
    for job in control::list(
        &pool,
        &lq_runtime::JobFilter::new().state(JobState::Cancelled),
        10,
    )
    .await?
    {
        println!("cancelled: job {} (attempts {})", job.id, job.attempts);
    }
    control::retry_now(&pool, queued).await?;
    println!(
        "job {queued} is {} again",
        control::get(&pool, queued).await?.state
    );
    Ok(())
}
