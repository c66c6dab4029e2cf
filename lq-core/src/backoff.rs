//! Retry delays: how long a failed job waits before its next attempt.

use std::time::Duration;

/// A retry policy, chosen per job type with `#[job(backoff = ...)]`.
///
/// ```
/// use lq_core::Backoff;
/// use std::time::Duration;
///
/// let b = Backoff::Exponential { base: Duration::from_secs(2), max: Duration::from_secs(60), jitter: 0.0 };
/// assert_eq!(b.delay(1), Duration::from_secs(2));
/// assert_eq!(b.delay(3), Duration::from_secs(8));
/// assert_eq!(b.delay(30), Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Copy)]
pub enum Backoff {
    /// `base * 2^(attempt-1)`, capped at `max`, then spread by ±`jitter` (a fraction).
    Exponential {
        /// Delay after the first failed attempt.
        base: Duration,
        /// Upper bound before jitter.
        max: Duration,
        /// Random spread as a fraction of the delay, `0.0..=1.0`.
        jitter: f64,
    },
    /// The same delay after every failure.
    Fixed(Duration),
    /// `step * attempt`, capped at `max`.
    Linear {
        /// Growth per attempt.
        step: Duration,
        /// Upper bound.
        max: Duration,
    },
    /// A user function of the attempt number (1 for the first failure).
    Custom(fn(u32) -> Duration),
}

impl Backoff {
    /// Exponential from 1 s, capped at 1 h, ±10 % jitter.
    pub const DEFAULT: Backoff = Backoff::Exponential {
        base: Duration::from_secs(1),
        max: Duration::from_secs(3600),
        jitter: 0.1,
    };

    /// Delay after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let attempt = attempt.max(1);
        match *self {
            Backoff::Exponential { base, max, jitter } => {
                let factor = 2u32.saturating_pow((attempt - 1).min(31));
                let raw = base.saturating_mul(factor).min(max);
                spread(raw, jitter)
            }
            Backoff::Fixed(d) => d,
            Backoff::Linear { step, max } => step.saturating_mul(attempt).min(max),
            Backoff::Custom(f) => f(attempt),
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Scales `d` by a random factor in `1 ± jitter`.
fn spread(d: Duration, jitter: f64) -> Duration {
    let jitter = jitter.clamp(0.0, 1.0);
    if jitter == 0.0 {
        return d;
    }
    let factor = 1.0 + jitter * (fastrand::f64() * 2.0 - 1.0);
    d.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_doubles_and_caps() {
        let b = Backoff::Exponential {
            base: Duration::from_secs(1),
            max: Duration::from_secs(10),
            jitter: 0.0,
        };
        let got: Vec<u64> = (1..=6).map(|a| b.delay(a).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 10, 10]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let b = Backoff::Exponential {
            base: Duration::from_secs(100),
            max: Duration::from_secs(100),
            jitter: 0.1,
        };
        for _ in 0..1000 {
            let d = b.delay(1).as_secs_f64();
            assert!((90.0..=110.0).contains(&d), "{d}");
        }
    }

    #[test]
    fn linear_and_fixed() {
        let l = Backoff::Linear {
            step: Duration::from_secs(10),
            max: Duration::from_secs(25),
        };
        assert_eq!(l.delay(2), Duration::from_secs(20));
        assert_eq!(l.delay(3), Duration::from_secs(25));
        assert_eq!(
            Backoff::Fixed(Duration::from_secs(7)).delay(9),
            Duration::from_secs(7)
        );
    }

    #[test]
    fn custom_function_gets_attempt() {
        fn f(a: u32) -> Duration {
            Duration::from_millis(u64::from(a) * 3)
        }
        assert_eq!(Backoff::Custom(f).delay(4), Duration::from_millis(12));
    }
}
