//! Scenario 3: drain (burn-down) of a pre-filled backlog of no-op jobs, with the
//! shipped defaults and with the best settings a sweep finds.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use lq_runtime::RuntimeConfig;
use serde_json::{json, Value};

use super::{announce, start_runtime, Ctx, DEFAULT_CONCURRENCY};
use crate::{
    cpu::CpuSnap,
    db,
    paired::{self, DrainShape, Paired},
    stats::Spread,
};

/// The knobs the sweep turns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub concurrency: usize,
    pub max_claim_batch: usize,
}

impl Settings {
    pub fn defaults() -> Settings {
        Settings {
            concurrency: DEFAULT_CONCURRENCY,
            max_claim_batch: RuntimeConfig::default().max_claim_batch,
        }
    }

    /// The shipped defaults but `max_claim_batch`; for a diagnosis only,
    /// `LQ_BENCH_CLAIM_SLOTS=N|off` changes `claim_slots` (`off`: no bound).
    pub fn config(&self) -> RuntimeConfig {
        let mut config = RuntimeConfig {
            max_claim_batch: self.max_claim_batch,
            ..Default::default()
        };
        match std::env::var("LQ_BENCH_CLAIM_SLOTS").as_deref() {
            Ok("off") => config.claim_slots = None,
            Ok(n) => config.claim_slots = n.parse().ok().or(config.claim_slots),
            Err(_) => {}
        }
        config
    }

    pub fn label(&self) -> String {
        format!(
            "concurrency {}, max_claim_batch {}",
            self.concurrency, self.max_claim_batch
        )
    }
}

/// One drain.
#[derive(Debug, Clone)]
pub struct DrainRun {
    pub rate: f64,
    pub secs: f64,
    pub avg_claim: f64,
    pub avg_complete: f64,
    pub wal_per_job: f64,
    pub commits_per_job: f64,
    pub cpu_bench: f64,
    pub cpu_pg: f64,
    pub load: String,
    /// Set when the run was stopped at the time limit: `(succeeded, of)`.
    pub unfinished: Option<(u64, u64)>,
}

impl DrainRun {
    pub fn json(&self) -> Value {
        json!({
            "jobs_per_s": self.rate, "secs": self.secs, "avg_claim_batch": self.avg_claim,
            "avg_complete_batch": self.avg_complete, "wal_bytes_per_job": self.wal_per_job,
            "commits_per_job": self.commits_per_job, "cpu_cores_bench_process": self.cpu_bench / self.secs,
            "cpu_cores_postgres": self.cpu_pg / self.secs, "load": self.load,
            "unfinished": self.unfinished.map(|(done, of)| json!({"succeeded": done, "of": of})),
        })
    }
}

/// A drain that takes longer than this is stopped and reported unfinished.
pub fn time_limit(quick: bool) -> Duration {
    Duration::from_secs(if quick { 30 } else { 45 })
}

pub fn backlog(quick: bool) -> u64 {
    if quick {
        50_000
    } else {
        200_000
    }
}

