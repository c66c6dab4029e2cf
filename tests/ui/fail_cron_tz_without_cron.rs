use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron_tz = "Europe/Paris")]
struct NightlyReport;

fn main() {}
