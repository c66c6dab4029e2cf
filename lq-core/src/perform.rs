//! [`Perform`]: the method a job type implements to do its work.

use std::future::Future;

use crate::{Job, JobContext, JobError};

/// The work a job does. Write it as `async fn`; the returned future must be `Send`.
///
/// ```
/// use lq_core::{Job, JobContext, JobError, Perform};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// struct Resize { image_id: i64 }
///
/// impl Perform for Resize {
///     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
///         if ctx.is_cancelled() {
///             return Err(JobError::snooze(std::time::Duration::from_secs(1)));
///         }
///         let _ = self.image_id;
///         Ok(())
///     }
/// }
/// ```
pub trait Perform: Job {
    /// Runs one attempt. `Ok` marks the job succeeded; see [`JobError`] for failures.
    fn perform(&self, ctx: &JobContext) -> impl Future<Output = Result<(), JobError>> + Send;
}
