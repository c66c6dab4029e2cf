//! How soon the notifier may send its next NOTIFY: a token bucket.
//!
//! A fixed gap between NOTIFYs delayed the wake-up of a producer that enqueues
//! one job right after the last one ran (about one a millisecond), by up to two
//! timer ticks. A bucket caps the average rate just the same, but lets a short run
//! of NOTIFYs through at once, so only a producer that keeps above the rate waits.

use std::time::Duration;

use tokio::time::Instant;

/// NOTIFYs a second that the bucket sustains.
const RATE_PER_SEC: f64 = 1_000.0;

/// NOTIFYs that may go at once after a quiet spell.
const BURST: f64 = 8.0;

/// A token bucket that starts full.
#[derive(Debug)]
pub(super) struct Pacer {
    tokens: f64,
    refilled_at: Option<Instant>,
}

impl Pacer {
    /// A full bucket.
    pub(super) fn new() -> Self {
        Self {
            tokens: BURST,
            refilled_at: None,
        }
    }

    /// Takes a token for a NOTIFY about to be sent at `now`, and returns how long to
    /// wait first: zero while tokens are left, else until the next one is due.
    pub(super) fn take(&mut self, now: Instant) -> Duration {
        if let Some(then) = self.refilled_at {
            let earned = now.saturating_duration_since(then).as_secs_f64() * RATE_PER_SEC;
            self.tokens = (self.tokens + earned).min(BURST);
        }
        self.refilled_at = Some(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            // Owed: the wait pays this token back, so the bucket is at zero after it.
            Duration::from_secs_f64(-self.tokens / RATE_PER_SEC)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: f64) -> Duration {
        Duration::from_secs_f64(n / 1_000.0)
    }

    /// Equal within a microsecond (the bucket counts in floating point).
    fn assert_about(got: Duration, want: Duration) {
        let diff = got.abs_diff(want);
        assert!(
            diff < Duration::from_micros(1),
            "{got:?}, expected {want:?}"
        );
    }

    /// A bucket that let a whole burst through at `t`, each at once.
    fn emptied_at(t: Instant) -> Pacer {
        let mut pacer = Pacer::new();
        for i in 0..BURST as usize {
            assert_eq!(pacer.take(t), Duration::ZERO, "take {i} of the burst");
        }
        pacer
    }

    #[test]
    fn a_burst_goes_at_once_then_is_paced_at_the_rate() {
        let t = Instant::now();
        let mut pacer = emptied_at(t);
        assert_about(pacer.take(t), ms(1.0));
        // The caller waited that out: the next one is due a millisecond later.
        assert_about(pacer.take(t + ms(1.0)), ms(1.0));
    }

    #[test]
    fn a_producer_below_the_rate_never_waits() {
        let mut pacer = Pacer::new();
        let t = Instant::now();
        for i in 0..10_000 {
            assert_eq!(
                pacer.take(t + ms(1.05 * i as f64)),
                Duration::ZERO,
                "take {i}"
            );
        }
    }

    #[test]
    fn a_producer_above_the_rate_is_held_to_it() {
        let mut pacer = Pacer::new();
        let start = Instant::now();
        let mut now = start;
        let sends = 1_000;
        for _ in 0..sends {
            // Pokes every 0.25 ms; each send waits out what the pacer asks.
            now += pacer.take(now) + ms(0.25);
        }
        let elapsed = now.duration_since(start);
        // The burst goes free, every later send costs 1 ms.
        let expected = ms(sends as f64 - BURST);
        assert!(
            elapsed.abs_diff(expected) <= ms(1.0),
            "{elapsed:?} for {sends} sends, expected about {expected:?}"
        );
    }

    #[test]
    fn a_quiet_spell_refills_the_bucket_but_no_further_than_the_burst() {
        let t = Instant::now();
        let mut pacer = emptied_at(t);
        let later = t + Duration::from_secs(60);
        for _ in 0..BURST as usize {
            assert_eq!(pacer.take(later), Duration::ZERO);
        }
        assert!(pacer.take(later) > Duration::ZERO);
    }
}
