//! The cluster's gauges (`metrics` feature): queue depth by state, oldest wait,
//! p99 wait and pause per queue. Only the leader sets them, every
//! `gauge_interval`, so a cluster exports one live series per queue. A runtime
//! that stops leading sets the gauges it had set to zero, so `max by (queue)`
//! and `sum by (queue)` over the cluster both give the leader's figures.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use lq_core::{chain, control, db};
use tracing::{warn, Instrument};

use crate::shared::Shared;

/// The window the p99 wait is taken over.
const P99_WINDOW: Duration = Duration::from_secs(300);

/// The gauges' query counts every live job, so it grows with the backlog (1.1 s
/// and three server processes at 10M queued jobs). The wait before the next one is
/// at least this many times the last one's duration, so it never takes more than
/// a twentieth of the time, however large the backlog.
const PACE: u32 = 20;

/// The wait before the next gauge query: `interval`, or longer after a slow one.
fn next_wait(interval: Duration, last_query: Duration) -> Duration {
    interval.max(last_query * PACE)
}

/// Sets the gauges every `gauge_interval` while this runtime leads (less often
/// when the query is slow, see [`PACE`]).
pub(crate) async fn run(shared: Arc<Shared>) {
    // Every queue this runtime has set gauges for while leading.
    let mut set_queues: BTreeSet<String> = BTreeSet::new();
    let mut last_query = Duration::ZERO;
    loop {
        if shared
            .pause(next_wait(shared.config.gauge_interval, last_query))
            .await
        {
            return;
        }
        // Read once: read twice, a leadership gained in between set `lq_leader`
        // to 0 in the same tick that set the queue gauges as leader.
        let leads = shared.is_leader();
        crate::telemetry::leader(leads);
        if !leads {
            last_query = Duration::ZERO;
            for q in std::mem::take(&mut set_queues) {
                Depth::default().set(&q);
            }
            continue;
        }
        let span = crate::telemetry::duty_span("gauges");
        let began = std::time::Instant::now();
        let result = set(&shared).instrument(span).await;
        last_query = began.elapsed();
        match result {
            Ok(now) => {
                // A queue gone from the overview (no live jobs left) reads zero,
                // not its last figures.
                for q in set_queues.difference(&now) {
                    Depth::default().set(q);
                }
                set_queues.extend(now);
            }
            Err(e) => {
                warn!(error = %chain(&e), "could not read the queues for the gauges; will retry")
            }
        }
    }
}

/// One queue's gauges.
#[derive(Default)]
struct Depth {
    available: i64,
    scheduled: i64,
    running: i64,
    oldest_wait: f64,
    paused: bool,
    p99_wait: f64,
}

impl Depth {
    fn set(&self, queue: &str) {
        let gauge = |metric: &'static str, v: f64| {
            metrics::gauge!(metric, "queue" => queue.to_owned()).set(v)
        };
        let depth = |state: &'static str, v: i64| {
            metrics::gauge!("lq_queue_jobs", "queue" => queue.to_owned(), "state" => state)
                .set(v as f64)
        };
        depth("available", self.available);
        depth("scheduled", self.scheduled);
        depth("running", self.running);
        gauge("lq_queue_oldest_wait_seconds", self.oldest_wait);
        gauge("lq_queue_paused", if self.paused { 1.0 } else { 0.0 });
        gauge("lq_queue_wait_p99_seconds", self.p99_wait);
    }
}

/// Sets the gauges of every queue with live jobs or a pause, and of the queues
/// this runtime serves; returns the queues set.
async fn set(shared: &Shared) -> Result<BTreeSet<String>, lq_core::Error> {
    let (queues, minutes) = shared
        .with_conn("queue_gauges", |mut conn| async move {
            let queues = db::queues::queue_overview(&mut conn).await?;
            let minutes =
                db::stats::stats_minute_since(&mut conn, P99_WINDOW.as_secs_f64()).await?;
            Ok((queues, minutes))
        })
        .await?;
    let mut waits: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for m in minutes {
        let sum = waits
            .entry(m.queue)
            .or_insert_with(|| vec![0; db::stats::WAIT_BUCKETS]);
        for (s, n) in sum.iter_mut().zip(&m.wait_buckets) {
            *s += n;
        }
    }
    let mut set = BTreeSet::new();
    for q in &queues {
        let depth = Depth {
            available: q.available,
            scheduled: q.scheduled,
            running: q.running,
            oldest_wait: q.oldest_available_secs.unwrap_or(0.0),
            paused: q.paused_at.is_some(),
            p99_wait: waits
                .get(&q.name)
                .and_then(|b| control::wait_quantile(b, 0.99))
                .map_or(0.0, |d| d.as_secs_f64()),
        };
        depth.set(&q.name);
        set.insert(q.name.clone());
    }
    for served in shared.wakers.keys() {
        if !set.contains(served) {
            Depth::default().set(served);
            set.insert(served.clone());
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::next_wait;

    #[test]
    fn a_slow_gauge_query_spaces_out_the_next_one() {
        let every = Duration::from_secs(15);
        assert_eq!(next_wait(every, Duration::from_millis(20)), every);
        assert_eq!(
            next_wait(every, Duration::from_millis(1100)),
            Duration::from_secs(22)
        );
        assert_eq!(
            next_wait(every, Duration::from_secs(11)),
            Duration::from_secs(220)
        );
    }
}
