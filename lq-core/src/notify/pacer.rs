//! How soon the notifier may send its next NOTIFY: a token bucket whose rate
//! drops while a process enqueues fast.
//!
//! A fixed gap between NOTIFYs delayed the wake-up of a producer that enqueues
//! one job right after the last one ran (about one a millisecond), by up to two
//! timer ticks. A bucket caps the average rate just the same, but lets a short run
//! of NOTIFYs through at once, so only a producer that keeps above the rate waits.
//!
//! Each NOTIFY is a statement beside the producer's own, costing the server
//! about what an insert does: on a small server 1,000 of them a second slowed a
//! one-producer enqueue loop by up to a sixth (bench/FINDINGS.md, stop 38), and
//! by a third where that producer made only 1,500 calls a second (stop 72),
//! while a quarter of that rate cost it little. So once pokes (one per enqueue
//! statement that asks for a NOTIFY) come faster than the bucket's own
//! [`RATE_PER_SEC`], where the bucket already coalesces them and each wake-up
//! finds jobs waiting, the rate drops to [`BUSY_RATE_PER_SEC`]: jobs wait up to
//! 4 ms for a wake-up instead of 1. Below it (a producer making at most one
//! enqueue call a millisecond) every poke still wakes workers at once.

use std::time::Duration;

use tokio::time::Instant;

/// NOTIFYs a second that the bucket sustains while pokes come at a modest rate.
const RATE_PER_SEC: f64 = 1_000.0;

/// NOTIFYs a second while pokes come faster than [`BUSY_POKES_PER_SEC`].
const BUSY_RATE_PER_SEC: f64 = 250.0;

/// Pokes a second (enqueue statements in this process, on one database) above
/// which the bucket refills at [`BUSY_RATE_PER_SEC`]: the modest rate itself,
/// since above it a NOTIFY a poke is no longer sent anyway (it was 2,000 up to
/// stop 72, which let a producer of 1,000–2,000 calls a second on a slow
/// server send a NOTIFY for every second insert or more).
const BUSY_POKES_PER_SEC: f64 = RATE_PER_SEC;

/// How long pokes are counted before the rate is chosen again.
const WINDOW: Duration = Duration::from_millis(20);

/// NOTIFYs that may go at once after a quiet spell.
const BURST: f64 = 8.0;

/// A token bucket that starts full.
#[derive(Debug)]
pub(super) struct Pacer {
    tokens: f64,
    refilled_at: Option<Instant>,
    /// The refill rate now: [`RATE_PER_SEC`] or [`BUSY_RATE_PER_SEC`].
    rate: f64,
    /// Pokes sent since `window_from`.
    pokes: u64,
    window_from: Option<Instant>,
}

impl Pacer {
    /// A full bucket at the modest rate.
    pub(super) fn new() -> Self {
        Self {
            tokens: BURST,
            refilled_at: None,
            rate: RATE_PER_SEC,
            pokes: 0,
            window_from: None,
        }
    }

    /// Takes a token for a NOTIFY about to be sent at `now`, and returns how long to
    /// wait first: zero while tokens are left, else until the next one is due.
    pub(super) fn take(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            // Owed: the wait pays this token back, so the bucket is at zero after it.
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }

