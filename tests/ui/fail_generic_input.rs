use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
struct Wrapper<T> {
    inner: T,
}

fn main() {}
