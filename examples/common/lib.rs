//! Shared set-up for the examples: a fresh database and logging.
//!
//! `DATABASE_URL` names a server where the examples may create a database; when it
//! is unset, `scripts/demo` provides one (see the README).

use sqlx::{postgres::PgPoolOptions, Connection, PgConnection, PgPool};

/// Creates (or recreates) database `name` on the `DATABASE_URL` server, migrates
/// it, and returns a pool on it.
pub async fn fresh_database(name: &str) -> anyhow::Result<PgPool> {
    let admin = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let mut conn = PgConnection::connect(&admin).await?;
    sqlx::raw_sql(&format!("drop database if exists {name} with (force)"))
        .execute(&mut conn)
        .await?;
    sqlx::raw_sql(&format!("create database {name}"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    let url = with_database(&admin, name);
    // The pool the README recommends: no ping before each acquire.
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .test_before_acquire(false)
        .idle_timeout(std::time::Duration::from_secs(60))
        .connect(&url)
        .await?;
    lq_runtime::migrate(&pool).await?;
    Ok(pool)
}

fn with_database(url: &str, db: &str) -> String {
    let (head, tail) = url.split_at(url.find('?').unwrap_or(url.len()));
    let slash = head.rfind('/').unwrap_or(head.len());
    format!("{}/{db}{tail}", &head[..slash])
}

/// Logs litequeue's warnings (and more with `RUST_LOG`) to stderr.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
}
