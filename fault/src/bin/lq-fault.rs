//! `lq-fault`: runs the fault scenarios and prints one summary row each.
//!
//! usage: lq-fault [--seed N] [--only NAME[,NAME...]] [--worker PATH] [--logs DIR]
//!
//! Needs `DATABASE_URL` (an admin URL) and, for the server-restart scenario, the
//! private cluster: run it as `LQ_FORCE_PRIVATE=1 scripts/with-postgres lq-fault`
//! (`scripts/fault-suite` does). Exits non-zero when any scenario fails.

use std::{path::PathBuf, process::ExitCode};

use anyhow::{bail, Context, Result};
use lq_fault::{
    cluster::Cluster,
    report::HEADER,
    scenarios::{self, Env, ALL},
};

struct Args {
    seed: u64,
    only: Vec<&'static str>,
    worker: Option<PathBuf>,
    logs: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        seed: default_seed(),
        only: ALL.to_vec(),
        worker: None,
        logs: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--seed" => args.seed = value()?.parse().context("--seed takes a number")?,
            "--only" => {
                let wanted = value()?;
                args.only = Vec::new();
                for name in wanted.split(',') {
                    let Some(n) = ALL.iter().find(|n| **n == name) else {
                        bail!("no scenario {name}; known: {ALL:?}")
                    };
                    args.only.push(n);
                }
            }
            "--worker" => args.worker = Some(value()?.into()),
            "--logs" => args.logs = Some(value()?.into()),
            "-h" | "--help" => {
                println!("usage: lq-fault [--seed N] [--only NAME[,NAME...]] [--worker PATH] [--logs DIR]\nscenarios: {}", ALL.join(", "));
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

fn default_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    t.as_nanos() as u64 ^ u64::from(std::process::id())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("lq-fault: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<bool> {
    let args = parse_args()?;
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let repo = manifest.parent().map(PathBuf::from).unwrap_or(manifest);
    let exe = std::env::current_exe()?;
    let worker_exe = args
        .worker
        .unwrap_or_else(|| exe.with_file_name("lq-fault-worker"));
    if !worker_exe.exists() {
        bail!(
            "worker binary {} not found (cargo build --release -p lq-fault)",
            worker_exe.display()
        );
    }
    let log_root = args.logs.unwrap_or_else(|| repo.join("target/fault-logs"));
    let cluster = Cluster::from_env(&repo)?;
    let server = cluster.check().await?;
    let env = Env {
        cluster,
        worker_exe,
        log_root,
        seed: args.seed,
    };
    println!(
        "lq-fault: seed {} (rerun with --seed {}); {server}; private cluster: {}",
        env.seed,
        env.seed,
        env.cluster.is_private()
    );
    println!("lq-fault: worker logs in {}", env.log_root.display());
    println!("{HEADER}");
    let mut all_passed = true;
    for name in args.only {
        if let Err(e) = env.cluster.ensure_up().await {
            eprintln!("lq-fault: the server is down and could not be restarted: {e:#}");
        }
        let row = scenarios::run(&env, name).await;
        for f in &row.failures {
            eprintln!("[{name}] failed check: {f}");
        }
        all_passed &= row.passed();
        println!("{}", row.line());
        for note in &row.notes {
            println!("{note}");
        }
    }
    println!(
        "lq-fault: {}",
        if all_passed {
            "all scenarios passed"
        } else {
            "FAILED"
        }
    );
    Ok(all_passed)
}
