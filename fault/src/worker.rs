//! The body of the worker binaries (`lq-fault-worker`, and `lq-fault-worker-old`,
//! the previous release, which lacks the kind `fault.deploy`): one worker
//! process of the fault suite.
//!
//! Connects to `DATABASE_URL`, serves queue `default` with the suite's job types
//! (and, with `--cron-slots N`, queue `cron`, which also makes it schedule the
//! recurring `fault.cron`),
//! publishes its counters to `fault.worker_stats` four times a second, and stops
//! gracefully on SIGTERM. With `--builtin-signal` it leaves the signal to
//! `Runtime::shutdown_on_signal` (and publishes nothing).
//!
//! usage: lq-fault-worker --owner NAME [--slots 8] [--grace-ms 5000] [--builtin-signal]
//!                        [--cron-slots N] [--unknown-kind-grace-ms N]

use std::time::Duration;

use crate::{
    jobs::{self, WorkerName},
    schema, WORKER_APP,
};
use anyhow::{bail, Context};
use lq_runtime::{Runtime, RuntimeConfig};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::signal::unix::{signal, SignalKind};

struct Args {
    owner: String,
    slots: usize,
    grace: Duration,
    builtin_signal: bool,
    cron_slots: usize,
    unknown_kind_grace: Option<Duration>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        owner: String::new(),
        slots: 8,
        grace: Duration::from_secs(5),
        builtin_signal: false,
        cron_slots: 0,
        unknown_kind_grace: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--owner" => args.owner = value()?,
            "--slots" => args.slots = value()?.parse()?,
            "--grace-ms" => args.grace = Duration::from_millis(value()?.parse()?),
            "--builtin-signal" => args.builtin_signal = true,
            "--cron-slots" => args.cron_slots = value()?.parse()?,
            "--unknown-kind-grace-ms" => {
                args.unknown_kind_grace = Some(Duration::from_millis(value()?.parse()?))
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if args.owner.is_empty() {
        bail!("--owner is required");
    }
    Ok(args)
}

/// Runs one worker until SIGTERM (see the module's usage).
pub async fn main() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let args = parse_args()?;
    let url = std::env::var("DATABASE_URL").context("DATABASE_URL is not set")?;
    let options: PgConnectOptions = url
        .parse::<PgConnectOptions>()?
        .application_name(WORKER_APP);
    let pool = PgPoolOptions::new()
        .max_connections((args.slots + args.cron_slots) as u32 + 6)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options)
        .await
        .context("connecting")?;
    let config = RuntimeConfig {
        poll_interval: Duration::from_millis(200),
        rescue_interval: Duration::from_millis(250),
        // Pruning keeps its 24 h retention; checked every second so the leader
        // scenario sees it run.
        prune_interval: Duration::from_secs(1),
        db_timeout: Duration::from_secs(3),
        shutdown_grace: args.grace,
        owner: args.owner.clone(),
        unknown_kind_grace: args
            .unknown_kind_grace
            .or(RuntimeConfig::default().unknown_kind_grace),
        ..RuntimeConfig::default()
    };
    // Registered before the runtime starts, so no SIGTERM can slip past it.
    let term = if args.builtin_signal {
        None
    } else {
        Some(signal(SignalKind::terminate())?)
    };
    let mut builder = Runtime::builder(pool.clone()).queue("default", args.slots);
    if args.cron_slots > 0 {
        builder = builder.queue(jobs::CRON_QUEUE, args.cron_slots);
    }
    let runtime = builder
        .config(config)
        .state(pool.clone())
        .state(WorkerName(args.owner.clone()))
        .start()
        .await?;
    eprintln!(
        "lq-fault-worker {} started (kinds {:?})",
        args.owner,
        runtime.kinds()
    );
    let Some(mut term) = term else {
        runtime.shutdown_on_signal().await?;
        println!("{}: stopped by shutdown_on_signal", args.owner);
        return Ok(());
    };
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tick.tick() => publish(&pool, &args.owner, &runtime).await,
        }
    }
    publish(&pool, &args.owner, &runtime).await;
    println!(
        "{} (at SIGTERM)",
        schema::stats_line(&args.owner, &runtime.stats())
    );
    runtime.shutdown().await?;
    println!("{}: stopped", args.owner);
    Ok(())
}

async fn publish(pool: &sqlx::PgPool, owner: &str, runtime: &Runtime) {
    let stats = runtime.stats();
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        schema::publish_stats(pool, owner, &stats),
    )
    .await;
}
