//! The [`Job`] trait: what `#[derive(Job)]` implements for a payload type.

use std::{future::Future, time::Duration};

use serde::{de::DeserializeOwned, Serialize};

use crate::{
    backoff::Backoff, enqueue, BulkEnqueued, EnqueueOptions, EnqueueTarget, Enqueued, Error,
};

/// Payload size limit in bytes of serialised JSON (1 MiB).
///
/// Bigger payloads belong in your own table; the job should carry the row's id.
/// [`crate::Error::PayloadTooLarge`] is returned at enqueue when a payload exceeds it.
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// Default lease a claim takes on a job; heartbeats extend it while the job runs.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// Per-type settings, fixed at compile time by the `#[job(...)]` attribute.
///
/// Every field has the default documented on the derive; per-call overrides live in
/// [`crate::EnqueueOptions`].
#[derive(Debug, Clone, Copy)]
pub struct JobOptions {
    /// Queue the job is enqueued on (default `"default"`).
    pub queue: &'static str,
    /// Priority; larger runs first (default 0).
    pub priority: i16,
    /// Claims allowed before the job is dead (default 20).
    pub max_attempts: u32,
    /// Delay before a failed attempt is retried (default [`Backoff::DEFAULT`]).
    pub backoff: Backoff,
    /// Longest one attempt may run; `None` means no limit.
    pub timeout: Option<Duration>,
    /// Lease taken at claim and renewed by heartbeats (default [`DEFAULT_LEASE`]).
    pub lease: Duration,
    /// Recurring schedule, if the type is a cron job.
    pub cron: Option<CronSpec>,
}

impl JobOptions {
    /// The defaults every `#[job(...)]` key starts from.
    pub const DEFAULT: JobOptions = JobOptions {
        queue: "default",
        priority: 0,
        max_attempts: 20,
        backoff: Backoff::DEFAULT,
        timeout: None,
        lease: DEFAULT_LEASE,
        cron: None,
    };
}

impl Default for JobOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What to do with ticks missed while no runtime was running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Run once for the whole missed window (the default).
    Once,
    /// Drop missed ticks; resume at the next future tick.
    Skip,
}

impl CatchUp {
    /// The policy's name, as `#[job(cron_catch_up = "...")]` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Once => "once",
            CatchUp::Skip => "skip",
        }
    }
}

/// A recurring schedule declared with `#[job(cron = "...")]`.
#[derive(Debug, Clone, Copy)]
pub struct CronSpec {
    /// The cron expression: 5 fields, or 6 with leading seconds.
    pub expr: &'static str,
    /// IANA time zone the expression is read in (default `"UTC"`).
    pub tz: &'static str,
    /// Missed-tick policy.
    pub catch_up: CatchUp,
    /// Builds the payload for one tick (the type's `Default`).
    pub build: fn() -> serde_json::Value,
    /// The unique key of one tick's job (the `Default`'s), if the type has a
    /// `unique_key`: a tick whose key a live job holds enqueues nothing.
    pub unique_key: fn() -> Option<String>,
}

/// A job type: a serde payload with a kind name and per-type options.
///
/// Implement it with `#[derive(Job)]`, never by hand: the derive also registers the
/// type with the runtime through `inventory`.
///
/// ```
/// use lq_core::Job;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(queue = "emails", max_attempts = 5)]
/// struct SendWelcomeEmail { user_id: i64 }
///
/// assert_eq!(SendWelcomeEmail::KIND, "SendWelcomeEmail");
/// assert_eq!(SendWelcomeEmail::OPTIONS.queue, "emails");
/// ```
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Stable name stored in each row; set it with `kind = "..."` to rename the type freely.
    const KIND: &'static str;
    /// Settings from the `#[job(...)]` attribute.
    const OPTIONS: JobOptions;

    /// The unique key from the `unique_key` template, if the type has one.
    fn unique_key(&self) -> Option<String> {
        None
    }

    /// Inserts this job with the type's settings, on a `&mut Transaction<Postgres>`
    /// (the job exists iff the transaction commits), a `&PgPool`, a `&mut PgConnection`
    /// or a [`crate::Enqueuer`] (see [`EnqueueTarget`]).
    ///
    /// When the type has a `unique_key` and a queued or running job already holds
    /// it, nothing is inserted and that job's id comes back with `existing: true`.
    ///
    /// ```no_run
    /// # use lq_core::Job;
    /// # #[derive(serde::Serialize, serde::Deserialize, Job)] struct Ping;
    /// # async fn f(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?;
    /// let job = Ping.enqueue(&mut tx).await?;
    /// tx.commit().await?;
    /// assert!(!job.existing);
    /// # Ok(()) }
    /// ```
    fn enqueue<'c, A>(&self, conn: A) -> impl Future<Output = Result<Enqueued, Error>> + Send
    where
        A: EnqueueTarget<'c>,
        Self: Sized,
    {
        async move { enqueue::enqueue(self, conn, &EnqueueOptions::new()).await }
    }

    /// Like [`Job::enqueue`], with per-call overrides (delay, run time, priority, queue).
    ///
    /// ```no_run
    /// # use lq_core::{EnqueueOptions, Job};
    /// # #[derive(serde::Serialize, serde::Deserialize, Job)] struct Ping;
    /// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
    /// let opts = EnqueueOptions::new().delay(std::time::Duration::from_secs(60)).priority(3);
    /// Ping.enqueue_with(&pool, opts).await?;
    /// # Ok(()) }
    /// ```
    fn enqueue_with<'c, A>(
        &self,
        conn: A,
        opts: EnqueueOptions,
    ) -> impl Future<Output = Result<Enqueued, Error>> + Send
    where
        A: EnqueueTarget<'c>,
        Self: Sized,
    {
        async move { enqueue::enqueue(self, conn, &opts).await }
    }

    /// Inserts many jobs of this type in one statement (one round trip, at most one
    /// NOTIFY). The rules:
    ///
    /// - Every job gets the same `opts` (queue, priority, due time, max attempts).
    /// - All or nothing: a payload or unique key that cannot be stored anywhere in
    ///   the batch fails the whole call before anything is written, with an error
    ///   naming its position (`PayloadTooLarge`, `PayloadHasNul`, `NonFiniteNumber`,
    ///   `InvalidUniqueKey`).
    /// - A job whose unique key is held by a live job of this kind, or by an earlier
    ///   job in the same batch, is skipped, not an error: [`BulkEnqueued::skipped`]
    ///   counts them and [`BulkEnqueued::ids`] holds the inserted ones, ascending.
    /// - On a transaction the jobs exist iff it commits, like [`Job::enqueue`].
    ///
    /// ```no_run
    /// # use lq_core::{EnqueueOptions, Job};
    /// # #[derive(serde::Serialize, serde::Deserialize, Job)] struct Ping { n: u32 }
    /// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
    /// let done = Ping::enqueue_many(&pool, (0..1000).map(|n| Ping { n }), EnqueueOptions::new()).await?;
    /// assert_eq!(done.ids.len(), 1000);
    /// # Ok(()) }
    /// ```
    fn enqueue_many<'c, A, I>(
        conn: A,
        jobs: I,
        opts: EnqueueOptions,
    ) -> impl Future<Output = Result<BulkEnqueued, Error>> + Send
    where
        A: EnqueueTarget<'c>,
        I: IntoIterator<Item = Self> + Send,
        I::IntoIter: Send,
        Self: Sized,
    {
        async move { enqueue::enqueue_many(jobs, conn, &opts).await }
    }
}
