use lq_runtime::Job;
use serde::{Deserialize, Serialize};

fn retry_delay(attempt: u32) -> u64 {
    u64::from(attempt) * 10
}

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = retry_delay)]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
