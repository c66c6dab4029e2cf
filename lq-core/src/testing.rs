//! Helpers for testing application code that enqueues and performs jobs, in the
//! spirit of Oban.Testing and River's `rivertest`: find what a transaction
//! enqueued, assert on it, and run a handler with a context built by hand.
//!
//! ```no_run
//! use lq_core::{testing, Job, JobContext, JobError, Perform};
//! # #[derive(serde::Serialize, serde::Deserialize, Job, PartialEq, Debug)]
//! # struct SendWelcomeEmail { user_id: i64 }
//! # impl Perform for SendWelcomeEmail {
//! #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
//! # }
//! # async fn sign_up(tx: &mut sqlx::PgConnection) {}
//! # async fn f(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! let mut tx = pool.begin().await?;
//! sign_up(&mut tx).await; // the application code under test
//! // Seen inside the transaction, before (or without) committing it.
//! let job = testing::assert_enqueued(&mut *tx, &SendWelcomeEmail { user_id: 42 }).await;
//! assert_eq!(job.queue, "default");
//!
//! // Run the handler directly, as attempt 3 (of the type's default 20).
//! let ctx = testing::TestContext::new::<SendWelcomeEmail>().attempt(3).build();
//! assert!(testing::perform_job(&job.job, &ctx).await.is_ok());
//! # Ok(()) }
//! ```

use std::fmt::Debug;

use chrono::{DateTime, Utc};
use sqlx::{Acquire, Postgres};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{db, AppState, ContextParts, CronTick, Error, Job, JobContext, JobError, Perform};

/// A queued job of type `J`, decoded, with where and when it will run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EnqueuedJob<J> {
    /// Job id.
    pub id: i64,
    /// The payload, decoded into its type.
    pub job: J,
    /// The queue it waits on: the type's, or the one an enqueue option chose.
    pub queue: String,
    /// Its priority within the queue; larger runs first.
    pub priority: i16,
    /// The earliest time a runtime may claim it (a delay or `run_at` shows here).
    pub run_at: DateTime<Utc>,
    /// How many claims it may take before it is dead.
    pub max_attempts: u32,
    /// Unique key, if any.
    pub unique_key: Option<String>,
    /// Metadata, if any.
    pub meta: Option<serde_json::Value>,
}

/// Every queued job of type `J` visible on `conn`, oldest first: on a
/// transaction, its own uncommitted jobs too. Fails with [`Error::Decode`] for
/// a payload that does not decode into `J`.
///
/// ```no_run
/// use lq_core::{testing, Job};
/// # #[derive(serde::Serialize, serde::Deserialize, Job, PartialEq, Debug)]
/// # struct SendWelcomeEmail { user_id: i64 }
/// # async fn sign_up(tx: &mut sqlx::PgConnection, user_id: i64) {}
/// # async fn f(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// sign_up(&mut tx, 42).await;
/// let queued = testing::all_enqueued::<SendWelcomeEmail, _>(&mut *tx).await?;
/// assert_eq!(queued.len(), 1, "one welcome mail, not one per retry of the sign-up");
/// assert_eq!(queued[0].job, SendWelcomeEmail { user_id: 42 });
/// # Ok(()) }
/// ```
pub async fn all_enqueued<'c, J, A>(conn: A) -> Result<Vec<EnqueuedJob<J>>, Error>
where
    J: Job,
    A: Acquire<'c, Database = Postgres>,
{
    let op = "jobs_queued_of_kind";
    let mut conn = conn.acquire().await.map_err(db::err(op))?;
    let rows = db::testing::jobs_queued_of_kind(&mut conn, J::KIND).await?;
    rows.into_iter()
        .map(|r| {
            let decode = |source| Error::Decode {
                id: r.id,
                kind: J::KIND,
                source,
            };
            Ok(EnqueuedJob {
                job: serde_json::from_str(&r.payload).map_err(decode)?,
                meta: r
                    .meta
                    .as_deref()
                    .map(serde_json::from_str)
                    .transpose()
                    .map_err(decode)?,
                id: r.id,
                queue: r.queue,
                priority: r.priority,
                run_at: r.run_at,
                max_attempts: u32::try_from(r.max_attempts).unwrap_or(0),
                unique_key: r.unique_key,
            })
        })
        .collect()
}

