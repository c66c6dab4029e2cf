//! [`drain`] and [`work`]: the real claim, run and outcome writes, one job at a
//! time, in the calling task.

use std::time::Duration;

use lq_core::{
    control::{self, JobRow},
    db::{self, claim::ClaimedJob},
    AppState, EnqueueOptions, Error, Job, JobDescriptor, JobState, Perform, Registry,
};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::attempt::{self, Outcome, Write};

/// The lease owner written into rows the in-task runner claims.
const OWNER: &str = "lq-testing";

/// What [`drain`] runs: which queues, and how far.
///
/// By default a single pass over the jobs ready at the start (jobs they enqueue
/// wait; Oban's `drain_queue` does the same), without scheduled jobs, with no limit.
#[derive(Debug, Clone, Default)]
pub struct Drain {
    queues: Vec<String>,
    recursive: bool,
    with_scheduled: bool,
    limit: Option<usize>,
    state: AppState,
}

impl Drain {
    /// Drains `queue`.
    pub fn queue(queue: impl Into<String>) -> Self {
        Self::default().and_queue(queue)
    }

    /// Drains `queue` too.
    pub fn and_queue(mut self, queue: impl Into<String>) -> Self {
        self.queues.push(queue.into());
        self
    }

    /// Keeps going until nothing is ready, running the jobs that drained jobs
    /// enqueue (and retries that fall due) as well.
    pub fn recursive(mut self) -> Self {
        self.recursive = true;
        self
    }

    /// Makes scheduled jobs due first (each pass, when recursive): a job
    /// enqueued with `run_at` in an hour runs now.
    pub fn with_scheduled(mut self) -> Self {
        self.with_scheduled = true;
        self
    }

    /// Stops after `attempts` attempts.
    pub fn limit(mut self, attempts: usize) -> Self {
        self.limit = Some(attempts);
        self
    }

    /// Shared state for the handlers, as the runtime builder's `.state(..)` gives.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }
}

/// What a [`drain`] ran: each attempt's job and the state it was left in.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Each attempt in order: the job's id and the state its outcome left it in
    /// (`Queued` for a retry or snooze).
    pub attempts: Vec<(i64, JobState)>,
    /// Attempts that succeeded.
    pub succeeded: usize,
    /// Attempts that failed and left the job queued for a retry, or snoozed.
    pub requeued: usize,
    /// Jobs that ended dead.
    pub dead: usize,
    /// Jobs that ended cancelled.
    pub cancelled: usize,
}

/// Runs the jobs ready in `what`'s queues in the calling task, one at a time,
/// through the runtime's own claim (attempt counted, lease minted), handler
/// rules (panics caught, timeout, backoff) and fenced outcome writes; then
/// returns what ran. For tests of code that enqueues, like Oban's `drain_queue`.
/// Only kinds with a `Perform` in this binary are run; a paused queue is drained
/// too.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
/// use lq_runtime::testing::{self, Drain};
/// let report = testing::drain(&pool, Drain::queue("emails").recursive().with_scheduled()).await?;
/// assert_eq!((report.succeeded, report.dead), (3, 0));
/// # Ok(()) }
/// ```
pub async fn drain(pool: &PgPool, what: Drain) -> Result<DrainReport, Error> {
    let runner = Runner::new(what.state)?;
    let mut report = DrainReport::default();
    let max_id = if what.recursive {
        None
    } else {
        let mut conn = acquire(pool).await?;
        db::testing::jobs_newest_id(&mut conn, &what.queues).await?
    };
    loop {
        if what.with_scheduled {
            let mut conn = acquire(pool).await?;
            db::testing::jobs_make_due(&mut conn, &what.queues).await?;
        }
        let mut ran_this_pass = 0;
        while what.limit.is_none_or(|l| report.attempts.len() < l) {
            let Some((job, queue)) = runner.claim(pool, &what.queues, max_id, None).await? else {
                break;
            };
            let id = job.id;
            let state = runner.run(pool, job, queue).await?;
            report.record(id, state);
            ran_this_pass += 1;
        }
        let limited = what.limit.is_some_and(|l| report.attempts.len() >= l);
        if !what.recursive || ran_this_pass == 0 || limited {
            return Ok(report);
        }
    }
}

