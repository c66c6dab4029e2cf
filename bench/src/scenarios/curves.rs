//! Scenario 9 (opt-in: `--only curves`): cost curves as the work grows, each
//! point drains of no-op jobs with the shipped defaults unless stated, in
//! rounds (see [`rounds`]: every point once a round, three rounds unless
//! `LQ_BENCH_CURVES_ROUNDS` says otherwise, one with `--quick`); a row shows
//! the median drain of its point and the range.
//!
//! - payload size: 100 B, 10 kB, 100 kB;
//! - queues: 1, 100, 1,000 served by one runtime — idle polling cost (commits
//!   per second with nothing to do) and a drain spread over all of them;
//! - backlog: the first 100,000 jobs of a backlog of 200k, 2M and 10M;
//! - runtimes sharing one server: 1, 4, 16 separate OS processes (this program
//!   re-executed in its child mode, see [`child`]) draining one backlog.
//!
//! Every point reports jobs/s, commits per job (the harness's own statements
//! left out), the claim latency as the runtime sees it (see [`claims`]) and
//! what the bench database's sessions waited on (see [`watch`]).
//!
//! For development, `LQ_BENCH_CURVES_DIV=N` divides every size by N (and
//! shortens the idle windows), and `LQ_BENCH_CURVES_ONLY=payloads,queues,
//! backlogs,runtimes` runs only the curves named. For a diagnosis,
//! `LQ_BENCH_CHILD_CLAIM_AHEAD=off` turns claim-ahead off, and
//! `LQ_BENCH_CHILD_MAX_CLAIM_BATCH=N` sets `max_claim_batch`, in the runtime
//! processes of the `runtimes` curve (not the shipped defaults then), and
//! `LQ_BENCH_CURVES_WARM=1` starts those runtimes before the drain is timed
//! (see [`child::warm_start`]); `LQ_BENCH_CURVES_PROCESSES=1,16` picks that
//! curve's points, and `LQ_BENCH_GLOBAL_LIMIT=N` and `LQ_BENCH_RATE_LIMIT=N`
//! put the limits on the queue that every runtime process shares (see
//! `scenarios::with_diagnosis_limits`).

pub mod child;
pub mod claims;
mod rounds;
pub mod watch;

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use lq_runtime::{Runtime, RuntimeConfig};
use serde_json::{json, Value};

use super::{announce, Ctx, DEFAULT_CONCURRENCY, QUEUE};
use crate::{
    cpu::CpuSnap,
    db,
    stats::{percentile, thousands},
};
use child::{Child, ChildReport};
use claims::Latency;
use rounds::Run;
use watch::{Waits, Watch};

/// Longest a drain may take before the point fails.
const LIMIT: Duration = Duration::from_secs(300);
/// Rows per prefill statement (a 10M backlog goes in ten statements).
const PREFILL_CHUNK: u64 = 1_000_000;
/// Wait labels shown per point in the table (more in the JSON details).
const TOP_WAITS: usize = 3;

/// `LQ_BENCH_CURVES_DIV`: every size is divided by it (1 when unset).
fn div() -> u64 {
    std::env::var("LQ_BENCH_CURVES_DIV")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|d| *d >= 1)
        .unwrap_or(1)
}

/// `n` divided by [`div`].
fn scaled(n: u64) -> u64 {
    (n / div()).max(1)
}

/// Whether `curve` runs: all of them unless `LQ_BENCH_CURVES_ONLY` names others.
fn wanted(curve: &str) -> bool {
    std::env::var("LQ_BENCH_CURVES_ONLY").map_or(true, |v| v.split(',').any(|c| c.trim() == curve))
}

/// The points of the `runtimes` curve: 1, 4 and 16 runtime processes, or those
/// `LQ_BENCH_CURVES_PROCESSES` lists (`1,16`), to profile one point at a time.
fn processes() -> Vec<usize> {
    std::env::var("LQ_BENCH_CURVES_PROCESSES")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .filter(|n| *n >= 1)
                .collect::<Vec<usize>>()
        })
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| vec![1, 4, 16])
}

