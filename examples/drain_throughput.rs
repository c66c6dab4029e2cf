//! Throughput: drain a backlog of no-op jobs with one runtime and print the rate.
//!
//! `scripts/with-postgres cargo run --release -p lq-examples --bin drain_throughput -- [JOBS] [CONCURRENCY]`
//! (defaults: 10,000 jobs, concurrency 100). The backlog is bulk-enqueued first;
//! the clock runs from `start()` until every job has succeeded.

use std::time::{Duration, Instant};

use lq_runtime::{EnqueueOptions, Job, JobContext, JobError, Perform, Runtime};
use serde::{Deserialize, Serialize};

/// Does nothing: the rate measured is litequeue's own overhead.
#[derive(Serialize, Deserialize, Job)]
struct Nop {
    n: u64,
}

impl Perform for Nop {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lq_examples::init_logging();
    let mut args = std::env::args().skip(1);
    let jobs: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10_000);
    let concurrency: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(100);
    let pool = lq_examples::fresh_database("lq_ex_drain").await?;
    let mut next = 0;
    while next < jobs {
        let chunk = (next..jobs.min(next + 1000)).map(|n| Nop { n });
        Nop::enqueue_many(&pool, chunk, EnqueueOptions::new().notify(false)).await?;
        next += 1000;
    }
    sqlx::raw_sql("vacuum analyze lq.jobs")
        .execute(&pool)
        .await?;

    let start = Instant::now();
    let runtime = Runtime::builder(pool.clone())
        .queue("default", concurrency)
        .start()
        .await?;
    while runtime.stats().succeeded < jobs {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    runtime.shutdown().await?;
    println!(
        "drained {jobs} no-op jobs with concurrency {concurrency} in {secs:.3} s: {:.0} jobs/s",
        jobs as f64 / secs
    );
    Ok(())
}
