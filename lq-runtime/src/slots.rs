//! A queue's slots: how many of its handlers may run at once (its concurrency),
//! and how many of its jobs may be leased at once ([`LEASES_PER_HANDLER`] times
//! that), so the next batch can be claimed while earlier ones' completions are
//! still being written; a claim may also take jobs ahead of the idle handlers
//! (`claim_ahead`): those wait here for a handler, with leases of their own.
//!
//! A claim reserves its leases before it is sent ([`Slots::reserve`]), so two claims
//! in flight never promise the same room; jobs waiting for a handler and leases
//! reserved count against the next claim's size.
//!
//! Slots also count the claimed jobs whose task has not started yet, so a claimer
//! with one claim in flight can wait for its last batch to start before it sizes a
//! second: short jobs then hand their handlers back first, and the second claim
//! takes a whole batch instead of the few handlers that happened to be free.

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
    /// Claimed jobs waiting for a handler.
    waiting: Arc<WaitingJobs>,
    /// Leases reserved by claims still in flight.
    claiming: Arc<AtomicUsize>,
    /// Handlers that have finished a job, ever: the claimer reads how many finished
    /// while a claim was out.
    finished: Arc<AtomicUsize>,
    /// Jobs claimed ahead that waited too long for a handler and went back, ever.
    handed_back: Arc<AtomicUsize>,
}

