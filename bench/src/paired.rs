//! The ceiling's own statements, run by pgbench right beside each litequeue run
//! they are compared with: the enqueues, and the two delete-shaped drains.
//!
//! The whole-run ceiling (`ceiling`) is measured minutes away from the figures it
//! divides, and on this host the single-row commit rate has moved by 2× within
//! one run, the one-statement drain by a third within an hour. These ceilings
//! take seconds to measure, so each run is paired with a pgbench run of the
//! ceiling's exact SQL file (same server, same settling first) right before it,
//! and the ratio is taken per pair.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};
use sqlx::{postgres::PgConnectOptions, PgPool};

use crate::{report::Report, scenarios::closed_loop, stats::Spread};

/// Scratch database holding the ceiling's `jobs` table (dropped and recreated).
const DB_NAME: &str = "lq_bench_pair";

/// Rows per statement of the ceiling's `enqueue_unnest.sql`, as its script binds them.
const UNNEST_ROWS: usize = 1000;

/// The paired drains' backlog: more than four clients delete in [`DRAIN_SECS`]
/// on this host (the ceiling's own 1M runs dry at the one-statement bound).
const DRAIN_BACKLOG: u64 = 2_000_000;

/// The paired drains' length, clients and batch, as the ceiling script runs them.
const DRAIN_SECS: u64 = 10;
const DRAIN_CLIENTS: u32 = 4;
const DRAIN_BATCH: u32 = 100;

/// The ceiling's delete-shaped drains, each the SQL file pgbench runs.
#[derive(Debug, Clone, Copy)]
pub enum DrainShape {
    /// `claim_delete_1tx.sql`: a batch claimed and deleted in one statement, the
    /// least work a drain can do per job (no claim is recorded, nothing is kept).
    OneStatement,
    /// `claim_then_delete.sql`: a batch claimed (updated), then deleted.
    ClaimThenDelete,
}

impl DrainShape {
    fn file(self) -> &'static str {
        match self {
            DrainShape::OneStatement => "claim_delete_1tx.sql",
            DrainShape::ClaimThenDelete => "claim_then_delete.sql",
        }
    }

    /// How the paired row names it.
    pub fn label(self) -> String {
        format!(
            "{} by pgbench (batch {DRAIN_BATCH}, {DRAIN_CLIENTS} clients, {DRAIN_SECS} s, {}M backlog)",
            self.file(),
            DRAIN_BACKLOG / 1_000_000
        )
    }
}

/// pgbench and the ceiling's SQL files, with a database to run them in.
pub struct Paired {
    dir: PathBuf,
    pgbench: PathBuf,
    opts: PgConnectOptions,
    pool: PgPool,
}

impl Paired {
    /// Creates the scratch database from the ceiling's `schema.sql` in `dir`;
    /// `None` (with a message) when the files or pgbench are missing.
    pub async fn setup(admin: &PgConnectOptions, dir: &Path) -> Result<Option<Paired>> {
        let Some(pgbench) = find_pgbench() else {
            eprintln!("paired ceiling: pgbench not found; enqueue and drain runs are not paired");
            return Ok(None);
        };
        if !dir.join("enqueue_1.sql").exists() {
            eprintln!(
                "paired ceiling: no enqueue_1.sql in {}; enqueue and drain runs are not paired",
                dir.display()
            );
            return Ok(None);
        }
        let schema = std::fs::read_to_string(dir.join("schema.sql"))
            .with_context(|| format!("reading {}/schema.sql", dir.display()))?;
        let opts = crate::db::recreate(admin, DB_NAME).await?;
        let pool = crate::db::pool(&opts, 2).await?;
        sqlx::raw_sql(&schema)
            .execute(&pool)
            .await
            .context("applying the ceiling's schema.sql")?;
        Ok(Some(Paired {
            dir: dir.to_owned(),
            pgbench,
            opts,
            pool,
        }))
    }

    /// Single-row autocommit inserts (`enqueue_1.sql`) by `clients` clients for
    /// `secs`: rows per second.
    pub async fn enqueue_single(&self, clients: u32, secs: f64) -> Result<f64> {
        self.run(
            1.0,
            clients,
            secs,
            &["-f".into(), self.file("enqueue_1.sql")],
        )
        .await
    }

    /// The statement of `enqueue_1.sql`, one autocommit insert at a time, sent by
    /// `producers` tasks through a sqlx pool set up as the enqueue scenario's
    /// (two connections per producer), or with `own_connection` on a connection
    /// of each producer's own (no pool, as an `Enqueuer` sends): what the driver
    /// and the async runtime cost before litequeue adds anything. Rows per second.
    pub async fn sqlx_single(
        &self,
        producers: u32,
        secs: f64,
        own_connection: bool,
    ) -> Result<f64> {
        crate::db::exec(&self.pool, "truncate jobs restart identity").await?;
        crate::db::settle_server(&self.pool).await?;
        let pool = crate::db::pool(&self.opts, 2 * producers).await?;
        let conns = if own_connection {
            crate::db::detached(&pool, producers).await?
        } else {
            Vec::new()
        };
        let shared = pool.clone();
        let rate = closed_loop(producers, secs, move |p, n| {
            let pool = shared.clone();
            let conn = conns.get(p as usize).cloned();
            async move {
                let arg = ((u64::from(p) << 24 | n) % 1_000_000_000) as i32;
                let insert = sqlx::query(
                    "INSERT INTO jobs (kind, args) VALUES ('noop', jsonb_build_object('n', $1::int))",
                )
                .bind(arg);
                match conn {
                    Some(conn) => insert.execute(&mut *conn.lock().await).await?,
                    None => insert.execute(&pool).await?,
                };
                Ok(())
            }
        })
        .await;
        pool.close().await;
        rate
    }

