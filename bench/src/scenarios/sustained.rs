//! Scenario 4: producers at a fixed offered load (about 50 % and 90 % of the drain
//! rate) against a runtime with shipped defaults. Every 10 s: completion rate,
//! queue depth, dead tuples, vacuums finished, CPU of PostgreSQL and of this
//! process, and how many of the table's block reads found shared buffers, so a
//! falling rate can be traced to what the server spent its time on.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Result;
use lq_runtime::{EnqueueOptions, Job, RuntimeConfig};
use serde_json::{json, Value};

use super::{announce, drain, start_runtime, Ctx, DEFAULT_CONCURRENCY};
use crate::{
    cpu::CpuSnap,
    db,
    jobs::Noop,
    stats::{thousands, Spread},
};

const WINDOW: Duration = Duration::from_secs(10);

/// Runs per level: like every other figure, a median of three with the spread.
const RUNS: usize = 3;

/// One 120 s run of one level.
struct LevelRun {
    offered: f64,
    first: f64,
    last: f64,
    samples: Vec<Value>,
    load: String,
}

/// Each run's offered load is a fraction of a drain run right before it: this
/// host's speed drifts by up to 2× within a full run, and a rate measured ten
/// minutes earlier can exceed what the server does by the time the level starts.
pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let secs = if ctx.quick { 30 } else { 120 };
    for frac in [0.5, 0.9] {
        let mut runs = Vec::new();
        for run in 1..=RUNS {
            let n = drain::backlog(ctx.quick);
            let s = drain::Settings::defaults();
            let why = format!(
                "to set the offered load of the {:.0} % level, run {run}/{RUNS}",
                frac * 100.0
            );
            let drain_rate = drain::once(ctx, n, s, None, &why).await?.rate;
            runs.push(level(ctx, frac, drain_rate * frac, secs).await?);
        }
        report(ctx, frac, secs, &runs);
    }
    if let Some((rate, from)) = &ctx.sustain_base {
        ctx.report.note(format!(
            "4.: offered load = fraction of one drain with shipped defaults run right before each run (earlier in this run, {from}: {rate:.0} jobs/s)"
        ));
    }
    Ok(())
}

fn report(ctx: &mut Ctx, frac: f64, secs: u64, runs: &[LevelRun]) {
    let ratio = Spread::of(&runs.iter().map(|r| r.last / r.first).collect::<Vec<_>>());
    let offered = Spread::of(&runs.iter().map(|r| r.offered).collect::<Vec<_>>());
    let first = Spread::of(&runs.iter().map(|r| r.first).collect::<Vec<_>>());
    let last = Spread::of(&runs.iter().map(|r| r.last).collect::<Vec<_>>());
    let most_depth = runs
        .iter()
        .flat_map(|r| &r.samples)
        .filter_map(|s| s["queue_depth"].as_i64())
        .max()
        .unwrap_or(0);
    let name = format!(
        "4. sustained {:.0} % of drain, {secs} s, {} runs",
        frac * 100.0,
        runs.len()
    );
    ctx.report.row(
        &name,
        format!(
            "last ÷ first 10 s {}; offered {}; first 10 s {}, last 10 s {}; queue depth at most {}",
            ratio.plain(2),
            offered.rate(),
            first.rate(),
            last.rate(),
            thousands(most_depth as f64)
        ),
        "its own first 10 s (target ratio ≥ 0.90)",
        Some(ratio.median),
    );
    for (i, r) in runs.iter().enumerate() {
        let series: Vec<String> = r.samples.iter().map(describe).collect();
        ctx.report.note(format!(
            "{name}, run {}: {}/s offered — every 10 s: {}",
            i + 1,
            thousands(r.offered),
            series.join("; ")
        ));
    }
    let details: Vec<Value> = runs
        .iter()
        .map(|r| json!({ "offered_per_s": r.offered, "load": r.load, "samples": r.samples }))
        .collect();
    ctx.report.detail(
        &name,
        json!({ "secs": secs, "ratio": ratio.json(), "runs": details }),
    );
}

