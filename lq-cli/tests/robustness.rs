//! The `lq` binary at the edges: payloads nested deeper than serde_json
//! decodes, a server that is not there, jobs that appear or age while `lq`
//! counts and asks, and `status --watch` as a stream.

use lq_tests::TestDb;

mod common;
use common::{answer_prompt, insert, lq, lq_text, Role, OPERATOR_GRANTS};

/// Whether `text` is one JSON document, as PostgreSQL (which takes any depth)
/// parses it, and `text`'s `path` (a `jsonb` path) equals `expected`.
async fn json_at(db: &TestDb, text: &str, path: &str, expected: &str) -> bool {
    sqlx::query_scalar(&format!("select ($1::jsonb {path}) = $2::jsonb"))
        .bind(text)
        .bind(expected)
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {:.200}", text))
}

#[tokio::test]
async fn json_output_shows_a_payload_and_meta_nested_5000_levels_deep() {
    let db = TestDb::new().await;
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let id: i64 = sqlx::query_scalar(
        "insert into lq.jobs (kind, queue, payload, meta, max_attempts)
         values ('cli.deep', 'deep-q', $1::text::jsonb, jsonb_build_object('t', $1::text::jsonb), 3)
         returning id",
    )
    .bind(&deep)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let deep_meta = format!(r#"{{"t": {deep}}}"#);
    let shallow = insert(&db, "cli.deep", "deep-q", 1).await[0];

    let (code, stdout, stderr) = lq_text(
        &db.url,
        &["--format", "json"],
        &["jobs", "show", &id.to_string()],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(json_at(&db, &stdout, "-> 'payload'", &deep).await);
    assert!(json_at(&db, &stdout, "-> 'meta'", &deep_meta).await);
    assert!(json_at(&db, &stdout, "-> 'id'", &id.to_string()).await);

    let (code, stdout, stderr) = lq_text(
        &db.url,
        &["--format", "json"],
        &["jobs", "list", "--queue", "deep-q"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(json_at(&db, &stdout, "-> 'jobs' -> 0 -> 'id'", &shallow.to_string()).await);
    assert!(json_at(&db, &stdout, "-> 'jobs' -> 0 -> 'meta'", "null").await);
    assert!(json_at(&db, &stdout, "-> 'jobs' -> 1 -> 'payload'", &deep).await);
    assert!(json_at(&db, &stdout, "-> 'jobs' -> 1 -> 'meta'", &deep_meta).await);

    // The table shows it too (raw, as it cannot be indented).
    let (code, stdout, stderr) = lq_text(&db.url, &[], &["jobs", "show", &id.to_string()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(&deep), "{:.200}", stdout);
    let (code, json, _) = lq(&db, &["jobs", "list", "--queue", "nothing-here"]);
    assert_eq!((code, json), (0, serde_json::json!({"jobs": []})));
}

/// A server that refuses the connection: `lq` names the reason the operating
/// system gave, and refuses arguments that are wrong anyway before connecting.
#[tokio::test]
async fn a_refused_connection_is_reported_with_its_reason() {
    let nowhere = "postgres://nobody@127.0.0.1:1/none";
    let (code, stdout, stderr) = lq_text(nowhere, &[], &["status"]);
    assert_eq!(code, 2, "{stdout}");
    assert!(
        stderr.contains("cannot connect to the database") && stderr.contains("refused"),
        "{stderr}"
    );
    assert!(!stderr.contains("timed out"), "{stderr}");
    for (args, needle) in [
        (vec!["jobs", "retry"], "retry which jobs?"),
        (vec!["jobs", "delete", "1", "--queue", "q"], "not both"),
        (
            vec!["jobs", "cancel", "--older-than", "5000y"],
            "older_than is over 1,000 years",
        ),
        (vec!["jobs", "list", "--limit=-1"], "limit -1 is negative"),
    ] {
        let (code, _, stderr) = lq_text(nowhere, &[], &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle) && !stderr.contains("connect"),
            "{args:?}: {stderr}"
        );
    }
}

/// `--timeout` bounds each call a command makes: a listing held up by a table
/// locked elsewhere is cancelled by the server within the bound and reported,
/// exit 2; a bad value is refused before connecting.
#[tokio::test]
async fn a_command_held_up_past_its_timeout_is_cancelled_and_reported() {
    let db = TestDb::new().await;
    let lock = db.lock_table("lq.finished_jobs").await;
    let url = db.url.clone();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        lq_text(
            &url,
            &["--timeout", "1s"],
            &["jobs", "list", "--state", "dead"],
        )
    })
    .await
    .unwrap();
    lock.rollback().await.unwrap();
    assert_eq!(code, 2, "{stdout}");
    assert!(stderr.contains("statement timeout"), "{stderr}");
    let (code, _, stderr) = lq_text(&db.url, &["--timeout", "0s"], &["status"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("zero") && !stderr.contains("connect"),
        "{stderr}"
    );
}

/// Jobs matching a bulk action's filter appear after `lq` looked for the
/// newest match and found none: none is acted on. (The appearance is staged:
/// a row policy hides the jobs from `lq`'s listing statement alone, as a job
/// enqueued between that statement and the count would be.)
#[tokio::test]
async fn a_bulk_action_that_finds_no_job_acts_on_none_that_appear_after() {
    let db = TestDb::new().await;
    let role = Role::create(&db, "lq_cli_rls").await;
    role.grant(&db, OPERATOR_GRANTS).await;
    let ids = insert(&db, "cli.ping", "late-q", 2).await;
    sqlx::raw_sql(
        "create function lq.test_not_the_listing() returns boolean language sql stable as
             $$ select pg_catalog.current_query() !~ 'payload::text as payload.*order by id desc limit' $$;
         alter table lq.jobs enable row level security;
         create policy test_hidden_from_the_listing on lq.jobs using (lq.test_not_the_listing());",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let url = role.url(&db);
    let cancel = ["jobs", "cancel", "--state", "queued", "--queue", "late-q"];
    for extra in ["--dry-run", "--yes"] {
        let (code, stdout, stderr) = lq_text(
            &url,
            &["--format", "json"],
            &[&cancel[..], &[extra]].concat(),
        );
        assert_eq!(code, 0, "{extra}: {stderr}");
        let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(json["matched"], 0, "{extra}: {json}");
    }
    assert_eq!(db.count("queued").await, 2, "{ids:?} left alone");
}

/// `status --watch --format json` prints one compact document per line, and
/// a Ctrl-C ends it even while a redraw waits on the database.
#[tokio::test]
async fn status_watch_streams_one_json_document_per_line_and_stops_on_ctrl_c_mid_redraw() {
    use std::io::BufRead;
    let db = TestDb::new().await;
    insert(&db, "cli.ping", "watch-q", 2).await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lq"))
        .args(["--format", "json", "status", "--watch", "1s"])
        .env("DATABASE_URL", &db.url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run lq");
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let (first, second) = tokio::task::spawn_blocking(move || {
        let mut lines = stdout.lines();
        let mut next = || lines.next().expect("a line").expect("text");
        (next(), next())
    })
    .await
    .unwrap();
    for line in [first, second] {
        let doc: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(doc["queues"][0]["queue"], "watch-q", "{doc}");
        assert_eq!(doc["queues"][0]["available"], 2, "{doc}");
    }

    // The next redraw waits for this lock (on the per-minute rollup, where
    // the last hour's outcomes come from); Ctrl-C meanwhile.
    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("lock table lq.stats_minute in access exclusive mode")
        .execute(&mut *lock)
        .await
        .unwrap();
    db.wait_for(
        "lq's redraw to wait for the lock",
        "select exists (select from pg_stat_activity
                        where datname = current_database() and wait_event_type = 'Lock')",
        std::time::Duration::from_secs(30),
    )
    .await;
    let interrupted = std::process::Command::new("kill")
        .args(["-s", "INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let pid = child.id().to_string();
    let exited = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        tokio::task::spawn_blocking(move || child.wait().unwrap()),
    )
    .await;
    if exited.is_err() {
        let _ = std::process::Command::new("kill")
            .args(["-s", "KILL", &pid])
            .status();
    }
    lock.rollback().await.unwrap();
    let status = exited.expect("lq still running 20 s after Ctrl-C").unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// A finished job whose retention runs out while the operator reads "delete N
/// finished jobs?" is not deleted with the N: the prune is pinned to the
/// database time of the count.
#[tokio::test]
async fn a_confirmed_prune_deletes_what_it_counted_not_jobs_past_retention_since() {
    let db = TestDb::new().await;
    let ids = insert(&db, "cli.ping", "prune-q", 2).await;
    let (old, fresh) = (ids[0], ids[1]);
    db.finish(old, "succeeded", 2.0 * 3600.0).await;
    db.finish(fresh, "succeeded", 0.0).await;
    let (code, prompt) = answer_prompt(&db, "prune --keep-finished 1h", "y", async {
        // While the question is read, `fresh` comes to have finished an hour
        // ago (as of now, which is later than the count).
        sqlx::query(
            "update lq.finished_jobs set finished_at = now() - interval '1 hour' where id = $1",
        )
        .bind(fresh)
        .execute(&db.pool)
        .await
        .unwrap();
    })
    .await;
    assert_eq!(code, 0, "{prompt}");
    assert!(
        prompt.contains("delete 1 finished jobs for good"),
        "{prompt}"
    );
    let left: Vec<i64> = sqlx::query_scalar("select id from lq.finished_jobs order by id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, vec![fresh]);
}

/// `lq prune --yes` does not count first (a count reads the whole history past
/// retention: on a long one, longer than a call may take). The count is made
/// visible here: a row policy hides every finished job from a statement that
/// counts, so a prune that counted first would find nothing to delete.
#[tokio::test]
async fn prune_with_yes_deletes_without_counting_first() {
    let db = TestDb::new().await;
    let role = Role::create(&db, "lq_cli_rls").await;
    role.grant(&db, OPERATOR_GRANTS).await;
    let ids = insert(&db, "cli.ping", "prune-q", 3).await;
    for id in &ids {
        db.finish(*id, "succeeded", 2.0 * 86400.0).await;
    }
    sqlx::raw_sql(
        "create function lq.test_not_a_count() returns boolean language sql stable as
             $$ select pg_catalog.current_query() !~* 'count\\(\\*\\) from lq\\.finished_jobs' $$;
         alter table lq.finished_jobs enable row level security;
         create policy test_hidden_from_counts on lq.finished_jobs using (lq.test_not_a_count());",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let url = role.url(&db);
    let (code, stdout, stderr) = lq_text(
        &url,
        &["--format", "json"],
        &["prune", "--keep-finished", "1d", "--dry-run"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(r#""matched": 0"#),
        "the count is hidden: {stdout}"
    );
    let (code, stdout, stderr) = lq_text(
        &url,
        &["--format", "json"],
        &["prune", "--keep-finished", "1d", "--yes"],
    );
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["pruned"], 3, "{json}");
    assert_eq!(db.count("succeeded").await, 0);
}

/// `lq migrate --dry-run` prints all `lq migrate` would run: piped into psql
/// on a database litequeue never migrated, it leaves a schema `lq migrate` and
/// `lq doctor` take as current, recorded as `lq migrate` records it.
#[tokio::test]
async fn migrate_dry_run_prints_a_script_psql_applies_to_a_current_schema() {
    use std::io::Write;
    let db = TestDb::new().await;
    let recorded = "select version, name, serves_from from lq.schema_migrations order by version";
    let migrated: Vec<(i32, String, Option<i32>)> =
        sqlx::query_as(recorded).fetch_all(&db.pool).await.unwrap();
    sqlx::raw_sql("drop schema lq cascade")
        .execute(&db.pool)
        .await
        .unwrap();

    let (code, script, stderr) = lq_text(&db.url, &[], &["migrate", "--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    let (_, json, _) = lq(&db, &["migrate", "--dry-run"]);
    assert_eq!(json["script"].as_str(), Some(script.as_str()));
    let mut psql = std::process::Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &db.url])
        .env("PGSSLMODE", "disable")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run psql");
    psql.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let applied = psql.wait_with_output().unwrap();
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );

    let by_hand: Vec<(i32, String, Option<i32>)> =
        sqlx::query_as(recorded).fetch_all(&db.pool).await.unwrap();
    assert_eq!(by_hand, migrated);
    let (code, json, stderr) = lq(&db, &["migrate"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json["applied"], serde_json::json!([]), "{json}");
    assert_eq!(
        json["version"].as_i64(),
        Some(lq_runtime::SCHEMA_VERSION.into())
    );
    let (_, json, _) = lq(&db, &["doctor"]);
    let schema = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "schema")
        .unwrap()
        .clone();
    assert_eq!(schema["ok"], true, "{schema}");
    let (code, json, _) = lq(&db, &["migrate", "--dry-run"]);
    assert_eq!((code, &json["script"]), (0, &serde_json::Value::Null));
}

/// A reader that goes away early (`lq jobs list | head -1`) ends `lq` quietly
/// with the command's own exit code (0 for a list), not with a panic on the
/// broken pipe.
#[tokio::test]
async fn a_reader_that_stops_reading_ends_lq_quietly() {
    use std::io::{BufRead, BufReader};
    let db = TestDb::new().await;
    common::insert(&db, "cli.many", "default", 3000).await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lq"))
        .args(["jobs", "list", "--limit", "3000"])
        .env("DATABASE_URL", &db.url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run lq");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped here: the rest of the 3,000 lines meet a closed pipe.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!first.is_empty());
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

/// `lq` pointed at a database without litequeue's schema, or with an older
/// one, says which version it found and what to do (migrate, or check the URL),
/// exits 2, and creates nothing: a pause is not recorded in a schema that is
/// not there.
#[tokio::test]
async fn a_database_without_the_current_schema_is_reported_as_such() {
    let db = TestDb::new().await;
    sqlx::raw_sql("drop schema lq cascade")
        .execute(&db.pool)
        .await
        .unwrap();
    let needed = lq_runtime::SCHEMA_VERSION;
    let commands: [&[&str]; 6] = [
        &["status"],
        &["jobs", "list"],
        &["jobs", "show", "1"],
        &["queues", "pause", "emails"],
        &["runtimes"],
        &["cron", "list"],
    ];
    for args in commands {
        let (code, stdout, stderr) = lq_text(&db.url, &[], args);
        assert_eq!(code, 2, "{args:?}: {stdout}");
        assert!(
            stderr.contains(&format!("at version 0, this lq needs {needed}"))
                && stderr.contains("run `lq migrate`")
                && stderr.contains("--database-url"),
            "{args:?}: {stderr}"
        );
        // PostgreSQL's own message is kept, once.
        assert_eq!(
            stderr.matches("does not exist").count(),
            1,
            "{args:?}: {stderr}"
        );
    }
    let schemas: i64 = sqlx::query_scalar("select count(*) from pg_namespace where nspname = 'lq'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(schemas, 0, "lq created nothing");

    // A schema at version 4, from before queues could be paused.
    sqlx::raw_sql(concat!(
        "create schema lq;
         create table lq.schema_migrations (
             version integer primary key, name text not null, applied_at timestamptz not null default now());
         insert into lq.schema_migrations (version, name) values
             (1, '0001_jobs'), (2, '0002_cron'), (3, '0003_finished_jobs'), (4, '0004_unique_per_kind');
         ",
        include_str!("../../migrations/0001_jobs.sql"),
        include_str!("../../migrations/0002_cron.sql"),
        include_str!("../../migrations/0003_finished_jobs.sql"),
        include_str!("../../migrations/0004_unique_per_kind.sql"),
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let (code, _, stderr) = lq_text(&db.url, &[], &["queues", "pause", "emails"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("at version 4, this lq needs {needed}")),
        "{stderr}"
    );

    // Once migrated, a job that is not there is just that.
    lq_runtime::migrate(&db.pool).await.unwrap();
    let (code, _, stderr) = lq_text(&db.url, &[], &["jobs", "show", "1"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("job 1 does not exist") && !stderr.contains("lq migrate"),
        "{stderr}"
    );
}
