//! The metrics publisher (`metrics` feature): every second, and once more at
//! shutdown, turns what the tallies counted since its last look into the per-job
//! metrics: `lq_job_attempts_total` by outcome, `lq_jobs_running`, and the
//! `lq_job_wait_seconds` / `lq_job_run_seconds` histograms (recorded per
//! bucket, at the bucket's upper bound of `control::WAIT_BUCKET_BOUNDS`). The job
//! path itself only adds to atomics: no registry lookup, no histogram sample,
//! no contended float update per job.

use std::{collections::HashMap, sync::Arc, time::Duration};

use lq_core::control::WAIT_BUCKET_BOUNDS;

use crate::{
    shared::Shared,
    tally::{Counts, LastSeen, Recorded, OUTCOMES},
};

/// How often the metrics catch up with the tallies.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// The value a sample of bucket `i` is recorded at: its upper bound; for the
/// last bucket (over an hour), two hours.
fn bucket_value(i: usize) -> f64 {
    WAIT_BUCKET_BOUNDS
        .get(i)
        .copied()
        .unwrap_or(2.0 * WAIT_BUCKET_BOUNDS[WAIT_BUCKET_BOUNDS.len() - 1])
}

/// The metric handles of one queue and kind, registered once.
struct JobMetrics {
    attempts: [metrics::Counter; OUTCOMES],
    running: metrics::Gauge,
    wait: metrics::Histogram,
    run: metrics::Histogram,
}

impl JobMetrics {
    fn new(queue: &str, kind: &'static str) -> Self {
        let labels = |o: Recorded| {
            [
                ("queue", queue.to_owned()),
                ("kind", kind.to_owned()),
                ("outcome", o.label().to_owned()),
            ]
        };
        Self {
            attempts: Recorded::ALL.map(|o| metrics::counter!("lq_job_attempts_total", &labels(o))),
            running: metrics::gauge!("lq_jobs_running", "queue" => queue.to_owned(), "kind" => kind),
            wait: metrics::histogram!("lq_job_wait_seconds", "queue" => queue.to_owned(), "kind" => kind),
            run: metrics::histogram!("lq_job_run_seconds", "queue" => queue.to_owned(), "kind" => kind),
        }
    }

    fn publish(&self, grown: &Counts, now: &Counts) {
        for (counter, n) in self.attempts.iter().zip(grown.outcomes) {
            if n > 0 {
                counter.increment(n);
            }
        }
        self.running
            .set(now.started.saturating_sub(now.returned) as f64);
        for (i, n) in grown.wait_buckets.iter().enumerate() {
            if *n > 0 {
                self.wait.record_many(bucket_value(i), *n as usize);
            }
        }
        for (i, n) in grown.run_buckets.iter().enumerate() {
            if *n > 0 {
                self.run.record_many(bucket_value(i), *n as usize);
            }
        }
    }
}

/// What the publisher has published, and its handles.
#[derive(Default)]
pub(crate) struct Published {
    seen: LastSeen,
    handles: HashMap<(String, &'static str), JobMetrics>,
}

/// Publishes every second until the runtime stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    loop {
        if shared.pause(PUBLISH_EVERY).await {
            return;
        }
        publish(&shared);
    }
}

/// Publishes what the tallies counted since the last call.
pub(crate) fn publish(shared: &Shared) {
    let mut published = shared
        .metrics_published
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let Published { seen, handles } = &mut *published;
    for (queue, kind, grown, now) in seen.growth(&shared.tallies) {
        let key = (queue, kind);
        let metrics = handles
            .entry(key.clone())
            .or_insert_with(|| JobMetrics::new(&key.0, key.1));
        metrics.publish(&grown, &now);
        seen.advance(key.0, key.1, now);
    }
}