/// One 10 s sample as a line of the notes.
fn describe(s: &Value) -> String {
    format!(
        "{}s: {}/s, depth {}, dead {}, vacuums {}, postgres {:.2} cores, heap/index hits {} / {} %",
        s["t_s"],
        thousands(rate_at(s)),
        s["queue_depth"],
        s["n_dead_tup"],
        s["vacuums"],
        s["cpu_cores_postgres"].as_f64().unwrap_or(f64::NAN),
        s["heap_hit_pct"],
        s["idx_hit_pct"]
    )
}

fn rate_at(s: &Value) -> f64 {
    s["completed_per_s"].as_f64().unwrap_or(f64::NAN)
}

/// Share of block reads that found shared buffers, in percent to one decimal.
fn hit_pct(hit: i64, read: i64) -> f64 {
    match hit + read {
        0 => 100.0,
        all => (1000.0 * hit as f64 / all as f64).round() / 10.0,
    }
}

async fn level(ctx: &mut Ctx, frac: f64, rate: f64, secs: u64) -> Result<LevelRun> {
    db::reset(&ctx.pool, None).await?;
    let load = announce(&format!(
        "sustained: {:.0} jobs/s offered ({:.0} % of drain) for {secs} s",
        rate,
        frac * 100.0
    ));
    let rt_pool = db::runtime_pool(&ctx.opts).await?;
    let rt = start_runtime(
        rt_pool.clone(),
        DEFAULT_CONCURRENCY,
        RuntimeConfig::default(),
        None,
    )
    .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let producer = {
        let (stop, sent, pool) = (stop.clone(), sent.clone(), db::pool(&ctx.opts, 1).await?);
        tokio::spawn(async move {
            let t0 = Instant::now();
            let mut n = 0u64;
            while !stop.load(Relaxed) {
                let due = (rate * t0.elapsed().as_secs_f64()) as u64;
                while n < due {
                    let k = (due - n).min(1000);
                    Noop::enqueue_many(
                        &pool,
                        (n..n + k).map(|n| Noop { n }),
                        EnqueueOptions::new(),
                    )
                    .await?;
                    n += k;
                    sent.store(n, Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            pool.close().await;
            anyhow::Ok(())
        })
    };
    let t0 = tokio::time::Instant::now();
    let mut samples = Vec::new();
    let mut prev = 0u64;
    let mut prev_stats = db::table_stats(&ctx.pool).await?;
    let mut prev_cpu = CpuSnap::now();
    for i in 1..=secs / WINDOW.as_secs() {
        tokio::time::sleep_until(t0 + WINDOW * i as u32).await;
        let done = rt.stats().succeeded;
        let cpu = CpuSnap::now();
        let (bench_cpu, pg_cpu) = cpu.since(&prev_cpu);
        let depth = db::depth(&ctx.pool).await?;
        let st = db::table_stats(&ctx.pool).await?;
        let window = WINDOW.as_secs_f64();
        let s = json!({
            "t_s": i * WINDOW.as_secs(), "completed_per_s": (done - prev) as f64 / window,
            "offered_total": sent.load(Relaxed), "succeeded_total": done, "queue_depth": depth,
            "n_live_tup": st.live, "n_dead_tup": st.dead,
            "vacuums": st.vacuums - prev_stats.vacuums,
            "cpu_cores_bench": bench_cpu / window, "cpu_cores_postgres": pg_cpu / window,
            "heap_hit_pct": hit_pct(st.heap_hit - prev_stats.heap_hit, st.heap_read - prev_stats.heap_read),
            "idx_hit_pct": hit_pct(st.idx_hit - prev_stats.idx_hit, st.idx_read - prev_stats.idx_read),
            "blocks_read_per_s": ((st.heap_read - prev_stats.heap_read) + (st.idx_read - prev_stats.idx_read)) as f64 / window,
        });
        println!("    {s}");
        samples.push(s);
        prev = done;
        prev_stats = st;
        prev_cpu = cpu;
    }
    stop.store(true, Relaxed);
    producer.await??;
    rt.shutdown().await?;
    rt_pool.close().await;

    let (first, last) = (
        samples.first().map_or(f64::NAN, rate_at),
        samples.last().map_or(f64::NAN, rate_at),
    );
    Ok(LevelRun {
        offered: rate,
        first,
        last,
        samples,
        load,
    })
}