    /// 1,000-row `unnest` inserts (`enqueue_unnest.sql`), one client: rows per second.
    pub async fn enqueue_unnest(&self, secs: f64) -> Result<f64> {
        let kinds = vec!["noop"; UNNEST_ROWS].join(",");
        let args = (0..UNNEST_ROWS)
            .map(|i| format!(r#""{{\"n\": {i}}}""#))
            .collect::<Vec<_>>()
            .join(",");
        let argv = [
            "-D".into(),
            format!("kinds={{{kinds}}}"),
            "-D".into(),
            format!("args={{{args}}}"),
            "-f".into(),
            self.file("enqueue_unnest.sql"),
        ];
        self.run(UNNEST_ROWS as f64, 1, secs, &argv).await
    }

    /// One of the ceiling's delete-shaped drains on a fresh backlog of
    /// [`DRAIN_BACKLOG`] jobs, settled as a litequeue drain is: jobs deleted per
    /// second, counted in the table afterwards. An error if the backlog ran dry,
    /// which would make the figure a floor.
    pub async fn drain(&self, shape: DrainShape) -> Result<f64> {
        crate::db::exec(&self.pool, "truncate jobs restart identity").await?;
        crate::db::exec(
            &self.pool,
            &format!(
                "insert into jobs (kind, args) select 'noop', jsonb_build_object('n', g) \
                 from generate_series(1, {DRAIN_BACKLOG}) g"
            ),
        )
        .await?;
        crate::db::exec(&self.pool, "vacuum analyze jobs").await?;
        crate::db::settle_server(&self.pool).await?;
        let argv = [
            "-D".into(),
            format!("n={DRAIN_BATCH}"),
            "-f".into(),
            self.file(shape.file()),
        ];
        self.pgbench(DRAIN_CLIENTS, DRAIN_SECS, &argv).await?;
        let left: i64 = sqlx::query_scalar("select count(*) from jobs")
            .fetch_one(&self.pool)
            .await?;
        let left = u64::try_from(left).unwrap_or(0);
        if left == 0 {
            bail!("{} ran dry: the figure would be a floor", shape.file());
        }
        Ok((DRAIN_BACKLOG - left) as f64 / DRAIN_SECS as f64)
    }

    fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Empties the table and settles as a litequeue run does, then runs pgbench as
    /// the ceiling script does; returns transactions per second × `rows_per_tx`.
    async fn run(&self, rows_per_tx: f64, clients: u32, secs: f64, argv: &[String]) -> Result<f64> {
        crate::db::exec(&self.pool, "truncate jobs restart identity").await?;
        crate::db::settle_server(&self.pool).await?;
        let tps = self
            .pgbench(clients, (secs.round() as u64).max(1), argv)
            .await?;
        Ok(tps * rows_per_tx)
    }

    /// pgbench as the ceiling script runs it (prepared statements, up to two
    /// threads), on the scratch database: transactions per second.
    async fn pgbench(&self, clients: u32, secs: u64, argv: &[String]) -> Result<f64> {
        let secs = secs.to_string();
        let threads = clients.min(2).to_string();
        let clients = clients.to_string();
        let mut cmd = Command::new(&self.pgbench);
        cmd.args([
            "-n", "-M", "prepared", "-c", &clients, "-j", &threads, "-T", &secs,
        ])
        .args(argv)
        .env("PGHOST", self.opts.get_host())
        .env("PGPORT", self.opts.get_port().to_string())
        .env("PGUSER", self.opts.get_username())
        .env("PGDATABASE", DB_NAME)
        // The same transport as sqlx, which this workspace builds without TLS:
        // pgbench over TLS ran its single insert 1.3× slower (bench/FINDINGS.md).
        .env("PGSSLMODE", "disable");
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await?
            .context("running pgbench")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "pgbench failed ({}): {text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tps_of(&text).with_context(|| format!("no tps in pgbench's output: {text}"))
    }
}

/// Adds the row `{name}, paired` to `report`: `rates`, each divided by the pgbench
/// rate of `what` measured right before it (`pairs`), the ratio being the median of
/// those per-pair ratios. Nothing when the runs were not paired.
pub fn row(report: &mut Report, name: &str, rates: &[f64], pairs: &[f64], what: &str) {
    if pairs.is_empty() || pairs.len() != rates.len() {
        return;
    }
    let ratios: Vec<f64> = rates.iter().zip(pairs).map(|(r, p)| r / p).collect();
    let ratio = Spread::of(&ratios);
    report.row(
        format!("{name}, paired"),
        Spread::of(rates).rate(),
        format!(
            "{what}, right before each run: {}; per-pair ratios {}",
            Spread::of(pairs).rate(),
            ratio.plain(2)
        ),
        Some(ratio.median),
    );
}

/// `tps = 2345.67 (without initial connection time)` → 2345.67.
fn tps_of(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// pgbench on PATH, else the newest under Debian's /usr/lib/postgresql.
fn find_pgbench() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("pgbench"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin/pgbench")))
            .filter(|p| p.is_file())
            .collect();
        dirs.sort_by_key(|p| {
            p.components()
                .nth(4)
                .and_then(|c| c.as_os_str().to_str()?.parse::<u32>().ok())
        });
        dirs.pop()
    })
}

#[cfg(test)]
mod tests {
    use super::tps_of;

    #[test]
    fn reads_pgbench_tps() {
        let out = "number of failed transactions: 0 (0.000%)\nlatency average = 0.4 ms\ntps = 2345.678901 (without initial connection time)\n";
        assert_eq!(tps_of(out), Some(2345.678901));
        assert_eq!(tps_of("no figure here"), None);
    }
}
