//! Scenario 1: one job per autocommit transaction (`job.enqueue(&pool)`), 1 and 4
//! producers, with and without the wake-up NOTIFY.

use std::time::{Duration, Instant};

use anyhow::Result;
use lq_runtime::{EnqueueOptions, Job};
use serde_json::json;
use tokio::task::JoinSet;

use super::{announce, Ctx};
use crate::{db, jobs::Noop, stats::Spread};

/// The four variants, in report order.
const VARIANTS: [(bool, u32); 4] = [(true, 1), (true, 4), (false, 1), (false, 4)];

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let secs = if ctx.quick { 3.0 } else { 10.0 };
    // Runs interleave the variants (run 1 of each, then run 2 of each, ...), so a
    // drift in the host's speed does not land on one variant, such as NOTIFY off.
    let mut rates = vec![Vec::new(); VARIANTS.len()];
    let mut loads = vec![Vec::new(); VARIANTS.len()];
    for run in 1..=3 {
        for (i, &(notify, producers)) in VARIANTS.iter().enumerate() {
            db::reset(&ctx.pool, None).await?;
            loads[i].push(announce(&format!(
                "enqueue single: {producers} producer(s), notify {notify}, run {run}/3"
            )));
            rates[i].push(once(ctx, producers, notify, secs).await?);
        }
    }
    let mut medians = Vec::new();
    for (i, &(notify, producers)) in VARIANTS.iter().enumerate() {
        let (rates, loads) = (&rates[i], &loads[i]);
        let s = Spread::of(rates);
        let reference = ctx
            .ceiling
            .as_ref()
            .and_then(|c| c.enqueue_single(producers))
            .cloned();
        let name = format!(
            "1. enqueue single/tx, {producers} producer{}{}",
            if producers > 1 { "s" } else { "" },
            if notify { "" } else { ", notify off" }
        );
        ctx.report
            .row_vs_ceiling(&name, s.rate(), s.median, reference.as_ref());
        ctx.report.detail(
            &name,
            json!({ "jobs_per_s": s.json(), "secs": secs, "load": loads }),
        );
        medians.push((notify, producers, s.median));
    }
    for p in [1u32, 4] {
        let on = medians.iter().find(|m| m.0 && m.1 == p).map(|m| m.2);
        let off = medians.iter().find(|m| !m.0 && m.1 == p).map(|m| m.2);
        if let (Some(on), Some(off)) = (on, off) {
            ctx.report.note(format!(
                "NOTIFY cost, single enqueue with {p} producer(s): {:.0}/s with vs {:.0}/s without ({:+.1} %)",
                on,
                off,
                (on / off - 1.0) * 100.0
            ));
        }
    }
    Ok(())
}

async fn once(ctx: &Ctx, producers: u32, notify: bool, secs: f64) -> Result<f64> {
    // Two connections per producer: sqlx pings a connection as it goes back to the
    // pool, and with no spare one each enqueue would wait for the previous one's ping
    // (an application's pool is larger than its concurrent enqueues anyway).
    let pool = db::pool(&ctx.opts, 2 * producers).await?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut tasks = JoinSet::new();
    for p in 0..producers {
        let pool = pool.clone();
        tasks.spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let job = Noop {
                    n: u64::from(p) << 40 | n,
                };
                if notify {
                    job.enqueue(&pool).await?;
                } else {
                    job.enqueue_with(&pool, EnqueueOptions::new().notify(false))
                        .await?;
                }
                n += 1;
            }
            anyhow::Ok(n)
        });
    }
    let mut total = 0;
    while let Some(r) = tasks.join_next().await {
        total += r??;
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    pool.close().await;
    Ok(rate)
}