/// Asserts that a queued job equal to `expected` is visible on `conn`, and
/// returns the oldest such job (to check its queue, `run_at` or priority).
///
/// # Panics
///
/// When there is none, listing the queued jobs of `J`'s kind; or when they
/// cannot be read.
pub async fn assert_enqueued<'c, J, A>(conn: A, expected: &J) -> EnqueuedJob<J>
where
    J: Job + PartialEq + Debug,
    A: Acquire<'c, Database = Postgres>,
{
    let queued = read_or_panic::<J, A>(conn).await;
    match queued.iter().find(|e| e.job == *expected) {
        Some(found) => found.clone_job(),
        None => panic!(
            "expected a queued {} job equal to {expected:?}; queued jobs of that kind: {:#?}",
            J::KIND,
            queued.iter().map(|e| &e.job).collect::<Vec<_>>()
        ),
    }
}

/// Asserts that a queued job of type `J` for which `matches` holds is visible on
/// `conn`, and returns the oldest one. The predicate sees where and when the job
/// runs too, so one assertion can check the payload's fields, the queue, the
/// priority, `run_at` and the unique key:
///
/// ```no_run
/// # use lq_core::{testing, Job};
/// # #[derive(serde::Serialize, serde::Deserialize, Job, Debug)]
/// # struct SendWelcomeEmail { user_id: i64 }
/// # async fn f(tx: &mut sqlx::PgConnection) {
/// let job = testing::assert_enqueued_where(&mut *tx, |e: &testing::EnqueuedJob<SendWelcomeEmail>| {
///     e.job.user_id == 42 && e.queue == "emails" && e.priority == 10
/// })
/// .await;
/// # }
/// ```
///
/// # Panics
///
/// When no job matches, listing every queued job of `J`'s kind with its queue,
/// priority and `run_at`; or when they cannot be read.
pub async fn assert_enqueued_where<'c, J, A, F>(conn: A, matches: F) -> EnqueuedJob<J>
where
    J: Job + Debug,
    A: Acquire<'c, Database = Postgres>,
    F: Fn(&EnqueuedJob<J>) -> bool,
{
    let queued = read_or_panic::<J, A>(conn).await;
    match queued.iter().find(|e| matches(e)) {
        Some(found) => found.clone_job(),
        None => panic!(
            "expected a queued {} job matching the predicate; queued jobs of that kind: {:#?}",
            J::KIND,
            queued
        ),
    }
}

/// Asserts that every job of `expected` is queued and visible on `conn`, one
/// queued job per expected one (two equal expected jobs need two queued), and
/// returns them in the order of `expected`. Other queued jobs of the kind are
/// allowed; use [`all_enqueued`] to check there are none.
///
/// # Panics
///
/// When one is missing, naming it and listing the queued jobs of the kind.
///
/// ```no_run
/// use lq_core::{testing, Job};
/// # #[derive(serde::Serialize, serde::Deserialize, Job, PartialEq, Debug)]
/// # struct SendWelcomeEmail { user_id: i64 }
/// # async fn sign_up(tx: &mut sqlx::PgConnection, user_id: i64) {}
/// # async fn f(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// sign_up(&mut tx, 1).await;
/// sign_up(&mut tx, 2).await;
/// let mails = [SendWelcomeEmail { user_id: 1 }, SendWelcomeEmail { user_id: 2 }];
/// let found = testing::assert_enqueued_many(&mut *tx, &mails).await;
/// assert!(found[0].id < found[1].id, "enqueued in sign-up order");
/// # Ok(()) }
/// ```
pub async fn assert_enqueued_many<'c, J, A>(conn: A, expected: &[J]) -> Vec<EnqueuedJob<J>>
where
    J: Job + PartialEq + Debug,
    A: Acquire<'c, Database = Postgres>,
{
    let queued = read_or_panic::<J, A>(conn).await;
    let mut taken = vec![false; queued.len()];
    let mut found = Vec::with_capacity(expected.len());
    for (i, want) in expected.iter().enumerate() {
        let hit = (0..queued.len()).find(|&k| !taken[k] && queued[k].job == *want);
        let Some(k) = hit else {
            panic!(
                "expected job {i} of {} queued, {want:?}, but found no such {} job; queued jobs of that kind: {:#?}",
                expected.len(),
                J::KIND,
                queued.iter().map(|e| &e.job).collect::<Vec<_>>()
            );
        };
        taken[k] = true;
        found.push(queued[k].clone_job());
    }
    found
}

