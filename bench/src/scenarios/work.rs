//! Scenario 8: realistic work. 100,000 jobs (20,000 with `--quick`) whose
//! handlers sleep 2–5 ms, parallelism 32, claim batch 50: throughput, how long
//! after the runtime's start each job's first attempt starts (the backlog is
//! due from then: p50, p99), how late retries start after their backoff, and
//! the share of jobs rescued
//! (a lease that expired under load). Then the same with 5 % of attempts failing
//! (retried with backoff until they succeed).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{ensure, Result};
use lq_runtime::{Runtime, RuntimeConfig};
use serde_json::json;

use super::{announce, Ctx, QUEUE};
use crate::{
    db,
    jobs::Waits,
    stats::{percentile, thousands},
};

const PARALLELISM: usize = 32;
const CLAIM_BATCH: usize = 50;

fn jobs(quick: bool) -> u64 {
    if quick {
        20_000
    } else {
        100_000
    }
}

/// One run: fills the backlog, runs it to the end, reports.
async fn once(ctx: &Ctx, n: u64, fail_pct: u8) -> Result<serde_json::Value> {
    db::reset(&ctx.pool, None).await?;
    sqlx::query(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         select 'bench.work', $2, jsonb_build_object('n', g, 'fail_pct', $3::int), 25
         from generate_series(1, $1) g",
    )
    .bind(n as i64)
    .bind(QUEUE)
    .bind(i32::from(fail_pct))
    .execute(&ctx.pool)
    .await?;
    db::settle(&ctx.pool).await?;
    announce(&format!(
        "work {n}: handlers 2–5 ms, parallelism {PARALLELISM}, claim batch {CLAIM_BATCH}, {fail_pct} % of attempts failing"
    ));
    let pool = db::runtime_pool(&ctx.opts).await?;
    let waits = Arc::new(Waits::default());
    // The backlog was due when it was inserted; its wait is counted from the
    // runtime's start, as if it had all been enqueued then.
    let due_before_start: f64 =
        sqlx::query_scalar("select extract(epoch from now() - min(run_at))::float8 from lq.jobs")
            .fetch_one(&ctx.pool)
            .await?;
    let t0 = Instant::now();
    let builder = Runtime::builder(pool.clone())
        .queue(QUEUE, PARALLELISM)
        .config(RuntimeConfig {
            max_claim_batch: CLAIM_BATCH,
            ..Default::default()
        })
        .state(waits.clone());
    let rt = super::with_diagnosis_limits(builder).start().await?;
    let limit = Duration::from_secs(if ctx.quick { 120 } else { 300 });
    // When 99 % of the jobs had succeeded: with failures, the last few wait out
    // their backoff (200 ms doubling) while the slots idle, and this splits that
    // tail from the rate while work was due.
    let most = n - n / 100;
    let mut secs_to_most = None;
    loop {
        let succeeded = rt.stats().succeeded;
        if succeeded >= most && secs_to_most.is_none() {
            secs_to_most = Some(t0.elapsed().as_secs_f64());
        }
        if succeeded >= n || t0.elapsed() >= limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let secs_to_most = secs_to_most.unwrap_or(secs);
    let stats = rt.stats();
    rt.shutdown().await?;
    pool.close().await;
    ensure!(
        stats.succeeded >= n,
        "only {} of {n} succeeded in {secs:.0} s",
        stats.succeeded
    );
    let (rescued, attempts): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where errors::text like '%lease expired%'),
                coalesce(sum(attempts), 0)::int8
         from lq.finished_jobs where kind = 'bench.work'",
    )
    .fetch_one(&ctx.pool)
    .await?;
    let (mut first, mut retries) = waits.take();
    let offset = (due_before_start * 1e6) as i64;
    first.iter_mut().for_each(|late| *late -= offset);
    first.sort_unstable();
    retries.sort_unstable();
    let ms = |v: &[i64], p: f64| {
        let f: Vec<f64> = v.iter().map(|&x| x as f64 / 1e3).collect();
        percentile(&f, p)
    };
    let rate = n as f64 / secs;
    // What the handlers allow: every slot busy all the time, for every attempt.
    let handler = waits.mean_handler_secs();
    let ideal = PARALLELISM as f64 / handler * n as f64 / attempts.max(1) as f64;
    let rate_to_most = most as f64 / secs_to_most;
    let claims_per_job = stats.claims as f64 / attempts.max(1) as f64;
    println!(
        "    {} jobs/s in {secs:.1} s ({attempts} attempts; handlers took {:.2} ms on average, so 32 slots allow {}/s); the first 99 % at {}/s in {secs_to_most:.1} s, the last 1 % in {:.1} s; {} claims ({claims_per_job:.3} an attempt); first attempts started after the runtime's start by p50 {:.0} ms, p99 {:.0} ms; retries late by p50 {:.0} ms, p99 {:.0} ms; rescued {rescued} ({:.3} %)",
        thousands(rate),
        handler * 1e3,
        thousands(ideal),
        thousands(rate_to_most),
        secs - secs_to_most,
        stats.claims,
        ms(&first, 50.0),
        ms(&first, 99.0),
        ms(&retries, 50.0),
        ms(&retries, 99.0),
        100.0 * rescued as f64 / n as f64,
    );
    Ok(json!({
        "jobs": n, "fail_pct": fail_pct, "jobs_per_s": rate, "secs": secs, "attempts": attempts,
        "first_99pct": { "jobs_per_s": rate_to_most, "secs": secs_to_most },
        "claims": stats.claims, "claims_per_attempt": claims_per_job,
        "first_attempt_late_ms": { "p50": ms(&first, 50.0), "p99": ms(&first, 99.0) },
        "retry_late_ms": { "p50": ms(&retries, 50.0), "p99": ms(&retries, 99.0), "count": retries.len() },
        "rescued": rescued, "rescued_share": rescued as f64 / n as f64,
        "mean_handler_ms": handler * 1e3, "ideal_jobs_per_s": ideal,
    }))
}

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let n = jobs(ctx.quick);
    for fail_pct in [0u8, 5] {
        let r = once(ctx, n, fail_pct).await?;
        let f = |k: &str, q: &str| r[k][q].as_f64().unwrap_or(f64::NAN);
        ctx.report.row(
            format!(
                "8. work {}k, handlers 2–5 ms, parallelism {PARALLELISM}, {fail_pct} % failing",
                n / 1000
            ),
            format!(
                "{}/s (the first 99 %: {}/s); first attempt started p50 {:.0} ms, p99 {:.0} ms after the start; rescued {}",
                thousands(r["jobs_per_s"].as_f64().unwrap_or(f64::NAN)),
                thousands(f("first_99pct", "jobs_per_s")),
                f("first_attempt_late_ms", "p50"),
                f("first_attempt_late_ms", "p99"),
                r["rescued"]
            ),
            format!(
                "slots always busy ({PARALLELISM} / {:.2} ms mean handler, per attempt): {}/s",
                r["mean_handler_ms"].as_f64().unwrap_or(f64::NAN),
                thousands(r["ideal_jobs_per_s"].as_f64().unwrap_or(f64::NAN))
            ),
            r["jobs_per_s"]
                .as_f64()
                .zip(r["ideal_jobs_per_s"].as_f64())
                .map(|(x, ideal)| x / ideal),
        );
        ctx.report.detail(&format!("work_fail_{fail_pct}"), r);
    }
    Ok(())
}
