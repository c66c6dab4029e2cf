use std::time::Duration;

use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = Self::retry_delay)]
struct SendWelcomeEmail {
    user_id: i64,
}

impl SendWelcomeEmail {
    fn retry_delay(attempt: u32, _jitter: f64) -> Duration {
        Duration::from_secs(u64::from(attempt))
    }
}

fn main() {}
