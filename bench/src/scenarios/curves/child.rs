//! Runtimes as separate OS processes: `lq-bench --runtime-child CONCURRENCY`
//! re-executes the bench as one runtime process (hidden mode), and [`Child`]
//! drives such a process from the parent.
//!
//! Protocol, one line each way: the child connects and prints `ready`; on `go`
//! it starts a runtime with the shipped defaults serving [`QUEUE`] (the bench's
//! no-op job kind registered); on `stop` (or stdin closed) it shuts the runtime
//! down gracefully and prints its [`ChildReport`] as one JSON line.

use std::{process::Stdio, str::FromStr, time::Duration};

use anyhow::{bail, ensure, Context, Result};
use lq_runtime::{Runtime, RuntimeBuilder, RuntimeConfig};
use serde::{Deserialize, Serialize};
use sqlx::{postgres::PgConnectOptions, PgPool};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{ChildStdin, ChildStdout},
};

use super::claims;
use crate::{cpu::CpuSnap, db, scenarios::QUEUE};

/// The hidden command-line flag of the child mode.
pub const FLAG: &str = "--runtime-child";

/// How long a child may take to answer a line.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// What one runtime process reports when it stops.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChildReport {
    pub claimed: u64,
    pub succeeded: u64,
    /// Claims sent while another of the queue's was in flight.
    #[serde(default)]
    pub overlapping_claims: u64,
    /// Claims that found the queue's claim slots taken and waited their turn.
    #[serde(default)]
    pub throttled_claims: u64,
    /// CPU seconds of this process from `go` to `stop`.
    pub cpu_secs: f64,
    /// Milliseconds from `go` to the runtime started (inside the measured drain).
    pub start_ms: f64,
    /// Every claim from `go` to `stop` (see [`claims`]).
    pub claims: Vec<claims::Sample>,
}

/// The child mode's main: `args` are what follows [`FLAG`] (the concurrency).
/// Connects to the bench database on the server of `admin_url`, as the parent did.
pub async fn main(admin_url: &str, args: &[String]) -> Result<()> {
    let concurrency: usize = args
        .first()
        .context("usage: lq-bench --runtime-child CONCURRENCY")?
        .parse()
        .context("CONCURRENCY must be a number")?;
    let opts = PgConnectOptions::from_str(admin_url)?.database(db::DB_NAME);
    let pool = db::runtime_pool(&opts).await?;
    sqlx::query("select 1").execute(&pool).await?;
    // The limits' diagnosis knobs reach the children through the environment,
    // so several runtimes can share one limited queue.
    let start =
        || crate::scenarios::with_diagnosis_limits(builder(pool.clone(), concurrency)).start();
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    // Warm: the runtime starts before `ready`, on the queue the parent paused,
    // and `go` (the parent resumes the queue) starts only the drain.
    let mut warm = None;
    if warm_start() {
        warm = Some(start().await?);
    }
    say("ready");
    ensure!(
        stdin.next_line().await?.as_deref() == Some("go"),
        "expected `go`"
    );
    let cpu = CpuSnap::now();
    let t0 = std::time::Instant::now();
    claims::start();
    let rt = match warm {
        Some(rt) => rt,
        None => start().await?,
    };
    let start_ms = t0.elapsed().as_secs_f64() * 1e3;
    while let Some(line) = stdin.next_line().await? {
        if line == "stop" {
            break;
        }
    }
    let samples = claims::stop();
    let cpu_secs = CpuSnap::now().since(&cpu).0;
    let stats = rt.stats();
    rt.shutdown().await?;
    let report = ChildReport {
        claimed: stats.claimed,
        succeeded: stats.succeeded,
        overlapping_claims: stats.overlapping_claims,
        throttled_claims: stats.throttled_claims,
        cpu_secs,
        start_ms,
        claims: samples,
    };
    say(&serde_json::to_string(&report)?);
    Ok(())
}

/// Prints one protocol line (stdout is line-buffered: it goes out at once).
fn say(line: &str) {
    println!("{line}");
}

