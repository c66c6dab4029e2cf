//! Scenario 1: one job per autocommit transaction, 1 and 4 producers: on the
//! pool the README recommends (`job.enqueue(&pool)`, no ping before each acquire)
//! and on an `Enqueuer` (`job.enqueue(&enqueuer)`, the README's recommendation for
//! such enqueues), each with and without the wake-up NOTIFY; on a connection per
//! producer, NOTIFY off (the floor: no pool, no hand-off); and once, 1 producer
//! with NOTIFY, on sqlx's default pool, to show what that costs. Each run comes
//! right after its own pgbench run of the ceiling's single-row insert with as
//! many clients (`paired`).

use anyhow::Result;
use lq_runtime::{EnqueueOptions, Enqueuer, Job};
use serde_json::json;

use super::{announce, closed_loop, Ctx};
use crate::{
    cpu::CpuSnap,
    db,
    jobs::Noop,
    paired::{self, Paired},
    stats::Spread,
};

/// What the producers enqueue on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// `&PgPool`, built as the README recommends (no ping before each acquire).
    Pool,
    /// `&PgPool` with sqlx's defaults (a ping before each acquire).
    DefaultPool,
    /// `&Enqueuer` with its default connections.
    Enqueuer,
    /// `&mut PgConnection`, one per producer and its own, NOTIFY off: the same
    /// single-row statement with no pool, no hand-off and no wake-up, the floor
    /// for the other targets.
    Connection,
}

/// One way of enqueueing measured.
#[derive(Clone, Copy)]
struct Variant {
    notify: bool,
    producers: u32,
    target: Target,
}

const fn variant(notify: bool, producers: u32, target: Target) -> Variant {
    Variant {
        notify,
        producers,
        target,
    }
}

/// The sqlx baselines: how each sends pgbench's statement, and whether on a
/// connection of each producer's own (else through a pool).
const BASELINES: [(&str, bool); 2] = [("", false), (", on a connection per producer", true)];

/// The variants, in report order.
const VARIANTS: [Variant; 11] = [
    variant(true, 1, Target::Pool),
    variant(true, 4, Target::Pool),
    variant(false, 1, Target::Pool),
    variant(false, 4, Target::Pool),
    variant(true, 1, Target::DefaultPool),
    variant(true, 1, Target::Enqueuer),
    variant(true, 4, Target::Enqueuer),
    variant(false, 1, Target::Enqueuer),
    variant(false, 4, Target::Enqueuer),
    variant(false, 1, Target::Connection),
    variant(false, 4, Target::Connection),
];

