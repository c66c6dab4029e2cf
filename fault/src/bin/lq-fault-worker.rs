//! `lq-fault-worker`: one worker process of the fault suite, of the current
//! release: it declares every kind of `lq_fault::jobs` and the kind
//! `fault.deploy` this release adds (see `lq_fault::worker`).

use lq_fault::jobs::{perform_spec, Spec};
use lq_runtime::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

/// The kind this release adds: the previous one (`lq-fault-worker-old`) has
/// never heard of it. Short work under a 2 s lease, on queue `default`.
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(kind = "fault.deploy", lease = "2s", max_attempts = 25, backoff = fixed("100ms"))]
struct Deploy {
    #[serde(flatten)]
    spec: Spec,
}

impl Perform for Deploy {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        perform_spec(&self.spec, ctx).await
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lq_fault::worker::main().await
}
