//! The job types the suite enqueues, and what their handlers do.
//!
//! Every performance records itself in `fault.performed` keyed by its lease token:
//! a row at start (so a process killed mid-job still leaves a trace), then
//! `finished_at` just before returning `Ok`, or `cancelled_at` when the
//! cancellation signal fired. Both writes are idempotent and retried.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use lq_runtime::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

/// Text of the error a handler returns when its cancellation signal fired.
pub const CANCELLED_MARK: &str = "fault handler: cancellation signal fired";
/// Start of the message of a deliberate panic.
pub const PANIC_MARK: &str = "fault handler panics";

/// The worker's lease owner name, shared with handlers through the runtime's state.
#[derive(Debug, Clone)]
pub struct WorkerName(pub String);

/// What one performance does (the payload of both job types).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Spec {
    /// Unique per enqueue attempt, so an in-doubt enqueue can be recognised.
    pub seq: u64,
    /// How long the work takes.
    pub work_ms: u32,
    /// When set, how long the work takes if the job was performed before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_ms: Option<u32>,
    /// Panic on every attempt up to this one.
    #[serde(default)]
    pub panic_until: u32,
    /// Abort the whole worker process (after recording the start).
    #[serde(default)]
    pub abort: bool,
}

/// Short work under a short lease (2 s).
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(kind = "fault.work", lease = "2s", max_attempts = 25, backoff = fixed("100ms"))]
pub struct Work {
    /// What to do.
    #[serde(flatten)]
    pub spec: Spec,
}

/// Long work under a long lease (60 s): only a graceful hand-back returns it quickly.
#[derive(Debug, Clone, Serialize, Deserialize, Job)]
#[job(kind = "fault.long", lease = "60s", max_attempts = 5, backoff = fixed("100ms"))]
pub struct Long {
    /// What to do.
    #[serde(flatten)]
    pub spec: Spec,
}

/// Queue of [`CronTick`]: served only by workers started with `--cron-slots`, so
/// only the cron scenario's workers schedule it.
pub const CRON_QUEUE: &str = "cron";
/// Kind of [`CronTick`].
pub const CRON_KIND: &str = "fault.cron";

/// A recurring job: every second (seconds field first), short work under a 2 s lease.
#[derive(Debug, Clone, Default, Serialize, Deserialize, Job)]
#[job(kind = "fault.cron", queue = "cron", cron = "* * * * * *", lease = "2s", max_attempts = 25, backoff = fixed("100ms"))]
pub struct CronTick {
    /// What to do (the default: record the performance, no extra work).
    #[serde(flatten)]
    pub spec: Spec,
}

impl Perform for CronTick {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        perform_spec(&self.spec, ctx).await
    }
}

impl Perform for Work {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        perform_spec(&self.spec, ctx).await
    }
}

impl Perform for Long {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        perform_spec(&self.spec, ctx).await
    }
}

/// Performs `spec`: records the start in `fault.performed`, works, records the finish.
pub async fn perform_spec(spec: &Spec, ctx: &JobContext) -> Result<(), JobError> {
    let pool = ctx.state::<PgPool>();
    let worker = ctx.state::<WorkerName>().0.as_str();
    let (id, token, attempt) = (ctx.id(), ctx.lease_token(), ctx.attempt() as i32);
    persist(ctx, "record start", || {
        sqlx::query(
            "insert into fault.performed (lease_token, job_id, kind, attempt, worker)
             values ($1, $2, $3, $4, $5) on conflict (lease_token) do nothing",
        )
        .bind(token)
        .bind(id)
        .bind(ctx.kind())
        .bind(attempt)
        .bind(worker)
        .execute(pool)
    })
    .await?;
    if spec.abort {
        eprintln!("job {id}: aborting the process on attempt {attempt}");
        std::process::abort();
    }
    if ctx.attempt() <= spec.panic_until {
        panic!("{PANIC_MARK} on attempt {attempt}");
    }
    let mut ms = spec.work_ms;
    if let Some(rerun) = spec.rerun_ms {
        let prior: bool = persist(ctx, "look up earlier runs", || {
            sqlx::query_scalar("select exists(select 1 from fault.performed where job_id = $1 and lease_token <> $2)")
                .bind(id)
                .bind(token)
                .fetch_one(pool)
        })
        .await?;
        if prior {
            ms = rerun;
        }
    }
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms.into())) => {}
        _ = ctx.cancelled() => {
            for _ in 0..3 {
                let mark = sqlx::query("update fault.performed set cancelled_at = now() where lease_token = $1")
                    .bind(token)
                    .execute(pool);
                if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), mark).await {
                    break;
                }
            }
            return Err(JobError::retry(std::io::Error::other(CANCELLED_MARK)));
        }
    }
    persist(ctx, "record finish", || {
        sqlx::query("update fault.performed set finished_at = now() where lease_token = $1")
            .bind(token)
            .execute(pool)
    })
    .await?;
    Ok(())
}

/// Runs an idempotent write until it lands: each try bounded, retried with backoff
/// for up to 20 s, given up early once the attempt is cancelled.
async fn persist<T, F, Fut>(ctx: &JobContext, what: &str, mut write: F) -> Result<T, JobError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut delay = Duration::from_millis(50);
    loop {
        let error = match tokio::time::timeout(Duration::from_secs(3), write()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_owned(),
        };
        if ctx.is_cancelled() || Instant::now() >= deadline {
            return Err(JobError::retry(std::io::Error::other(format!(
                "{what}: {error}"
            ))));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}
