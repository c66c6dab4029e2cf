//! A type with `Perform` registers a handler; one without it registers none.

use lq_runtime::{Job, JobContext, JobError, Perform, Registry};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(queue = "emails")]
struct SendWelcomeEmail {
    user_id: i64,
}

impl Perform for SendWelcomeEmail {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        let _ = self.user_id;
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
struct ProducedElsewhere {
    id: u64,
}

fn main() {
    let registry = Registry::collect().expect("no duplicate kinds");
    let send = registry.get(SendWelcomeEmail::KIND).expect("registered");
    assert!((send.handler)().is_some());
    assert_eq!(send.options.queue, "emails");
    let other = registry.get(ProducedElsewhere::KIND).expect("registered");
    assert!((other.handler)().is_none());
}
