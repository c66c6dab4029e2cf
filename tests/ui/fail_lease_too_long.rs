use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(lease = "300000y")]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
