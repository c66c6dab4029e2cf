//! The PostgreSQL server under test: fresh databases, and stop/start through
//! `scripts/with-postgres --ctl` (which runs `pg_ctl` as the right OS user).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    ConnectOptions, Connection, PgConnection, PgPool,
};

use crate::ORCHESTRATOR_APP;

/// The server named by `DATABASE_URL`, and whether it is the private cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Admin URL: may create and drop databases.
    pub admin_url: String,
    /// Data directory of the private cluster (`LQ_PG_DATA`), if it is one.
    pub data_dir: Option<PathBuf>,
    script: PathBuf,
}

/// A fresh database of one scenario.
pub struct ScenarioDb {
    /// Its URL (workers get it as `DATABASE_URL`).
    pub url: String,
    /// The orchestrator's pool on it.
    pub pool: PgPool,
}

impl Cluster {
    /// Reads `DATABASE_URL` and `LQ_PG_DATA`; `repo` holds `scripts/with-postgres`.
    pub fn from_env(repo: &Path) -> Result<Self> {
        let admin_url = std::env::var("DATABASE_URL")
            .context("DATABASE_URL is not set (run under scripts/with-postgres)")?;
        let data_dir = std::env::var_os("LQ_PG_DATA").map(PathBuf::from);
        Ok(Self {
            admin_url,
            data_dir,
            script: repo.join("scripts/with-postgres"),
        })
    }

    /// True when the server is the private cluster that may be stopped and restarted.
    pub fn is_private(&self) -> bool {
        self.data_dir.is_some()
    }

    async fn admin(&self) -> Result<PgConnection> {
        let opts: PgConnectOptions = self.admin_url.parse()?;
        let conn = tokio::time::timeout(
            Duration::from_secs(5),
            opts.application_name(ORCHESTRATOR_APP).connect(),
        )
        .await
        .context("connecting to the admin database timed out")??;
        Ok(conn)
    }

    /// Refuses a server whose `fsync` is off: crash results would mean nothing.
    pub async fn check(&self) -> Result<String> {
        let mut c = self.admin().await?;
        let fsync: String = sqlx::query_scalar("show fsync").fetch_one(&mut c).await?;
        let sync: String = sqlx::query_scalar("show synchronous_commit")
            .fetch_one(&mut c)
            .await?;
        let version: String = sqlx::query_scalar("show server_version")
            .fetch_one(&mut c)
            .await?;
        if self.is_private() {
            // After a crash the server syncs its whole data directory before redo;
            // one syncfs() instead of an fsync() per file keeps restarts short on a
            // slow disk. Durability is unchanged (fsync stays on).
            sqlx::raw_sql("alter system set recovery_init_sync_method = 'syncfs'")
                .execute(&mut c)
                .await?;
            sqlx::raw_sql("select pg_reload_conf()")
                .execute(&mut c)
                .await?;
        }
        c.close().await.ok();
        if fsync != "on" || sync == "off" {
            bail!("the server runs with fsync={fsync}, synchronous_commit={sync}: crash tests need both on");
        }
        Ok(format!(
            "PostgreSQL {version}, fsync={fsync}, synchronous_commit={sync}"
        ))
    }

    /// Drops and recreates database `name`, migrates it and adds the `fault` schema.
    pub async fn fresh_db(&self, name: &str) -> Result<ScenarioDb> {
        let mut admin = self.admin().await?;
        sqlx::raw_sql(&format!("drop database if exists {name} with (force)"))
            .execute(&mut admin)
            .await?;
        sqlx::raw_sql(&format!("create database {name}"))
            .execute(&mut admin)
            .await?;
        admin.close().await.ok();
        let url = url_for(&self.admin_url, name);
        let opts: PgConnectOptions = url
            .parse::<PgConnectOptions>()?
            .application_name(ORCHESTRATOR_APP);
        let pool = PgPoolOptions::new()
            .max_connections(6)
            .acquire_timeout(Duration::from_secs(3))
            .connect_with(opts)
            .await?;
        lq_runtime::migrate(&pool).await?;
        sqlx::raw_sql(crate::schema::CREATE).execute(&pool).await?;
        Ok(ScenarioDb { url, pool })
    }

    /// `pg_ctl stop -m immediate`: every backend dies at once, no checkpoint.
    pub async fn stop_immediate(&self) -> Result<()> {
        self.ctl(&["stop", "-m", "immediate", "-w", "-t", "30"])
            .await
    }

    /// `pg_ctl start` (crash recovery runs first), waiting until it accepts connections.
    pub async fn start(&self) -> Result<()> {
        self.ctl(&["start", "-w", "-t", "60"]).await
    }

    /// Starts the private cluster again if it does not answer (after an aborted run).
    pub async fn ensure_up(&self) -> Result<()> {
        if self.admin().await.is_ok() {
            return Ok(());
        }
        if !self.is_private() {
            bail!("the server does not answer");
        }
        self.start().await?;
        self.admin().await.map(|_| ())
    }

    async fn ctl(&self, args: &[&str]) -> Result<()> {
        if !self.is_private() {
            bail!("refusing to stop or start a server that is not the private cluster (run under LQ_FORCE_PRIVATE=1)");
        }
        let out = tokio::process::Command::new(&self.script)
            .arg("--ctl")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {}", self.script.display()))?;
        if !out.status.success() {
            bail!(
                "with-postgres --ctl {} failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }
}

/// `base` with its database name replaced by `db`.
pub fn url_for(base: &str, db: &str) -> String {
    let (head, tail) = match base.find('?') {
        Some(i) => base.split_at(i),
        None => (base, ""),
    };
    let slash = head
        .rfind('/')
        .filter(|&i| i > "postgres://".len())
        .unwrap_or(head.len());
    format!("{}/{db}{tail}", &head[..slash])
}
