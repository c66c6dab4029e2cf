//! Per queue and kind counts of what this runtime did, in atomics built once at
//! start: the job path only adds to them (relaxed, no lock, no allocation).
//! Every count only grows; each reader keeps the counts it last used and takes
//! the difference: the per-minute rollup ([`crate::rollup`]) and, under the
//! `metrics` feature, the metrics publisher ([`crate::publisher`]), so neither
//! the facade's registry nor its histograms are touched per job.

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
    /// Handed back unspent: at shutdown, after waiting too long for a handler, or
    /// leased by a claim whose answer was lost.
    Released,
}

/// How many kinds of [`Recorded`] there are.
pub(crate) const OUTCOMES: usize = 9;

impl Recorded {
    /// Every outcome, in declaration order (its index in the counts).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) const ALL: [Recorded; OUTCOMES] = [
        Recorded::Succeeded,
        Recorded::Retried,
        Recorded::TimedOut,
        Recorded::Panicked,
        Recorded::Snoozed,
        Recorded::Dead,
        Recorded::Cancelled,
        Recorded::LeaseLost,
        Recorded::Released,
    ];

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

/// The counts of one queue and kind since start, read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Counts {
    pub outcomes: [u64; OUTCOMES],
    pub started: u64,
    pub returned: u64,
    pub wait_micros: u64,
    pub run_micros: u64,
    pub wait_buckets: [u64; WAIT_BUCKETS],
    pub run_buckets: [u64; WAIT_BUCKETS],
}

impl Counts {
    /// What grew from `before` to `self`.
    pub(crate) fn since(&self, before: &Counts) -> Counts {
        let sub = |a: u64, b: u64| a.saturating_sub(b);
        let mut d = Counts {
            started: sub(self.started, before.started),
            returned: sub(self.returned, before.returned),
            wait_micros: sub(self.wait_micros, before.wait_micros),
            run_micros: sub(self.run_micros, before.run_micros),
            ..Counts::default()
        };
        for i in 0..OUTCOMES {
            d.outcomes[i] = sub(self.outcomes[i], before.outcomes[i]);
        }
        for i in 0..WAIT_BUCKETS {
            d.wait_buckets[i] = sub(self.wait_buckets[i], before.wait_buckets[i]);
            d.run_buckets[i] = sub(self.run_buckets[i], before.run_buckets[i]);
        }
        d
    }

    /// This difference as a row to add to the rollup; `None` when nothing happened.
    pub(crate) fn to_rollup(self, queue: &str, kind: &str) -> Option<StatsDelta> {
        let out = |r: Recorded| self.outcomes[r as usize] as i64;
        let delta = StatsDelta {
            queue: queue.to_owned(),
            kind: kind.to_owned(),
            succeeded: out(Recorded::Succeeded),
            retried: out(Recorded::Retried) + out(Recorded::TimedOut) + out(Recorded::Panicked),
            snoozed: out(Recorded::Snoozed),
            dead: out(Recorded::Dead),
            cancelled: out(Recorded::Cancelled),
            started: self.started as i64,
            wait_seconds: self.wait_micros as f64 / 1e6,
            run_seconds: self.run_micros as f64 / 1e6,
            wait_buckets: self.wait_buckets.map(|n| n as i64),
        };
        // Lease losses and hand-backs are not outcomes of the job: not rolled up.
        let empty = delta.succeeded
            + delta.retried
            + delta.snoozed
            + delta.dead
            + delta.cancelled
            + delta.started
            == 0;
        (!empty).then_some(delta)
    }
}

/// The counts of one queue and kind.
#[derive(Default)]
pub(crate) struct Tally {
    outcomes: [AtomicU64; OUTCOMES],
    started: AtomicU64,
    returned: AtomicU64,
    wait_micros: AtomicU64,
    run_micros: AtomicU64,
    wait_buckets: [AtomicU64; WAIT_BUCKETS],
    /// Only the metrics' run-time histogram uses these.
    #[cfg(feature = "metrics")]
    run_buckets: [AtomicU64; WAIT_BUCKETS],
}

impl Tally {
    /// A handler started, `wait_secs` after its job was due.
    pub(crate) fn started(&self, wait_secs: f64) {
        let wait_secs = wait_secs.max(0.0);
        self.started.fetch_add(1, Relaxed);
        self.wait_micros
            .fetch_add((wait_secs * 1e6) as u64, Relaxed);
        self.wait_buckets[wait_bucket(wait_secs)].fetch_add(1, Relaxed);
    }

