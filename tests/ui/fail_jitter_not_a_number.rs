use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = exponential(jitter = "10%"))]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
