use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "@daily 30")]
struct NightlyReport;

fn main() {}