    /// The handler started by [`Tally::started`] returned after `run_secs`.
    pub(crate) fn returned(&self, run_secs: f64) {
        let run_secs = run_secs.max(0.0);
        self.returned.fetch_add(1, Relaxed);
        self.run_micros.fetch_add((run_secs * 1e6) as u64, Relaxed);
        #[cfg(feature = "metrics")]
        self.run_buckets[wait_bucket(run_secs)].fetch_add(1, Relaxed);
    }

    /// An attempt's outcome was written (or found its lease gone).
    pub(crate) fn finished(&self, outcome: Recorded) {
        self.outcomes[outcome as usize].fetch_add(1, Relaxed);
    }

    /// Every count, now.
    pub(crate) fn read(&self) -> Counts {
        let mut c = Counts {
            started: self.started.load(Relaxed),
            returned: self.returned.load(Relaxed),
            wait_micros: self.wait_micros.load(Relaxed),
            run_micros: self.run_micros.load(Relaxed),
            ..Counts::default()
        };
        for (n, a) in c.outcomes.iter_mut().zip(&self.outcomes) {
            *n = a.load(Relaxed);
        }
        for (n, a) in c.wait_buckets.iter_mut().zip(&self.wait_buckets) {
            *n = a.load(Relaxed);
        }
        #[cfg(feature = "metrics")]
        for (n, a) in c.run_buckets.iter_mut().zip(&self.run_buckets) {
            *n = a.load(Relaxed);
        }
        c
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
                let per_kind = kinds.iter().map(|k| (*k, Tally::default())).collect();
                (q.to_owned(), per_kind)
            })
            .collect();
        Self { by_queue }
    }

    /// The tally of `queue` and `kind`; `None` for a pair not served.
    pub(crate) fn get(&self, queue: &str, kind: &str) -> Option<&Tally> {
        self.by_queue.get(queue)?.get(kind)
    }

    /// Every tally with its queue and kind.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &'static str, &Tally)> {
        self.by_queue
            .iter()
            .flat_map(|(q, kinds)| kinds.iter().map(move |(k, t)| (q.as_str(), *k, t)))
    }
}

/// What a reader saw last of each tally, to take differences against.
#[derive(Default)]
pub(crate) struct LastSeen(HashMap<(String, &'static str), Counts>);

impl LastSeen {
    /// For each tally, what grew since the last [`LastSeen::advance`], and the
    /// counts now (to pass to `advance` once the difference is used).
    pub(crate) fn growth(&self, tallies: &Tallies) -> Vec<(String, &'static str, Counts, Counts)> {
        tallies
            .iter()
            .map(|(q, k, t)| {
                let now = t.read();
                let before = self.0.get(&(q.to_owned(), k)).copied().unwrap_or_default();
                (q.to_owned(), k, now.since(&before), now)
            })
            .collect()
    }

    /// Records `now` as seen for `queue` and `kind`.
    pub(crate) fn advance(&mut self, queue: String, kind: &'static str, now: Counts) {
        self.0.insert((queue, kind), now);
    }
}

// The bounds the buckets are counted with are the rollup's.
const _: () = assert!(WAIT_BUCKET_BOUNDS.len() + 1 == WAIT_BUCKETS);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_growth_once_and_again_until_it_advances() {
        let tallies = Tallies::new(["q"].into_iter(), &["k"]);
        let t = tallies.get("q", "k").unwrap();
        t.started(0.002);
        t.started(7200.0);
        t.returned(0.5);
        t.returned(1.0);
        t.finished(Recorded::Succeeded);
        t.finished(Recorded::TimedOut);
        t.finished(Recorded::LeaseLost);
        let mut seen = LastSeen::default();
        let grown = seen.growth(&tallies);
        let (_, _, delta, now) = grown[0].clone();
        let row = delta.to_rollup("q", "k").unwrap();
        assert_eq!((row.succeeded, row.retried, row.started), (1, 1, 2));
        assert_eq!((row.wait_buckets[1], row.wait_buckets[14]), (1, 1));
        assert!((row.run_seconds - 1.5).abs() < 1e-6);
        // Not advanced (the write failed): the same growth is seen again.
        assert_eq!(seen.growth(&tallies)[0].2, delta);
        seen.advance("q".into(), "k", now);
        assert!(seen.growth(&tallies)[0].2.to_rollup("q", "k").is_none());
        t.finished(Recorded::Dead);
        assert_eq!(
            seen.growth(&tallies)[0].2.to_rollup("q", "k").unwrap().dead,
            1
        );
        assert!(tallies.get("q", "other").is_none());
    }
}
