//! No attribute: every option has its documented default, and the type registers.

use lq_runtime::{Backoff, Job, JobOptions, Registry, DEFAULT_LEASE};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
struct Ping;

mod nested {
    #[derive(serde::Serialize, serde::Deserialize, lq_runtime::Job)]
    pub struct Pong {
        pub n: u32,
    }
}

fn main() {
    assert_eq!(Ping::KIND, "Ping");
    let o = Ping::OPTIONS;
    assert_eq!((o.queue, o.priority, o.max_attempts), ("default", 0, 20));
    assert_eq!(
        format!("{:?}", o.backoff),
        format!("{:?}", Backoff::DEFAULT)
    );
    assert_eq!((o.timeout, o.lease), (None, DEFAULT_LEASE));
    assert!(o.cron.is_none());
    assert_eq!(format!("{o:?}"), format!("{:?}", JobOptions::DEFAULT));
    assert_eq!(Ping.unique_key(), None);
    assert_eq!(nested::Pong { n: 1 }.unique_key(), None);

    let registry = Registry::collect().expect("no duplicate kinds");
    let pong = registry.get("Pong").expect("Pong is registered");
    assert!(
        pong.type_name.ends_with("::nested::Pong"),
        "{}",
        pong.type_name
    );
    assert!((pong.handler)().is_none(), "no Perform impl, no handler");
    assert!(registry.get("Ping").is_some());
}
