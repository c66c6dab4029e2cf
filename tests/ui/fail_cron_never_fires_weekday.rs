use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "0 0 1 * +MON#5")]
struct NightlyReport;

fn main() {}
