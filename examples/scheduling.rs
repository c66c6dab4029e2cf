//! Scheduling: run after a delay or at a time, per-call priority and queue, and
//! snoozing a job without spending an attempt.

use std::time::Duration;

use lq_runtime::{control, EnqueueOptions, Job, JobContext, JobError, Perform, Runtime};
use serde::{Deserialize, Serialize};

/// Waits for a resource: snoozes twice (attempts are not spent), then runs.
#[derive(Serialize, Deserialize, Job)]
#[job(max_attempts = 1)]
struct WaitForExport {
    export_id: i64,
}

impl Perform for WaitForExport {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let row = control::get(ctx.state::<sqlx::PgPool>(), ctx.id()).await?;
        if row.created_at + chrono::Duration::milliseconds(600) > chrono::Utc::now() {
            println!("export {} not ready; snoozing", self.export_id);
            return Err(JobError::snooze(Duration::from_millis(300)));
        }
        println!(
            "export {} processed on attempt {}",
            self.export_id,
            ctx.attempt()
        );
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = lq_examples::fresh_database("lq_ex_scheduling").await?;
    let later = EnqueueOptions::new()
        .delay(Duration::from_secs(3600))
        .priority(5);
    let tomorrow = EnqueueOptions::new()
        .run_at(chrono::Utc::now() + chrono::Duration::days(1))
        .queue("reports");
    WaitForExport { export_id: 1 }
        .enqueue_with(&pool, later)
        .await?;
    WaitForExport { export_id: 2 }
        .enqueue_with(&pool, tomorrow)
        .await?;
    let now = WaitForExport { export_id: 3 }.enqueue(&pool).await?;

    let runtime = Runtime::builder(pool.clone())
        .queue("default", 2)
        .state(pool.clone())
        .start()
        .await?;
    while control::get(&pool, now.id).await?.finished_at.is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    runtime.shutdown().await?;
    for job in control::list(&pool, &lq_runtime::JobFilter::new(), 10).await? {
        println!(
            "job {} {} run_at {} attempts {}",
            job.id, job.state, job.run_at, job.attempts
        );
    }
    // Queued but not yet due (what Oban and River call scheduled): the two
    // jobs put off; `lq jobs list --scheduled` shows the same.
    let waiting = control::list(&pool, &lq_runtime::JobFilter::new().scheduled(), 10).await?;
    println!("{} jobs scheduled for later", waiting.len());
    Ok(())
}
