//! A queue's rate limit: how many of its jobs may start per period, across
//! every runtime.

use std::{fmt, time::Duration};

/// At most `allowed` of a queue's jobs start per `period`, across every runtime
/// that sets it (`RuntimeBuilder::rate_limit` in `lq-runtime`).
///
/// It is a token bucket of `allowed` tokens, refilled at `allowed / period` a
/// second by database time, one row per queue in `lq.rate_limits`: a claim
/// spends a token for each attempt it starts. So the queue starts jobs at that
/// rate on average, and at most `allowed` at once after a quiet spell; in any
/// window of `w`, at most `allowed + allowed × w / period` start. Every attempt
/// counts, retries included: what a rate limit protects (a partner's API, a mail
/// relay) sees each one.
///
/// ```
/// use std::time::Duration;
/// use lq_core::RateLimit;
///
/// let limit = RateLimit::per_minute(600);
/// assert_eq!(limit, RateLimit::new(600, Duration::from_secs(60)));
/// assert_eq!(limit.per_second_f64(), 10.0);
/// assert_eq!(limit.to_string(), "600 per 60s");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    allowed: u32,
    period: Duration,
}

/// The longest period a rate limit may have: a day. A longer one is more
/// likely a unit mistaken than a limit meant, and the bucket's arithmetic in
/// seconds stays exact well within it.
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(86_400);

impl RateLimit {
    /// `allowed` jobs per `period`. Checked when the runtime starts: `allowed`
    /// at least 1, `period` from a millisecond to [`MAX_RATE_PERIOD`].
    pub const fn new(allowed: u32, period: Duration) -> Self {
        Self { allowed, period }
    }

    /// `allowed` jobs a second.
    pub const fn per_second(allowed: u32) -> Self {
        Self::new(allowed, Duration::from_secs(1))
    }

    /// `allowed` jobs a minute.
    pub const fn per_minute(allowed: u32) -> Self {
        Self::new(allowed, Duration::from_secs(60))
    }

    /// `allowed` jobs an hour.
    pub const fn per_hour(allowed: u32) -> Self {
        Self::new(allowed, Duration::from_secs(3_600))
    }

    /// Jobs per period, and the bucket's size.
    pub const fn allowed(&self) -> u32 {
        self.allowed
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The average rate, in jobs a second.
    pub fn per_second_f64(&self) -> f64 {
        f64::from(self.allowed) / self.period.as_secs_f64()
    }

    /// Why this limit cannot work, if it cannot.
    pub fn invalid(&self) -> Option<&'static str> {
        if self.allowed == 0 {
            Some("0 jobs per period would run none of its jobs: allow at least 1, or pause the queue")
        } else if self.allowed > i32::MAX as u32 {
            Some("at most 2147483647 jobs per period")
        } else if self.period < Duration::from_millis(1) {
            Some("the period must be at least a millisecond")
        } else if self.period > MAX_RATE_PERIOD {
            Some("the period must be at most a day")
        } else {
            None
        }
    }

    /// How long until the bucket, holding `tokens`, holds a whole token again.
    pub fn until_next_token(&self, tokens: f64) -> Duration {
        let missing = (1.0 - tokens).max(0.0);
        Duration::from_secs_f64(missing / self.per_second_f64())
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per {:?}", self.allowed, self.period)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_that_cannot_work_say_why() {
        assert!(RateLimit::per_second(0)
            .invalid()
            .unwrap()
            .contains("pause"));
        assert!(RateLimit::new(1, Duration::ZERO).invalid().is_some());
        assert!(RateLimit::new(1, Duration::from_secs(86_401))
            .invalid()
            .is_some());
        assert_eq!(RateLimit::per_hour(1).invalid(), None);
        assert_eq!(RateLimit::new(5, Duration::from_millis(1)).invalid(), None);
    }

    #[test]
    fn the_next_token_comes_after_the_missing_fraction_of_one() {
        let limit = RateLimit::new(10, Duration::from_secs(2)); // 5 a second
        assert_eq!(limit.until_next_token(0.0), Duration::from_millis(200));
        assert_eq!(limit.until_next_token(0.5), Duration::from_millis(100));
        assert_eq!(limit.until_next_token(1.5), Duration::ZERO);
    }
}
