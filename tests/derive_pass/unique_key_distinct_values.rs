//! Distinct field values render distinct keys; plain values render as written.

use lq_runtime::Job;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(unique_key = "k:{a}:{b}")]
struct Pair {
    a: String,
    b: String,
}

#[derive(Serialize, Deserialize, Job)]
#[job(unique_key = "order-{0}")]
struct Order(String);

#[derive(Serialize, Deserialize, Default, Job)]
#[job(cron = "0 0 29 2 *")] // leap day: rare, but it fires
struct LeapDay;

fn key(a: &str, b: &str) -> String {
    let job = Pair {
        a: a.into(),
        b: b.into(),
    };
    job.unique_key().expect("a key")
}

fn main() {
    assert_eq!(key("42", "7"), "k:42:7");
    assert_eq!(key("1:2", "3"), r"k:1\:2:3");
    assert_eq!(key("1", "2:3"), r"k:1:2\:3");
    assert_eq!(key("x\\", "y"), r"k:x\\:y");
    // One placeholder: nothing to confuse, so nothing is escaped.
    let id = "67e55044-10b1-426f-9247-bb680e5fe0c8:\\";
    assert_eq!(Order(id.into()).unique_key(), Some(format!("order-{id}")));
    assert_eq!(LeapDay::OPTIONS.cron.map(|c| c.expr), Some("0 0 29 2 *"));
}