/// Fills `n` jobs above `keep_upto` (or into an empty table), then times a runtime
/// from `start()` until it has marked all of them succeeded.
pub async fn once(
    ctx: &Ctx,
    n: u64,
    s: Settings,
    keep_upto: Option<i64>,
    what: &str,
) -> Result<DrainRun> {
    db::reset(&ctx.pool, keep_upto).await?;
    db::prefill_noop(&ctx.pool, n).await?;
    db::settle(&ctx.pool).await?;
    let load = announce(&format!("drain {n}: {} ({what})", s.label()));
    let pool = db::runtime_pool(&ctx.opts).await?;
    let (wal0, commits0) = db::wal_and_commits(&ctx.pool).await?;
    let cpu0 = CpuSnap::now();
    let t0 = Instant::now();
    crate::busy::start();
    let rt = start_runtime(pool.clone(), s.concurrency, s.config(), None).await?;
    let limit = time_limit(ctx.quick);
    let mut timeline = Timeline::from_env();
    loop {
        let succeeded = rt.stats().succeeded;
        timeline.sample(t0, succeeded);
        if succeeded >= n || t0.elapsed() >= limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    crate::busy::report(t0, Instant::now());
    timeline.print(secs, n);
    let (cpu_bench, cpu_pg) = CpuSnap::now().since(&cpu0);
    let stats = rt.stats();
    let succeeded = stats.succeeded.min(n);
    let unfinished = (succeeded < n).then_some((succeeded, n));
    if unfinished.is_some() {
        println!(
            "    NOT FINISHED: {succeeded} of {n} succeeded after {secs:.0} s; stats {:?}",
            rt.stats()
        );
        drop(rt); // no graceful hand-back: end its sessions instead
        tokio::time::sleep(Duration::from_millis(200)).await;
        db::end_runtime_sessions(&ctx.pool).await?;
        let _ = tokio::time::timeout(Duration::from_secs(5), pool.close()).await;
    } else {
        rt.shutdown().await?;
        pool.close().await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // let exiting backends flush their stats
    let (wal1, commits1) = db::wal_and_commits(&ctx.pool).await?;
    let (done, claims, completes) = db::batches(&ctx.pool, keep_upto.unwrap_or(0)).await?;
    let n = if unfinished.is_some() {
        (done as u64).max(1)
    } else {
        n
    };
    ensure!(
        unfinished.is_some() || done as u64 == n,
        "{done} of {n} jobs succeeded in the table"
    );
    let n_f = n as f64;
    let run = DrainRun {
        rate: succeeded as f64 / secs,
        secs,
        avg_claim: n_f / claims.max(1) as f64,
        avg_complete: n_f / completes.max(1) as f64,
        wal_per_job: (wal1 - wal0) / n_f,
        commits_per_job: (commits1 - commits0) as f64 / n_f,
        cpu_bench,
        cpu_pg,
        load,
        unfinished,
    };
    println!(
        "    {:.0} jobs/s in {:.2} s; avg claim batch {:.1}, completion batch {:.1}; {:.0} WAL bytes and {:.4} commits per job; CPU cores: bench {:.2}, postgres {:.2}; CPU µs a job: bench {:.1}, postgres {:.1}; claims: {} overlapping, {} throttled, {} jobs claimed ahead",
        run.rate, secs, run.avg_claim, run.avg_complete, run.wal_per_job, run.commits_per_job, cpu_bench / secs, cpu_pg / secs,
        cpu_bench * 1e6 / n_f, cpu_pg * 1e6 / n_f,
        stats.overlapping_claims, stats.throttled_claims, stats.claimed_ahead
    );
    Ok(run)
}

pub async fn runs(
    ctx: &Ctx,
    s: Settings,
    keep_upto: Option<i64>,
    what: &str,
) -> Result<Vec<DrainRun>> {
    let n = backlog(ctx.quick);
    let mut v = Vec::new();
    for run in 1..=3 {
        v.push(once(ctx, n, s, keep_upto, &format!("{what}, run {run}/3")).await?);
    }
    Ok(v)
}

/// Adds the table rows for a set of runs (against the ceiling at the batch size
/// used, and at batch 1); returns the median rate.
pub fn report(ctx: &mut Ctx, name: &str, runs: &[DrainRun]) -> f64 {
    let s = Spread::of(&runs.iter().map(|r| r.rate).collect::<Vec<_>>());
    let claim = Spread::of(&runs.iter().map(|r| r.avg_claim).collect::<Vec<_>>());
    let m = |f: fn(&DrainRun) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>()).median;
    let dnf = runs.iter().filter(|r| r.unfinished.is_some()).count();
    let dnf = if dnf > 0 {
        format!(
            "; {dnf} of {} runs stopped unfinished at the time limit",
            runs.len()
        )
    } else {
        String::new()
    };
    let figure = format!("{} (avg claim batch {:.0}{dnf})", s.rate(), claim.median);
    let near = ctx
        .ceiling
        .as_ref()
        .and_then(|c| c.drain_near(claim.median))
        .cloned();
    let one = ctx.ceiling.as_ref().and_then(|c| c.drain_batch1()).cloned();
    let delete = ctx
        .ceiling
        .as_ref()
        .and_then(|c| c.drain_delete_100())
        .cloned();
    let bound = ctx
        .ceiling
        .as_ref()
        .and_then(|c| c.drain_one_statement_100())
        .cloned();
    // litequeue deletes finished jobs from lq.jobs: the delete-shaped row and the
    // one-statement bound are its comparisons; the update-shaped rows stay,
    // labelled, for continuity with earlier reports.
    if let Some(delete) = delete {
        ctx.report.row_vs_ceiling(
            format!("{name} (vs claim-then-delete)"),
            figure.clone(),
            s.median,
            Some(&delete),
        );
    }
    if let Some(bound) = bound {
        ctx.report.row_vs_ceiling(
            format!("{name} (vs ack+claim in one statement)"),
            figure.clone(),
            s.median,
            Some(&bound),
        );
    }
    ctx.report.row_vs_ceiling(
        format!("{name} (vs claim-then-update)"),
        figure.clone(),
        s.median,
        near.as_ref(),
    );
    if let Some(one) = one {
        ctx.report.row_vs_ceiling(
            format!("{name} (vs claim-then-update, batch 1)"),
            figure,
            s.median,
            Some(&one),
        );
    }
    ctx.report.note(format!(
        "{name}: per job {:.0} WAL bytes, {:.4} commits; avg completion batch {:.0}; CPU cores used: bench process {:.2}, postgres {:.2} (medians of 3)",
        m(|r| r.wal_per_job),
        m(|r| r.commits_per_job),
        m(|r| r.avg_complete),
        m(|r| r.cpu_bench / r.secs),
        m(|r| r.cpu_pg / r.secs)
    ));
    let runs_json: Vec<Value> = runs.iter().map(DrainRun::json).collect();
    ctx.report.detail(
        name,
        json!({ "jobs_per_s": s.json(), "avg_claim_batch": claim.json(), "runs": runs_json }),
    );
    s.median
}

/// The shipped-defaults runs, each right after the ceiling's two delete-shaped
/// drains by pgbench when `ctx.paired` is set: the one-statement bound and
/// claim-then-delete, measured seconds before the drain they divide. Returns the
/// runs and the two bounds per run (empty when not paired or a pairing failed).
async fn runs_paired(ctx: &Ctx, s: Settings) -> Result<(Vec<DrainRun>, Vec<f64>, Vec<f64>)> {
    let n = backlog(ctx.quick);
    let (mut v, mut bounds, mut deletes) = (Vec::new(), Vec::new(), Vec::new());
    let mut paired = ctx.paired.as_ref();
    for run in 1..=3 {
        if let Some(p) = paired {
            match pair(p).await {
                Ok((bound, delete)) => {
                    bounds.push(bound);
                    deletes.push(delete);
                }
                Err(e) => {
                    eprintln!("paired drain bound failed, drains not paired: {e:#}");
                    (paired, bounds, deletes) = (None, Vec::new(), Vec::new());
                }
            }
        }
        let what = format!("shipped defaults, run {run}/3");
        v.push(once(ctx, n, s, None, &what).await?);
    }
    Ok((v, bounds, deletes))
}

/// The one-statement bound and claim-then-delete, in that order.
async fn pair(p: &Paired) -> Result<(f64, f64)> {
    let bound = p.drain(DrainShape::OneStatement).await?;
    let delete = p.drain(DrainShape::ClaimThenDelete).await?;
    println!("    paired: one-statement bound {bound:.0}/s, claim-then-delete {delete:.0}/s");
    Ok((bound, delete))
}

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let n = backlog(ctx.quick);
    let d = Settings::defaults();
    let (r, bounds, deletes) = runs_paired(ctx, d).await?;
    let name = format!(
        "3a. drain {}k, shipped defaults, concurrency {}",
        n / 1000,
        d.concurrency
    );
    let median = report(ctx, &name, &r);
    let rates: Vec<f64> = r.iter().map(|r| r.rate).collect();
    for (shape, pairs, vs) in [
        (
            DrainShape::OneStatement,
            &bounds,
            "vs ack+claim in one statement",
        ),
        (
            DrainShape::ClaimThenDelete,
            &deletes,
            "vs claim-then-delete",
        ),
    ] {
        let row = format!("{name} ({vs})");
        paired::row(&mut ctx.report, &row, &rates, pairs, &shape.label());
    }
    if r.iter().all(|r| r.unfinished.is_none()) {
        ctx.sustain_base = Some((median, "median drain with shipped defaults (3a)".into()));
    }
    if ctx.no_sweep {
        return Ok(());
    }

    // A claim takes at most the idle handlers plus the claim-ahead allowance (up to
    // nine times the concurrency, shared by two claims in flight), so max_claim_batch
    // only matters below five times the concurrency: the grid skips combinations
    // that behave the same.
    let grid: Vec<Settings> = if ctx.quick {
        [50, 100, 200, 400]
            .map(|c| Settings {
                concurrency: c,
                max_claim_batch: 500,
            })
            .to_vec()
    } else {
        [
            (50, 500),
            (100, 500),
            (200, 100),
            (200, 500),
            (400, 100),
            (400, 500),
            (1000, 1000),
        ]
        .map(|(c, b)| Settings {
            concurrency: c,
            max_claim_batch: b,
        })
        .to_vec()
    };
    let mut sweep = Vec::new();
    for s in &grid {
        let r = once(ctx, n, *s, None, "sweep, 1 run").await?;
        sweep.push(json!({ "concurrency": s.concurrency, "max_claim_batch": s.max_claim_batch, "run": r.json() }));
        ctx.report.note(format!(
            "sweep (1 run each): {} -> {:.0}/s, avg claim batch {:.0}",
            s.label(),
            r.rate,
            r.avg_claim
        ));
        let replace = match &ctx.sustain_base {
            None => true,
            Some((rate, from)) => from.starts_with("fastest") && r.rate > *rate,
        };
        if r.unfinished.is_none() && replace {
            ctx.sustain_base = Some((
                r.rate,
                format!(
                    "fastest finished sweep run ({}); 3a did not finish",
                    s.label()
                ),
            ));
        }
        let better = match ctx.best {
            Some((_, best)) => r.rate > best,
            None => true,
        };
        if better {
            ctx.best = Some((*s, r.rate));
        }
    }
    ctx.report.detail("3. drain sweep", Value::Array(sweep));
    let (best, _) = ctx.best.expect("the sweep ran");
    let r = runs(ctx, best, None, "best settings").await?;
    let name = format!("3b. drain {}k, best of sweep: {}", n / 1000, best.label());
    let median = report(ctx, &name, &r);
    ctx.best = Some((best, median));
    Ok(())
}

