//! A queue's wake-up: how a NOTIFY, the idle poller or a retry's timer tells the
//! queue's claimer, waiting for work, to claim again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::{watch, Notify};

/// One per served queue. A wake-up sent while the claimer is busy is kept, so its
/// next wait returns at once: none is lost, at worst one claim finds nothing.
pub(crate) struct QueueWake {
    notify: Notify,
    waiting: AtomicBool,
    /// Whether a pause of the queue was heard of since its last claim that
    /// found jobs: jobs claimed ahead then go back instead of starting.
    paused: watch::Sender<bool>,
    /// Pauses heard of: a claim sent before the latest one cannot say the
    /// queue is claimable (its snapshot may predate the pause).
    pauses: AtomicU64,
}

impl Default for QueueWake {
    fn default() -> Self {
        Self {
            notify: Notify::new(),
            waiting: AtomicBool::new(false),
            paused: watch::Sender::new(false),
            pauses: AtomicU64::new(0),
        }
    }
}

impl QueueWake {
    /// A pause of the queue was heard of (`lq_pause`) and confirmed.
    pub fn mark_paused(&self) {
        self.paused.send_modify(|p| {
            self.pauses.fetch_add(1, Ordering::AcqRel);
            *p = true;
        });
    }

    /// Pauses heard of so far: read as a claim is sent, for [`Self::mark_claimable`].
    pub fn pauses_heard(&self) -> u64 {
        self.pauses.load(Ordering::Acquire)
    }

    /// A claim sent when `pauses_heard` read `sent_after` found jobs: the
    /// queue was not paused when it claimed, unless a pause was heard of since
    /// it was sent (its snapshot may predate that pause).
    pub fn mark_claimable(&self, sent_after: u64) {
        self.paused.send_if_modified(|p| {
            // Under the channel's lock, as `mark_paused`: none is lost.
            let clear = *p && self.pauses.load(Ordering::Acquire) == sent_after;
            if clear {
                *p = false;
            }
            clear
        });
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
        let sent_before = w.pauses_heard();
        w.mark_paused();
        paused.await;
        assert!(w.is_paused());
        w.paused().await; // at once: still paused
                          // A claim sent before the pause says nothing of it.
        w.mark_claimable(sent_before);
        assert!(w.is_paused());
        w.mark_claimable(w.pauses_heard());
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
