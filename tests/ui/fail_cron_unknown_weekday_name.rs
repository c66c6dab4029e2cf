use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "0 9 * * MONDAY")]
struct NightlyReport;

fn main() {}
