//! Bulk enqueue: many jobs of one type in one statement and one round trip.

use std::time::Instant;

use lq_runtime::{EnqueueOptions, Job};
use serde::{Deserialize, Serialize};

/// One row of an import.
#[derive(Serialize, Deserialize, Job)]
#[job(queue = "imports")]
struct ImportRow {
    line: u32,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = lq_examples::fresh_database("lq_ex_bulk").await?;
    let start = Instant::now();
    let mut tx = pool.begin().await?;
    let done = ImportRow::enqueue_many(
        &mut tx,
        (0..10_000).map(|line| ImportRow { line }),
        EnqueueOptions::new(),
    )
    .await?;
    tx.commit().await?;
    println!(
        "enqueued {} jobs in one statement in {:?}",
        done.ids.len(),
        start.elapsed()
    );
    Ok(())
}
