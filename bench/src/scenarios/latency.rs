//! Scenario 5: latency from the enqueue call to the start of `perform`, serial and
//! open loop, with LISTEN/NOTIFY and poll-only (`.notify(false)`, 1 s poll).

use std::{collections::HashMap, sync::Arc, time::Duration};

use anyhow::{bail, Result};
use lq_runtime::{EnqueueOptions, Job, Runtime, RuntimeConfig};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::task::JoinSet;

use super::{announce, start_runtime, Ctx, DEFAULT_CONCURRENCY};
use crate::{
    db,
    jobs::{now_ns, Probe, Sink},
    stats::{percentile, Spread},
};

/// One latency measurement, in milliseconds.
#[derive(Debug, Clone)]
pub struct LatRun {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub n: usize,
    /// Time inside the enqueue call (insert + commit), p50.
    pub enqueue_p50: f64,
    /// From the enqueue call's return (the commit) to perform start: p50 and p99.
    pub after_commit_p50: f64,
    pub after_commit_p99: f64,
    pub load: String,
}

/// `samples` are (enqueued, started) from the sink; `returned` maps each
/// enqueue instant to the instant its enqueue call returned.
fn summarize(samples: &[(u64, u64)], returned: &HashMap<u64, u64>, load: String) -> LatRun {
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let ms = sorted(
        samples
            .iter()
            .map(|(e, s)| s.saturating_sub(*e) as f64 / 1e6)
            .collect(),
    );
    let after = sorted(
        samples
            .iter()
            .filter_map(|(e, s)| returned.get(e).map(|r| s.saturating_sub(*r) as f64 / 1e6))
            .collect(),
    );
    let enq = sorted(
        returned
            .iter()
            .map(|(e, r)| r.saturating_sub(*e) as f64 / 1e6)
            .collect(),
    );
    let r = LatRun {
        p50: percentile(&ms, 50.0),
        p99: percentile(&ms, 99.0),
        max: percentile(&ms, 100.0),
        n: ms.len(),
        enqueue_p50: percentile(&enq, 50.0),
        after_commit_p50: percentile(&after, 50.0),
        after_commit_p99: percentile(&after, 99.0),
        load,
    };
    println!(
        "    {} samples: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms; enqueue call p50 {:.3} ms; after commit p50 {:.3} p99 {:.3} ms",
        r.n, r.p50, r.p99, r.max, r.enqueue_p50, r.after_commit_p50, r.after_commit_p99
    );
    r
}

fn opts(notify: bool) -> EnqueueOptions {
    EnqueueOptions::new().notify(notify)
}

/// A runtime with shipped defaults and a producer pool, warmed up with a few probes.
async fn setup(ctx: &Ctx) -> Result<(Runtime, Arc<Sink>, PgPool, PgPool)> {
    let sink = Arc::new(Sink::default());
    let rt_pool = db::runtime_pool(&ctx.opts).await?;
    let rt = start_runtime(
        rt_pool.clone(),
        DEFAULT_CONCURRENCY,
        RuntimeConfig::default(),
        Some(sink.clone()),
    )
    .await?;
    let prod = db::pool(&ctx.opts, 8).await?;
    for i in 0..20 {
        Probe { t_ns: now_ns() }.enqueue(&prod).await?;
        if !sink.wait_for(i + 1, Duration::from_secs(5)).await {
            bail!("warm-up probe not performed within 5 s");
        }
    }
    sink.take();
    Ok((rt, sink, rt_pool, prod))
}

async fn teardown(rt: Runtime, rt_pool: PgPool, prod: PgPool) -> Result<()> {
    rt.shutdown().await?;
    rt_pool.close().await;
    prod.close().await;
    Ok(())
}

/// Enqueue one, wait until its `perform` started, next.
pub async fn serial(
    ctx: &Ctx,
    n: usize,
    notify: bool,
    keep_upto: Option<i64>,
    what: &str,
) -> Result<LatRun> {
    db::reset(&ctx.pool, keep_upto).await?;
    let (rt, sink, rt_pool, prod) = setup(ctx).await?;
    let load = announce(&format!(
        "latency serial, {n} samples, notify {notify} ({what})"
    ));
    let mut returned = HashMap::new();
    for i in 0..n {
        let t = now_ns();
        Probe { t_ns: t }.enqueue_with(&prod, opts(notify)).await?;
        returned.insert(t, now_ns());
        if !sink.wait_for(i + 1, Duration::from_secs(10)).await {
            bail!("probe {i} not performed within 10 s");
        }
    }
    let r = summarize(&sink.take(), &returned, load);
    teardown(rt, rt_pool, prod).await?;
    Ok(r)
}

