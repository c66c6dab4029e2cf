//! Transactional enqueue: a job exists iff the business transaction commits.
//!
//! `cargo run -p lq-examples --bin transactional_enqueue` (needs `DATABASE_URL`, or
//! run it through `scripts/with-postgres`).

use lq_runtime::Job;
use serde::{Deserialize, Serialize};

/// Sent after an account is created.
#[derive(Serialize, Deserialize, Job)]
struct SendReceipt {
    account_id: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = lq_examples::fresh_database("lq_ex_tx").await?;
    sqlx::raw_sql("create table accounts (id bigserial primary key, name text)")
        .execute(&pool)
        .await?;

    // Committed: the account and its job both exist.
    let mut tx = pool.begin().await?;
    let id: i64 = sqlx::query_scalar("insert into accounts (name) values ('ada') returning id")
        .fetch_one(&mut *tx)
        .await?;
    let kept = SendReceipt { account_id: id }.enqueue(&mut tx).await?;
    tx.commit().await?;

    // Rolled back: neither exists; no worker will ever see the job.
    let mut tx = pool.begin().await?;
    let id: i64 = sqlx::query_scalar("insert into accounts (name) values ('bob') returning id")
        .fetch_one(&mut *tx)
        .await?;
    SendReceipt { account_id: id }.enqueue(&mut tx).await?;
    tx.rollback().await?;

    let jobs: Vec<i64> = sqlx::query_scalar("select id from lq.all_jobs")
        .fetch_all(&pool)
        .await?;
    println!(
        "jobs in the table: {jobs:?} (only job {} from the committed transaction)",
        kept.id
    );
    Ok(())
}
