//! Queue control: pause, resume, and an overview of every queue.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::pinned;
use crate::{db, validate_name, Error, RateLimit};

/// Longest `paused_by` note kept, in bytes.
const MAX_PAUSED_BY_BYTES: usize = 200;

/// Pauses `queue` in every runtime: no claim that starts after this returns
/// takes a job from it, and it stays paused across restarts until
/// [`resume_queue`]. Jobs already running finish, and so does a claim already
/// running when the pause commits (one statement per runtime, usually a few
/// milliseconds, at most nine tenths of its `db_timeout`): its snapshot
/// predates the pause, so it may still take jobs. `by` records who paused it
/// (an operator's name or a tool's). A queue no runtime has seen yet can be
/// paused ahead. Returns `false` when it was already paused.
///
/// ```no_run
/// use lq_core::control;
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// control::pause_queue(&pool, "emails", "alice: mail provider outage").await?;
/// // ... later
/// control::resume_queue(&pool, "emails").await?;
/// # Ok(()) }
/// ```
pub async fn pause_queue(pool: &PgPool, queue: &str, by: &str) -> Result<bool, Error> {
    validate_name("queue", queue)?;
    let (queue, by) = (queue.to_owned(), storable_note(by));
    pinned(pool, "queue_pause", |conn| {
        Box::pin(async move { db::queues::queue_pause(conn, &queue, &by).await })
    })
    .await
}

/// Resumes a paused `queue`; its runtimes are woken at once. Returns `false` when
/// it was not paused.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// if !lq_core::control::resume_queue(&pool, "emails").await? {
///     println!("emails was not paused");
/// }
/// # Ok(()) }
/// ```
pub async fn resume_queue(pool: &PgPool, queue: &str) -> Result<bool, Error> {
    validate_name("queue", queue)?;
    let queue = queue.to_owned();
    pinned(pool, "queue_resume", |conn| {
        Box::pin(async move { db::queues::queue_resume(conn, &queue).await })
    })
    .await
}

/// Every queue with live jobs, a pause record or a live runtime serving it, by
/// name. Reads the live jobs only, never the history.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// for q in lq_core::control::queues(&pool).await? {
///     let paused = q.paused.is_some();
///     println!("{}: {} available, {} running, paused: {paused}", q.name, q.available, q.running);
/// }
/// # Ok(()) }
/// ```
pub async fn queues(pool: &PgPool) -> Result<Vec<QueueInfo>, Error> {
    let (rows, buckets) = pinned(pool, "queue_overview", |conn| {
        Box::pin(async move {
            let rows = db::queues::queue_overview(conn).await?;
            // Empty for a role granted what operators needed before schema
            // 13: its queues, without their rate limits.
            let buckets = db::queues::queue_rate_limits(conn).await?;
            Ok((rows, buckets))
        })
    })
    .await?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let mut buckets: std::collections::HashMap<String, RateBucket> = buckets
        .into_iter()
        .map(|b| {
            let period = Duration::try_from_secs_f64(b.period_secs).unwrap_or(Duration::ZERO);
            let limit = RateLimit::new(u32::try_from(b.allowed).unwrap_or(0), period);
            let bucket = RateBucket {
                limit,
                tokens: b.tokens_now,
                refilled_at: b.updated_at,
            };
            (b.queue, bucket)
        })
        .collect();
    Ok(rows
        .into_iter()
        .map(|r| QueueInfo {
            rate_limit: buckets.remove(&r.name),
            name: r.name,
            paused: r.paused_at.map(|at| Paused {
                at,
                by: r.paused_by.unwrap_or_default(),
            }),
            available: count(r.available),
            scheduled: count(r.scheduled),
            running: count(r.running),
            oldest_available_wait: r
                .oldest_available_secs
                .map(|s| Duration::from_secs_f64(s.max(0.0))),
        })
        .collect())
}

/// One queue's state, as [`queues`] reports it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QueueInfo {
    /// The queue's name.
    pub name: String,
    /// Set while the queue is paused.
    pub paused: Option<Paused>,
    /// Jobs ready to run now.
    pub available: u64,
    /// Jobs queued for later (`run_at` in the future: delayed, backing off, snoozed).
    pub scheduled: u64,
    /// Jobs running now.
    pub running: u64,
    /// How long the oldest ready job has waited past its `run_at`: the figure to
    /// alert on when a queue is stuck or under-provisioned.
    pub oldest_available_wait: Option<Duration>,
    /// The queue's rate limit, once a runtime with one has claimed from it
    /// (`RuntimeBuilder::rate_limit`). `None` also when the caller's role may
    /// not read `lq.rate_limits`.
    pub rate_limit: Option<RateBucket>,
}

/// A queue's rate limit as its bucket in `lq.rate_limits` holds it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RateBucket {
    /// The rate the last claim of the queue ran at.
    pub limit: RateLimit,
    /// The jobs it may start now: the tokens a refill now would leave.
    pub tokens: f64,
    /// When a claim last refilled it (database time).
    pub refilled_at: DateTime<Utc>,
}

impl std::fmt::Display for RateBucket {
    /// `600 per 60s (12 left)`: the rate, and the whole tokens it holds now.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} left)", self.limit, self.tokens.max(0.0).floor())
    }
}

/// Who paused a queue, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Paused {
    /// When it was paused (database time).
    pub at: DateTime<Utc>,
    /// The note given to [`pause_queue`].
    pub by: String,
}

/// `by` as it can be stored: NUL written as `\0` (PostgreSQL text cannot hold
/// it), cut at a character boundary to [`MAX_PAUSED_BY_BYTES`].
pub(super) fn storable_note(by: &str) -> String {
    let mut note = by.replace('\0', "\\0");
    if note.len() > MAX_PAUSED_BY_BYTES {
        let mut cut = MAX_PAUSED_BY_BYTES;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_stored_without_nul_and_within_the_cap() {
        assert_eq!(storable_note("a\0b"), "a\\0b");
        let long = "é".repeat(150); // 300 bytes
        let note = storable_note(&long);
        assert_eq!(note.len(), 200);
        assert!(note.chars().all(|c| c == 'é'));
    }
}
