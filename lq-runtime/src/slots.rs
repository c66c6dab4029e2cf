//! A queue's slots: how many of its handlers may run at once (its concurrency),
//! and how many of its jobs may be leased at once ([`LEASES_PER_HANDLER`] times
//! that), so the next batch can be claimed while earlier ones' completions are
//! still being written.
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

/// Leases a queue may hold per handler slot: one for the running job and two for
/// finished jobs whose success is not written yet (the batch being written and the
/// one gathering). With two, claims at concurrency 100 averaged 78 jobs instead of
/// 98, because the claimer waited for completions to land.
pub(crate) const LEASES_PER_HANDLER: usize = 3;

/// The two limits of one queue.
#[derive(Debug)]
pub(crate) struct Slots {
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

/// One claimed job's share of its queue: a running handler and a held lease.
#[derive(Debug)]
pub(crate) struct Slot {
    handler: Option<OwnedSemaphorePermit>,
    lease: OwnedSemaphorePermit,
    /// Held until the job's task starts.
    unstarted: Option<NotStarted>,
}

impl Slots {
    /// Limits for a queue of `concurrency` handlers.
    pub fn new(concurrency: usize) -> Self {
        Self {
            handlers: Arc::new(Semaphore::new(concurrency)),
            leases: Arc::new(Semaphore::new(concurrency * LEASES_PER_HANDLER)),
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

    /// How many jobs may be claimed now.
    pub fn free(&self) -> usize {
        self.handlers
            .available_permits()
            .min(self.leases.available_permits())
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

    /// Takes a slot for one claimed job; `None` only if none is free, which the
    /// claimer rules out by claiming at most [`Slots::free`] jobs.
    pub fn take(&self) -> Option<Slot> {
        let handler = self.handlers.clone().try_acquire_owned().ok()?;
        let lease = self.leases.clone().try_acquire_owned().ok()?;
        self.unstarted.count.fetch_add(1, Ordering::AcqRel);
        Some(Slot {
            handler: Some(handler),
            lease,
            unstarted: Some(NotStarted(self.unstarted.clone())),
        })
    }
}

impl Slot {
    /// The job's task is running; called first thing in it.
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
