use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "5/10 * * * *")]
struct NightlyReport;

fn main() {}
