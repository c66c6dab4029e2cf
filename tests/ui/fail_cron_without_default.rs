use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(cron = "0 3 * * *")]
struct NightlyReport {
    day: u32,
}

fn main() {}
