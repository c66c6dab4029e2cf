use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = 5)]
struct NightlyReport;

fn main() {}
