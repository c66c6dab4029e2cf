use lq_runtime::Job;
use serde::{Deserialize, Serialize};

mod retry {}

#[derive(Serialize, Deserialize, Job)]
#[job(backoff = retry::exponential(base = "1s"))]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
