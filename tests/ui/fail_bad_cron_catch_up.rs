use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "0 3 * * *", cron_catch_up = "all")]
struct NightlyReport;

fn main() {}
