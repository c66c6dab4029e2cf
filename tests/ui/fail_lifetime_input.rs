use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
struct SendWelcomeEmail<'a> {
    email: &'a str,
}

fn main() {}
