//! How long each control call may take: 30 s unless the caller widens or
//! narrows it for a scope with [`with_timeout`].

use std::{future::Future, time::Duration};

/// The bound on a control call when no [`with_timeout`] scope sets one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The widest bound a call may have: PostgreSQL's `statement_timeout` is a
/// 32-bit count of milliseconds, and the server's share of the bound must fit.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(2_000_000);

tokio::task_local! {
    static BOUND: Duration;
}

/// Runs `fut` with every control call it makes (on this task) bounded by
/// `bound` instead of [`DEFAULT_TIMEOUT`]: a count over a large history or a
/// bulk action on a slow disk may need minutes, a health probe a second. As
/// with the default, the server cancels each statement at nine tenths of the
/// bound, so nothing keeps running once the call gave up. Past the bound a
/// call fails with [`Error::Timeout`](crate::Error::Timeout) or the server's
/// cancel. A bound under a millisecond counts as one; one over
/// [`MAX_TIMEOUT`] (about 23 days) as that.
///
/// ```no_run
/// use std::time::Duration;
/// use lq_core::{control, JobFilter, JobState};
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let dead = JobFilter::new().state(JobState::Dead);
/// let counts = control::with_timeout(Duration::from_secs(600), control::count(&pool, &dead)).await?;
/// # Ok(()) }
/// ```
pub async fn with_timeout<F: Future>(bound: Duration, fut: F) -> F::Output {
    BOUND
        .scope(bound.clamp(Duration::from_millis(1), MAX_TIMEOUT), fut)
        .await
}

/// The bound a control call made here and now gets: the innermost
/// [`with_timeout`] scope's, else [`DEFAULT_TIMEOUT`]. A task spawned from the
/// scope does not inherit it; pass this value to a `with_timeout` in the task.
///
/// ```
/// use std::time::Duration;
/// use lq_core::control::{timeout, with_timeout, DEFAULT_TIMEOUT};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// assert_eq!(timeout(), DEFAULT_TIMEOUT);
/// let inside = with_timeout(Duration::from_secs(5), async { timeout() }).await;
/// assert_eq!(inside, Duration::from_secs(5));
/// # });
/// ```
pub fn timeout() -> Duration {
    BOUND.try_with(|b| *b).unwrap_or(DEFAULT_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{timeout, with_timeout, DEFAULT_TIMEOUT, MAX_TIMEOUT};

    #[tokio::test]
    async fn a_scope_sets_the_bound_and_the_default_returns_after_it() {
        assert_eq!(timeout(), DEFAULT_TIMEOUT);
        let inner = with_timeout(Duration::from_secs(5), async {
            let outer = timeout();
            let nested = with_timeout(Duration::from_secs(1), async { timeout() }).await;
            (outer, nested, timeout())
        })
        .await;
        assert_eq!(
            inner,
            (
                Duration::from_secs(5),
                Duration::from_secs(1),
                Duration::from_secs(5)
            )
        );
        assert_eq!(timeout(), DEFAULT_TIMEOUT);
    }

    #[tokio::test]
    async fn a_bound_is_kept_within_what_the_server_takes() {
        assert_eq!(
            with_timeout(Duration::ZERO, async { timeout() }).await,
            Duration::from_millis(1)
        );
        assert_eq!(
            with_timeout(Duration::MAX, async { timeout() }).await,
            MAX_TIMEOUT
        );
        let (_, server_ms) = crate::db::statement_timeout_within(MAX_TIMEOUT);
        assert!(server_ms.parse::<i32>().is_ok(), "{server_ms} fits an int");
    }
}