impl Target {
    /// How the row names it.
    fn label(self) -> &'static str {
        match self {
            Target::Pool => "",
            Target::DefaultPool => ", sqlx's default pool (a ping before each acquire)",
            Target::Enqueuer => ", on an Enqueuer",
            Target::Connection => ", on a connection per producer",
        }
    }
}

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let secs = if ctx.quick { 3.0 } else { 10.0 };
    // Runs interleave the variants (run 1 of each, then run 2 of each, ...), so a
    // drift in the host's speed does not land on one variant, such as NOTIFY off.
    // Within a run, each producer count starts with the sqlx baseline, then the two
    // NOTIFY variants, in an order that alternates from run to run; each of the
    // three comes right after its own pgbench run of the ceiling's insert, so a
    // ratio compares two measurements seconds apart (this host drifts).
    let mut rates = vec![Vec::new(); VARIANTS.len()];
    let mut cpus: Vec<Vec<Cpu>> = vec![Vec::new(); VARIANTS.len()];
    let mut loads = vec![Vec::new(); VARIANTS.len()];
    let mut paired = vec![Vec::new(); VARIANTS.len()];
    // Per producer count (1, 4) and way of sending (a pool, a connection each).
    let mut baseline = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    let mut baseline_paired = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    let only_enqueuer = std::env::var_os("LQ_BENCH_ENQUEUER_ONLY").is_some();
    // `LQ_BENCH_POOL_ONLY` runs the recommended pool's one-producer rows alone,
    // with and without the wake-up (the pacing's experiments).
    let only_pool = std::env::var_os("LQ_BENCH_POOL_ONLY").is_some();
    for run in 1..=3 {
        for producers in [1u32, 4] {
            let b = usize::from(producers > 1);
            if only_pool && producers > 1 {
                continue;
            }
            if let Some(p) = ctx.paired.as_ref().filter(|_| !only_pool) {
                for (w, &(how, own_connection)) in BASELINES.iter().enumerate() {
                    // The pool's baseline compares with the pool's rows, which
                    // `LQ_BENCH_ENQUEUER_ONLY` leaves out.
                    if only_enqueuer && !own_connection {
                        continue;
                    }
                    let what = format!("the sqlx baseline{how}");
                    let pgbench = pgbench_before(p, producers, secs, run, &what).await?;
                    baseline_paired[b][w].push(pgbench);
                    announce(&format!(
                        "enqueue single: the same insert by sqlx{how}, {producers} producer(s), run {run}/3"
                    ));
                    baseline[b][w].push(p.sqlx_single(producers, secs, own_connection).await?);
                }
            }
            let mut order: Vec<usize> = (0..VARIANTS.len())
                .filter(|&i| VARIANTS[i].producers == producers)
                .filter(|&i| {
                    !only_enqueuer
                        || VARIANTS[i].target != Target::Pool
                            && VARIANTS[i].target != Target::DefaultPool
                })
                .filter(|&i| !only_pool || VARIANTS[i].target == Target::Pool)
                .collect();
            if run % 2 == 0 {
                order.reverse();
            }
            for i in order {
                let Variant { notify, target, .. } = VARIANTS[i];
                let pool = target.label();
                if let Some(p) = &ctx.paired {
                    let next = format!("notify {notify}{pool}");
                    paired[i].push(pgbench_before(p, producers, secs, run, &next).await?);
                }
                db::reset(&ctx.pool, None).await?;
                loads[i].push(announce(&format!(
                    "enqueue single: {producers} producer(s), notify {notify}{pool}, run {run}/3"
                )));
                let (rate, cpu) = once(ctx, VARIANTS[i], secs).await?;
                rates[i].push(rate);
                cpus[i].push(cpu);
            }
        }
    }
    for (i, producers) in [1u32, 4].into_iter().enumerate() {
        for (w, (how, _)) in BASELINES.iter().enumerate() {
            let name = format!(
                "1. baseline: enqueue_1.sql's insert by sqlx (no litequeue){how}, {producers} producer{}",
                if producers > 1 { "s" } else { "" }
            );
            let what = format!("enqueue_1.sql by pgbench, {producers} client(s)");
            let (rates, pairs) = (&baseline[i][w], &baseline_paired[i][w]);
            paired::row(&mut ctx.report, &name, rates, pairs, &what);
            if !rates.is_empty() {
                let json = json!({ "jobs_per_s": Spread::of(rates).json(), "secs": secs });
                ctx.report.detail(&name, json);
            }
        }
    }
    let mut medians = Vec::new();
    for (i, &v) in VARIANTS.iter().enumerate() {
        let Variant {
            notify,
            producers,
            target,
        } = v;
        let (rates, loads) = (&rates[i], &loads[i]);
        let s = Spread::of(rates);
        let reference = ctx
            .ceiling
            .as_ref()
            .and_then(|c| c.enqueue_single(producers))
            .cloned();
        let name = format!(
            "1. enqueue single/tx, {producers} producer{}{}{}",
            if producers > 1 { "s" } else { "" },
            if notify { "" } else { ", notify off" },
            target.label()
        );
        ctx.report
            .row_vs_ceiling(&name, s.rate(), s.median, reference.as_ref());
        let pairs = &paired[i];
        let what = format!("enqueue_1.sql by pgbench, {producers} client(s)");
        paired::row(&mut ctx.report, &name, rates, pairs, &what);
        let cpu = Cpu::medians(&cpus[i]);
        ctx.report.detail(
            &name,
            json!({
                "jobs_per_s": s.json(), "secs": secs, "load": loads, "paired_ceiling_per_s": pairs,
                "cpu_us_per_job": { "bench": cpu.bench_us, "postgres": cpu.postgres_us },
            }),
        );
        if target == Target::Pool && !rates.is_empty() {
            medians.push((notify, producers, s.median));
        }
        if producers == 1 && !cpus[i].is_empty() {
            ctx.report.note(format!(
                "CPU a job, {name}: this process {:.1} µs, PostgreSQL {:.1} µs (medians of {})",
                cpu.bench_us,
                cpu.postgres_us,
                cpus[i].len()
            ));
        }
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

/// CPU time a job took during one run: of this process (producers, the
/// `Enqueuer`, the notifier) and of every PostgreSQL process, in µs. Read from
/// /proc, in ticks of 10 ms, so only a run of thousands of jobs reads true.
#[derive(Clone, Copy, Default)]
struct Cpu {
    bench_us: f64,
    postgres_us: f64,
}

impl Cpu {
    fn medians(runs: &[Cpu]) -> Cpu {
        let median = |f: fn(&Cpu) -> f64| {
            let v: Vec<f64> = runs.iter().map(f).collect();
            if v.is_empty() {
                0.0
            } else {
                Spread::of(&v).median
            }
        };
        Cpu {
            bench_us: median(|c| c.bench_us),
            postgres_us: median(|c| c.postgres_us),
        }
    }
}

async fn once(ctx: &Ctx, v: Variant, secs: f64) -> Result<(f64, Cpu)> {
    let Variant {
        notify,
        producers,
        target,
    } = v;
    // Two connections per producer: sqlx pings a connection as it goes back to the
    // pool, and with no spare one each enqueue would wait for the previous one's ping
    // (an application's pool is larger than its concurrent enqueues anyway).
    let pool = if target == Target::DefaultPool {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(2 * producers)
            .connect_with(ctx.opts.clone())
            .await?
    } else {
        db::pool(&ctx.opts, 2 * producers).await?
    };
    let enqueuer = (target == Target::Enqueuer).then(|| {
        // `LQ_BENCH_ENQUEUER_CONNECTIONS` tries other sizes than the default
        // (and `LQ_BENCH_ENQUEUER_ONLY` runs the enqueuer's and the connection's
        // rows alone).
        let connections = std::env::var("LQ_BENCH_ENQUEUER_CONNECTIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(lq_runtime::DEFAULT_ENQUEUER_CONNECTIONS);
        Enqueuer::with_connections(&pool, connections)
    });
    let conns = if target == Target::Connection {
        db::detached(&pool, producers).await?
    } else {
        Vec::new()
    };
    let shared = pool.clone();
    let cpu0 = CpuSnap::now();
    let rate = closed_loop(producers, secs, move |p, n| {
        let pool = shared.clone();
        let enqueuer = enqueuer.clone();
        let conn = conns.get(p as usize).cloned();
        async move {
            let job = Noop {
                n: u64::from(p) << 40 | n,
            };
            let opts = EnqueueOptions::new().notify(notify);
            match (&enqueuer, conn) {
                (Some(enqueuer), _) => job.enqueue_with(enqueuer, opts).await?,
                (None, Some(conn)) => job.enqueue_with(&mut *conn.lock().await, opts).await?,
                (None, None) => job.enqueue_with(&pool, opts).await?,
            };
            Ok(())
        }
    })
    .await?;
    let (bench, postgres) = CpuSnap::now().since(&cpu0);
    pool.close().await;
    let jobs = (rate * secs).max(1.0);
    let cpu = Cpu {
        bench_us: bench / jobs * 1e6,
        postgres_us: postgres / jobs * 1e6,
    };
    Ok((rate, cpu))
}

/// The ceiling's single-row insert by pgbench with `producers` clients, run right
/// before the measurement named `next`: rows per second.
async fn pgbench_before(
    p: &Paired,
    producers: u32,
    secs: f64,
    run: u32,
    next: &str,
) -> Result<f64> {
    announce(&format!(
        "enqueue single: ceiling's enqueue_1.sql by pgbench, {producers} client(s), before {next}, run {run}/3"
    ));
    p.enqueue_single(producers, secs).await
}
