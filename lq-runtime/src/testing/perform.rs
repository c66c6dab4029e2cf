//! [`perform`]: one handler call without a database, and what would follow it.

use std::time::Duration;

use lq_core::{db::claim::ClaimedJob, Failure, Perform, Registry};
use tokio_util::sync::CancellationToken;

use super::TestContext;
use crate::attempt::{self, Outcome, Write};

/// What the runtime would do after one attempt, as [`perform`] reports it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Performed {
    /// The handler returned `Ok`.
    Succeeded,
    /// Queued again after the job's backoff; `error` is the text stored.
    Retry {
        /// The attempt's error, as stored.
        error: String,
        /// The backoff before the next attempt (jitter included).
        after: Duration,
    },
    /// Dead: a permanent failure, an undecodable payload, or the last attempt failed.
    Dead {
        /// The attempt's error, as stored.
        error: String,
    },
    /// Back to the queue after `after`, the attempt not spent.
    Snoozed {
        /// The requested delay.
        after: Duration,
    },
    /// Cancelled at the handler's request.
    Cancelled {
        /// The stored reason.
        reason: String,
    },
}

/// Runs `job`'s handler once with the context `test` builds, as the runtime
/// would (through the job's JSON, panics caught, the type's `timeout` applied),
/// and returns what the runtime would do next: retry after which backoff, dead,
/// snoozed, cancelled. Needs no database.
///
/// ```
/// use lq_runtime::testing::{self, Performed, TestContext};
/// use lq_runtime::{Job, JobContext, JobError, Perform};
///
/// #[derive(serde::Serialize, serde::Deserialize, Job)]
/// #[job(max_attempts = 3, backoff = fixed("5s"))]
/// struct Charge { cents: i64 }
///
/// impl Perform for Charge {
///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
///         Err("gateway down".into())
///     }
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let job = Charge { cents: 100 };
/// let first = testing::perform(&job, &TestContext::new::<Charge>()).await;
/// assert!(matches!(first, Performed::Retry { after, .. } if after.as_secs() == 5));
/// let last = testing::perform(&job, &TestContext::new::<Charge>().attempt(3)).await;
/// assert_eq!(last, Performed::Dead { error: "gateway down".into() });
/// # });
/// ```
///
/// # Panics
///
/// When the registry cannot be built (two types in the binary declare one
/// kind), or `J` is not in it.
pub async fn perform<J: Perform>(job: &J, test: &TestContext) -> Performed {
    let registry = Registry::collect().unwrap_or_else(|e| panic!("{e}"));
    let desc = registry
        .get(J::KIND)
        .unwrap_or_else(|| panic!("kind {} is not registered", J::KIND));
    let ctx = test.build();
    let claimed = ClaimedJob {
        id: ctx.id(),
        kind: J::KIND.to_owned(),
        payload: serde_json::to_string(job)
            .unwrap_or_else(|e| panic!("{} job does not serialise: {e}", J::KIND)),
        attempts: i32::try_from(ctx.attempt()).unwrap_or(i32::MAX),
        max_attempts: i32::try_from(ctx.max_attempts()).unwrap_or(i32::MAX),
        lease_token: ctx.lease_token(),
        run_at: ctx.run_at(),
        created_at: ctx.created_at(),
        started_at: ctx.run_at(),
        meta: ctx.meta().map(|m| m.to_string()),
    };
    let never = CancellationToken::new();
    let outcome = attempt::perform(&never, desc, &claimed, ctx, &test.cancellation()).await;
    let retry_in = attempt::requeue_delay(desc, &claimed, &outcome);
    let last = claimed.attempts >= claimed.max_attempts;
    let text = |o: &Outcome| {
        Write::of(o, retry_in)
            .text()
            .map(|t| t.into_owned())
            .unwrap_or_default()
    };
    match &outcome {
        Outcome::Succeeded => Performed::Succeeded,
        Outcome::Failed(Failure::Snooze(d)) => Performed::Snoozed { after: *d },
        Outcome::Failed(Failure::Cancel(_)) => Performed::Cancelled {
            reason: text(&outcome),
        },
        _ => match retry_in {
            Some(after) if !last => Performed::Retry {
                error: text(&outcome),
                after,
            },
            _ => Performed::Dead {
                error: text(&outcome),
            },
        },
    }
}
