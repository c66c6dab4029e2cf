use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(priority = 40000)]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
