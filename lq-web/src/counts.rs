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
    /// every live job (1.1 s at 10 million queued on the 2-core benchmark host,
    /// docs/performance.md), and the overview, the queues page and
    /// `/api/stats` each read it on every refresh of every open tab.
    pub(crate) async fn queues(&self, pool: &PgPool) -> Result<Vec<QueueInfo>, lq_core::Error> {
        if let Some(queues) = self.queues.get("") {
            return Ok(queues);
        }
        let ticket = self.queues.ticket();
        let queues = control::queues(pool).await?;
        self.queues.put(String::new(), queues.clone(), ticket);
        Ok(queues)
    }

    /// Drops every count kept, and any read in flight will not be kept: an
    /// action taken here (a pause, a retry) shows at once on the page it
    /// returns to. Changes made elsewhere (`lq`, another dashboard process)
    /// show within one refresh period.
    pub(crate) fn forget_all(&self) {
        self.by_queue.clear();
        self.by_state.clear();
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
        let ticket = self.by_queue.ticket();
        let counts = control::count(pool, filter).await?;
        self.by_queue.put(key, counts.clone(), ticket);
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
        let ticket = self.by_state.ticket();
        let counts = control::count_by_state_capped(pool, filter, TAB_CAP).await?;
        self.by_state.put(key, counts.clone(), ticket);
        Ok(counts)
    }
}

/// Values kept for `ttl` by key, at most [`MAX_ENTRIES`] at once.
struct Recent<V> {
    ttl: Duration,
    entries: Mutex<Entries<V>>,
}

/// The values, and how many times they were all dropped.
struct Entries<V> {
    generation: u64,
    by_key: HashMap<String, (Instant, V)>,
}

/// Taken before a read whose result is to be kept: when it started, and the
/// generation it started in.
struct Ticket {
    generation: u64,
    at: Instant,
}

impl<V: Clone> Recent<V> {
    /// Nothing kept yet; values kept for `ttl`.
    fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(Entries {
                generation: 0,
                by_key: HashMap::new(),
            }),
        }
    }

    /// The value kept for `key`, if it is younger than `ttl`.
    fn get(&self, key: &str) -> Option<V> {
        let entries = self.lock();
        let (at, value) = entries.by_key.get(key)?;
        (at.elapsed() < self.ttl).then(|| value.clone())
    }

    /// What [`Self::put`] needs to know of a read about to start.
    fn ticket(&self) -> Ticket {
        Ticket {
            generation: self.lock().generation,
            at: Instant::now(),
        }
    }

    /// Keeps `value`, read since `ticket` was taken, for `key`, aged from when
    /// the read started; not if everything was dropped meanwhile (the value
    /// may predate what dropped it), nor when the map is still full after
    /// dropping what has aged past `ttl` (the next look reads again).
    fn put(&self, key: String, value: V, ticket: Ticket) {
        let mut entries = self.lock();
        if entries.generation != ticket.generation {
            return;
        }
        entries.by_key.retain(|_, (at, _)| at.elapsed() < self.ttl);
        if entries.by_key.len() < MAX_ENTRIES {
            entries.by_key.insert(key, (ticket.at, value));
        }
    }

    /// Drops every value kept, and every read in flight from being kept.
    fn clear(&self) {
        let mut entries = self.lock();
        entries.generation += 1;
        entries.by_key.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries<V>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that started before everything was dropped (a pause made while
    /// another tab's refresh was counting) is not kept: it may show the queue
    /// as it was before the pause.
    #[test]
    fn a_value_read_before_everything_was_dropped_is_not_kept() {
        let recent = Recent::<u32>::new(Duration::from_secs(60));
        let before = recent.ticket();
        recent.clear();
        recent.put("k".into(), 1, before);
        assert_eq!(recent.get("k"), None);
        let after = recent.ticket();
        recent.put("k".into(), 2, after);
        assert_eq!(recent.get("k"), Some(2));
    }
}
