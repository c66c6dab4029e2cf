use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "0 0 31 2 *")]
struct EndOfFebruaryReport;

fn main() {}