/// `200k`, `2M`, `10M`: a job count for a row label.
fn short(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// Fills `n` no-op jobs of `payload_bytes` each over `queues` (round robin), in
/// statements of at most [`PREFILL_CHUNK`] rows.
async fn prefill(ctx: &Ctx, n: u64, payload_bytes: usize, queues: usize) -> Result<()> {
    let mut from = 0;
    while from < n {
        let rows = PREFILL_CHUNK.min(n - from);
        prefill_chunk(ctx, from, rows, payload_bytes, queues).await?;
        from += rows;
    }
    Ok(())
}

/// Inserts jobs `from + 1 ..= from + rows` of [`prefill`].
async fn prefill_chunk(
    ctx: &Ctx,
    from: u64,
    rows: u64,
    payload_bytes: usize,
    queues: usize,
) -> Result<()> {
    // Hex of distinct md5s: as incompressible as TOAST would see real data.
    let chunks = (payload_bytes / 32).max(1) as i32;
    sqlx::query(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         select 'bench.noop',
                case when $3 = 1 then $4 else 'q' || (g % $3) end,
                jsonb_build_object('n', g, 'pad',
                    (select string_agg(md5(g::text || '.' || i::text), '') from generate_series(1, $2) i)),
                20
         from generate_series($5 + 1, $5 + $1) g",
    )
    .bind(rows as i64)
    .bind(if payload_bytes <= 64 { 0 } else { chunks })
    .bind(queues as i32)
    .bind(QUEUE)
    .bind(from as i64)
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

/// Starts one runtime on a pool of its own, serving `queues` with `concurrency` each.
async fn start(ctx: &Ctx, queues: &[String], concurrency: usize) -> Result<Runtime> {
    let pool = db::runtime_pool(&ctx.opts).await?;
    let mut b = Runtime::builder(pool).config(RuntimeConfig::default());
    for q in queues {
        b = b.queue(q.clone(), concurrency);
    }
    Ok(b.start().await?)
}

/// What one drain measured.
struct Drained {
    jobs: u64,
    secs: f64,
    commits_per_job: f64,
    claims: Latency,
    waits: Waits,
    /// CPU cores used by the runtime side (this process, or the runtime
    /// processes together) and by every PostgreSQL process, over the drain.
    cores_runtime: f64,
    cores_pg: f64,
}

impl Drained {
    fn rate(&self) -> f64 {
        self.jobs as f64 / self.secs
    }

    /// Commits, claim latency, waits and cores, for a table row.
    fn tail(&self) -> String {
        format!(
            "{:.4} commits/job; {}; {}; cores: runtime {:.2}, postgres {:.2}",
            self.commits_per_job,
            self.claims.show(),
            self.waits.show(TOP_WAITS),
            self.cores_runtime,
            self.cores_pg
        )
    }

    /// Prints the point's figures below its announcement.
    fn print(&self) {
        println!(
            "    {} jobs/s ({} in {:.2} s); {}",
            thousands(self.rate()),
            self.jobs,
            self.secs,
            self.tail()
        );
        println!(
            "    claims: {} ({} empty); all sampled session states: {}; client sessions on the server at most {} of max_connections {}",
            self.claims.claims,
            self.claims.empty,
            self.waits
                .means
                .iter()
                .map(|(w, m)| format!("{w} {m:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.waits.peak_clients,
            self.waits.max_connections
        );
    }

    fn json(&self) -> Value {
        json!({ "jobs": self.jobs, "secs": self.secs, "jobs_per_s": self.rate(),
                "commits_per_job": self.commits_per_job, "claim_latency": self.claims.json(),
                "waits": self.waits.json(), "cores_runtime": self.cores_runtime,
                "cores_postgres": self.cores_pg })
    }
}

/// Commits on the bench database since `c0`, less the watch's own `watched`,
/// read once every runtime and watch session has ended (and so flushed its
/// statistics).
async fn commits_since(ctx: &Ctx, c0: i64, watched: u64) -> Result<i64> {
    watch::quiet(&ctx.pool).await?;
    let (_, c1) = db::wal_and_commits(&ctx.pool).await?;
    Ok(c1 - c0 - watched as i64)
}

/// Fails unless at least `n` jobs have succeeded; returns how many did.
async fn succeeded(ctx: &Ctx, n: u64) -> Result<u64> {
    let (done, _, _) = db::batches(&ctx.pool, 0).await?;
    ensure!(done as u64 >= n, "only {done} of {n} jobs succeeded");
    Ok(done as u64)
}

/// One runtime in this process drains until `n` jobs have succeeded (its own
/// count, taken after each completion commits); measured from its start.
async fn drain_in_process(
    ctx: &Ctx,
    queues: &[String],
    concurrency: usize,
    n: u64,
) -> Result<Drained> {
    let (_, c0) = db::wal_and_commits(&ctx.pool).await?;
    let watch = Watch::open(&ctx.opts).await?;
    claims::start();
    let rt = start(ctx, queues, concurrency).await?;
    let t0 = Instant::now();
    let cpu0 = CpuSnap::now();
    while rt.stats().succeeded < n && t0.elapsed() < LIMIT {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let (cpu_me, cpu_pg) = CpuSnap::now().since(&cpu0);
    let samples = claims::stop();
    rt.shutdown().await?;
    let (waits, watched) = watch.close().await?;
    let commits = commits_since(ctx, c0, watched).await?;
    let done = succeeded(ctx, n).await?;
    Ok(Drained {
        jobs: n,
        secs,
        commits_per_job: commits as f64 / done as f64,
        claims: Latency::of(&samples),
        waits,
        cores_runtime: cpu_me / secs,
        cores_pg: cpu_pg / secs,
    })
}

/// `r` runtime processes drain the whole prefilled queue of `n` jobs together;
/// measured from `go` to the queue found empty. Returns the children's reports too.
async fn drain_processes(ctx: &Ctx, r: usize, n: u64) -> Result<(Drained, Vec<ChildReport>)> {
    let warm = child::warm_start();
    if warm {
        lq_runtime::control::pause_queue(&ctx.pool, QUEUE, "lq-bench: runtimes starting").await?;
    }
    let mut kids = (0..r)
        .map(|_| Child::spawn(DEFAULT_CONCURRENCY))
        .collect::<Result<Vec<_>>>()?;
    for k in &mut kids {
        k.ready().await?;
    }
    let (_, c0) = db::wal_and_commits(&ctx.pool).await?;
    let watch = Watch::open(&ctx.opts).await?;
    let cpu0 = CpuSnap::now();
    let t0 = Instant::now();
    if warm {
        lq_runtime::control::resume_queue(&ctx.pool, QUEUE).await?;
    }
    for k in &mut kids {
        k.go().await?;
    }
    wait_drained(&watch, &mut kids, t0).await?;
    let secs = t0.elapsed().as_secs_f64();
    let (_, cpu_pg) = CpuSnap::now().since(&cpu0);
    let reports = finish_all(kids).await?;
    let (waits, watched) = watch.close().await?;
    let commits = commits_since(ctx, c0, watched).await?;
    let done = succeeded(ctx, n).await?;
    let samples: Vec<claims::Sample> = reports.iter().flat_map(|r| r.claims.clone()).collect();
    let drained = Drained {
        jobs: n,
        secs,
        commits_per_job: commits as f64 / done as f64,
        claims: Latency::of(&samples),
        waits,
        cores_runtime: reports.iter().map(|r| r.cpu_secs).sum::<f64>() / secs,
        cores_pg: cpu_pg / secs,
    };
    Ok((drained, reports))
}

/// Polls every 20 ms until `lq.jobs` is empty; fails when a runtime process
/// exits first or [`LIMIT`] passes.
async fn wait_drained(watch: &Watch, kids: &mut [Child], t0: Instant) -> Result<()> {
    loop {
        if watch.drained().await? {
            return Ok(());
        }
        if let Some(i) = kids.iter_mut().position(|k| k.exited()) {
            bail!("runtime process {i} exited before the queue was drained");
        }
        if t0.elapsed() > LIMIT {
            bail!("the queue was not drained within {LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops every runtime process at once and collects their reports.
async fn finish_all(kids: Vec<Child>) -> Result<Vec<ChildReport>> {
    let mut set = tokio::task::JoinSet::new();
    for k in kids {
        set.spawn(k.finish());
    }
    let mut reports = Vec::new();
    while let Some(r) = set.join_next().await {
        reports.push(r??);
    }
    Ok(reports)
}

async fn payloads(ctx: &mut Ctx) -> Result<()> {
    let sizes = [(100usize, 20_000u64), (10_000, 20_000), (100_000, 5_000)]
        .map(|(bytes, n)| (bytes, scaled(if ctx.quick { n / 4 } else { n })));
    let (of, mut points) = (rounds::rounds(ctx.quick), rounds::points(sizes.len()));
    for round in 1..=of {
        for (&(bytes, n), point) in sizes.iter().zip(&mut points) {
            db::reset(&ctx.pool, None).await?;
            prefill(ctx, n, bytes, 1).await?;
            db::settle(&ctx.pool).await?;
            announce(&format!(
                "curve payload {bytes} B: drain {n}{}",
                rounds::label(round, of)
            ));
            let (w0, _) = db::wal_and_commits(&ctx.pool).await?;
            let d = drain_in_process(ctx, &queue_names(1), DEFAULT_CONCURRENCY, n).await?;
            let (w1, _) = db::wal_and_commits(&ctx.pool).await?;
            let wal = (w1 - w0) / n as f64;
            d.print();
            println!(
                "    {:.1} MB/s of payload, {wal:.0} WAL bytes per job",
                d.rate() * bytes as f64 / 1e6
            );
            point.push(Run {
                drained: d,
                lead: format!("{wal:.0} WAL bytes/job; "),
                trail: String::new(),
                extra: json!({ "wal_bytes_per_job": wal }),
            });
        }
    }
    for (&(bytes, n), point) in sizes.iter().zip(&points) {
        let mb = point.median().drained.rate() * bytes as f64 / 1e6;
        ctx.report.row(
            format!("9a. curve: payload {bytes} B, drain {}", short(n)),
            format!("{} ({mb:.1} MB/s)", point.rate()),
            point.tail(),
            None,
        );
        ctx.report
            .detail(&format!("curve_payload_{bytes}"), point.json());
    }
    Ok(())
}

/// What serving `names` with nothing to do costs the server: commits per
/// second over an idle window, the latency of the empty claims meanwhile, and
/// the runtime's own count of claims and idle polls in the window.
async fn idle(ctx: &Ctx, names: &[String]) -> Result<(f64, Latency, u64, u64)> {
    let (secs, settle) = if div() > 1 { (3, 2) } else { (10, 12) };
    db::reset(&ctx.pool, None).await?;
    db::settle(&ctx.pool).await?;
    let rt = start(ctx, names, 10).await?;
    // Past start-up's own claims (one per queue, and one more when the listener
    // subscribes): PostgreSQL 15 reports an idle session's commits up to 10 s
    // late, so a shorter wait counts them in the window.
    tokio::time::sleep(Duration::from_secs(settle)).await;
    claims::start();
    let s0 = rt.stats();
    let (_, c0) = db::wal_and_commits(&ctx.pool).await?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await; // the window measured
    let (_, c1) = db::wal_and_commits(&ctx.pool).await?;
    let rate = (c1 - c0) as f64 / t0.elapsed().as_secs_f64();
    let s1 = rt.stats();
    let samples = claims::stop();
    rt.shutdown().await?;
    let (claims, polls) = (s1.claims - s0.claims, s1.idle_polls - s0.idle_polls);
    Ok((rate, Latency::of(&samples), claims, polls))
}

async fn queues(ctx: &mut Ctx) -> Result<()> {
    let counts = [1usize, 100, 1000];
    // Busy: 50k jobs over all of them, 10 handlers per queue.
    let n = scaled(if ctx.quick { 20_000 } else { 50_000 });
    let (of, mut points) = (rounds::rounds(ctx.quick), rounds::points(counts.len()));
    // Idle once per point (it reads the same in every run), in the first round.
    let mut idles = Vec::new();
    for round in 1..=of {
        for (&q, point) in counts.iter().zip(&mut points) {
            let names = queue_names(q);
            if round == 1 {
                announce(&format!("curve queues {q}: idle"));
                let (rate, latency, claims, polls) = idle(ctx, &names).await?;
                println!(
                    "    idle: {rate:.1} commits/s; {claims} claims and {polls} idle polls by the runtime, {}",
                    latency.show()
                );
                idles.push((
                    format!(
                        "idle: {rate:.1} commits/s, {claims} claims, {polls} polls ({}); drain: ",
                        latency.show()
                    ),
                    json!({ "idle_commits_per_s": rate, "idle_claim_latency": latency.json(),
                            "idle_claims": claims, "idle_polls": polls }),
                ));
            }
            announce(&format!(
                "curve queues {q}: a drain of {n} spread over them{}",
                rounds::label(round, of)
            ));
            db::reset(&ctx.pool, None).await?;
            prefill(ctx, n, 0, q).await?;
            db::settle(&ctx.pool).await?;
            let d = drain_in_process(ctx, &names, 10, n).await?;
            d.print();
            point.push(Run::plain(d));
        }
    }
    for ((&q, point), (idle, idle_json)) in counts.iter().zip(&points).zip(idles) {
        ctx.report.row(
            format!("9b. curve: {q} queues, one runtime, 10 handlers each"),
            format!("drain {}: {}", short(n), point.rate()),
            format!("{idle}{}", point.tail()),
            None,
        );
        let mut detail = point.json();
        if let (Some(d), Some(idle)) = (detail.as_object_mut(), idle_json.as_object()) {
            d.extend(idle.clone());
        }
        ctx.report.detail(&format!("curve_queues_{q}"), detail);
    }
    Ok(())
}

async fn backlogs(ctx: &mut Ctx) -> Result<()> {
    let n = scaled(if ctx.quick { 50_000 } else { 100_000 });
    let sizes = [200_000u64, 2_000_000, 10_000_000].map(scaled);
    let (of, mut points) = (rounds::rounds(ctx.quick), rounds::points(sizes.len()));
    for round in 1..=of {
        for (&backlog, point) in sizes.iter().zip(&mut points) {
            db::reset(&ctx.pool, None).await?;
            let t = Instant::now();
            prefill(ctx, backlog, 0, 1).await?;
            db::exec(&ctx.pool, "vacuum analyze lq.jobs").await?;
            println!(
                "    (prefilled {backlog} and vacuumed in {:.0} s; {})",
                t.elapsed().as_secs_f64(),
                sizes_of_jobs(ctx).await?
            );
            db::settle(&ctx.pool).await?;
            announce(&format!(
                "curve backlog {backlog}: drain the first {n}{}",
                rounds::label(round, of)
            ));
            let s0 = db::table_stats(&ctx.pool).await?;
            let d = drain_in_process(ctx, &queue_names(1), DEFAULT_CONCURRENCY, n).await?;
            let s1 = db::table_stats(&ctx.pool).await?;
            d.print();
            let io = json!({
                "heap_blocks_read": s1.heap_read - s0.heap_read, "heap_blocks_hit": s1.heap_hit - s0.heap_hit,
                "index_blocks_read": s1.idx_read - s0.idx_read, "index_blocks_hit": s1.idx_hit - s0.idx_hit,
                "vacuums": s1.vacuums - s0.vacuums });
            println!("    lq.jobs blocks over the drain (and shutdown): {io}");
            point.push(Run {
                extra: json!({ "lq_jobs_blocks": io }),
                ..Run::plain(d)
            });
        }
    }
    for (&backlog, point) in sizes.iter().zip(&points) {
        ctx.report.row(
            format!(
                "9c. curve: backlog {}, first {} drained",
                short(backlog),
                short(n)
            ),
            point.rate(),
            point.tail(),
            None,
        );
        ctx.report
            .detail(&format!("curve_backlog_{backlog}"), point.json());
    }
    // Give the disk back (truncate frees the files at once).
    db::reset(&ctx.pool, None).await?;
    Ok(())
}

/// Sizes of `lq.jobs` and its pickup index, for the record.
async fn sizes_of_jobs(ctx: &Ctx) -> Result<String> {
    let (table, pickup): (String, String) = sqlx::query_as(
        "select pg_size_pretty(pg_total_relation_size('lq.jobs')),
                pg_size_pretty(pg_relation_size('lq.jobs_pickup'))",
    )
    .fetch_one(&ctx.pool)
    .await?;
    Ok(format!(
        "lq.jobs {table} with indexes, pickup index {pickup}"
    ))
}

async fn runtimes(ctx: &mut Ctx) -> Result<()> {
    let n = scaled(if ctx.quick { 50_000 } else { 200_000 });
    let counts = processes();
    note_connections(ctx, &counts).await?;
    let (of, mut points) = (rounds::rounds(ctx.quick), rounds::points(counts.len()));
    for round in 1..=of {
        for (&r, point) in counts.iter().zip(&mut points) {
            db::reset(&ctx.pool, None).await?;
            db::prefill_noop(&ctx.pool, n).await?;
            db::settle(&ctx.pool).await?;
            announce(&format!(
                "curve runtimes {r}: {r} runtime process(es) drain {n}, concurrency {DEFAULT_CONCURRENCY} each{}",
                rounds::label(round, of)
            ));
            let s0 = db::table_stats(&ctx.pool).await?;
            let (d, reports) = drain_processes(ctx, r, n).await?;
            let s1 = db::table_stats(&ctx.pool).await?;
            d.print();
            println!("    per process: {}", per_process(&reports));
            let work = work_per_job(ctx, &s0, &s1, &d).await?;
            println!("    per job: {work}");
            let processes = reports
                .iter()
                .map(|c| {
                    json!({ "claimed": c.claimed, "succeeded": c.succeeded, "cpu_secs": c.cpu_secs,
                                 "start_ms": c.start_ms,
                                 "claim_latency": Latency::of(&c.claims).json() })
                })
                .collect::<Vec<_>>();
            point.push(Run {
                drained: d,
                lead: String::new(),
                trail: format!("; per job: {work}"),
                extra: json!({ "per_job": work, "processes": processes }),
            });
        }
    }
    for (&r, point) in counts.iter().zip(&points) {
        ctx.report.row(
            format!("9d. curve: {r} runtime process(es) sharing the server"),
            format!("drain {}: {}", short(n), point.rate()),
            point.tail(),
            None,
        );
        ctx.report
            .detail(&format!("curve_runtimes_{r}"), point.json());
    }
    Ok(())
}

/// Says in the report which points of the `runtimes` curve need more
/// connections than the server has free (`max_connections` less the sessions
/// open before the curve, the harness's among them): their runtimes wait for
/// connections that other processes hold, which bends the curve for a reason
/// of the server's settings, not of the claims.
async fn note_connections(ctx: &mut Ctx, counts: &[usize]) -> Result<()> {
    let each = child::connections(&ctx.pool, DEFAULT_CONCURRENCY);
    let (open, max) = watch::clients(&ctx.pool).await?;
    let free = (max - open).max(0);
    let short: Vec<String> = counts
        .iter()
        .filter(|&&r| r as i64 * i64::from(each) > free)
        .map(|&r| format!("{r} ({} connections)", r as i64 * i64::from(each)))
        .collect();
    let verdict = if short.is_empty() {
        "every point fits".to_owned()
    } else {
        format!(
            "more than that at {}: those points wait for connections, so they measure the \
             server's connection limit too (run the curve on a server with more, e.g. \
             `LQ_FORCE_PRIVATE=1 scripts/with-postgres`, whose cluster allows 300)",
            short.join(", ")
        )
    };
    let line = format!(
        "Curve 9d: each runtime process opens up to {each} connections (its runtime's own, \
         `RuntimeBuilder::connections`, and one of its application pool); the server had {free} \
         free of max_connections {max} before the curve; {verdict}."
    );
    println!("{line}");
    ctx.report.note(line);
    Ok(())
}

/// Where the server's work a job went in a drain of the `runtimes` curve, for
/// telling why the curve bends: PostgreSQL's CPU, the jobs a claim and a
/// completion statement took on average (each stamps one `started_at` or
/// `finished_at`), and the `lq.jobs` heap and index blocks touched and rows
/// written (between `s0` and `s1`, read after every runtime process ended and
/// so flushed its statistics).
async fn work_per_job(
    ctx: &Ctx,
    s0: &db::TableStats,
    s1: &db::TableStats,
    d: &Drained,
) -> Result<String> {
    let (done, claims, completions) = db::batches(&ctx.pool, 0).await?;
    let jobs = done.max(1) as f64;
    let blocks = |hit: i64, read: i64| (hit + read) as f64 / jobs;
    Ok(format!(
        "PostgreSQL {:.1} µs of CPU; claim batch {:.0}, completion batch {:.0}; \
         lq.jobs blocks touched: heap {:.2}, index {:.2}; rows updated {:.3} \
         (HOT {:.3}), deleted {:.3}",
        d.cores_pg * d.secs * 1e6 / jobs,
        jobs / claims.max(1) as f64,
        jobs / completions.max(1) as f64,
        blocks(s1.heap_hit - s0.heap_hit, s1.heap_read - s0.heap_read),
        blocks(s1.idx_hit - s0.idx_hit, s1.idx_read - s0.idx_read),
        (s1.updated - s0.updated) as f64 / jobs,
        (s1.hot_updated - s0.hot_updated) as f64 / jobs,
        (s1.deleted - s0.deleted) as f64 / jobs,
    ))
}

/// How the drain split over the processes: jobs and claim p99 (min–max), and
/// their claims that overlapped another or waited for a claim slot (in all).
fn per_process(reports: &[ChildReport]) -> String {
    let mut jobs: Vec<f64> = reports.iter().map(|c| c.succeeded as f64).collect();
    let mut p99: Vec<f64> = reports
        .iter()
        .map(|c| Latency::of(&c.claims).p99_ms)
        .collect();
    jobs.sort_by(f64::total_cmp);
    p99.sort_by(f64::total_cmp);
    let slowest_start = reports.iter().map(|c| c.start_ms).fold(0.0, f64::max);
    format!(
        "jobs succeeded {}–{} (median {}), claim p99 {:.2}–{:.2} ms, CPU {:.2} s in all, \
         runtime start within {slowest_start:.0} ms of `go`; claims overlapping another {}, \
         waiting for a claim slot {}",
        jobs[0],
        jobs[jobs.len() - 1],
        percentile(&jobs, 50.0),
        p99[0],
        p99[p99.len() - 1],
        reports.iter().map(|c| c.cpu_secs).sum::<f64>(),
        reports.iter().map(|c| c.overlapping_claims).sum::<u64>(),
        reports.iter().map(|c| c.throttled_claims).sum::<u64>()
    )
}

pub async fn run(ctx: &mut Ctx) -> Result<()> {
    ctx.report.note(
        "Curves (9a–9d): claim p50/p99 is the claim statement's round trip as the runtime sees it: \
         from the lq.claim span's creation (before the claimer takes its connection) to its \
         lq.claimed record (after the statement returned), every claim of the drain, empty ones \
         included; 9d merges the samples of all runtime processes. Waits are the mean number of \
         the bench database's sessions (runtimes' and server workers', not the harness's) per \
         wait_event_type/wait_event, pg_stat_activity sampled every 100 ms during the drain; \
         commits per job leave out the sampler's own.",
    );
    ctx.report.note(format!(
        "Curves: {} round(s), each draining every point of a curve once; a row shows its point's \
         median drain [lowest–highest], and the median drain's other figures.",
        rounds::rounds(ctx.quick)
    ));
    if div() > 1 {
        ctx.report.note(format!(
            "Curves run reduced: LQ_BENCH_CURVES_DIV={} divides every size.",
            div()
        ));
    }
    if wanted("payloads") {
        payloads(ctx).await?;
    }
    if wanted("queues") {
        queues(ctx).await?;
    }
    if wanted("backlogs") {
        backlogs(ctx).await?;
    }
    if wanted("runtimes") {
        runtimes(ctx).await?;
    }
    Ok(())
}
