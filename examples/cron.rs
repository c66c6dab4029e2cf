//! Recurring jobs: `#[job(cron = "...")]`, fired once per tick across every runtime.

use std::time::Duration;

use lq_runtime::{Job, JobContext, JobError, Perform, Runtime};
use serde::{Deserialize, Serialize};

/// Every second (6 fields: seconds first). Cron types must implement `Default`.
#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "* * * * * *", cron_catch_up = "skip")]
struct Tick;

impl Perform for Tick {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        println!("tick job {} ran", ctx.id());
        Ok(())
    }
}

/// At 03:00 Paris time, one run for any window missed while everything was down.
#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "0 3 * * *", cron_tz = "Europe/Paris")]
struct NightlyReport;

impl Perform for NightlyReport {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = lq_examples::fresh_database("lq_ex_cron").await?;
    // Two runtimes share the schedule; each tick still fires once.
    let a = Runtime::builder(pool.clone())
        .queue("default", 2)
        .start()
        .await?;
    let b = Runtime::builder(pool.clone())
        .queue("default", 2)
        .start()
        .await?;
    tokio::time::sleep(Duration::from_millis(3500)).await; // let a few ticks pass
    a.shutdown().await?;
    b.shutdown().await?;
    let ticks: Vec<(chrono::DateTime<chrono::Utc>, Option<i64>)> =
        sqlx::query_as("select tick, job_id from lq.cron_ticks where kind = 'Tick' order by tick")
            .fetch_all(&pool)
            .await?;
    for (tick, job) in ticks {
        println!("tick {tick} -> job {job:?}");
    }
    Ok(())
}
