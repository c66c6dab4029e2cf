//! A worker binary: serve queues until SIGTERM or Ctrl-C, then shut down
//! gracefully (finish within the grace period, hand the rest back at once).
//!
//! `DATABASE_URL=postgres://... cargo run -p lq-examples --bin worker`

use std::time::Duration;

use lq_runtime::{Job, JobContext, JobError, Perform, Runtime};
use serde::{Deserialize, Serialize};

/// Takes a few seconds; stops early when told to.
#[derive(Serialize, Deserialize, Job)]
#[job(timeout = "1m")]
struct Transcode {
    video_id: i64,
}

impl Perform for Transcode {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(3)) => {
                tracing::info!(video = self.video_id, "transcoded");
                Ok(())
            }
            _ = ctx.cancelled() => Err("interrupted".into()),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lq_examples::init_logging();
    let url = std::env::var("DATABASE_URL")?;
    let pool = sqlx::PgPool::connect(&url).await?;
    lq_runtime::migrate(&pool).await?;
    let runtime = Runtime::builder(pool)
        .queue("default", 8)
        .shutdown_grace(Duration::from_secs(10))
        .start()
        .await?;
    tracing::info!(kinds = ?runtime.kinds(), "worker running; SIGTERM or Ctrl-C to stop");
    runtime.shutdown_on_signal().await?;
    Ok(())
}
