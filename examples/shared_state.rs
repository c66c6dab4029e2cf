//! Shared application state: pools, clients and config reach every job through
//! `ctx.state::<T>()`.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    sync::Arc,
    time::Duration,
};

use lq_runtime::{control, Job, JobContext, JobError, JobState, Perform, Runtime};
use serde::{Deserialize, Serialize};

/// A stand-in for an HTTP client or a mailer.
#[derive(Default)]
struct Metrics {
    pings: AtomicU64,
}

/// Uses two pieces of state: the metrics and the database pool.
#[derive(Serialize, Deserialize, Job)]
struct Ping {
    n: u32,
}

impl Perform for Ping {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.state::<Arc<Metrics>>()
            .pings
            .fetch_add(1, Ordering::Relaxed);
        let _: i32 = sqlx::query_scalar("select 1")
            .fetch_one(ctx.state::<sqlx::PgPool>())
            .await?;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = lq_examples::fresh_database("lq_ex_state").await?;
    let metrics = Arc::new(Metrics::default());
    for n in 0..10 {
        Ping { n }.enqueue(&pool).await?;
    }
    let runtime = Runtime::builder(pool.clone())
        .queue("default", 4)
        .state(metrics.clone())
        .state(pool.clone())
        .start()
        .await?;
    while control::list(
        &pool,
        &lq_runtime::JobFilter::new().state(JobState::Succeeded),
        100,
    )
    .await?
    .len()
        < 10
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runtime.shutdown().await?;
    println!("pings performed: {}", metrics.pings.load(Ordering::Relaxed));
    Ok(())
}
