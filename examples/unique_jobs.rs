//! Unique keys: at most one live job per key, enforced by a partial unique index.

use lq_runtime::Job;
use serde::{Deserialize, Serialize};

/// One live refresh per customer, however often it is requested.
#[derive(Serialize, Deserialize, Job)]
#[job(unique_key = "refresh-customer:{customer_id}")]
struct RefreshCustomer {
    customer_id: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = lq_examples::fresh_database("lq_ex_unique").await?;
    let first = RefreshCustomer { customer_id: 7 }.enqueue(&pool).await?;
    let second = RefreshCustomer { customer_id: 7 }.enqueue(&pool).await?;
    let other = RefreshCustomer { customer_id: 8 }.enqueue(&pool).await?;
    println!("first:  id {} existing {}", first.id, first.existing);
    println!(
        "second: id {} existing {} (the same live job)",
        second.id, second.existing
    );
    println!("other:  id {} existing {}", other.id, other.existing);
    assert_eq!(first.id, second.id);
    Ok(())
}
