use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(unique_key = "batch:{ids}")]
struct ProcessBatch {
    ids: Vec<i64>,
}

fn main() {}
