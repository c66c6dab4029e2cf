//! Scenario 2: bulk enqueue, 1,000 jobs per `enqueue_many` statement, one producer;
//! each run right after a pgbench run of the ceiling's 1,000-row `unnest` insert
//! (`paired`).

use std::time::{Duration, Instant};

use anyhow::Result;
use lq_runtime::{EnqueueOptions, Job};
use serde_json::json;

use super::{announce, Ctx};
use crate::{db, jobs::Noop, paired, stats::Spread};

pub const BATCH: u64 = 1000;

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let secs = if ctx.quick { 3.0 } else { 10.0 };
    let mut rates = Vec::new();
    let mut loads = Vec::new();
    let mut pairs = Vec::new();
    for run in 1..=3 {
        if let Some(p) = &ctx.paired {
            announce(&format!(
                "bulk enqueue: ceiling's enqueue_unnest.sql by pgbench, run {run}/3"
            ));
            pairs.push(p.enqueue_unnest(secs).await?);
        }
        db::reset(&ctx.pool, None).await?;
        loads.push(announce(&format!(
            "bulk enqueue: {BATCH} jobs per statement, run {run}/3"
        )));
        let pool = db::pool(&ctx.opts, 1).await?;
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(secs);
        let mut n = 0u64;
        while Instant::now() < deadline {
            let jobs = (n..n + BATCH).map(|n| Noop { n });
            let done = Noop::enqueue_many(&pool, jobs, EnqueueOptions::new()).await?;
            n += done.ids.len() as u64;
        }
        rates.push(n as f64 / start.elapsed().as_secs_f64());
        pool.close().await;
    }
    let s = Spread::of(&rates);
    let reference = ctx
        .ceiling
        .as_ref()
        .and_then(|c| c.enqueue_unnest())
        .cloned();
    let name = "2. bulk enqueue, 1,000 jobs/statement, 1 producer";
    ctx.report
        .row_vs_ceiling(name, s.rate(), s.median, reference.as_ref());
    let what = "enqueue_unnest.sql by pgbench, 1 client";
    paired::row(&mut ctx.report, name, &rates, &pairs, what);
    ctx.report.detail(
        name,
        json!({ "jobs_per_s": s.json(), "secs": secs, "load": loads, "paired_ceiling_per_s": pairs }),
    );
    Ok(())
}
