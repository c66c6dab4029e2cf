use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = exponential(base = "1s", jitter = 1.5))]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
