//! Scenario 3c: the runtime's own statements with no runtime around them.
//!
//! `k` connections each loop over a claim of `CLAIM` jobs and the success write
//! of exactly those jobs (`db::claim::job_claim`, then
//! `db::finish::job_complete_many`), the two statements a drain sends, on
//! connections set up as the runtime's hot-path ones. Nothing else runs: no
//! handlers, no channels, no heartbeats. The rate is what PostgreSQL can do with
//! litequeue's statements and schema, so the drain (3a) divided by it is how much
//! of its statements' ceiling the runtime reaches, and this rate divided by the
//! one-statement bound is the share left to the work each job costs the server.

use std::time::Instant;

use anyhow::{ensure, Result};
use lq_core::db as lq_db;
use serde_json::json;
use sqlx::{Connection, PgConnection};

use super::{announce, drain, Ctx};
use crate::{cpu::CpuSnap, db, stats::Spread};

/// Jobs per claim: the runtime's `max_claim_batch` default, which a drain's
/// claims reach (claim-ahead).
const CLAIM: i64 = 500;

/// The runtime's hot-path session settings (`HOT_PATH_SETTINGS` in
/// `lq-runtime/src/builder.rs`): one generic plan, no JIT, index paths only.
const HOT_PATH: [(&str, &str); 5] = [
    ("plan_cache_mode", "force_generic_plan"),
    ("jit", "off"),
    ("enable_seqscan", "off"),
    ("enable_bitmapscan", "off"),
    ("enable_sort", "off"),
];

/// One stream: claims and acknowledges until a claim comes back empty; returns
/// the jobs it finished.
async fn stream(mut conn: PgConnection) -> Result<u64> {
    let kinds = vec![<crate::jobs::Noop as lq_runtime::Job>::KIND.to_owned()];
    let owner = format!("lq-bench-statements:{}", std::process::id());
    let mut done = 0;
    loop {
        let claimed =
            lq_db::claim::job_claim(&mut conn, super::QUEUE, &kinds, &[30.0], CLAIM, &owner)
                .await?;
        if claimed.is_empty() {
            conn.close().await?;
            return Ok(done);
        }
        let ids: Vec<i64> = claimed.iter().map(|j| j.id).collect();
        let tokens: Vec<_> = claimed.iter().map(|j| j.lease_token).collect();
        let finished = lq_db::finish::job_complete_many(&mut conn, &ids, &tokens).await?;
        ensure!(
            finished.len() == ids.len(),
            "{} of {} claimed jobs finished",
            finished.len(),
            ids.len()
        );
        done += finished.len() as u64;
    }
}

/// Drains a fresh backlog with `k` streams; returns jobs/s and PostgreSQL's cores.
async fn once(ctx: &Ctx, n: u64, k: usize) -> Result<(f64, f64)> {
    db::reset(&ctx.pool, None).await?;
    db::prefill_noop(&ctx.pool, n).await?;
    db::settle(&ctx.pool).await?;
    announce(&format!(
        "the runtime's statements, {k} stream(s), claims of {CLAIM}, {n} jobs"
    ));
    let opts = ctx.opts.clone().options(HOT_PATH);
    let mut conns = Vec::with_capacity(k);
    for _ in 0..k {
        conns.push(PgConnection::connect_with(&opts).await?);
    }
    let cpu0 = CpuSnap::now();
    let t0 = Instant::now();
    let tasks: Vec<_> = conns.into_iter().map(|c| tokio::spawn(stream(c))).collect();
    let mut done = 0;
    for t in tasks {
        done += t.await??;
    }
    let secs = t0.elapsed().as_secs_f64();
    let (_, cpu_pg) = CpuSnap::now().since(&cpu0);
    ensure!(done == n, "{done} of {n} jobs finished");
    let rate = n as f64 / secs;
    println!(
        "    {rate:.0} jobs/s in {secs:.2} s; CPU cores: postgres {:.2}",
        cpu_pg / secs
    );
    Ok((rate, cpu_pg / secs))
}

/// Runs 1, 2 and 4 streams, three drains each, and reports each median.
pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let n = drain::backlog(ctx.quick);
    let mut detail = serde_json::Map::new();
    for k in [1, 2, 4] {
        let mut rates = Vec::new();
        let mut cores = Vec::new();
        for _ in 0..3 {
            let (rate, pg) = once(ctx, n, k).await?;
            rates.push(rate);
            cores.push(pg);
        }
        let s = Spread::of(&rates);
        let name = format!(
            "3c. drain {}k by the runtime's own statements, {k} stream(s), no runtime",
            n / 1000
        );
        let bound = ctx
            .ceiling
            .as_ref()
            .and_then(|c| c.drain_one_statement_100())
            .cloned();
        ctx.report
            .row_vs_ceiling(name, s.rate(), s.median, bound.as_ref());
        detail.insert(
            format!("streams_{k}"),
            json!({ "jobs_per_s": s.json(), "postgres_cores": Spread::of(&cores).json() }),
        );
    }
    ctx.report.detail("3c_statements", detail.into());
    Ok(())
}
