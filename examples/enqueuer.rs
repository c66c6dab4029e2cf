//! An `Enqueuer`: many concurrent callers, each enqueueing one job outside any
//! transaction (request handlers, say), on a few connections of its own. Calls
//! that arrive while its connections are busy share the next statement.

use std::time::Instant;

use lq_runtime::{Enqueuer, Job};
use serde::{Deserialize, Serialize};

/// What a request handler asks for.
#[derive(Serialize, Deserialize, Job)]
#[job(queue = "thumbnails")]
struct MakeThumbnail {
    upload_id: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = lq_examples::fresh_database("lq_ex_enqueuer").await?;
    // One per process, cloned into every handler.
    let enqueuer = Enqueuer::new(&pool);
    let start = Instant::now();
    let mut handlers = tokio::task::JoinSet::new();
    for upload_id in 0..2_000 {
        let enqueuer = enqueuer.clone();
        handlers.spawn(async move { MakeThumbnail { upload_id }.enqueue(&enqueuer).await });
    }
    while let Some(done) = handlers.join_next().await {
        done??; // each job is committed when its own call returns
    }
    let elapsed = start.elapsed();
    // Rows written by one statement share its transaction id.
    let (jobs, statements): (i64, i64) =
        sqlx::query_as("select count(*), count(distinct xmin::text) from lq.jobs")
            .fetch_one(&pool)
            .await?;
    println!("{jobs} jobs from 2,000 concurrent calls in {elapsed:?}, in {statements} statements");
    Ok(())
}
