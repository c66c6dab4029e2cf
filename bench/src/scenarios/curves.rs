//! Scenario 9 (opt-in: `--only curves`): cost curves as the work grows, each
//! point one drain of no-op jobs with the shipped defaults unless stated.
//!
//! - payload size: 100 B, 10 kB, 100 kB;
//! - queues: 1, 100, 1,000 served by one runtime — idle polling cost (commits
//!   per second with nothing to do) and a drain spread over all of them;
//! - backlog: the first 100,000 jobs of a backlog of 200k and 2M;
//! - runtimes sharing one server: 1, 4, 16 (in this one process, each with its
//!   own pool, as separate deployments would have).

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{ensure, Result};
use lq_runtime::{Runtime, RuntimeConfig};
use serde_json::json;

use super::{announce, Ctx, DEFAULT_CONCURRENCY, QUEUE};
use crate::{db, stats::thousands};

/// Fills `n` no-op jobs of `payload_bytes` each over `queues` (round robin).
async fn prefill(ctx: &Ctx, n: u64, payload_bytes: usize, queues: usize) -> Result<()> {
    // Hex of distinct md5s: as incompressible as TOAST would see real data.
    let chunks = (payload_bytes / 32).max(1) as i32;
    sqlx::query(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         select 'bench.noop',
                case when $3 = 1 then $4 else 'q' || (g % $3) end,
                jsonb_build_object('n', g, 'pad',
                    (select string_agg(md5(g::text || '.' || i::text), '') from generate_series(1, $2) i)),
                20
         from generate_series(1, $1) g",
    )
    .bind(n as i64)
    .bind(if payload_bytes <= 64 { 0 } else { chunks })
    .bind(queues as i32)
    .bind(QUEUE)
    .execute(&ctx.pool)
    .await?;
    Ok(())
}

fn queue_names(queues: usize) -> Vec<String> {
    if queues == 1 {
        vec![QUEUE.to_owned()]
    } else {
        (0..queues).map(|i| format!("q{i}")).collect()
    }
}

/// Starts `runtimes` runtimes, each on a pool of its own, serving `queues`
/// with `concurrency` each.
async fn start(
    ctx: &Ctx,
    runtimes: usize,
    queues: &[String],
    concurrency: usize,
) -> Result<Vec<Runtime>> {
    let mut out = Vec::new();
    for _ in 0..runtimes {
        let pool = db::runtime_pool(&ctx.opts).await?;
        let mut b = Runtime::builder(pool).config(RuntimeConfig::default());
        for q in queues {
            b = b.queue(q.clone(), concurrency);
        }
        out.push(b.start().await?);
    }
    Ok(out)
}

