use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = linear(step = "0s", max = "1m"))]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
