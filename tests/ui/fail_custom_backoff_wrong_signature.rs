use lq_runtime::Job;
use serde::{Deserialize, Serialize};

fn retry_delay(attempt: u64) -> u64 {
    attempt * 10
}

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = retry_delay)]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
