use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = fixed("30s", "1m"))]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
