//! A queue's wake-up: how a NOTIFY, the idle poller or a retry's timer tells the
//! queue's claimer, waiting for work, to claim again.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{watch, Notify};

/// One per served queue. A wake-up sent while the claimer is busy is kept, so its
/// next wait returns at once: none is lost, at worst one claim finds nothing.
pub(crate) struct QueueWake {
    notify: Notify,
    waiting: AtomicBool,
    /// Whether a pause of the queue was heard of since its last claim that
    /// found jobs: jobs claimed ahead then go back instead of starting.
    paused: watch::Sender<bool>,
}

impl Default for QueueWake {
    fn default() -> Self {
        Self {
            notify: Notify::new(),
            waiting: AtomicBool::new(false),
            paused: watch::Sender::new(false),
        }
    }
}

impl QueueWake {
    /// A pause of the queue was heard of (`lq_pause`).
    pub fn mark_paused(&self) {
        self.paused.send_replace(true);
    }

    /// A claim found jobs: the queue is not paused (the claim checks).
    pub fn mark_claimable(&self) {
        if *self.paused.borrow() {
            self.paused.send_replace(false);
        }
    }

    /// Whether a pause was heard of since the last claim that found jobs.
    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Resolves once a pause is heard of (at once if one was).
    pub async fn paused(&self) {
        let mut rx = self.paused.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ = rx.wait_for(|p| *p).await;
    }

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
    async fn a_pause_heard_of_holds_until_a_claim_finds_jobs() {
        let w = QueueWake::default();
        assert!(!w.is_paused());
        let paused = w.paused();
        tokio::pin!(paused);
        assert!(futures_util::poll!(paused.as_mut()).is_pending());
        w.mark_paused();
        paused.await;
        assert!(w.is_paused());
        w.paused().await; // at once: still paused
        w.mark_claimable();
        assert!(!w.is_paused());
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