/// For a diagnosis only (`LQ_BENCH_DRAIN_TIMELINE=MS`): the jobs that succeeded in
/// each `MS` of a drain, to tell its start and its tail from its steady middle.
struct Timeline {
    step: Option<Duration>,
    points: Vec<(Duration, u64)>,
}

impl Timeline {
    fn from_env() -> Self {
        let step = std::env::var("LQ_BENCH_DRAIN_TIMELINE")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis);
        Timeline {
            step,
            points: Vec::new(),
        }
    }

    fn sample(&mut self, t0: Instant, succeeded: u64) {
        if self.step.is_some() {
            self.points.push((t0.elapsed(), succeeded));
        }
    }

    fn print(&self, secs: f64, n: u64) {
        let Some(step) = self.step else { return };
        let mut line = String::new();
        let (mut next, mut last) = (step, 0u64);
        for &(at, done) in &self.points {
            if at >= next {
                line.push_str(&format!(" {}", done - last));
                last = done;
                next += step;
            }
        }
        // The steady rate: the middle 80 % of the jobs, against the whole drain's.
        let at = |share: f64| {
            self.points
                .iter()
                .find(|p| p.1 as f64 >= share * n as f64)
                .map_or(secs, |p| p.0.as_secs_f64())
        };
        let (t10, t90) = (at(0.1), at(0.9));
        println!(
            "    timeline, jobs per {} ms:{line}\n    10 % done at {:.3} s, 90 % at {:.3} s: middle {:.0}/s against {:.0}/s overall",
            step.as_millis(),
            t10,
            t90,
            0.8 * n as f64 / (t90 - t10),
            n as f64 / secs
        );
    }
}
