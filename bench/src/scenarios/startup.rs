//! Scenario 7: from `Runtime::builder(..).start()` to the first `perform`, with one
//! job queued and the pool already connected.

use std::{sync::Arc, time::Duration};

use anyhow::{bail, Result};
use lq_runtime::{EnqueueOptions, Job, RuntimeConfig};
use serde_json::json;

use super::{announce, start_runtime, Ctx, DEFAULT_CONCURRENCY};
use crate::{
    db,
    jobs::{now_ns, Probe, Sink},
    stats::Spread,
};

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let mut ms = Vec::new();
    let mut loads = Vec::new();
    for run in 1..=3 {
        db::reset(&ctx.pool, None).await?;
        Probe { t_ns: 0 }
            .enqueue_with(&ctx.pool, EnqueueOptions::new().notify(false))
            .await?;
        let sink = Arc::new(Sink::default());
        let pool = db::runtime_pool(&ctx.opts).await?;
        loads.push(announce(&format!("startup to first perform, run {run}/3")));
        let t0 = now_ns();
        let rt = start_runtime(
            pool.clone(),
            DEFAULT_CONCURRENCY,
            RuntimeConfig::default(),
            Some(sink.clone()),
        )
        .await?;
        if !sink.wait_for(1, Duration::from_secs(10)).await {
            bail!("the queued job was not performed within 10 s of start");
        }
        let started = sink.take()[0].1;
        ms.push(started.saturating_sub(t0) as f64 / 1e6);
        println!("    {:.2} ms", ms[ms.len() - 1]);
        rt.shutdown().await?;
        pool.close().await;
    }
    let s = Spread::of(&ms);
    let name = "7. startup: start() to first perform (1 queued job)";
    ctx.report
        .row(name, format!("{} ms", s.plain(2)), "—", None);
    ctx.report
        .detail(name, json!({ "ms": s.json(), "load": loads }));
    Ok(())
}
