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
