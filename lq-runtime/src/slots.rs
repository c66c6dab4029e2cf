//! A queue's slots: how many of its handlers may run at once (its concurrency),
//! and how many of its jobs may be leased at once ([`LEASES_PER_HANDLER`] times
//! that), so the next batch can be claimed while earlier ones' completions are
//! still being written; a claim may also take jobs ahead of the idle handlers
//! (`claim_ahead`): those wait here for a handler, with leases of their own.
//!
//! Slots also count the claimed jobs whose task has not started yet, so the claimer
//! can wait for its last batch to start before it sizes the next claim: short jobs
//! then hand their handlers back first, and one claim takes a whole batch instead
//! of the few handlers that happened to be free.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Leases a queue may hold per handler, and per job it may claim ahead: one for
/// the running (or waiting) job and two for finished jobs whose success is not
/// written yet (the batch being written and the one gathering). With two, claims at
/// concurrency 100 averaged 78 jobs instead of 98, because the claimer waited for
/// completions to land.
pub(crate) const LEASES_PER_HANDLER: usize = 3;

/// The two limits of one queue.
#[derive(Debug)]
pub(crate) struct Slots {
    concurrency: usize,
    ahead: usize,
    handlers: Arc<Semaphore>,
    leases: Arc<Semaphore>,
    unstarted: Arc<Unstarted>,
}

/// Claimed jobs whose task has not begun, and a wake-up for when none is left.
#[derive(Debug, Default)]
struct Unstarted {
    count: AtomicUsize,
    none_left: Notify,
}

/// One claimed job's share of its queue: a held lease, and a running handler (or,
/// for a job claimed ahead, one to wait for).
#[derive(Debug)]
pub(crate) struct Slot {
    handler: Option<OwnedSemaphorePermit>,
    /// Where a job claimed ahead of the idle handlers waits for one.
    handlers: Arc<Semaphore>,
    lease: OwnedSemaphorePermit,
    /// Held until the job's task starts.
    unstarted: Option<NotStarted>,
}

impl Slots {
    /// Limits for a queue of `concurrency` handlers, for which at most `ahead`
    /// jobs may wait: `LEASES_PER_HANDLER` leases for each of both. Fewer for the
    /// waiting jobs starve the claims: the completions of the larger claims need
    /// room too.
    pub fn new(concurrency: usize, ahead: usize) -> Self {
        Self {
            concurrency,
            ahead,
            handlers: Arc::new(Semaphore::new(concurrency)),
            leases: Arc::new(Semaphore::new((concurrency + ahead) * LEASES_PER_HANDLER)),
            unstarted: Arc::default(),
        }
    }

