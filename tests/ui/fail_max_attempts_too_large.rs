use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(max_attempts = 3000000000)]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
