use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron_catch_up = "skip")]
struct NightlyReport;

fn main() {}