/// Runs until `n` jobs have succeeded (in the table); returns jobs/s and
/// commits per job.
async fn drain(ctx: &Ctx, rts: Vec<Runtime>, n: u64, above: i64) -> Result<(f64, f64)> {
    let (_, c0) = db::wal_and_commits(&ctx.pool).await?;
    let t0 = Instant::now();
    let limit = Duration::from_secs(300);
    loop {
        let done: u64 = rts.iter().map(|r| r.stats().succeeded).sum();
        if done >= n || t0.elapsed() > limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    for rt in rts {
        rt.shutdown().await?;
    }
    let (_, c1) = db::wal_and_commits(&ctx.pool).await?;
    let (done, _, _) = db::batches(&ctx.pool, above).await?;
    ensure!(
        done as u64 >= n,
        "only {done} of {n} jobs succeeded in {secs:.0} s"
    );
    Ok((n as f64 / secs, (c1 - c0) as f64 / done as f64))
}

async fn payloads(ctx: &mut Ctx) -> Result<()> {
    for (bytes, n) in [(100usize, 20_000u64), (10_000, 20_000), (100_000, 5_000)] {
        let n = if ctx.quick { n / 4 } else { n };
        db::reset(&ctx.pool, None).await?;
        prefill(ctx, n, bytes, 1).await?;
        db::settle(&ctx.pool).await?;
        announce(&format!("curve payload {bytes} B: drain {n}"));
        let (w0, _) = db::wal_and_commits(&ctx.pool).await?;
        let rts = start(ctx, 1, &queue_names(1), DEFAULT_CONCURRENCY).await?;
        let (rate, commits) = drain(ctx, rts, n, 0).await?;
        let (w1, _) = db::wal_and_commits(&ctx.pool).await?;
        let wal = (w1 - w0) / n as f64;
        println!(
            "    {} jobs/s, {:.1} MB/s of payload, {wal:.0} WAL bytes and {commits:.4} commits per job",
            thousands(rate),
            rate * bytes as f64 / 1e6
        );
        ctx.report.row(
            format!("9a. curve: payload {bytes} B, drain {}k", n / 1000),
            format!(
                "{}/s ({:.1} MB/s)",
                thousands(rate),
                rate * bytes as f64 / 1e6
            ),
            format!("{wal:.0} WAL bytes per job"),
            None,
        );
        ctx.report.detail(
            &format!("curve_payload_{bytes}"),
            json!({ "jobs": n, "jobs_per_s": rate, "wal_bytes_per_job": wal, "commits_per_job": commits }),
        );
    }
    Ok(())
}

async fn queues(ctx: &mut Ctx) -> Result<()> {
    for q in [1usize, 100, 1000] {
        let names = queue_names(q);
        // Idle: what serving q empty queues costs the server.
        db::reset(&ctx.pool, None).await?;
        db::settle(&ctx.pool).await?;
        announce(&format!(
            "curve queues {q}: idle for 10 s, then a drain spread over them"
        ));
        let rts = start(ctx, 1, &names, 10).await?;
        tokio::time::sleep(Duration::from_secs(2)).await; // past start-up's own writes
        let (_, c0) = db::wal_and_commits(&ctx.pool).await?;
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (_, c1) = db::wal_and_commits(&ctx.pool).await?;
        let idle = (c1 - c0) as f64 / t0.elapsed().as_secs_f64();
        for rt in rts {
            rt.shutdown().await?;
        }
        // Busy: 50k jobs over all of them, 10 handlers per queue.
        let n = if ctx.quick { 20_000 } else { 50_000 };
        db::reset(&ctx.pool, None).await?;
        prefill(ctx, n, 0, q).await?;
        db::settle(&ctx.pool).await?;
        let rts = start(ctx, 1, &names, 10).await?;
        let (rate, commits) = drain(ctx, rts, n, 0).await?;
        println!(
            "    idle: {idle:.1} commits/s; drain {}: {} jobs/s, {commits:.4} commits per job",
            n,
            thousands(rate)
        );
        ctx.report.row(
            format!("9b. curve: {q} queues, one runtime, 10 handlers each"),
            format!("drain {}k: {}/s", n / 1000, thousands(rate)),
            format!("idle: {idle:.1} commits/s"),
            None,
        );
        ctx.report.detail(
            &format!("curve_queues_{q}"),
            json!({ "idle_commits_per_s": idle, "jobs": n, "jobs_per_s": rate, "commits_per_job": commits }),
        );
    }
    Ok(())
}

async fn backlogs(ctx: &mut Ctx) -> Result<()> {
    let n = if ctx.quick { 50_000 } else { 100_000 };
    for backlog in [200_000u64, 2_000_000] {
        db::reset(&ctx.pool, None).await?;
        prefill(ctx, backlog, 0, 1).await?;
        db::exec(&ctx.pool, "vacuum analyze lq.jobs").await?;
        db::settle(&ctx.pool).await?;
        announce(&format!("curve backlog {backlog}: drain the first {n}"));
        let rts = start(ctx, 1, &queue_names(1), DEFAULT_CONCURRENCY).await?;
        let (rate, commits) = drain(ctx, rts, n, 0).await?;
        println!(
            "    {} jobs/s, {commits:.4} commits per job",
            thousands(rate)
        );
        ctx.report.row(
            format!(
                "9c. curve: backlog {}k, first {}k drained",
                backlog / 1000,
                n / 1000
            ),
            format!("{}/s", thousands(rate)),
            "—",
            None,
        );
        ctx.report.detail(
            &format!("curve_backlog_{backlog}"),
            json!({ "drained": n, "jobs_per_s": rate, "commits_per_job": commits }),
        );
    }
    Ok(())
}

async fn runtimes(ctx: &mut Ctx) -> Result<()> {
    let n = if ctx.quick { 50_000 } else { 200_000 };
    for r in [1usize, 4, 16] {
        db::reset(&ctx.pool, None).await?;
        db::prefill_noop(&ctx.pool, n).await?;
        db::settle(&ctx.pool).await?;
        announce(&format!(
            "curve runtimes {r}: drain {n}, concurrency {DEFAULT_CONCURRENCY} each"
        ));
        let rts = start(ctx, r, &queue_names(1), DEFAULT_CONCURRENCY).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let waits = tokio::spawn(lock_waits(ctx.pool.clone(), stop.clone()));
        let (rate, commits) = drain(ctx, rts, n, 0).await?;
        stop.store(true, Ordering::Relaxed);
        let samples = waits.await?;
        let mean = samples.iter().sum::<i64>() as f64 / samples.len().max(1) as f64;
        let most = samples.iter().copied().max().unwrap_or(0);
        println!(
            "    {} jobs/s, {commits:.4} commits per job; sessions waiting on a lock: mean {mean:.2}, most {most} ({} samples)",
            thousands(rate),
            samples.len()
        );
        ctx.report.row(
            format!("9d. curve: {r} runtime(s) sharing the server (one process, a pool each)"),
            format!("drain {}k: {}/s", n / 1000, thousands(rate)),
            format!("{commits:.4} commits per job; lock waits mean {mean:.2}, most {most}"),
            None,
        );
        ctx.report.detail(
            &format!("curve_runtimes_{r}"),
            json!({ "jobs": n, "jobs_per_s": rate, "commits_per_job": commits,
                    "lock_waiting_sessions": { "mean": mean, "max": most } }),
        );
    }
    Ok(())
}

/// Samples, every 100 ms until `stop`, how many sessions wait on a lock.
async fn lock_waits(pool: sqlx::PgPool, stop: Arc<AtomicBool>) -> Vec<i64> {
    let mut samples = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if let Ok(n) = sqlx::query_scalar::<_, i64>(
            "select count(*) from pg_stat_activity where wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await
        {
            samples.push(n);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    samples
}

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    payloads(ctx).await?;
    queues(ctx).await?;
    backlogs(ctx).await?;
    runtimes(ctx).await?;
    Ok(())
}
