//! The pages' job counts, each kept for one refresh period. Counting reaches
//! into the history (`lq.finished_jobs`), the most expensive read the dashboard
//! makes, and every open tab refreshes every few seconds: with the cache it is
//! one count per filter per period, however many operators are watching. The
//! jobs page's state tabs count each state only up to [`TAB_CAP`], through the
//! state's partial index where it has one, so a history of millions does not
//! make every refresh read it all. The confirmation of a bulk action always
//! counts afresh, exactly.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use lq_core::sqlx::PgPool;
use lq_core::{
    control,
    control::{JobCount, QueueInfo, StateCount},
    JobFilter,
};

/// Most filters remembered at once, of each kind (a page per filter an
/// operator has open).
const MAX_ENTRIES: usize = 256;

/// The state tabs count each state exactly up to this, then show "10,000+":
/// an exact count of a history of 86 million jobs (a day at 1,000 a second)
/// reads every row on each refresh, and one past the control calls' 30 s bound
/// would fail the page.
pub(crate) const TAB_CAP: u64 = 10_000;

/// Recent counts by filter, and the queues' live counts.
pub(crate) struct CountCache {
    by_queue: Recent<Vec<JobCount>>,
    by_state: Recent<Vec<StateCount>>,
    queues: Recent<Vec<QueueInfo>>,
}

impl CountCache {
    /// Counts are reused for `ttl`.
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            by_queue: Recent::new(ttl),
            by_state: Recent::new(ttl),
            queues: Recent::new(ttl),
        }
    }

    /// [`control::queues`], or its result from less than `ttl` ago. It counts
    /// every live job (about a second at 10 million queued, on the 2-core
    /// benchmark host), and the overview, the queues page and `/api/stats`
    /// each read it on every refresh of every open tab.
    pub(crate) async fn queues(&self, pool: &PgPool) -> Result<Vec<QueueInfo>, lq_core::Error> {
        if let Some(queues) = self.queues.get("") {
            return Ok(queues);
        }
        let queues = control::queues(pool).await?;
        self.queues.put(String::new(), queues.clone());
        Ok(queues)
    }

    /// Drops the kept [`Self::queues`]: a pause or resume made here shows at
    /// once on the page it returns to.
    pub(crate) fn forget_queues(&self) {
        self.queues.clear();
    }

    /// [`control::count`] of `filter`, or its result from less than `ttl` ago.
    pub(crate) async fn count(
        &self,
        pool: &PgPool,
        filter: &JobFilter,
    ) -> Result<Vec<JobCount>, lq_core::Error> {
        let key = format!("{filter:?}");
        if let Some(counts) = self.by_queue.get(&key) {
            return Ok(counts);
        }
        let counts = control::count(pool, filter).await?;
        self.by_queue.put(key, counts.clone());
        Ok(counts)
    }

    /// [`control::count_by_state_capped`] of `filter` at [`TAB_CAP`], or its
    /// result from less than `ttl` ago.
    pub(crate) async fn count_by_state(
        &self,
        pool: &PgPool,
        filter: &JobFilter,
    ) -> Result<Vec<StateCount>, lq_core::Error> {
        let key = format!("{filter:?}");
        if let Some(counts) = self.by_state.get(&key) {
            return Ok(counts);
        }
        let counts = control::count_by_state_capped(pool, filter, TAB_CAP).await?;
        self.by_state.put(key, counts.clone());
        Ok(counts)
    }
}

/// Values kept for `ttl` by key, at most [`MAX_ENTRIES`] at once.
struct Recent<V> {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Instant, V)>>,
}

impl<V: Clone> Recent<V> {
    /// Nothing kept yet; values kept for `ttl`.
    fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::default(),
        }
    }

    /// The value kept for `key`, if it is younger than `ttl`.
    fn get(&self, key: &str) -> Option<V> {
        let entries = self.lock();
        let (at, value) = entries.get(key)?;
        (at.elapsed() < self.ttl).then(|| value.clone())
    }

    /// Keeps `value` for `key`, dropping what has aged past `ttl`; when the
    /// map is still full, nothing is kept (the next look counts again).
    fn put(&self, key: String, value: V) {
        let mut entries = self.lock();
        entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
        if entries.len() < MAX_ENTRIES {
            entries.insert(key, (Instant::now(), value));
        }
    }

    /// Forgets every value kept.
    fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, V)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}
