use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
struct RéinitialiserMotDePasse {
    user_id: i64,
}

fn main() {}
