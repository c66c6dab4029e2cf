//! Job types of the dashboard tests. Every kind is distinct.

use lq_runtime::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};

/// A mail to send, on the `mail` queue.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "web.mail", queue = "mail")]
pub struct Mail {
    pub to: String,
    pub n: u64,
}

impl Perform for Mail {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A report, on the default queue.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "web.report")]
pub struct Report {
    pub tenant: String,
}

impl Perform for Report {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// An order with a unique key, for retries a live job blocks.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "web.order", unique_key = "order:{order_id}")]
pub struct Order {
    pub order_id: i64,
}

impl Perform for Order {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
