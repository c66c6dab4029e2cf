use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(unique_key = "welcome:{ user_id }")]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
