use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
struct ChargeOrder {
    #[job(unique_key = "{order_id}")]
    order_id: i64,
}

fn main() {}