/// Enqueues at a fixed rate whatever the worker does (each enqueue its own task).
pub async fn open_loop(
    ctx: &Ctx,
    rate: f64,
    secs: f64,
    notify: bool,
    keep_upto: Option<i64>,
    what: &str,
) -> Result<LatRun> {
    db::reset(&ctx.pool, keep_upto).await?;
    let (rt, sink, rt_pool, prod) = setup(ctx).await?;
    let load = announce(&format!(
        "latency open loop, {rate:.0} jobs/s for {secs} s, notify {notify} ({what})"
    ));
    let total = (rate * secs) as usize;
    let mut returned = HashMap::new();
    let t0 = tokio::time::Instant::now();
    let mut tasks = JoinSet::new();
    for k in 0..total {
        tokio::time::sleep_until(t0 + Duration::from_secs_f64(k as f64 / rate)).await;
        let prod = prod.clone();
        tasks.spawn(async move {
            let t = now_ns();
            Probe { t_ns: t }.enqueue_with(&prod, opts(notify)).await?;
            anyhow::Ok((t, now_ns()))
        });
        while let Some(r) = tasks.try_join_next() {
            let (t, back) = r??;
            returned.insert(t, back);
        }
    }
    while let Some(r) = tasks.join_next().await {
        let (t, back) = r??;
        returned.insert(t, back);
    }
    if !sink.wait_for(total, Duration::from_secs(30)).await {
        bail!("only {} of {total} probes performed", sink.len());
    }
    let r = summarize(&sink.take(), &returned, load);
    teardown(rt, rt_pool, prod).await?;
    Ok(r)
}

/// Adds a table row for a set of runs, with `ratio` against `reference` if any.
pub fn report(ctx: &mut Ctx, name: &str, runs: &[LatRun], reference: &str, ratio: Option<f64>) {
    let p50 = Spread::of(&runs.iter().map(|r| r.p50).collect::<Vec<_>>());
    let p99 = Spread::of(&runs.iter().map(|r| r.p99).collect::<Vec<_>>());
    let max = Spread::of(&runs.iter().map(|r| r.max).collect::<Vec<_>>());
    let med = |f: fn(&LatRun) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>()).median;
    let figure = format!(
        "p50 {} / p99 {} / max {} ms (of which the enqueue call p50 {:.2} ms; from its return: p50 {:.2} / p99 {:.2} ms)",
        p50.plain(2),
        p99.plain(2),
        max.plain(1),
        med(|r| r.enqueue_p50),
        med(|r| r.after_commit_p50),
        med(|r| r.after_commit_p99),
    );
    ctx.report.row(name, figure, reference, ratio);
    let runs_json: Vec<Value> = runs
        .iter()
        .map(|r| {
            json!({
                "p50_ms": r.p50, "p99_ms": r.p99, "max_ms": r.max, "samples": r.n,
                "enqueue_call_p50_ms": r.enqueue_p50, "after_commit_p50_ms": r.after_commit_p50,
                "after_commit_p99_ms": r.after_commit_p99, "load": r.load,
            })
        })
        .collect();
    ctx.report.detail(name, json!({ "p50_ms": p50.json(), "p99_ms": p99.json(), "max_ms": max.json(), "runs": runs_json }));
}

pub const OPEN_RATE: f64 = 500.0;

/// A producer fast enough that the notifier paces its wake-ups at the busy rate
/// (over 1,000 enqueues a second): the row that shows what that pacing costs.
pub const FAST_OPEN_RATE: f64 = 4_000.0;
pub const TARGET: &str = "— (target p50 ≤ 2 ms, p99 ≤ 5 ms)";

pub fn open_secs(quick: bool) -> f64 {
    if quick {
        3.0
    } else {
        10.0
    }
}

pub fn serial_n(quick: bool) -> usize {
    if quick {
        200
    } else {
        1000
    }
}

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let (q, secs, n) = (ctx.quick, open_secs(ctx.quick), serial_n(ctx.quick));
    let poll_n = if q { 5 } else { 20 };
    let mut v = Vec::new();
    for i in 1..=3 {
        v.push(serial(ctx, n, true, None, &format!("run {i}/3")).await?);
    }
    let name = format!("5. latency serial, NOTIFY ({n} samples/run)");
    report(ctx, &name, &v, "—", None);
    let mut v = Vec::new();
    for i in 1..=3 {
        v.push(open_loop(ctx, OPEN_RATE, secs, true, None, &format!("run {i}/3")).await?);
    }
    let name = format!("5. latency open loop {OPEN_RATE:.0}/s, NOTIFY ({secs:.0} s/run)");
    report(ctx, &name, &v, TARGET, None);
    let mut v = Vec::new();
    for i in 1..=3 {
        let what = format!("run {i}/3");
        v.push(open_loop(ctx, FAST_OPEN_RATE, secs, true, None, &what).await?);
    }
    let name = format!(
        "5. latency open loop {FAST_OPEN_RATE:.0}/s, NOTIFY paced at 250/s ({secs:.0} s/run)"
    );
    report(ctx, &name, &v, "—", None);
    let mut v = Vec::new();
    for i in 1..=3 {
        v.push(serial(ctx, poll_n, false, None, &format!("run {i}/3")).await?);
    }
    let name =
        format!("5. latency serial, poll-only 1 s ({poll_n} samples/run: each waits ~1 poll)");
    report(ctx, &name, &v, "—", None);
    let mut v = Vec::new();
    for i in 1..=3 {
        v.push(open_loop(ctx, OPEN_RATE, secs, false, None, &format!("run {i}/3")).await?);
    }
    report(
        ctx,
        &format!("5. latency open loop {OPEN_RATE:.0}/s, poll-only 1 s ({secs:.0} s/run)"),
        &v,
        "—",
        None,
    );
    Ok(())
}
