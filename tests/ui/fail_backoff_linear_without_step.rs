use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = linear(max = "10m"))]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
