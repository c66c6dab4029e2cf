//! [`JobContext`]: what `perform` knows about the attempt it runs.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use uuid::Uuid;

use crate::{app_state::AppState, cron::CronTick};

/// The attempt being performed: ids, counters, shared state and a cancellation signal.
///
/// The signal fires when the job is cancelled by a user and when the runtime loses
/// the job's lease: long handlers should watch it with [`JobContext::cancelled`]
/// and return early. When the attempt's timeout passes, or a graceful shutdown's
/// grace period ends, the runtime drops the handler's future instead (it stops at
/// its next `.await`) and then fires the signal, for tasks the handler spawned
/// with a clone of the context.
#[derive(Clone)]
pub struct JobContext {
    inner: Arc<Inner>,
}

struct Inner {
    job: ContextParts,
    meta: Option<serde_json::Value>,
    cron: Option<CronTick>,
    cancel: CancellationToken,
    state: AppState,
}

/// What the claim told the runtime about one job; the runtime builds a
/// [`JobContext`] from it.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct ContextParts {
    pub id: i64,
    pub kind: &'static str,
    pub queue: String,
    pub attempt: u32,
    pub max_attempts: u32,
    pub run_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    /// The metadata as JSON text, decoded by [`JobContext::new`].
    pub meta: Option<String>,
    pub lease_token: Uuid,
}

impl JobContext {
    /// Builds a context; the runtime calls this once per claimed job.
    #[doc(hidden)]
    pub fn new(job: ContextParts, cancel: CancellationToken, state: AppState) -> Self {
        let meta = job
            .meta
            .as_deref()
            .and_then(|text| decode_meta(job.id, text));
        let cron = meta.as_ref().and_then(CronTick::from_meta);
        Self {
            inner: Arc::new(Inner {
                job,
                meta,
                cron,
                cancel,
                state,
            }),
        }
    }

    /// The job's id (its row's primary key).
    pub fn id(&self) -> i64 {
        self.inner.job.id
    }

    /// The job's kind.
    pub fn kind(&self) -> &'static str {
        self.inner.job.kind
    }

    /// The queue the job was claimed from.
    pub fn queue(&self) -> &str {
        &self.inner.job.queue
    }

    /// This attempt's number, from 1; counted when the job was claimed.
    pub fn attempt(&self) -> u32 {
        self.inner.job.attempt
    }

    /// Attempts allowed before the job is dead.
    pub fn max_attempts(&self) -> u32 {
        self.inner.job.max_attempts
    }

    /// True on the last allowed attempt.
    pub fn is_last_attempt(&self) -> bool {
        self.inner.job.attempt >= self.inner.job.max_attempts
    }

    /// When this attempt was due (database time): the enqueue's `run_at`, or the
    /// time a retry's backoff or a snooze ended. `started - run_at` is the wait.
    pub fn run_at(&self) -> DateTime<Utc> {
        self.inner.job.run_at
    }

    /// When the job was enqueued (database time).
    pub fn created_at(&self) -> DateTime<Utc> {
        self.inner.job.created_at
    }

    /// For a recurring job, the cron tick it stands for and how many ticks it
    /// covers (more than one for a catch-up run after downtime); `None` for a job
    /// enqueued by hand, including one run now outside its schedule
    /// ([`crate::control::cron_run_now`], `lq cron run`).
    ///
    /// ```
    /// # use lq_core::{JobContext, JobError};
    /// async fn perform(ctx: &JobContext) -> Result<(), JobError> {
    ///     if let Some(cron) = ctx.cron() {
    ///         // Report for the hour that ended at the tick, not for "now".
    ///         let _window_end = cron.tick;
    ///         if cron.catch_up {
    ///             tracing::info!(missed = cron.ticks_covered, "catching up");
    ///         }
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn cron(&self) -> Option<&CronTick> {
        self.inner.cron.as_ref()
    }

    /// The job's free-form metadata (`lq.jobs.meta`), if it has any. The key
    /// `"lq"` is litequeue's own (the cron tick, or who ran a recurring job
    /// now); trace context, when there is
    /// any, is under the top-level keys `traceparent` and `tracestate`.
    pub fn meta(&self) -> Option<&serde_json::Value> {
        self.inner.meta.as_ref()
    }

    /// The lease token minted by this attempt's claim.
    pub fn lease_token(&self) -> Uuid {
        self.inner.job.lease_token
    }

    /// True once the attempt should stop: cancelled or its lease lost (and, for
    /// tasks the handler spawned, timed out or past the shutdown's grace).
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Completes when the attempt should stop; race long work against it, so a
    /// cancel, a lost lease or the shutdown's grace ends the attempt at once.
    ///
    /// ```
    /// use lq_core::{Job, JobContext, JobError, Perform};
    /// use serde::{Deserialize, Serialize};
    /// use std::time::Duration;
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// struct Export { report_id: i64 }
    ///
    /// impl Perform for Export {
    ///     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
    ///         let work = tokio::time::sleep(Duration::from_secs(60)); // the real work
    ///         tokio::select! {
    ///             () = work => Ok(()),
    ///             () = ctx.cancelled() => Err(JobError::snooze(Duration::from_secs(5))),
    ///         }
    ///     }
    /// }
    /// ```
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.inner.cancel.cancelled()
    }

    /// Shared application state registered with the runtime builder's `.state(..)`:
    /// one value per type, shared by every attempt (hold a pool or a client, not
    /// per-job data).
    ///
    /// ```
    /// use lq_core::{Job, JobContext, JobError, Perform};
    /// use serde::{Deserialize, Serialize};
    ///
    /// /// Registered once: `Runtime::builder(pool).state(Mailer { from: .. })`.
    /// struct Mailer { from: String }
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// struct Welcome { to: String }
    ///
    /// impl Perform for Welcome {
    ///     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
    ///         let mailer = ctx.state::<Mailer>();
    ///         println!("mail from {} to {}", mailer.from, self.to);
    ///         Ok(())
    ///     }
    /// }
    /// ```
    ///
    /// # Panics
    ///
    /// When no value of type `T` was registered; use [`JobContext::try_state`] to check.
    pub fn state<T: Send + Sync + 'static>(&self) -> &T {
        match self.inner.state.get::<T>() {
            Some(v) => v,
            None => panic!(
                "no application state of type {} was registered: add .state(value) to the runtime builder",
                std::any::type_name::<T>()
            ),
        }
    }

    /// Shared application state of type `T`, if registered.
    pub fn try_state<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.inner.state.get::<T>()
    }
}

/// Metadata nested deeper than serde_json decodes is left out, with a warning,
/// rather than costing the job its run.
fn decode_meta(id: i64, text: &str) -> Option<serde_json::Value> {
    match serde_json::from_str(text) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(id, error = %e, "job metadata could not be decoded; the handler sees none");
            None
        }
    }
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.inner.job.id)
            .field("kind", &self.inner.job.kind)
            .field("queue", &self.inner.job.queue)
            .field("attempt", &self.inner.job.attempt)
            .field("max_attempts", &self.inner.job.max_attempts)
            .field("run_at", &self.inner.job.run_at)
            .field("cron", &self.inner.cron)
            .finish_non_exhaustive()
    }
}
