use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(priority = "high")]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
