//! The `metrics` feature, read through a recorder that keeps every value (its own
//! test binary: a recorder is global to the process, so the tests share one and
//! each reads its own queue's labels): per-job counters labelled by queue, kind
//! and outcome, the wait histogram, the running gauge, the leader's queue gauges;
//! the claims that waited for a claim slot; the jobs of a claim whose answer was
//! lost, counted as released under their kind; and the per-minute rollup that
//! feeds charts.

use std::{
    collections::HashMap,
    sync::{atomic::Ordering, Arc, OnceLock},
    time::Duration,
};

use lq_core::db::claim::CLAIM_SLOT_LOCK_KEY;
use lq_runtime::{
    control, EnqueueOptions, Job, JobContext, JobError, Perform, Runtime, RuntimeConfig,
};
use lq_tests::TestDb;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(kind = "metrics.ok", queue = "metrics-q")]
struct Ok1 {
    n: u32,
}

impl Perform for Ok1 {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(kind = "metrics.failing", queue = "metrics-q", max_attempts = 2, backoff = fixed("10ms"))]
struct Failing;

impl Perform for Failing {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Err("always".into())
    }
}

/// A recorder that keeps each metric's current value: counters as totals, gauges
/// as last set, histograms as every sample. (metrics-util's debugging recorder
/// resets a gauge to zero each time it is read, so a gauge read twice reads zero
/// whatever it was set to, and a test of it could not fail.)
#[derive(Clone)]
struct Recorded(Arc<Registry<Key, AtomicStorage>>);

impl Recorder for Recorded {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

/// The process's recorder, installed by the first test that asks for it.
fn recorder() -> &'static Recorded {
    static RECORDER: OnceLock<Recorded> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorded = Recorded(Arc::new(Registry::atomic()));
        metrics::set_global_recorder(recorded.clone()).unwrap();
        recorded
    })
}

/// Held by each test while its runtime runs: `lq_leader` has no queue label, and
/// a runtime that stops zeroes it, so the tests take turns.
async fn one_runtime_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    TURN.get_or_init(Default::default).lock().await
}

/// Counters and gauges by name and sorted labels; histogram sample counts.
#[derive(Default)]
struct Seen {
    values: HashMap<String, f64>,
    samples: HashMap<String, usize>,
}