/// A runtime process, seen from the parent. Killed if dropped before it exits.
pub struct Child {
    proc: tokio::process::Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Child {
    /// Starts this program again in child mode, serving with `concurrency` handlers.
    pub fn spawn(concurrency: usize) -> Result<Child> {
        let mut proc = tokio::process::Command::new(std::env::current_exe()?)
            .arg(FLAG)
            .arg(concurrency.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a runtime process")?;
        let stdin = proc.stdin.take().context("child stdin")?;
        let stdout = BufReader::new(proc.stdout.take().context("child stdout")?).lines();
        Ok(Child {
            proc,
            stdin,
            stdout,
        })
    }

    /// Waits for the child's `ready` (connected to the database).
    pub async fn ready(&mut self) -> Result<()> {
        let line = self.line().await?;
        ensure!(line == "ready", "runtime process said {line:?}, not ready");
        Ok(())
    }

    /// Tells the child to start its runtime.
    pub async fn go(&mut self) -> Result<()> {
        self.tell("go").await
    }

    /// Whether the child has exited (it never should before `stop`).
    pub fn exited(&mut self) -> bool {
        matches!(self.proc.try_wait(), Ok(Some(_)))
    }

    /// Stops the child's runtime, reads its report and waits for it to exit.
    pub async fn finish(mut self) -> Result<ChildReport> {
        self.tell("stop").await?;
        let line = self.line().await?;
        let report = serde_json::from_str(&line).context("a runtime process's report")?;
        let status = tokio::time::timeout(ANSWER_WITHIN, self.proc.wait()).await??;
        ensure!(status.success(), "runtime process exited with {status}");
        Ok(report)
    }

    async fn tell(&mut self, word: &str) -> Result<()> {
        self.stdin.write_all(format!("{word}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// The child's next line, within [`ANSWER_WITHIN`].
    async fn line(&mut self) -> Result<String> {
        match tokio::time::timeout(ANSWER_WITHIN, self.stdout.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => bail!("runtime process ended without answering (see its stderr)"),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => bail!("runtime process did not answer within {ANSWER_WITHIN:?}"),
        }
    }
}

/// `LQ_BENCH_CURVES_WARM=1` (a diagnosis): the runtime processes start their
/// runtimes, and open their connections, before the measured drain, which a
/// paused queue holds back until `go`; by default each starts at `go`, inside
/// the drain, as a deployment's runtimes start on a backlog.
pub fn warm_start() -> bool {
    std::env::var("LQ_BENCH_CURVES_WARM").as_deref() == Ok("1")
}

/// The runtime a child starts (before the diagnosis limits).
fn builder(pool: PgPool, concurrency: usize) -> RuntimeBuilder {
    Runtime::builder(pool)
        .config(child_config())
        .queue(QUEUE, concurrency)
}

/// The most connections one runtime process opens: its runtime's own
/// ([`RuntimeBuilder::connections`]) and one of its application pool, which
/// the runtime borrows at start and the child's own statements use.
pub fn connections(pool: &PgPool, concurrency: usize) -> u32 {
    builder(pool.clone(), concurrency).connections() + 1
}

/// The shipped defaults, unless changed for a diagnosis:
/// `LQ_BENCH_CHILD_CLAIM_AHEAD=off` (no jobs claimed ahead, and so no second
/// claim in flight), `LQ_BENCH_CHILD_MAX_CLAIM_BATCH=N`,
/// `LQ_BENCH_CHILD_CLAIM_SLOTS=N|off` (`claim_slots`; `off` for no bound).
fn child_config() -> RuntimeConfig {
    let mut config = RuntimeConfig::default();
    if std::env::var("LQ_BENCH_CHILD_CLAIM_AHEAD").as_deref() == Ok("off") {
        config.claim_ahead = false;
    }
    if let Some(n) = std::env::var("LQ_BENCH_CHILD_MAX_CLAIM_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.max_claim_batch = n;
    }
    match std::env::var("LQ_BENCH_CHILD_CLAIM_SLOTS").as_deref() {
        Ok("off") => config.claim_slots = None,
        Ok(n) => config.claim_slots = n.parse().ok().or(config.claim_slots),
        Err(_) => {}
    }
    config
}
