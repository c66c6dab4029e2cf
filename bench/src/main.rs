//! lq-bench: litequeue's benchmark program.
//!
//! `cargo run --release -p lq-bench -- [--quick] [--json out.json] [--md out.md]
//! [--only enqueue,bulk,drain,statements,work,latency,retained,startup,sustained,curves]
//! (`curves`, the cost curves, and `statements`, the drain's statements without
//! the runtime, run only when named)
//! [--ceiling FILE | --ceiling-script PATH | --no-ceiling] [--ceiling-after-script PATH]
//! [--no-paired] [--no-sweep]` (`--no-sweep`: the drain runs its shipped-defaults row only)
//!
//! Creates its own database (`lq_bench`, dropped and recreated) on the server of
//! DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres), runs each
//! scenario three times and prints one table: the litequeue figure (median
//! [min–max]), the matching row of the raw-SQL ceiling measured on the same server,
//! and their ratio. With `--ceiling-after-script` the ceiling runs once more after
//! the scenarios and each ratio is also taken against that second measurement: the
//! host's speed drifts within a run. The enqueue scenarios, and the drain with
//! shipped defaults (against the one-statement bound and claim-then-delete, on a
//! 2M backlog), also run the ceiling's own SQL file with pgbench right before
//! each of their runs and report the ratio per pair (`paired`; off with
//! `--no-paired`). `scripts/bench` is the one command that runs it all.
//!
//! `lq-bench --runtime-child CONCURRENCY` is a hidden mode: one runtime process of
//! the curves scenario, started by lq-bench itself (see `scenarios::curves::child`).

mod busy;
mod ceiling;
mod cpu;
mod db;
mod jobs;
mod paired;
mod report;
mod scenarios;
mod span_clock;
mod stats;
mod writeback;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use scenarios::Ctx;

/// Run order. The sustained runs come last: their four minutes of saturation
/// leave gigabytes of disk writeback behind (every run also waits for writeback
/// to finish first, see `writeback`).
const SCENARIOS: [&str; 10] = [
    "enqueue",
    "bulk",
    "drain",
    "statements",
    "work",
    "latency",
    "retained",
    "startup",
    "sustained",
    "curves",
];

/// Scenarios run only when named in `--only` (they take long).
const OPT_IN: [&str; 2] = ["curves", "statements"];

struct Args {
    quick: bool,
    json: Option<PathBuf>,
    md: Option<PathBuf>,
    only: Vec<String>,
    ceiling_file: Option<PathBuf>,
    ceiling_script: Option<PathBuf>,
    ceiling_after_script: Option<PathBuf>,
    no_ceiling: bool,
    no_paired: bool,
    no_sweep: bool,
}

fn args() -> Result<Args> {
    let mut a = Args {
        quick: false,
        json: None,
        md: None,
        only: SCENARIOS
            .iter()
            .filter(|s| !OPT_IN.contains(s))
            .map(|s| s.to_string())
            .collect(),
        ceiling_file: None,
        ceiling_script: None,
        ceiling_after_script: None,
        no_ceiling: false,
        no_paired: false,
        no_sweep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--quick" => a.quick = true,
            "--json" => a.json = Some(value()?.into()),
            "--md" => a.md = Some(value()?.into()),
            "--ceiling" => a.ceiling_file = Some(value()?.into()),
            "--ceiling-script" => a.ceiling_script = Some(value()?.into()),
            "--ceiling-after-script" => a.ceiling_after_script = Some(value()?.into()),
            "--no-ceiling" => a.no_ceiling = true,
            "--no-paired" => a.no_paired = true,
            "--no-sweep" => a.no_sweep = true,
            "--only" => {
                a.only = value()?
                    .split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect();
                if let Some(bad) = a.only.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
                    bail!("unknown scenario {bad}; known: {}", SCENARIOS.join(","));
                }
            }
            "-h" | "--help" => {
                println!("usage: lq-bench [--quick] [--json FILE] [--md FILE] [--only {}] [--ceiling FILE | --ceiling-script PATH | --no-ceiling] [--ceiling-after-script PATH] [--no-paired] [--no-sweep]", SCENARIOS.join(","));
                std::process::exit(0);
            }
            other => bail!("unknown argument {other} (see --help)"),
        }
    }
    Ok(a)
}

/// The ceiling script: `--ceiling-script`, else `--ceiling-after-script`, else
/// `../shared/bench/ceiling` beside the repository.
fn ceiling_script(a: &Args) -> PathBuf {
    a.ceiling_script
        .clone()
        .or_else(|| a.ceiling_after_script.clone())
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench/ceiling")
        })
}

