use lq_runtime::Job;
use serde::{Deserialize, Serialize};

const RETRY_DELAY_SECS: u64 = 30;

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = RETRY_DELAY_SECS)]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