/// `name{label=value,...}`, labels sorted.
fn key_name(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Seen {
    /// Reads every metric's value now.
    fn take(&mut self, recorded: &Recorded) {
        for (key, counter) in recorded.0.get_counter_handles() {
            let value = counter.load(Ordering::SeqCst) as f64;
            self.values.insert(key_name(&key), value);
        }
        for (key, gauge) in recorded.0.get_gauge_handles() {
            let value = f64::from_bits(gauge.load(Ordering::SeqCst));
            self.values.insert(key_name(&key), value);
        }
        for (key, histogram) in recorded.0.get_histogram_handles() {
            self.samples.insert(key_name(&key), histogram.data().len());
        }
    }

    fn value(&self, name: &str) -> f64 {
        self.values.get(name).copied().unwrap_or_else(|| {
            let mut known: Vec<_> = self.values.keys().collect();
            known.sort();
            panic!("no metric {name}; have {known:#?}")
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_reports_its_jobs_by_queue_kind_and_outcome() {
    let recorded = recorder();
    let _turn = one_runtime_at_a_time().await;
    let db = TestDb::new().await;
    Ok1::enqueue_many(&db.pool, (0..5).map(|n| Ok1 { n }), EnqueueOptions::new())
        .await
        .unwrap();
    Failing.enqueue(&db.pool).await.unwrap();
    let runtime = Runtime::builder(db.pool.clone())
        .config(RuntimeConfig {
            gauge_interval: Duration::from_millis(100),
            stats_interval: Duration::from_millis(100),
            ..RuntimeConfig::default()
        })
        .queue("metrics-q", 4)
        .poll_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    db.wait_idle(Duration::from_secs(30)).await;

    // The leader's gauges: an idle queue, seen once the gauge duty has run.
    let mut seen = Seen::default();
    let idle = "lq_queue_jobs{queue=metrics-q,state=available}";
    for _ in 0..300 {
        seen.take(recorded);
        if seen.values.contains_key(idle) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen.value(idle), 0.0);
    assert_eq!(seen.value("lq_queue_paused{queue=metrics-q}"), 0.0);
    assert_eq!(seen.value("lq_leader{}"), 1.0);
    runtime.shutdown().await.unwrap();
    seen.take(recorded);

    let ok = "kind=metrics.ok";
    let failing = "kind=metrics.failing";
    assert_eq!(
        seen.value(&format!("lq_jobs_enqueued_total{{{ok},queue=metrics-q}}")),
        5.0
    );
    assert_eq!(
        seen.value(&format!(
            "lq_jobs_enqueued_total{{{failing},queue=metrics-q}}"
        )),
        1.0
    );
    let attempts = |kind: &str, outcome: &str| {
        seen.value(&format!(
            "lq_job_attempts_total{{{kind},outcome={outcome},queue=metrics-q}}"
        ))
    };
    assert_eq!(attempts(ok, "succeeded"), 5.0);
    assert_eq!(attempts(failing, "retried"), 1.0);
    assert_eq!(attempts(failing, "dead"), 1.0);
    assert_eq!(attempts(ok, "dead"), 0.0);
    assert_eq!(seen.value("lq_jobs_claimed_total{queue=metrics-q}"), 7.0);
    assert_eq!(
        seen.value(&format!("lq_jobs_running{{{ok},queue=metrics-q}}")),
        0.0
    );
    assert_eq!(
        seen.samples[&format!("lq_job_wait_seconds{{{ok},queue=metrics-q}}")],
        5
    );
    assert_eq!(
        seen.samples[&format!("lq_job_run_seconds{{{failing},queue=metrics-q}}")],
        2
    );

    // The rollup has the same counts, summed per minute, written at the latest
    // by the shutdown.
    let minutes = control::stats(&db.pool, Duration::from_secs(600))
        .await
        .unwrap();
    let sum = |kind: &str, f: fn(&control::MinuteStats) -> i64| -> i64 {
        minutes
            .iter()
            .filter(|m| m.kind == kind && m.queue == "metrics-q")
            .map(f)
            .sum()
    };
    assert_eq!(sum("metrics.ok", |m| m.succeeded), 5);
    assert_eq!(sum("metrics.ok", |m| m.started), 5);
    assert_eq!(sum("metrics.failing", |m| m.retried), 1);
    assert_eq!(sum("metrics.failing", |m| m.dead), 1);
    let buckets: i64 = minutes.iter().flat_map(|m| m.wait_buckets.iter()).sum();
    assert_eq!(buckets, 7, "one wait sample per attempt started");
}

#[derive(Serialize, Deserialize, Job)]
#[job(kind = "metrics.throttled", queue = "metrics-throttled")]
struct Throttled;

impl Perform for Throttled {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_waits_for_a_claim_slot_is_counted() {
    let recorded = recorder();
    let _turn = one_runtime_at_a_time().await;
    let db = TestDb::new().await;
    Throttled.enqueue(&db.pool).await.unwrap();
    // Both of the queue's slots taken, as two claims in flight elsewhere would.
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query(
        "select pg_advisory_xact_lock($1 + slot, hashtext($2)) from generate_series(0, 1) slot",
    )
    .bind(CLAIM_SLOT_LOCK_KEY)
    .bind("metrics-throttled")
    .execute(&mut *holder)
    .await
    .unwrap();
    let runtime = Runtime::builder(db.pool.clone())
        .queue("metrics-throttled", 2)
        .poll_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the runtime's claim to wait for a slot",
        &format!(
            "select exists (select from pg_locks where locktype = 'advisory' and not granted
                 and database = (select oid from pg_database where datname = current_database())
                 and classid::bigint between {CLAIM_SLOT_LOCK_KEY} and {CLAIM_SLOT_LOCK_KEY} + 1)"
        ),
        Duration::from_secs(60),
    )
    .await;
    holder.commit().await.unwrap();
    db.wait_idle(Duration::from_secs(60)).await;
    let throttled = runtime.stats().throttled_claims;
    runtime.shutdown().await.unwrap();
    let mut seen = Seen::default();
    seen.take(recorded);
    assert!(throttled >= 1, "the claim waited, so it was throttled");
    assert_eq!(
        seen.value("lq_claims_throttled_total{queue=metrics-throttled}"),
        throttled as f64,
        "the metric counts what the runtime's stats count"
    );
    assert_eq!(db.count("succeeded").await, 1);
}

/// One attempt, a lease long enough that the rescuer cannot take the job before
/// the hand-back; the marker lets the proxy find the claim's answer.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "metrics.lost_claim",
    queue = "metrics-lost",
    max_attempts = 1,
    lease = "20s"
)]
struct LostClaim {
    marker: String,
}

impl Perform for LostClaim {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Jobs leased by a claim whose answer was lost are handed back by the runtime
/// that minted the lease tokens; the hand-back learns their kinds, so the
/// `released` counter has them under their queue and kind, as `stats()` has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_a_claim_whose_answer_is_lost_are_counted_as_released() {
    let recorded = recorder();
    let _turn = one_runtime_at_a_time().await;
    let db = TestDb::new().await;
    let marker = "metrics-lost-claim-answer-7d21";
    LostClaim {
        marker: marker.to_owned(),
    }
    .enqueue(&db.pool)
    .await
    .unwrap();
    let server = db.pool.connect_options();
    let proxy = lq_fault::proxy::LosingProxy::start(&server, marker.as_bytes()).await;
    let through_proxy = sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .connect_with(proxy.options(&server))
        .await
        .unwrap();
    let runtime = Runtime::builder(through_proxy)
        .queue("metrics-lost", 2)
        .poll_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    db.wait_idle(Duration::from_secs(60)).await;
    let stats = runtime.shutdown_with_stats().await.unwrap();
    let mut seen = Seen::default();
    seen.take(recorded);
    assert_eq!(proxy.answers_lost(), 1, "the claim's answer was lost");
    assert_eq!(stats.released, 1, "{stats:?}");
    let attempts = |outcome: &str| {
        seen.value(&format!(
            "lq_job_attempts_total{{kind=metrics.lost_claim,outcome={outcome},queue=metrics-lost}}"
        ))
    };
    assert_eq!(
        attempts("released"),
        1.0,
        "the metric counts what stats() counts"
    );
    assert_eq!(attempts("succeeded"), 1.0);
    assert_eq!(db.count("succeeded").await, 1);
}