/// Enqueues `job` (committed, with its type's options) and runs that one job in
/// the calling task, as [`drain`] would; returns its row afterwards (state,
/// attempts, errors). A job whose unique key a live job holds runs that job
/// instead, if it is ready.
///
/// ```no_run
/// # #[derive(serde::Serialize, serde::Deserialize, lq_runtime::Job)] struct Resize { id: i64 }
/// # impl lq_runtime::Perform for Resize {
/// #     async fn perform(&self, _: &lq_runtime::JobContext) -> Result<(), lq_runtime::JobError> { Ok(()) }
/// # }
/// # async fn f(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
/// let row = lq_runtime::testing::work(&pool, Resize { id: 7 }).await?;
/// assert_eq!(row.state, lq_runtime::JobState::Succeeded);
/// # Ok(()) }
/// ```
pub async fn work<J: Job + Perform>(pool: &PgPool, job: J) -> Result<JobRow, Error> {
    let runner = Runner::new(AppState::default())?;
    let id = job.enqueue_with(pool, EnqueueOptions::new()).await?.id;
    let queues = [J::OPTIONS.queue.to_owned()];
    if let Some((claimed, queue)) = runner.claim(pool, &queues, None, Some(id)).await? {
        runner.run(pool, claimed, queue).await?;
    }
    control::get(pool, id).await
}

impl DrainReport {
    fn record(&mut self, id: i64, state: JobState) {
        self.attempts.push((id, state));
        match state {
            JobState::Succeeded => self.succeeded += 1,
            JobState::Dead => self.dead += 1,
            JobState::Cancelled => self.cancelled += 1,
            _ => self.requeued += 1,
        }
    }
}

/// The registry's runnable kinds, and the state handlers see.
struct Runner {
    registry: Registry,
    kinds: Vec<String>,
    lease_secs: Vec<f64>,
    state: AppState,
}

impl Runner {
    fn new(state: AppState) -> Result<Self, Error> {
        let registry = Registry::collect()?;
        let runnable: Vec<&JobDescriptor> = registry
            .iter()
            .filter(|d| (d.handler)().is_some())
            .collect();
        let (kinds, lease_secs) = attempt::claimable(&runnable);
        Ok(Self {
            kinds,
            lease_secs,
            registry,
            state,
        })
    }

    async fn claim(
        &self,
        pool: &PgPool,
        queues: &[String],
        max_id: Option<i64>,
        only_id: Option<i64>,
    ) -> Result<Option<(ClaimedJob, String)>, Error> {
        let mut conn = acquire(pool).await?;
        let job = db::testing::job_claim_for_test(
            &mut conn,
            queues,
            &self.kinds,
            &self.lease_secs,
            OWNER,
            max_id,
            only_id,
        )
        .await?;
        Ok(job.map(|c| (c.job, c.queue)))
    }

    /// Runs one claimed job and writes its outcome; returns the state it left.
    async fn run(&self, pool: &PgPool, job: ClaimedJob, queue: String) -> Result<JobState, Error> {
        let desc = self
            .registry
            .get(&job.kind)
            .expect("claimed kinds come from the registry");
        let cancel = CancellationToken::new();
        let ctx = attempt::context(desc, queue, &job, cancel.clone(), self.state.clone());
        let outcome = attempt::perform(&CancellationToken::new(), desc, &job, ctx, &cancel).await;
        let mut conn = acquire(pool).await?;
        let (id, token) = (job.id, job.lease_token);
        let written = match outcome {
            Outcome::Succeeded => {
                let done = db::finish::job_complete_many(&mut conn, &[id], &[token]).await?;
                (!done.is_empty()).then_some(JobState::Succeeded)
            }
            other => {
                let retry_in = attempt::requeue_delay(desc, &job, &other);
                Write::of(&other, retry_in)
                    .run(&mut conn, id, token)
                    .await?
            }
        };
        // Only a concurrent runtime or rescuer can take the lease of a job this
        // task holds; the row says what became of it.
        match written {
            Some(state) => Ok(state),
            None => Ok(control::get(pool, id).await?.state),
        }
    }
}

async fn acquire(pool: &PgPool) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, Error> {
    db::timed("testing_acquire", Duration::from_secs(30), async {
        pool.acquire().await.map_err(db::err("testing_acquire"))
    })
    .await
}
