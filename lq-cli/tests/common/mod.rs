//! Helpers shared by the `lq` process tests: run the binary, insert jobs.
// Each test crate uses part of these helpers.
#![allow(dead_code)]

use std::process::Command;

use lq_tests::TestDb;
use serde_json::Value;

/// Runs `lq --format json ARGS` on `db`; returns the exit code and parsed stdout
/// (Null when stdout is empty), and stderr.
pub fn lq(db: &TestDb, args: &[&str]) -> (i32, Value, String) {
    let (code, stdout, stderr) = lq_text(&db.url, &["--format", "json"], args);
    let json = if stdout.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    };
    (code, json, stderr)
}

/// Runs `lq FLAGS ARGS` with `DATABASE_URL` set to `url`; returns the exit code,
/// stdout and stderr as text.
pub fn lq_text(url: &str, flags: &[&str], args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lq"))
        .args(flags)
        .args(args)
        .env("DATABASE_URL", url)
        .output()
        .expect("run lq");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Inserts queued jobs of `kind` on `queue`, and returns their ids.
pub async fn insert(db: &TestDb, kind: &str, queue: &str, n: i64) -> Vec<i64> {
    sqlx::query_scalar(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         select $1, $2, jsonb_build_object('n', g), 3 from generate_series(1, $3) g returning id",
    )
    .bind(kind)
    .bind(queue)
    .bind(n)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}
