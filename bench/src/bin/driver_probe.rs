//! driver-probe: how fast one producer inserts single rows on a connection of its
//! own, split into its parts. An experiment beside `bench/experiments/`, not a
//! scenario: it separates the driver (sqlx), the runtime's scheduling (tokio
//! multi-thread or current-thread), litequeue's statement and litequeue's client
//! code, each against pgbench run by the caller on the same server.
//!
//! `driver-probe WHAT FLAVOUR SECS COMMIT`, on the database of DATABASE_URL, which
//! `bench/experiments/one_producer_parts.sh` prepares and which runs it:
//! - WHAT `sql`: the ceiling's `enqueue_1.sql` insert into the ceiling's `jobs`
//!   table; `lqsql`: litequeue's single insert (no key, no metadata, no NOTIFY)
//!   through its statement function (`db::enqueue::job_insert`); `lq`: `Noop.enqueue_with(&mut conn, notify off)`;
//!   `enq`: the same on an `Enqueuer`; `pool`: on the README's pool (all but
//!   `sql` on a migrated litequeue schema).
//! - FLAVOUR `mt` (two workers) or `ct` (current thread).
//! - COMMIT `sync` or `async` (`synchronous_commit = off` for the session: CPU only).
//!
//! `PROBE_NOTIFY=0` turns the wake-up NOTIFY off for `enq` and `pool`;
//! `PROBE_TRACING=1` installs a subscriber as the benchmark's (warnings only).

use std::{str::FromStr, time::Instant};

use anyhow::{Context, Result};
use lq_core::db::enqueue::{job_insert, NewJob};
use lq_runtime::{EnqueueOptions, Job, JobContext, JobError, Perform};
use serde::{Deserialize, Serialize};
use sqlx::{postgres::PgConnectOptions, ConnectOptions, Connection};

/// The benchmark's no-op job.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "bench.noop")]
struct Noop {
    n: u64,
}

impl Perform for Noop {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

const CEILING_INSERT: &str =
    "INSERT INTO jobs (kind, args) VALUES ('noop', jsonb_build_object('n', $1::int))";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &'static str| args.get(i).map(String::as_str).unwrap_or(d).to_owned();
    let (what, flavour, commit) = (arg(1, "sql"), arg(2, "mt"), arg(4, "sync"));
    let secs: u64 = arg(3, "5").parse()?;
    // `enq` and `pool` wake workers after each commit unless PROBE_NOTIFY=0.
    let notify = std::env::var("PROBE_NOTIFY").map_or(true, |v| v != "0");
    if std::env::var_os("PROBE_TRACING").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("warn,sqlx::query=error"))
            .init();
    }
    let rt = match flavour.as_str() {
        "ct" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        _ => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?,
    };
    let w = what.clone();
    let c = commit.clone();
    let rate = rt.block_on(async move {
        let url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let opts = PgConnectOptions::from_str(&url)?;
        let mut conn = opts.connect().await.context("connecting")?;
        // `enq` and `pool`: the README's pool (no ping before acquire), two connections.
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .test_before_acquire(false)
            .connect_with(opts.clone())
            .await?;
        let enqueuer = lq_runtime::Enqueuer::new(&pool);
        let table = if w == "sql" { "jobs" } else { "lq.jobs" };
        sqlx::query(&format!("truncate {table}"))
            .execute(&mut conn)
            .await?;
        if c != "sync" {
            sqlx::query("set synchronous_commit = off")
                .execute(&mut conn)
                .await?;
        }
        let task = tokio::spawn(async move {
            let start = Instant::now();
            let mut n = 0u64;
            let payload = |n: u64| format!("{{\"n\":{n}}}");
            while start.elapsed().as_secs() < secs {
                match w.as_str() {
                    "sql" => {
                        sqlx::query(CEILING_INSERT)
                            .bind((n % 1_000_000_000) as i32)
                            .execute(&mut conn)
                            .await?;
                    }
                    "lqsql" => {
                        // litequeue's own statement function, called directly:
                        // the statement without the client code around it.
                        let row = NewJob {
                            kind: "bench.noop",
                            queue: "default",
                            priority: 0,
                            run_at: None,
                            delay_secs: 0.0,
                            max_attempts: 25,
                            notify: false,
                            meta: None,
                        };
                        job_insert(&mut conn, &row, &payload(n), None).await?;
                    }
                    "enq" => {
                        Noop { n }
                            .enqueue_with(&enqueuer, EnqueueOptions::new().notify(notify))
                            .await?;
                    }
                    "pool" => {
                        Noop { n }
                            .enqueue_with(&pool, EnqueueOptions::new().notify(notify))
                            .await?;
                    }
                    _ => {
                        Noop { n }
                            .enqueue_with(&mut conn, EnqueueOptions::new().notify(false))
                            .await?;
                    }
                }
                n += 1;
            }
            conn.close().await?;
            anyhow::Ok(n as f64 / start.elapsed().as_secs_f64())
        });
        task.await?
    })?;
    println!("{what} {flavour} {commit} {rate:.0}/s");
    Ok(())
}
