//! [`JobError`]: how `perform` says what should happen to a failed attempt.

use std::{error::Error as StdError, fmt, time::Duration};

/// A boxed error from user code.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// The failure of one attempt, and what to do next.
///
/// `?` converts any error (anything `Into<Box<dyn Error + Send + Sync>>`, which
/// includes `anyhow::Error`, `String` and `&str`) into a retryable failure. The
/// constructors choose a different fate.
///
/// ```
/// use lq_core::JobError;
/// use std::time::Duration;
///
/// fn parse(s: &str) -> Result<i64, JobError> {
///     let n: i64 = s.parse()?;                       // retried with backoff
///     if n < 0 {
///         return Err(JobError::permanent("negative")); // dead now, no retry
///     }
///     if n == 0 {
///         return Err(JobError::snooze(Duration::from_secs(30))); // later, attempt not spent
///     }
///     if n > 1_000 {
///         return Err(JobError::cancel("over the limit; ask support")); // `cancelled`, not dead
///     }
///     if n == 13 {
///         return Err(JobError::retry(format!("{n} is busy"))); // as `?` does
///     }
///     Ok(n)
/// }
/// assert!(parse("x").is_err());
/// assert!(matches!(parse("2000").unwrap_err().failure(), lq_core::Failure::Cancel(_)));
/// ```
pub struct JobError {
    outcome: Failure,
}

/// What the runtime does with a failed attempt.
#[derive(Debug)]
#[non_exhaustive]
pub enum Failure {
    /// Retry after the job's backoff; dead once attempts run out.
    Retry(BoxError),
    /// Dead now, whatever attempts remain.
    Permanent(BoxError),
    /// Back to the queue after the delay, without spending an attempt.
    Snooze(Duration),
    /// End as `cancelled`, with the reason stored.
    Cancel(String),
}

impl JobError {
    /// A failure that is retried with the job's backoff (what `?` produces).
    pub fn retry(error: impl Into<BoxError>) -> Self {
        Self {
            outcome: Failure::Retry(error.into()),
        }
    }

    /// A failure no retry can fix: the job goes dead at once with this reason.
    pub fn permanent(error: impl Into<BoxError>) -> Self {
        Self {
            outcome: Failure::Permanent(error.into()),
        }
    }

    /// Not now: requeue after `delay` without spending an attempt.
    pub fn snooze(delay: Duration) -> Self {
        Self {
            outcome: Failure::Snooze(delay),
        }
    }

    /// Stop for good and mark the job `cancelled` with `reason`.
    pub fn cancel(reason: impl Into<String>) -> Self {
        Self {
            outcome: Failure::Cancel(reason.into()),
        }
    }

    /// What the runtime will do with this failure.
    pub fn failure(&self) -> &Failure {
        &self.outcome
    }

    /// Consumes the error, giving its outcome.
    pub fn into_failure(self) -> Failure {
        self.outcome
    }
}

impl<E: Into<BoxError>> From<E> for JobError {
    fn from(error: E) -> Self {
        Self::retry(error)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.outcome.fmt(f)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Failure::Retry(e) => write!(f, "{}", chain(e.as_ref())),
            Failure::Permanent(e) => write!(f, "permanent: {}", chain(e.as_ref())),
            Failure::Snooze(d) => write!(f, "snoozed for {d:?}"),
            Failure::Cancel(r) => write!(f, "cancelled: {r}"),
        }
    }
}

/// Renders an error with its whole source chain, `outer: inner: root`, leaving
/// out a cause whose text the rendering already ends with (sqlx's errors, and
/// many `thiserror` types, end their own message with their source's).
///
/// ```
/// let io = std::io::Error::other("disk full");
/// let e = lq_core::Error::Database { op: "job_insert", source: sqlx::Error::Io(io) };
/// assert_eq!(lq_core::chain(&e), "database error in job_insert: error communicating with database: disk full");
/// ```
pub fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut out = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = e.source();
    }
    out
}
