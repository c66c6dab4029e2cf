//! Scenario 3c: the runtime's two drain statements with no runtime around them.
//!
//! Claims of `CLAIM` jobs (`db::claim::job_claim`) and success writes of exactly
//! those jobs (`db::finish::job_complete_many`), on connections set up as the
//! runtime's hot-path ones, sent in two shapes: as the runtime sends them (one
//! connection claiming, another acknowledging what it is handed), and as `k`
//! streams that each claim, then acknowledge, in turn. Nothing else runs: no
//! handlers, tasks, channels of the runtime's or heartbeats. So the drain (3a)
//! divided by the first shape is how much of its own statements' ceiling the
//! runtime reaches, and these rates divided by the one-statement bound are what
//! is left to the work each job costs the server.

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

/// One claim of [`CLAIM`] bench jobs, as the runtime's claimer sends it.
async fn claim(conn: &mut PgConnection) -> Result<Vec<lq_db::claim::ClaimedJob>> {
    let kinds = [<crate::jobs::Noop as lq_runtime::Job>::KIND.to_owned()];
    Ok(lq_db::claim::job_claim(conn, super::QUEUE, &kinds, &[30.0], CLAIM, OWNER).await?)
}

/// One stream: claims and acknowledges until a claim comes back empty; returns
/// the jobs it finished, and its connection (closed once PostgreSQL's CPU time
/// is read: a backend's time is counted only while it lives).
async fn stream(mut conn: PgConnection) -> Result<(u64, PgConnection)> {
    let mut done = 0;
    loop {
        let claimed = claim(&mut conn).await?;
        if claimed.is_empty() {
            return Ok((done, conn));
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

/// The runtime's shape without its handlers: one connection only claims and
/// hands each batch over; the other only acknowledges, each statement covering
/// whatever was handed over while the previous one ran (at most
/// `max_complete_batch`'s default, 1,000).
async fn split(
    mut claimer: PgConnection,
    mut acker: PgConnection,
) -> Result<(u64, [PgConnection; 2])> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(i64, sqlx::types::Uuid)>();
    let claims = tokio::spawn(async move {
        loop {
            let claimed = claim(&mut claimer).await?;
            if claimed.is_empty() {
                return anyhow::Ok(claimer);
            }
            for j in claimed {
                tx.send((j.id, j.lease_token))?;
            }
        }
    });
    let mut done = 0u64;
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 1000).await > 0 {
        let (ids, tokens): (Vec<i64>, Vec<_>) = batch.drain(..).unzip();
        done += lq_db::finish::job_complete_many(&mut acker, &ids, &tokens)
            .await?
            .len() as u64;
    }
    let claimer = claims.await??;
    Ok((done, [claimer, acker]))
}

/// How the statements are sent.
#[derive(Clone, Copy)]
enum Shape {
    /// `k` connections, each claiming then acknowledging in turn.
    Streams(usize),
    /// A claiming connection and an acknowledging one, as the runtime has.
    Split,
}

impl Shape {
    fn label(self) -> String {
        match self {
            Shape::Streams(1) => "1 stream (claim, then acknowledge, in turn)".into(),
            Shape::Streams(k) => format!("{k} streams (each claims, then acknowledges, in turn)"),
            Shape::Split => "a claiming and an acknowledging connection, as the runtime".into(),
        }
    }

    fn key(self) -> String {
        match self {
            Shape::Streams(k) => format!("streams_{k}"),
            Shape::Split => "split".into(),
        }
    }
}

/// Lease owner of the claims.
const OWNER: &str = "lq-bench-statements";

/// Drains a fresh backlog of `n` jobs in `shape`; returns jobs/s and
/// PostgreSQL's cores.
async fn once(ctx: &Ctx, n: u64, shape: Shape) -> Result<(f64, f64)> {
    db::reset(&ctx.pool, None).await?;
    db::prefill_noop(&ctx.pool, n).await?;
    db::settle(&ctx.pool).await?;
    announce(&format!(
        "the runtime's statements, {}, claims of {CLAIM}, {n} jobs",
        shape.label()
    ));
    let opts = ctx.opts.clone().options(lq_db::HOT_PATH_SETTINGS);
    let k = match shape {
        Shape::Streams(k) => k,
        Shape::Split => 2,
    };
    let mut conns = Vec::with_capacity(k);
    for _ in 0..k {
        conns.push(PgConnection::connect_with(&opts).await?);
    }
    let cpu0 = CpuSnap::now();
    let t0 = Instant::now();
    let mut done = 0;
    let mut used = Vec::new();
    match shape {
        Shape::Split => {
            let (a, b) = (conns.remove(0), conns.remove(0));
            let (d, c) = split(a, b).await?;
            done = d;
            used.extend(c);
        }
        Shape::Streams(_) => {
            let tasks: Vec<_> = conns.into_iter().map(|c| tokio::spawn(stream(c))).collect();
            for t in tasks {
                let (d, c) = t.await??;
                done += d;
                used.push(c);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let (_, cpu_pg) = CpuSnap::now().since(&cpu0);
    for c in used {
        c.close().await?;
    }
    ensure!(done == n, "{done} of {n} jobs finished");
    let rate = n as f64 / secs;
    println!(
        "    {rate:.0} jobs/s in {secs:.2} s; CPU cores: postgres {:.2}",
        cpu_pg / secs
    );
    Ok((rate, cpu_pg / secs))
}

/// Runs each shape three times and reports its median, against the
/// one-statement bound when the ceiling ran.
pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let n = drain::backlog(ctx.quick);
    let mut detail = serde_json::Map::new();
    for shape in [
        Shape::Split,
        Shape::Streams(1),
        Shape::Streams(2),
        Shape::Streams(4),
    ] {
        let mut rates = Vec::new();
        let mut cores = Vec::new();
        for _ in 0..3 {
            let (rate, pg) = once(ctx, n, shape).await?;
            rates.push(rate);
            cores.push(pg);
        }
        let s = Spread::of(&rates);
        let name = format!(
            "3c. drain {}k by the runtime's two statements alone, {}",
            n / 1000,
            shape.label()
        );
        let bound = ctx
            .ceiling
            .as_ref()
            .and_then(|c| c.drain_one_statement_100())
            .cloned();
        ctx.report
            .row_vs_ceiling(name, s.rate(), s.median, bound.as_ref());
        detail.insert(
            shape.key(),
            json!({ "jobs_per_s": s.json(), "postgres_cores": Spread::of(&cores).json() }),
        );
    }
    ctx.report.detail("3c_statements", detail.into());
    Ok(())
}
