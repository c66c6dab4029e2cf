//! Per queue and kind counts of what this runtime did, kept in atomics built
//! once at start (no lock on the job path): the source of the per-minute rollup
//! (`lq.stats_minute`, see [`crate::rollup`]) and, under the `metrics` feature,
//! of the per-job metrics, whose handles are registered here once.

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering::Relaxed},
};

use lq_core::{
    control::{wait_bucket, WAIT_BUCKET_BOUNDS},
    db::stats::{StatsDelta, WAIT_BUCKETS},
};

/// How one attempt ended, as counted (after its write committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recorded {
    Succeeded,
    /// Failed with an error and queued for a retry.
    Retried,
    /// Over its timeout, queued for a retry.
    TimedOut,
    /// Its handler panicked, queued for a retry.
    Panicked,
    Snoozed,
    Dead,
    Cancelled,
    /// The write found the lease gone: another worker owns the job.
    LeaseLost,
    /// Handed back unspent at shutdown.
    Released,
}

impl Recorded {
    /// The `outcome` label of `lq_job_attempts_total`.
    pub(crate) const fn label(self) -> &'static str {
        match self {
            Recorded::Succeeded => "succeeded",
            Recorded::Retried => "retried",
            Recorded::TimedOut => "timed_out",
            Recorded::Panicked => "panicked",
            Recorded::Snoozed => "snoozed",
            Recorded::Dead => "dead",
            Recorded::Cancelled => "cancelled",
            Recorded::LeaseLost => "lease_lost",
            Recorded::Released => "released",
        }
    }
}

/// Counts of one queue and kind since the last flush.
pub(crate) struct Tally {
    outcomes: [AtomicU64; 9],
    started: AtomicU64,
    wait_micros: AtomicU64,
    run_micros: AtomicU64,
    wait_buckets: [AtomicU64; WAIT_BUCKETS],
    #[cfg(feature = "metrics")]
    metrics: crate::telemetry::JobMetrics,
}

impl Tally {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn new(queue: &str, kind: &'static str) -> Self {
        Self {
            outcomes: Default::default(),
            started: AtomicU64::new(0),
            wait_micros: AtomicU64::new(0),
            run_micros: AtomicU64::new(0),
            wait_buckets: Default::default(),
            #[cfg(feature = "metrics")]
            metrics: crate::telemetry::JobMetrics::new(queue, kind),
        }
    }

    /// A handler started, `wait_secs` after its job was due.
    pub(crate) fn started(&self, wait_secs: f64) {
        let wait_secs = wait_secs.max(0.0);
        self.started.fetch_add(1, Relaxed);
        self.wait_micros
            .fetch_add((wait_secs * 1e6) as u64, Relaxed);
        self.wait_buckets[wait_bucket(wait_secs)].fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics.started(wait_secs);
    }

