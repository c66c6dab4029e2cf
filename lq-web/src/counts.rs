//! The pages' job counts, each kept for one refresh period. Counting reaches
//! into the history (`lq.finished_jobs`), the most expensive read the dashboard
//! makes, and every open tab refreshes every few seconds: with the cache it is
//! one count per filter per period, however many operators are watching. The
//! confirmation of a bulk action always counts afresh.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use lq_core::sqlx::PgPool;
use lq_core::{control, control::JobCount, JobFilter};

/// Most filters remembered at once (a page per filter an operator has open).
const MAX_ENTRIES: usize = 256;

/// Recent counts by filter.
pub(crate) struct CountCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Instant, Vec<JobCount>)>>,
}

impl CountCache {
    /// Counts are reused for `ttl`.
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::default(),
        }
    }

    /// [`control::count`] of `filter`, or its result from less than `ttl` ago.
    pub(crate) async fn count(
        &self,
        pool: &PgPool,
        filter: &JobFilter,
    ) -> Result<Vec<JobCount>, lq_core::Error> {
        let key = format!("{filter:?}");
        if let Some((at, counts)) = self.lock().get(&key) {
            if at.elapsed() < self.ttl {
                return Ok(counts.clone());
            }
        }
        let counts = control::count(pool, filter).await?;
        let mut entries = self.lock();
        entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
        if entries.len() < MAX_ENTRIES {
            entries.insert(key, (Instant::now(), counts.clone()));
        }
        Ok(counts)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Vec<JobCount>)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}