/// Leases set aside for one claim in flight, handed to its jobs one by one
/// ([`Slots::take_reserved`]); those it did not need go back when it is dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    leases: Option<OwnedSemaphorePermit>,
    claiming: Arc<AtomicUsize>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(left) = self.leases.take() {
            self.claiming
                .fetch_sub(left.num_permits(), Ordering::AcqRel);
        }
    }
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
    /// Held while the job waits for a handler.
    waiting: Option<Waiting>,
    /// The queue's count of finished handlers.
    finished: Arc<AtomicUsize>,
    /// The queue's count of jobs handed back after waiting too long.
    handed_back: Arc<AtomicUsize>,
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
            waiting: Arc::default(),
            claiming: Arc::default(),
            finished: Arc::default(),
            handed_back: Arc::default(),
        }
    }

    /// Jobs claimed ahead that went back to the queue after waiting too long for
    /// a handler, since the queue began (wrapping): the claimer stops claiming
    /// ahead when it grows.
    pub fn handed_back(&self) -> usize {
        self.handed_back.load(Ordering::Acquire)
    }

    /// Handlers that have finished a job since the queue began (wrapping).
    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::Acquire)
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

    /// The handlers' semaphore, to read how many are idle later.
    pub fn handlers(&self) -> Arc<Semaphore> {
        self.handlers.clone()
    }

    /// Whether some claimed job has not started yet.
    pub fn has_unstarted(&self) -> bool {
        self.unstarted.count.load(Ordering::Acquire) > 0
    }

    /// Handlers not running a job now.
    pub fn idle_handlers(&self) -> usize {
        self.handlers.available_permits()
    }

    /// How many jobs may be claimed now when `ahead` of them may wait for a
    /// handler: the idle handlers plus `ahead`, less the jobs already waiting for
    /// a handler and the leases the claims in flight reserved, and never more
    /// than the free leases.
    pub fn claimable(&self, ahead: usize) -> usize {
        let taken =
            self.waiting.count.load(Ordering::Acquire) + self.claiming.load(Ordering::Acquire);
        (self.idle_handlers() + ahead)
            .saturating_sub(taken)
            .min(self.leases.available_permits())
    }

    /// Sets `n` leases aside for a claim about to be sent; `None` if fewer are free.
    pub fn reserve(&self, n: usize) -> Option<Reservation> {
        let n32 = u32::try_from(n).ok()?;
        let leases = self.leases.clone().try_acquire_many_owned(n32).ok()?;
        self.claiming.fetch_add(n, Ordering::AcqRel);
        Some(Reservation {
            leases: Some(leases),
            claiming: self.claiming.clone(),
        })
    }

    /// A slot for one job of a claim, its lease from the claim's reservation.
    pub fn take_reserved(&self, reserved: &mut Reservation) -> Option<Slot> {
        let all = reserved.leases.as_mut()?;
        let lease = if all.num_permits() == 1 {
            reserved.leases.take()?
        } else {
            all.split(1)?
        };
        self.claiming.fetch_sub(1, Ordering::AcqRel);
        Some(self.slot(lease))
    }

    /// Waits until at least one job may be claimed: a handler and a lease free,
    /// or a job claimed ahead gone to a handler (which leaves room for another
    /// ahead). Handlers go to waiting jobs first, so without the second a claimer
    /// keeping jobs ahead would wake only once none was left.
    pub async fn wait_free(&self) {
        let free = async {
            if let Ok(p) = self.handlers.acquire().await {
                drop(p);
            }
            if let Ok(p) = self.leases.acquire().await {
                drop(p);
            }
        };
        tokio::select! {
            _ = free => {}
            _ = self.waiting.one_left.notified() => {}
        }
    }

    /// Leases free now.
    pub fn free_leases(&self) -> usize {
        self.leases.available_permits()
    }

    /// Waits until more than `floor` leases are free ([`Slots::free_leases`]
    /// read before the queue's jobs last changed hands): one of the queue's
    /// jobs here has finished and its outcome is written, so the queue runs
    /// one job fewer. Returns at once if that happened already; never while
    /// none is leased here. Only the claimer takes leases, and it waits here
    /// instead of claiming.
    pub async fn lease_freed(&self, floor: usize) {
        let more = floor.saturating_add(1);
        if let Ok(p) = self
            .leases
            .acquire_many(u32::try_from(more).unwrap_or(u32::MAX))
            .await
        {
            drop(p);
        }
    }

    /// Takes a slot for one job outside any reservation (tests only), with a
    /// handler if one is idle (else the job waits for one:
    /// [`Slot::wait_for_handler`]); `None` if no lease is free.
    #[cfg(test)]
    pub fn take(&self) -> Option<Slot> {
        let lease = self.leases.clone().try_acquire_owned().ok()?;
        Some(self.slot(lease))
    }

    /// A slot around `lease`, with a handler if one is idle.
    fn slot(&self, lease: OwnedSemaphorePermit) -> Slot {
        let handler = self.handlers.clone().try_acquire_owned().ok();
        self.unstarted.count.fetch_add(1, Ordering::AcqRel);
        let waiting = handler.is_none().then(|| Waiting::new(&self.waiting));
        Slot {
            handler,
            handlers: self.handlers.clone(),
            lease,
            unstarted: Some(NotStarted(self.unstarted.clone())),
            waiting,
            finished: self.finished.clone(),
            handed_back: self.handed_back.clone(),
        }
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
        self.waiting = None;
    }

    /// The job waited too long for a handler and goes back to the queue; counted
    /// in [`Slots::handed_back`].
    pub fn handed_back(&mut self) {
        self.handed_back.fetch_add(1, Ordering::AcqRel);
    }

    /// The job's handler is about to run; called once it has a handler.
    pub fn started(&mut self) {
        self.unstarted = None;
    }

    /// The handler is done: another may start, while the lease stays held until
    /// the outcome is written. Counted in [`Slots::finished`].
    pub fn handler_done(&mut self) {
        if self.handler.take().is_some() {
            self.finished.fetch_add(1, Ordering::AcqRel);
        }
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

/// Claimed jobs waiting for a handler, and a wake-up for the claimer each time one
/// stops waiting.
#[derive(Debug, Default)]
struct WaitingJobs {
    count: AtomicUsize,
    one_left: Notify,
}

/// One claimed job counted as waiting for a handler, until it has one or is dropped.
#[derive(Debug)]
struct Waiting(Arc<WaitingJobs>);

impl Waiting {
    fn new(jobs: &Arc<WaitingJobs>) -> Self {
        jobs.count.fetch_add(1, Ordering::AcqRel);
        Self(jobs.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::AcqRel);
        // A stored permit if the claimer is not waiting yet: no wake-up is lost.
        self.0.one_left.notify_one();
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
        assert_eq!(slots.claimable(0), 4);
        assert_eq!(slots.claimable(8), 12);
        assert_eq!(slots.claimable(100), (4 + 8) * LEASES_PER_HANDLER);
    }

    #[test]
    fn a_claim_in_flight_and_its_unstarted_jobs_count_against_the_next_claim() {
        let slots = Slots::new(4, 8);
        let mut first = slots.reserve(10).expect("leases are free");
        assert_eq!(
            slots.claimable(8),
            2,
            "12 may be taken, 10 are being claimed"
        );
        let got: Vec<Slot> = (0..6)
            .map(|_| slots.take_reserved(&mut first).unwrap())
            .collect();
        assert_eq!(slots.claimable(8), 2, "6 unstarted and 4 still reserved");
        drop(first);
        assert_eq!(
            slots.claimable(8),
            6,
            "the rows not found give their leases back"
        );
        assert_eq!(got.iter().filter(|s| s.waits_for_handler()).count(), 2);
        drop(got);
        assert_eq!(slots.claimable(8), 12);
        assert_eq!(slots.leases.available_permits(), 36);
    }

    #[test]
    fn a_reservation_hands_out_no_more_leases_than_it_holds() {
        let slots = Slots::new(2, 0);
        let mut r = slots.reserve(2).expect("leases are free");
        let _a = slots.take_reserved(&mut r).expect("the first of two");
        let _b = slots.take_reserved(&mut r).expect("the second of two");
        assert!(slots.take_reserved(&mut r).is_none());
        assert!(slots.reserve(5).is_none(), "only 4 of 6 leases are free");
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
    async fn a_claimer_at_a_global_limit_wakes_when_a_lease_comes_free() {
        let slots = Slots::new(2, 0);
        let mut reserved = slots.reserve(2).unwrap();
        let floor = slots.free_leases();
        let first = slots.take_reserved(&mut reserved).unwrap();
        let second = slots.take_reserved(&mut reserved).unwrap();
        let freed = slots.lease_freed(floor);
        tokio::pin!(freed);
        assert!(futures_util::poll!(freed.as_mut()).is_pending());
        drop(first); // its outcome written: the lease is back
        freed.await;
        // A lease that came free before the wait began is seen at once.
        drop(second);
        slots.lease_freed(floor + 1).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_claimer_keeping_jobs_ahead_wakes_when_one_gets_a_handler() {
        let slots = Slots::new(1, 2);
        let mut running = slots.take().expect("a lease");
        let mut waiting = slots.take().expect("a lease");
        assert_eq!(slots.claimable(1), 0, "one handler busy, one job ahead");
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            waiting.wait_for_handler().await;
            waiting.started();
            tx.send(waiting).unwrap();
        });
        tokio::task::yield_now().await; // the job queues for the handler
        let claimer = slots.wait_free();
        tokio::pin!(claimer);
        assert!(
            futures_util::poll!(&mut claimer).is_pending(),
            "no room yet"
        );
        running.started();
        running.handler_done();
        assert_eq!(slots.finished(), 1);
        let mut waiting = rx.await.unwrap(); // it took the handler, leaving room
        assert!(
            futures_util::poll!(&mut claimer).is_ready(),
            "the claimer wakes for the room a job ahead left"
        );
        assert_eq!(slots.claimable(1), 1);
        assert_eq!(slots.idle_handlers(), 0, "the job ahead holds the handler");
        waiting.handler_done();
        assert_eq!(slots.finished(), 2);
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