    /// Waits until every job taken so far has started (and so, if it was short,
    /// has already freed its handler).
    pub async fn all_started(&self) {
        loop {
            let notified = self.unstarted.none_left.notified();
            if self.unstarted.count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Handlers that may run at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Most jobs that may wait for a handler (claimed ahead).
    pub fn most_ahead(&self) -> usize {
        self.ahead
    }

    /// Handlers not running a job now.
    pub fn idle_handlers(&self) -> usize {
        self.handlers.available_permits()
    }

    /// How many jobs may be claimed now, each with a handler waiting for it.
    pub fn free(&self) -> usize {
        self.idle_handlers().min(self.leases.available_permits())
    }

    /// How many jobs may be claimed now when `ahead` of them may wait for a
    /// handler: never more than the free leases.
    pub fn claimable(&self, ahead: usize) -> usize {
        (self.idle_handlers() + ahead).min(self.leases.available_permits())
    }

    /// Waits until at least one job may be claimed.
    pub async fn wait_free(&self) {
        if let Ok(p) = self.handlers.acquire().await {
            drop(p);
        }
        if let Ok(p) = self.leases.acquire().await {
            drop(p);
        }
    }

    /// Takes a slot for one claimed job, with a handler if one is idle (else the
    /// job waits for one: [`Slot::wait_for_handler`]); `None` only if no lease is
    /// free, which the claimer rules out by claiming at most [`Slots::claimable`].
    pub fn take(&self) -> Option<Slot> {
        let lease = self.leases.clone().try_acquire_owned().ok()?;
        let handler = self.handlers.clone().try_acquire_owned().ok();
        self.unstarted.count.fetch_add(1, Ordering::AcqRel);
        Some(Slot {
            handler,
            handlers: self.handlers.clone(),
            lease,
            unstarted: Some(NotStarted(self.unstarted.clone())),
        })
    }
}

impl Slot {
    /// Whether the job still waits for a handler (it was claimed ahead).
    pub fn waits_for_handler(&self) -> bool {
        self.handler.is_none()
    }

    /// Waits for a handler to run the job. Handlers go to waiting jobs in the order
    /// they began to wait (tokio's semaphore is fair).
    pub async fn wait_for_handler(&mut self) {
        if self.handler.is_none() {
            // The semaphore is never closed, so this only ever returns a permit.
            self.handler = self.handlers.clone().acquire_owned().await.ok();
        }
    }

    /// The job's handler is about to run; called once it has a handler.
    pub fn started(&mut self) {
        self.unstarted = None;
    }

    /// The handler is done: another may start, while the lease stays held until
    /// the outcome is written.
    pub fn handler_done(&mut self) {
        self.handler = None;
    }

    /// Frees the leases of many finished jobs at once, so each queue's claimer
    /// wakes to the whole batch's room rather than to the first slot of it. A
    /// batch may hold jobs of several queues: permits merge per queue.
    pub fn release_all(slots: impl IntoIterator<Item = Slot>) {
        let mut per_queue: Vec<OwnedSemaphorePermit> = Vec::new();
        for slot in slots {
            drop(slot.handler);
            let lease = slot.lease;
            match per_queue
                .iter_mut()
                .find(|p| Arc::ptr_eq(p.semaphore(), lease.semaphore()))
            {
                Some(p) => p.merge(lease),
                None => per_queue.push(lease),
            }
        }
        drop(per_queue); // one release, and one wake-up, per queue
    }
}

/// One claimed job counted as not started; dropping it (when the task starts, or
/// when a task is dropped before it ran) takes it off the count.
#[derive(Debug)]
struct NotStarted(Arc<Unstarted>);

impl Drop for NotStarted {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none_left.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_cover_the_handlers_and_the_jobs_claimed_ahead() {
        let slots = Slots::new(4, 8);
        assert_eq!(slots.free(), 4);
        assert_eq!(slots.claimable(0), 4);
        assert_eq!(slots.claimable(8), 12);
        assert_eq!(slots.claimable(100), (4 + 8) * LEASES_PER_HANDLER);
    }

    #[test]
    fn a_job_taken_beyond_the_idle_handlers_waits_for_one() {
        let slots = Slots::new(1, 2);
        let first = slots.take().expect("a lease");
        let second = slots.take().expect("a lease");
        assert!(!first.waits_for_handler());
        assert!(second.waits_for_handler());
        assert_eq!(slots.idle_handlers(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn waiting_jobs_get_handlers_in_claim_order_as_handlers_finish() {
        let slots = Slots::new(1, 2);
        let mut running = slots.take().expect("a lease");
        let mut second = slots.take().expect("a lease");
        let mut third = slots.take().expect("a lease");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (n, mut slot) in [(3, third), (2, second)] {
            let tx = tx.clone();
            tokio::spawn(async move {
                slot.wait_for_handler().await;
                slot.started();
                tx.send(n).unwrap();
                slot.handler_done();
            });
        }
        // Let both tasks queue for the handler: third first, then second.
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "no handler is free yet");
        running.started();
        running.handler_done();
        assert_eq!(rx.recv().await, Some(3));
        assert_eq!(rx.recv().await, Some(2));
        slots.all_started().await;
        (second, third) = (slots.take().unwrap(), slots.take().unwrap());
        assert!(!second.waits_for_handler());
        assert!(third.waits_for_handler());
    }
}
