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

/// A login role of its own for one test (roles are cluster-wide), dropped with
/// what it was granted when the value drops.
pub struct Role {
    /// The role's name.
    pub name: String,
    /// The test database's URL.
    db_url: String,
}

impl Role {
    /// Creates a login role named `prefix` and a random suffix on `db`'s server.
    pub async fn create(db: &TestDb, prefix: &str) -> Self {
        let name = format!("{prefix}_{:08x}", fastrand::u32(..));
        sqlx::raw_sql(&format!("create role {name} login"))
            .execute(&db.pool)
            .await
            .unwrap();
        Self {
            name,
            db_url: db.url.clone(),
        }
    }

    /// Runs `grants` on `db`, `{role}` standing for this role.
    pub async fn grant(&self, db: &TestDb, grants: &str) {
        sqlx::raw_sql(&grants.replace("{role}", &self.name))
            .execute(&db.pool)
            .await
            .unwrap();
    }

    /// `db`'s URL, logging in as this role.
    pub fn url(&self, db: &TestDb) -> String {
        let (scheme, rest) = db.url.split_once("://").unwrap();
        let host_and_db = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
        format!("{scheme}://{}@{host_and_db}", self.name)
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        // Its grants first (the test's database may still exist), then the role.
        lq_tests::run_from_drop(
            self.db_url.clone(),
            vec![format!("drop owned by {}", self.name)],
        );
        lq_tests::run_as_admin_from_drop(vec![format!("drop role if exists {}", self.name)]);
    }
}

/// The operator's grants of docs/roles.md, but pg_monitor.
pub const OPERATOR_GRANTS: &str = "
    grant usage on schema lq to {role};
    grant select, insert, update, delete on lq.jobs, lq.finished_jobs to {role};
    grant select, insert, update on lq.queues to {role};
    grant select on lq.all_jobs, lq.runtimes, lq.leader, lq.cron_schedules, lq.cron_ticks,
        lq.stats_minute, lq.schema_migrations to {role};";

/// `lq … --yes`-less bulk action answered at its prompt on a terminal: `lq` runs
/// under `script` (util-linux), which gives it a pseudo-terminal for stdin.
/// Returns `lq`'s exit code once the answer is in, and what it printed up to
/// and with the prompt; before answering, calls `meanwhile` (which runs after
/// the prompt has been printed).
pub async fn answer_prompt<F: std::future::Future<Output = ()>>(
    db: &TestDb,
    args: &str,
    answer: &str,
    meanwhile: F,
) -> (i32, String) {
    use std::io::{Read, Write};
    let command = format!("'{}' --format json {args}", env!("CARGO_BIN_EXE_lq"));
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("DATABASE_URL", &db.url)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run lq under script (util-linux)");
    let mut stdout = child.stdout.take().unwrap();
    // Blocks until the prompt is out (or lq exits without one, which fails below).
    let shown = tokio::task::spawn_blocking(move || {
        let (mut seen, mut chunk) = (Vec::new(), [0u8; 512]);
        loop {
            let n = stdout.read(&mut chunk).unwrap();
            seen.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&seen).into_owned();
            if n == 0 || text.contains("[y/N]") {
                return (text, stdout);
            }
        }
    })
    .await
    .unwrap();
    let (text, mut stdout) = shown;
    assert!(text.contains("[y/N]"), "no prompt: {text}");
    meanwhile.await;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(format!("{answer}\n").as_bytes()).unwrap();
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let code = status
        .code()
        .unwrap_or_else(|| panic!("lq did not exit: {rest}"));
    (code, text)
}
