use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(unique_key = "report:{day}")]
struct NightlyReport;

fn main() {}