fn load_ceiling(a: &Args, admin_url: &str) -> Result<Option<ceiling::Ceiling>> {
    if a.no_ceiling {
        return Ok(None);
    }
    let text = if let Some(f) = &a.ceiling_file {
        std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
    } else {
        let script = ceiling_script(a);
        if !script.exists() {
            eprintln!(
                "ceiling: {} not found; figures are reported without a ceiling",
                script.display()
            );
            return Ok(None);
        }
        let admin = admin_url.parse().context("parsing DATABASE_URL")?;
        scenarios::announce("ceiling (nothing else of lq-bench runs meanwhile)");
        let text = ceiling::run(&script, &admin)?;
        print!("{text}");
        text
    };
    Ok(Some(ceiling::Ceiling::parse(&text)))
}

/// The server's admin database: DATABASE_URL, else the local default.
fn admin_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// Logs (RUST_LOG, default warnings) to stdout, or to stderr in a runtime
/// process, whose stdout is its protocol; plus the curves' claim timer, which
/// sees nothing until the curves turn it on.
fn init_tracing(child: bool) {
    use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt, Layer};
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "warn,sqlx::query=error".into());
    let fmt = tracing_subscriber::fmt::layer();
    let fmt = if child {
        fmt.with_writer(std::io::stderr).with_filter(filter).boxed()
    } else {
        fmt.with_filter(filter).boxed()
    };
    tracing_subscriber::registry()
        .with(fmt)
        .with(scenarios::curves::claims::layer())
        .with(busy::layer())
        .init();
}

#[tokio::main]
async fn main() -> Result<()> {
    jobs::now_ns(); // fix the monotonic base
    let argv: Vec<String> = std::env::args().collect();
    let child = argv.get(1).map(String::as_str) == Some(scenarios::curves::child::FLAG);
    init_tracing(child);
    if child {
        return scenarios::curves::child::main(&admin_url(), &argv[2..]).await;
    }
    let a = args()?;
    #[cfg(feature = "observability")]
    {
        // Every metric recorded as in production; the recorder's render is never
        // called, as a scrape is not part of a drain.
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
        std::mem::forget(handle);
        eprintln!("lq-bench: built with the observability features (metrics recorder installed)");
    }
    let admin_url = admin_url();
    let ceiling = load_ceiling(&a, &admin_url)?;
    let (opts, pool) = db::create(&admin_url).await?;
    let paired = if a.no_paired {
        None
    } else {
        let dir = ceiling_script(&a)
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default();
        paired::Paired::setup(&admin_url.parse()?, &dir).await?
    };
    let version = db::server_version(&pool).await?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mode = if a.quick { "quick" } else { "full" };
    let header = format!(
        "litequeue benchmark ({mode}), PostgreSQL {version}, {cores} cores; ceiling: {}. Medians of 3 runs [min–max] unless stated; the machine is shared, so other processes may have been running (load is printed before each run).",
        ceiling.as_ref().map_or("not run".to_owned(), |c| c.header.clone()),
    );
    println!("# {header}");
    let mut ctx = Ctx {
        opts,
        pool,
        quick: a.quick,
        no_sweep: a.no_sweep,
        ceiling,
        paired,
        report: Default::default(),
        sustain_base: None,
        best: None,
    };
    for s in SCENARIOS.iter().filter(|s| a.only.iter().any(|o| o == *s)) {
        match *s {
            "enqueue" => scenarios::enqueue_single::run(&mut ctx).await?,
            "bulk" => scenarios::enqueue_bulk::run(&mut ctx).await?,
            "drain" => scenarios::drain::run(&mut ctx).await?,
            "statements" => scenarios::statements::run(&mut ctx).await?,
            "work" => scenarios::work::run(&mut ctx).await?,
            "curves" => scenarios::curves::run(&mut ctx).await?,
            "sustained" => scenarios::sustained::run(&mut ctx).await?,
            "latency" => scenarios::latency::run(&mut ctx).await?,
            "retained" => scenarios::retained::run(&mut ctx).await?,
            "startup" => scenarios::startup::run(&mut ctx).await?,
            _ => unreachable!("checked in args()"),
        }
    }
    if let Some(c) = &ctx.ceiling {
        ctx.report.detail("ceiling_output", c.raw.clone().into());
    }
    let mut header = header;
    if let (Some(script), false) = (&a.ceiling_after_script, a.no_ceiling) {
        scenarios::announce("ceiling again, after the scenarios");
        let admin = admin_url.parse().context("parsing DATABASE_URL")?;
        let text = ceiling::run(script, &admin)?;
        print!("{text}");
        let after = ceiling::Ceiling::parse(&text);
        ctx.report.rerate(&after);
        ctx.report.detail("ceiling_after_output", text.into());
        header += &format!(
            " Ceiling measured again after the scenarios: {}.",
            after.header
        );
    }
    let md = ctx.report.markdown(&header);
    println!("\n{md}");
    if let Some(p) = &a.md {
        std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.json {
        let j = serde_json::to_string_pretty(&ctx.report.json(&header))?;
        std::fs::write(p, j).with_context(|| format!("writing {}", p.display()))?;
    }
    ctx.pool.close().await;
    Ok(())
}