/// Waits until job `id` is in `state`, reading it every 20 ms, and returns it;
/// [`Error::WaitTimedOut`] (with the state it is in) after `timeout`. For tests
/// that run a real runtime: wait on the database, not on time.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool, id: i64) -> Result<(), lq_core::Error> {
/// use std::time::Duration;
/// use lq_core::{testing, JobState};
/// let row = testing::wait_for_job(&pool, id, JobState::Succeeded, Duration::from_secs(10)).await?;
/// assert_eq!(row.attempts, 1);
/// # Ok(()) }
/// ```
pub async fn wait_for_job(
    pool: &sqlx::PgPool,
    id: i64,
    state: crate::JobState,
    timeout: std::time::Duration,
) -> Result<crate::control::JobRow, Error> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let row = crate::control::get(pool, id).await?;
        if row.state == state {
            return Ok(row);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::WaitTimedOut {
                id,
                wanted: state,
                last: row.state,
                after: timeout,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Asserts that no queued job equal to `unexpected` is visible on `conn`.
///
/// # Panics
///
/// When there is one (naming its id), or when the jobs cannot be read.
///
/// ```no_run
/// use lq_core::{testing, Job};
/// # #[derive(serde::Serialize, serde::Deserialize, Job, PartialEq, Debug)]
/// # struct SendWelcomeEmail { user_id: i64 }
/// # async fn sign_up(tx: &mut sqlx::PgConnection, user_id: i64) {}
/// # async fn f(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// sign_up(&mut tx, 42).await;
/// tx.rollback().await?;
/// // The job was enqueued in the rolled-back transaction: it never existed.
/// testing::refute_enqueued(&pool, &SendWelcomeEmail { user_id: 42 }).await;
/// # Ok(()) }
/// ```
pub async fn refute_enqueued<'c, J, A>(conn: A, unexpected: &J)
where
    J: Job + PartialEq + Debug,
    A: Acquire<'c, Database = Postgres>,
{
    let queued = read_or_panic::<J, A>(conn).await;
    if let Some(found) = queued.iter().find(|e| e.job == *unexpected) {
        panic!(
            "expected no queued {} job equal to {unexpected:?}, found job {}",
            J::KIND,
            found.id
        );
    }
}

async fn read_or_panic<'c, J: Job, A: Acquire<'c, Database = Postgres>>(
    conn: A,
) -> Vec<EnqueuedJob<J>> {
    match all_enqueued::<J, A>(conn).await {
        Ok(queued) => queued,
        Err(e) => panic!(
            "could not read the queued {} jobs: {}",
            J::KIND,
            crate::chain(&e)
        ),
    }
}

impl<J: Job> EnqueuedJob<J> {
    /// A copy, the payload copied through JSON (job types need not be `Clone`).
    fn clone_job(&self) -> Self {
        let json = serde_json::to_string(&self.job).expect("a decoded job serialises again");
        Self {
            job: serde_json::from_str(&json).expect("a job's own JSON decodes"),
            id: self.id,
            queue: self.queue.clone(),
            priority: self.priority,
            run_at: self.run_at,
            max_attempts: self.max_attempts,
            unique_key: self.unique_key.clone(),
            meta: self.meta.clone(),
        }
    }
}

/// Runs `job`'s handler with `ctx`: the job goes through its JSON form first,
/// as a claimed job does, so a type that does not survive the round trip fails
/// here rather than in production. Only the handler: no `timeout`, no panic
/// caught, no retry decided; `lq_runtime::testing::perform` adds those and
/// says what the runtime would record.
///
/// # Panics
///
/// When the job does not serialise, or its JSON does not decode into its type.
pub async fn perform_job<J: Perform>(job: &J, ctx: &JobContext) -> Result<(), JobError> {
    let json = serde_json::to_string(job)
        .unwrap_or_else(|e| panic!("{} job does not serialise: {e}", J::KIND));
    let decoded: J = serde_json::from_str(&json).unwrap_or_else(|e| {
        panic!(
            "{} job does not decode from its own JSON {json}: {e}",
            J::KIND
        )
    });
    decoded.perform(ctx).await
}

/// Builds a [`JobContext`] for calling a handler in a test: attempt 1 of the
/// type's `max_attempts`, on its queue, due and enqueued now, with no state
/// unless given.
///
/// ```
/// use lq_core::{testing::TestContext, Job};
/// # #[derive(serde::Serialize, serde::Deserialize, Job)] struct Report;
/// let test = TestContext::new::<Report>().attempt(2).state(String::from("smtp://test"));
/// let cancel = test.cancellation(); // fire it to test a handler's cancellation path
/// let ctx = test.build();
/// assert_eq!((ctx.attempt(), ctx.state::<String>().as_str()), (2, "smtp://test"));
/// cancel.cancel();
/// assert!(ctx.is_cancelled());
/// ```
#[derive(Debug, Clone)]
pub struct TestContext {
    parts: ContextParts,
    meta: Option<serde_json::Value>,
    state: AppState,
    cancel: CancellationToken,
}

impl TestContext {
    /// A context for a job of type `J`.
    pub fn new<J: Job>() -> Self {
        let now = Utc::now();
        Self {
            parts: ContextParts {
                id: 1,
                kind: J::KIND,
                queue: J::OPTIONS.queue.to_owned(),
                attempt: 1,
                max_attempts: J::OPTIONS.max_attempts,
                run_at: now,
                created_at: now,
                meta: None,
                lease_token: Uuid::new_v4(),
            },
            meta: None,
            state: AppState::default(),
            cancel: CancellationToken::new(),
        }
    }

    /// The job's id.
    pub fn id(mut self, id: i64) -> Self {
        self.parts.id = id;
        self
    }

    /// The queue it was claimed from.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.parts.queue = queue.into();
        self
    }

    /// This attempt's number, from 1.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.parts.attempt = attempt;
        self
    }

    /// Attempts allowed.
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.parts.max_attempts = max_attempts;
        self
    }

    /// When the attempt was due.
    pub fn run_at(mut self, run_at: DateTime<Utc>) -> Self {
        self.parts.run_at = run_at;
        self
    }

    /// When the job was enqueued.
    pub fn created_at(mut self, created_at: DateTime<Utc>) -> Self {
        self.parts.created_at = created_at;
        self
    }

    /// The job's metadata (replacing a cron tick set earlier).
    pub fn meta(mut self, meta: serde_json::Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// The cron tick the job stands for (see [`JobContext::cron`]).
    pub fn cron(mut self, tick: CronTick) -> Self {
        self.meta = Some(tick.to_meta());
        self
    }

    /// Adds shared state, as the runtime builder's `.state(..)` does.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// The token behind the context's cancellation signal: cancel it to see how
    /// the handler reacts to a cancel or a lost lease.
    pub fn cancellation(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// The context.
    pub fn build(&self) -> JobContext {
        let mut parts = self.parts.clone();
        parts.meta = self.meta.as_ref().map(|m| m.to_string());
        JobContext::new(parts, self.cancel.clone(), self.state.clone())
    }
}
