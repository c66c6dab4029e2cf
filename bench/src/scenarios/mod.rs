//! One scenario per file; [`Ctx`] carries what they share.

pub mod curves;
pub mod drain;
pub mod enqueue_bulk;
pub mod enqueue_single;
pub mod latency;
pub mod retained;
pub mod startup;
pub mod statements;
pub mod sustained;
pub mod work;

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Result;
use lq_runtime::{Runtime, RuntimeBuilder, RuntimeConfig};
use sqlx::{postgres::PgConnectOptions, PgPool};

use crate::{ceiling::Ceiling, jobs::Sink, paired::Paired, report::Report};

/// The queue every scenario uses, and the concurrency the benchmark documents as
/// its default: concurrency is the user's per-queue setting (there is no default).
pub const QUEUE: &str = "default";
pub const DEFAULT_CONCURRENCY: usize = 100;

/// What the scenarios share.
pub struct Ctx {
    pub opts: PgConnectOptions,
    /// Harness pool on the benchmark database (setup and sampling only).
    pub pool: PgPool,
    pub quick: bool,
    /// Drain: only the shipped defaults (3a), no sweep and no 3b; for paired
    /// comparisons of two builds, where 3a is the row that matters.
    pub no_sweep: bool,
    pub ceiling: Option<Ceiling>,
    /// pgbench runs of the ceiling's enqueue statements beside each enqueue run.
    pub paired: Option<Paired>,
    pub report: Report,
    /// The drain rate sustained load is a fraction of, and where it comes from: the
    /// shipped-defaults median when every such run finished, else the fastest
    /// finished run of the sweep.
    pub sustain_base: Option<(f64, String)>,
    /// Best settings found by the sweep (scenario 3b) and their median rate.
    pub best: Option<(drain::Settings, f64)>,
}

/// /proc/loadavg's three averages.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Prints what is about to be measured with the machine's load; returns the load.
pub fn announce(what: &str) -> String {
    let l = load();
    let t = crate::jobs::now_ns() as f64 / 1e9;
    println!("[{t:7.1}s] {what} (load {l}; other processes may have been running)");
    l
}

/// Runs `producers` tasks, each calling `op(producer, n)` for n = 0, 1, … one call
/// at a time until `secs` have passed; returns the calls per second of all of them.
pub async fn closed_loop<F, Fut>(producers: u32, secs: f64, op: F) -> Result<f64>
where
    F: Fn(u32, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..producers {
        let op = op.clone();
        tasks.spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                op(p, n).await?;
                n += 1;
            }
            anyhow::Ok(n)
        });
    }
    let mut total = 0;
    while let Some(r) = tasks.join_next().await {
        total += r??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// Starts a runtime serving [`QUEUE`] with `concurrency` slots.
pub async fn start_runtime(
    pool: PgPool,
    concurrency: usize,
    config: RuntimeConfig,
    sink: Option<Arc<Sink>>,
) -> Result<Runtime> {
    let mut b = Runtime::builder(pool)
        .queue(QUEUE, concurrency)
        .config(config);
    b = with_diagnosis_limits(b);
    if let Some(s) = sink {
        b = b.state(s);
    }
    Ok(b.start().await?)
}

/// For pricing the limits across runtimes only: `LQ_BENCH_GLOBAL_LIMIT=N` puts
/// a global limit of `N` on the bench's queue (`N` at least the concurrency
/// runs as many jobs at once as none), `LQ_BENCH_RATE_LIMIT=N` a rate limit of
/// `N` jobs a second (a bucket of `N`).
pub(crate) fn with_diagnosis_limits(mut b: RuntimeBuilder) -> RuntimeBuilder {
    let knob = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    if let Some(n) = knob("LQ_BENCH_GLOBAL_LIMIT") {
        b = b.global_limit(QUEUE, n);
    }
    if let Some(n) = knob("LQ_BENCH_RATE_LIMIT") {
        b = b.rate_limit(QUEUE, lq_runtime::RateLimit::per_second(n));
    }
    b
}