    /// Adds the tokens earned since the last refill, at the rate of that time.
    fn refill(&mut self, now: Instant) {
        if let Some(then) = self.refilled_at {
            let earned = now.saturating_duration_since(then).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + earned).min(BURST);
        }
        self.refilled_at = Some(now);
    }

    /// Counts the `pokes` a NOTIFY sent at `now` covered, and at the end of each
    /// window sets the rate from how fast they came.
    pub(super) fn sent(&mut self, now: Instant, pokes: u64) {
        let from = *self.window_from.get_or_insert(now);
        self.pokes += pokes;
        let counted = now.saturating_duration_since(from);
        if counted < WINDOW {
            return;
        }
        let per_sec = self.pokes as f64 / counted.as_secs_f64();
        // Time so far earns at the old rate; only what follows at the new one.
        self.refill(now);
        self.rate = if per_sec > BUSY_POKES_PER_SEC {
            BUSY_RATE_PER_SEC
        } else {
            RATE_PER_SEC
        };
        (self.pokes, self.window_from) = (0, Some(now));
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

    /// NOTIFYs a second that a producer poking every `gap` from `start` gets over
    /// `secs` seconds, and the longest wait the pacer asked for.
    fn notifies(pacer: &mut Pacer, start: Instant, gap: Duration, secs: f64) -> (f64, Duration) {
        let end = start + Duration::from_secs_f64(secs);
        let (mut now, mut next_poke) = (start, start);
        let (mut pending, mut sends, mut longest) = (0u64, 0u32, Duration::ZERO);
        while now < end {
            while next_poke <= now {
                pending += 1;
                next_poke += gap;
            }
            if pending == 0 {
                now = next_poke;
                continue;
            }
            let wait = pacer.take(now);
            longest = longest.max(wait);
            now += wait;
            // Pokes that land during the wait go with this NOTIFY.
            while next_poke <= now {
                pending += 1;
                next_poke += gap;
            }
            pacer.sent(now, pending);
            pending = 0;
            sends += 1;
        }
        (f64::from(sends) / secs, longest)
    }

    #[test]
    fn a_fast_producer_is_notified_at_the_busy_rate() {
        let mut pacer = Pacer::new();
        // 5,000 pokes a second.
        let (per_sec, longest) = notifies(&mut pacer, Instant::now(), ms(0.2), 2.0);
        assert!(
            (BUSY_RATE_PER_SEC * 0.9..BUSY_RATE_PER_SEC * 1.15).contains(&per_sec),
            "{per_sec} NOTIFYs a second"
        );
        // One NOTIFY every 4 ms, less the poke gap already waited.
        let gap = Duration::from_secs_f64(1.0 / BUSY_RATE_PER_SEC);
        assert!(longest <= gap && longest > gap - ms(0.5), "{longest:?}");
    }

    #[test]
    fn a_producer_just_above_the_modest_rate_is_notified_at_the_busy_rate() {
        let mut pacer = Pacer::new();
        // 1,500 pokes a second: a serial producer on a slow server.
        let (per_sec, _) = notifies(&mut pacer, Instant::now(), ms(1.0 / 1.5), 2.0);
        assert_eq!(pacer.rate, BUSY_RATE_PER_SEC);
        assert!(
            (BUSY_RATE_PER_SEC * 0.9..BUSY_RATE_PER_SEC * 1.15).contains(&per_sec),
            "{per_sec} NOTIFYs a second"
        );
    }

    #[test]
    fn a_producer_below_the_busy_rate_is_notified_at_once() {
        let mut pacer = Pacer::new();
        // 950 pokes a second, as a serial producer makes.
        let (per_sec, longest) = notifies(&mut pacer, Instant::now(), ms(1.05), 2.0);
        assert!((900.0..1_000.0).contains(&per_sec), "{per_sec}");
        assert_eq!(longest, Duration::ZERO);
    }

    #[test]
    fn the_modest_rate_returns_after_a_fast_spell() {
        let mut pacer = Pacer::new();
        let start = Instant::now();
        notifies(&mut pacer, start, ms(0.2), 1.0);
        assert_eq!(pacer.rate, BUSY_RATE_PER_SEC);
        // A quiet second, then a serial producer: after one window it waits no more.
        let later = start + Duration::from_secs(2);
        notifies(&mut pacer, later, ms(1.05), 0.05);
        assert_eq!(pacer.rate, RATE_PER_SEC);
        let (_, longest) = notifies(&mut pacer, later + ms(50.0), ms(1.05), 1.0);
        assert_eq!(longest, Duration::ZERO);
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
