use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(unique_key = r"sync:{tenant}\{account}")]
struct SyncAccount {
    tenant: String,
    account: String,
}

fn main() {}
