//! A queue's wake-up: how a NOTIFY, the idle poller or a retry's timer tells the
//! queue's claimer, waiting for work, to claim again.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// One per served queue. A wake-up sent while the claimer is busy is kept, so its
/// next wait returns at once: none is lost, at worst one claim finds nothing.
#[derive(Default)]
pub(crate) struct QueueWake {
    notify: Notify,
    waiting: AtomicBool,
}

impl QueueWake {
    /// Wakes the claimer now, or makes its next wait return at once.
    pub fn wake(&self) {
        self.notify.notify_one();
    }

    /// Whether the claimer waits for work: the idle poller asks only for these.
    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Waits until woken, marked as waiting meanwhile (also when the wait is
    /// dropped unfinished, as in a `select!`).
    pub async fn wait(&self) {
        struct Waiting<'a>(&'a AtomicBool);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Relaxed);
            }
        }
        self.waiting.store(true, Ordering::Relaxed);
        let _waiting = Waiting(&self.waiting);
        self.notify.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::QueueWake;

    #[tokio::test]
    async fn a_wake_sent_before_the_wait_is_kept_and_the_flag_follows_the_wait() {
        let w = QueueWake::default();
        w.wake();
        assert!(!w.is_waiting());
        w.wait().await; // returns at once: the wake-up was kept
        assert!(!w.is_waiting());

        let waiting = w.wait();
        tokio::pin!(waiting);
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        assert!(w.is_waiting());
        w.wake();
        waiting.await;
        assert!(!w.is_waiting());
    }

    #[tokio::test]
    async fn a_dropped_wait_is_no_longer_waiting() {
        let w = QueueWake::default();
        {
            let waiting = w.wait();
            tokio::pin!(waiting);
            assert!(futures_util::poll!(waiting.as_mut()).is_pending());
            assert!(w.is_waiting());
        }
        assert!(!w.is_waiting());
    }
}
