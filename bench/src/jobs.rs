//! The benchmark's job types: a no-op for throughput and a probe for latency.

use std::{
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use lq_runtime::{Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

static BASE: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since a process-local monotonic base (producer and worker share it).
pub fn now_ns() -> u64 {
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Does nothing: what a drain measures is the queue, not the work.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "bench.noop")]
pub struct Noop {
    /// A counter, so payloads differ.
    pub n: u64,
}

impl Perform for Noop {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Carries its enqueue instant; records when `perform` starts.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "bench.probe")]
pub struct Probe {
    /// [`now_ns`] just before the enqueue call.
    pub t_ns: u64,
}

impl Perform for Probe {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let start = now_ns();
        if let Some(sink) = ctx.try_state::<Arc<Sink>>() {
            sink.record(self.t_ns, start);
        }
        Ok(())
    }
}

/// Where probes report `(enqueued_ns, started_ns)`.
#[derive(Default)]
pub struct Sink {
    samples: Mutex<Vec<(u64, u64)>>,
    notify: Notify,
}

impl Sink {
    fn record(&self, enq: u64, start: u64) {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((enq, start));
        self.notify.notify_one();
    }

    /// Samples recorded so far.
    pub fn len(&self) -> usize {
        self.samples.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Takes every sample recorded so far.
    pub fn take(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Waits until at least `n` samples exist; false on timeout.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            if self.len() >= n {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.len() >= n;
            }
        }
    }
}

/// Realistic work: sleeps 2–5 ms (an HTTP call, a query), fails `fail_pct` % of
/// its attempts, and records how late each attempt started after its `run_at`.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "bench.work", max_attempts = 25, backoff = exponential(base = "200ms", max = "5s"))]
pub struct Work {
    pub n: u64,
    pub fail_pct: u8,
}

impl Perform for Work {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let late = (lq_runtime::chrono::Utc::now() - ctx.run_at())
            .num_microseconds()
            .unwrap_or(0);
        if let Some(w) = ctx.try_state::<Arc<Waits>>() {
            w.record(ctx.attempt(), late);
        }
        let began = Instant::now();
        tokio::time::sleep(Duration::from_micros(fastrand::u64(2_000..=5_000))).await;
        if let Some(w) = ctx.try_state::<Arc<Waits>>() {
            w.slept(began.elapsed());
        }
        if fastrand::u8(..100) < self.fail_pct {
            return Err("injected failure".into());
        }
        Ok(())
    }
}

/// How late attempts started (microseconds), first attempts apart from retries.
#[derive(Default)]
pub struct Waits {
    first: Mutex<Vec<i64>>,
    retries: Mutex<Vec<i64>>,
    /// Handler time actually spent (tokio's timer rounds sleeps up to whole
    /// milliseconds), summed, in microseconds, and the attempts it covers.
    slept: std::sync::atomic::AtomicU64,
    attempts: std::sync::atomic::AtomicU64,
}

impl Waits {
    fn slept(&self, d: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        self.slept.fetch_add(d.as_micros() as u64, Relaxed);
        self.attempts.fetch_add(1, Relaxed);
    }

    /// The mean handler time, in seconds.
    pub fn mean_handler_secs(&self) -> f64 {
        use std::sync::atomic::Ordering::Relaxed;
        self.slept.load(Relaxed) as f64 / 1e6 / self.attempts.load(Relaxed).max(1) as f64
    }

    fn record(&self, attempt: u32, late_micros: i64) {
        let v = if attempt <= 1 {
            &self.first
        } else {
            &self.retries
        };
        v.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(late_micros);
    }

    /// Takes (first attempts, retries).
    pub fn take(&self) -> (Vec<i64>, Vec<i64>) {
        let take =
            |m: &Mutex<Vec<i64>>| std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner()));
        (take(&self.first), take(&self.retries))
    }
}
