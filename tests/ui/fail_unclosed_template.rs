use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(unique_key = "order:{order_id")]
struct PlaceOrder {
    order_id: i64,
}

fn main() {}
