//! Pooled connections that a failover left read-only, dropped instead of reused.
//!
//! A session opened on a standby, or while `default_transaction_read_only` was
//! on, stays read-only: every write on it fails (`25006`) however long the
//! pool keeps it (sqlx's `max_lifetime`, 30 min). So when a statement on a
//! pooled connection fails that way, every connection of the runtime's pools
//! opened before that moment is closed at its next acquire rather than reused,
//! and the next statement opens a fresh session, which a promoted server takes
//! writes on.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

/// The moment before which pooled connections are stale.
pub(crate) struct StaleConns {
    base: Instant,
    /// Nanoseconds after `base` of the last read-only failure, 0 for none.
    before: AtomicU64,
}

impl Default for StaleConns {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            before: AtomicU64::new(0),
        }
    }
}

impl StaleConns {
    /// A statement found its session read-only: every connection opened until
    /// now is stale.
    pub fn mark_now(&self) {
        let now = self.nanos(Instant::now()).max(1);
        self.before.fetch_max(now, Ordering::AcqRel);
    }

    /// Whether a connection opened `age` ago predates the last read-only failure.
    pub fn is_stale(&self, age: Duration) -> bool {
        let before = self.before.load(Ordering::Acquire);
        if before == 0 {
            return false;
        }
        let opened = Instant::now().checked_sub(age).unwrap_or(self.base);
        self.nanos(opened) <= before
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_opened_before_a_read_only_failure_are_stale_and_later_ones_not() {
        let stale = StaleConns::default();
        assert!(!stale.is_stale(Duration::from_secs(3600)), "no failure yet");
        std::thread::sleep(Duration::from_millis(5));
        stale.mark_now();
        // Opened a second ago: before the failure.
        assert!(stale.is_stale(Duration::from_millis(1000).min(stale.base.elapsed())));
        std::thread::sleep(Duration::from_millis(5));
        // Opened just now: after it.
        assert!(!stale.is_stale(Duration::ZERO));
    }
}
