//! A queue's slots: how many of its handlers may run at once (its concurrency),
//! and how many of its jobs may be leased at once (twice that), so the next batch
//! can be claimed while the previous one's completions are being written.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The two limits of one queue.
#[derive(Debug)]
pub(crate) struct Slots {
    handlers: Arc<Semaphore>,
    leases: Arc<Semaphore>,
}

/// One claimed job's share of its queue: a running handler and a held lease.
#[derive(Debug)]
pub(crate) struct Slot {
    handler: Option<OwnedSemaphorePermit>,
    lease: OwnedSemaphorePermit,
}

impl Slots {
    /// Limits for a queue of `concurrency` handlers.
    pub fn new(concurrency: usize) -> Self {
        Self {
            handlers: Arc::new(Semaphore::new(concurrency)),
            leases: Arc::new(Semaphore::new(concurrency * 2)),
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
        Some(Slot {
            handler: Some(handler),
            lease,
        })
    }
}

impl Slot {
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
