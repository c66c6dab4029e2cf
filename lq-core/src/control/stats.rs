//! The per-minute rollup: throughput, outcomes and wait per queue and kind,
//! summed over every runtime, without scanning the job history.

use std::time::Duration;

use sqlx::PgPool;

use super::pinned;
use crate::{db, Error};

/// Upper bounds of the wait buckets, in seconds; a last bucket counts the
/// longer waits. The same in every runtime and in `lq.stats_minute`.
pub const WAIT_BUCKET_BOUNDS: [f64; 14] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// The bucket a wait of `secs` falls in.
pub fn wait_bucket(secs: f64) -> usize {
    WAIT_BUCKET_BOUNDS
        .iter()
        .position(|b| secs <= *b)
        .unwrap_or(WAIT_BUCKET_BOUNDS.len())
}

/// The wait that `q` (0 to 1) of the attempts counted in `buckets` stayed
/// within, as the upper bound of its bucket; `None` with no attempts. A quantile
/// in the last bucket is reported as its lower bound, one hour: "an hour or more".
///
/// ```
/// use lq_core::control::{wait_bucket, wait_quantile};
/// let mut buckets = vec![0i64; 15];
/// buckets[wait_bucket(0.003)] += 98;
/// buckets[wait_bucket(2.0)] += 2;
/// assert_eq!(wait_quantile(&buckets, 0.5), Some(std::time::Duration::from_millis(5)));
/// assert_eq!(wait_quantile(&buckets, 0.99), Some(std::time::Duration::from_secs(5)));
/// ```
pub fn wait_quantile(buckets: &[i64], q: f64) -> Option<Duration> {
    let total: i64 = buckets.iter().sum();
    if total <= 0 {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as i64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            let bound = WAIT_BUCKET_BOUNDS
                .get(i)
                .or(WAIT_BUCKET_BOUNDS.last())
                .copied()
                .unwrap_or(0.0);
            return Some(Duration::from_secs_f64(bound));
        }
    }
    None
}

pub use crate::db::stats::MinuteStats;

/// The rollup's rows of the last `window`, oldest minute first. Rows reach it
/// every few seconds from each runtime (`RuntimeConfig::stats_interval`).
///
/// ```no_run
/// use lq_core::control;
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let hour = control::stats(&pool, std::time::Duration::from_secs(3600)).await?;
/// let done: i64 = hour.iter().filter(|m| m.queue == "emails").map(|m| m.succeeded).sum();
/// # Ok(()) }
/// ```
pub async fn stats(pool: &PgPool, window: Duration) -> Result<Vec<MinuteStats>, Error> {
    let secs = window.as_secs_f64();
    pinned(pool, "stats_minute_since", |conn| {
        Box::pin(async move { db::stats::stats_minute_since(conn, secs).await })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_take_their_bound_and_the_last_takes_the_rest() {
        assert_eq!(wait_bucket(0.0), 0);
        assert_eq!(wait_bucket(0.001), 0);
        assert_eq!(wait_bucket(0.0011), 1);
        assert_eq!(wait_bucket(3600.0), 13);
        assert_eq!(wait_bucket(1e9), 14);
        assert_eq!(wait_bucket(f64::NAN), 14);
    }

    #[test]
    fn a_quantile_is_the_bound_of_the_bucket_that_reaches_it() {
        assert_eq!(wait_quantile(&[0; 15], 0.99), None);
        let mut b = vec![0; 15];
        b[14] = 1;
        assert_eq!(wait_quantile(&b, 0.5), Some(Duration::from_secs(3600)));
        b[2] = 99;
        assert_eq!(wait_quantile(&b, 0.99), Some(Duration::from_millis(10)));
        assert_eq!(wait_quantile(&b, 1.0), Some(Duration::from_secs(3600)));
        assert_eq!(wait_quantile(&b, 0.0), Some(Duration::from_millis(10)));
    }
}
