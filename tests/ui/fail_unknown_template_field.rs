use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(unique_key = "order:{ordr_id}")]
struct PlaceOrder {
    order_id: i64,
    customer: String,
}

fn main() {}
