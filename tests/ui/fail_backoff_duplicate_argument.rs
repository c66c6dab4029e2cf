use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = exponential(base = "1s", base = "2s"))]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
