use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
enum Action {
    Start,
    Stop,
}

fn main() {}