    /// The handler started by [`Tally::started`] returned after `run_secs`.
    pub(crate) fn returned(&self, run_secs: f64) {
        self.run_micros
            .fetch_add((run_secs.max(0.0) * 1e6) as u64, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics.returned(run_secs);
    }

    /// An attempt's outcome was written (or found its lease gone).
    pub(crate) fn finished(&self, outcome: Recorded) {
        self.outcomes[outcome as usize].fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics.finished(outcome);
    }

    /// Takes the counts since the last call, as a row to add to the rollup.
    fn take(&self, queue: &str, kind: &str) -> Option<StatsDelta> {
        let out = |r: Recorded| self.outcomes[r as usize].swap(0, Relaxed) as i64;
        let mut delta = StatsDelta {
            queue: queue.to_owned(),
            kind: kind.to_owned(),
            succeeded: out(Recorded::Succeeded),
            retried: out(Recorded::Retried) + out(Recorded::TimedOut) + out(Recorded::Panicked),
            snoozed: out(Recorded::Snoozed),
            dead: out(Recorded::Dead),
            cancelled: out(Recorded::Cancelled),
            started: self.started.swap(0, Relaxed) as i64,
            wait_seconds: self.wait_micros.swap(0, Relaxed) as f64 / 1e6,
            run_seconds: self.run_micros.swap(0, Relaxed) as f64 / 1e6,
            wait_buckets: [0; WAIT_BUCKETS],
        };
        for (b, n) in delta.wait_buckets.iter_mut().zip(&self.wait_buckets) {
            *b = n.swap(0, Relaxed) as i64;
        }
        // Lease losses and hand-backs are not outcomes of the job: not rolled up.
        let _ = (out(Recorded::LeaseLost), out(Recorded::Released));
        let empty = delta.succeeded
            + delta.retried
            + delta.snoozed
            + delta.dead
            + delta.cancelled
            + delta.started
            == 0;
        (!empty).then_some(delta)
    }

    /// Adds back a row that could not be written, to go with the next flush.
    fn restore(&self, d: &StatsDelta) {
        let add = |r: Recorded, n: i64| self.outcomes[r as usize].fetch_add(n as u64, Relaxed);
        add(Recorded::Succeeded, d.succeeded);
        add(Recorded::Retried, d.retried);
        add(Recorded::Snoozed, d.snoozed);
        add(Recorded::Dead, d.dead);
        add(Recorded::Cancelled, d.cancelled);
        self.started.fetch_add(d.started as u64, Relaxed);
        self.wait_micros
            .fetch_add((d.wait_seconds * 1e6) as u64, Relaxed);
        self.run_micros
            .fetch_add((d.run_seconds * 1e6) as u64, Relaxed);
        for (b, n) in self.wait_buckets.iter().zip(d.wait_buckets) {
            b.fetch_add(n as u64, Relaxed);
        }
    }
}

/// Every (queue, kind) this runtime can claim, built once at start.
#[derive(Default)]
pub(crate) struct Tallies {
    by_queue: HashMap<String, HashMap<&'static str, Tally>>,
}

impl Tallies {
    /// One tally per served queue and runnable kind.
    pub(crate) fn new<'a>(queues: impl Iterator<Item = &'a str>, kinds: &[&'static str]) -> Self {
        let by_queue = queues
            .map(|q| {
                let per_kind = kinds.iter().map(|k| (*k, Tally::new(q, k))).collect();
                (q.to_owned(), per_kind)
            })
            .collect();
        Self { by_queue }
    }

    /// The tally of `queue` and `kind`; `None` for a pair not served.
    pub(crate) fn get(&self, queue: &str, kind: &str) -> Option<&Tally> {
        self.by_queue.get(queue)?.get(kind)
    }

    /// Takes every non-empty tally as a rollup row.
    pub(crate) fn take(&self) -> Vec<StatsDelta> {
        self.by_queue
            .iter()
            .flat_map(|(q, kinds)| kinds.iter().filter_map(|(k, t)| t.take(q, k)))
            .collect()
    }

    /// Adds back rows that could not be written.
    pub(crate) fn restore(&self, deltas: &[StatsDelta]) {
        for d in deltas {
            if let Some(t) = self.get(&d.queue, &d.kind) {
                t.restore(d);
            }
        }
    }
}

// The bounds the buckets are counted with are the rollup's.
const _: () = assert!(WAIT_BUCKET_BOUNDS.len() + 1 == WAIT_BUCKETS);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_take_empties_the_tally_and_a_restore_puts_it_back() {
        let tallies = Tallies::new(["q"].into_iter(), &["k"]);
        let t = tallies.get("q", "k").unwrap();
        t.started(0.002);
        t.started(7200.0);
        t.returned(0.5);
        t.returned(1.0);
        t.finished(Recorded::Succeeded);
        t.finished(Recorded::TimedOut);
        t.finished(Recorded::LeaseLost);
        let rows = tallies.take();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.succeeded, r.retried, r.started), (1, 1, 2));
        assert_eq!((r.wait_buckets[1], r.wait_buckets[14]), (1, 1));
        assert!((r.run_seconds - 1.5).abs() < 1e-6);
        assert!(tallies.take().is_empty(), "taken once");
        tallies.restore(&rows);
        assert_eq!(tallies.take(), rows);
        assert!(tallies.get("q", "other").is_none());
    }
}
