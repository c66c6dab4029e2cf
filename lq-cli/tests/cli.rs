//! The `lq` binary run as a process against a real PostgreSQL, its JSON parsed
//! and its exit codes checked.

use std::process::Command;

use lq_runtime::{control, Job, JobContext, JobError, JobState, Perform, Runtime};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

mod common;
use common::{answer_prompt, insert, lq, lq_text};

/// A job the runtime in these tests can run.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "cli.ping", queue = "cli-q")]
struct Ping {
    n: u32,
}

impl Perform for Ping {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A recurring job that never fires in a test (the first of January), run
/// by hand with `lq cron run`.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "cli.new_year",
    queue = "cli-cron",
    cron = "0 0 1 1 *",
    unique_key = "new-year"
)]
struct NewYear {
    greeting: String,
}

impl Default for NewYear {
    fn default() -> Self {
        Self {
            greeting: "happy".into(),
        }
    }
}

impl Perform for NewYear {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn cron_run_enqueues_a_recurring_job_now_once_and_names_what_it_cannot_run() {
    let db = TestDb::new().await;
    // A runtime that declares the schedule records its job, and stops before
    // it could run one.
    let rt = Runtime::builder(db.pool.clone())
        .queue("cli-cron", 1)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the schedule's job to be recorded",
        "select exists (select from lq.cron_schedules where kind = 'cli.new_year' and payload is not null)",
        std::time::Duration::from_secs(30),
    )
    .await;
    rt.shutdown().await.unwrap();

    let (code, json, err) = lq(&db, &["cron", "run", "cli.new_year", "--by", "test"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["kind"], "cli.new_year");
    let id = json["id"].as_i64().expect("the job's id");
    let job = control::get(&db.pool, id).await.unwrap();
    assert_eq!(
        (job.queue.as_str(), job.payload.get(), job.state),
        ("cli-cron", r#"{"greeting": "happy"}"#, JobState::Queued)
    );

    // The first still queued holds the schedule's unique key: nothing more.
    let (code, _, err) = lq(&db, &["cron", "run", "cli.new_year"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("live job {id} holds its unique key \"new-year\"")),
        "{err}"
    );
    let (code, _, err) = lq(&db, &["cron", "run", "cli.no_such_kind"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no recurring job of kind \"cli.no_such_kind\" is scheduled"),
        "{err}"
    );
    assert_eq!(db.count("queued").await, 1);
}

#[tokio::test]
async fn migrate_shows_its_sql_on_a_dry_run_then_applies_it() {
    let db = TestDb::new().await;
    sqlx::raw_sql("drop schema lq cascade")
        .execute(&db.pool)
        .await
        .unwrap();
    let (code, json, _) = lq(&db, &["migrate", "--dry-run"]);
    assert_eq!(code, 0);
    let pending = json["pending"].as_array().unwrap();
    assert_eq!(pending.len() as i32, lq_runtime::SCHEMA_VERSION);
    assert!(pending[0]["sql"]
        .as_str()
        .unwrap()
        .contains("create table lq.jobs"));
    assert_eq!(
        lq_runtime::schema_version(&db.pool).await.unwrap(),
        0,
        "a dry run changes nothing"
    );
    let (code, json, _) = lq(&db, &["migrate"]);
    assert_eq!(
        (code, json["version"].as_i64()),
        (0, Some(lq_runtime::SCHEMA_VERSION.into()))
    );
    let (_, json, _) = lq(&db, &["migrate", "--dry-run"]);
    assert!(json["pending"].as_array().unwrap().is_empty());
}

/// A schema a newer build migrated: `lq migrate` applies nothing and says this
/// build is behind while the schema still serves it, and refuses (exit 2,
/// changing nothing) once a migration above this build no longer serves it.
#[tokio::test]
async fn migrate_against_a_newer_schema_says_whether_it_serves_this_build() {
    let db = TestDb::new().await;
    let known = lq_runtime::SCHEMA_VERSION;
    let record = |version: i32, serves_from: i32| {
        sqlx::query(
            "insert into lq.schema_migrations (version, name, serves_from) values ($1, 'later', $2)",
        )
        .bind(version)
        .bind(serves_from)
        .execute(&db.pool)
    };
    record(known + 1, known).await.unwrap();
    let (code, json, stderr) = lq(&db, &["migrate"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json["applied"], serde_json::json!([]));
    assert_eq!(json["version"].as_i64(), Some(i64::from(known + 1)));
    assert_eq!(json["this_build"].as_i64(), Some(i64::from(known)));
    assert!(stderr.contains("newer than this build"), "{stderr}");
    let (code, json, _) = lq(&db, &["migrate", "--dry-run"]);
    assert_eq!(code, 0);
    assert_eq!(json["pending"], serde_json::json!([]));
    assert_eq!(
        (json["version"].as_i64(), json["this_build"].as_i64()),
        (Some(i64::from(known + 1)), Some(i64::from(known)))
    );

    record(known + 2, known + 2).await.unwrap();
    let (code, _, stderr) = lq(&db, &["migrate"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("upgrade litequeue"), "{stderr}");
    let (code, _, stderr) = lq(&db, &["migrate", "--dry-run"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("upgrade litequeue"), "{stderr}");
    assert_eq!(
        lq_runtime::schema_version(&db.pool).await.unwrap(),
        known + 2
    );
}

#[tokio::test]
async fn status_list_show_and_a_bulk_retry_after_an_outage() {
    let db = TestDb::new().await;
    let queued = insert(&db, "cli.email", "mail", 3).await;
    let dead = insert(&db, "cli.charge", "billing", 4).await;
    for id in &dead {
        db.finish(*id, "dead", 60.0).await;
    }
    sqlx::query(
        "update lq.finished_jobs set errors = '[{\"attempt\": 3, \"at\": \"2026-01-01T00:00:00Z\", \"worker\": \"w\", \"error\": \"card declined\"}]'
         where id = $1",
    )
    .bind(dead[0])
    .execute(&db.pool)
    .await
    .unwrap();
    // The last hour's outcomes, as the runtimes that ran them record them in
    // the per-minute rollup; a minute two hours ago is not counted.
    sqlx::query(
        "insert into lq.stats_minute (minute, queue, kind, dead, wait_buckets)
         values (date_trunc('minute', now()), 'billing', 'cli.charge', 4, array_fill(0::int8, array[15])),
                (date_trunc('minute', now()) - interval '2 hours', 'billing', 'cli.charge', 9,
                 array_fill(0::int8, array[15]))",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // The mail queue's rate limit, as a runtime with one leaves its bucket.
    sqlx::query("insert into lq.rate_limits values ('mail', 0, 600, 60, now())")
        .execute(&db.pool)
        .await
        .unwrap();

    let (code, json, _) = lq(&db, &["status"]);
    assert_eq!(code, 0);
    let queues = json["queues"].as_array().unwrap();
    let line = |name: &str| queues.iter().find(|q| q["queue"] == name).unwrap().clone();
    assert_eq!(line("mail")["available"], 3);
    assert_eq!(line("mail")["rate_limit"]["allowed"], 600);
    assert_eq!(line("mail")["rate_limit"]["period_secs"], 60.0);
    assert_eq!(line("billing")["dead_last_hour"], 4);
    assert_eq!(line("billing")["rate_limit"], serde_json::Value::Null);

    let (code, json, _) = lq(
        &db,
        &[
            "jobs",
            "list",
            "--state",
            "dead",
            "--kind",
            "cli.charge",
            "--limit",
            "2",
        ],
    );
    assert_eq!(code, 0);
    let ids: Vec<i64> = json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![dead[3], dead[2]]);
    let (_, json, _) = lq(
        &db,
        &[
            "jobs",
            "list",
            "--state",
            "dead",
            "--before",
            &dead[2].to_string(),
        ],
    );
    assert_eq!(json["jobs"].as_array().unwrap().len(), 2);

    let (code, json, _) = lq(&db, &["jobs", "show", &dead[0].to_string()]);
    assert_eq!(code, 0);
    assert_eq!(json["errors"][0]["error"], "card declined");
    assert_eq!(json["payload"]["n"], 1);

    // A dry run counts; without --yes and no terminal, nothing happens.
    let retry_dead = ["jobs", "retry", "--state", "dead", "--kind", "cli.charge"];
    let (code, json, _) = lq(&db, &[&retry_dead[..], &["--dry-run"]].concat());
    assert_eq!((code, json["matched"].as_u64()), (0, Some(4)));
    let (code, _, err) = lq(&db, &retry_dead);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(db.count("dead").await, 4);
    let (code, json, _) = lq(&db, &[&retry_dead[..], &["--yes"]].concat());
    assert_eq!(code, 0);
    assert_eq!(json["done"].as_array().unwrap().len(), 4);
    assert_eq!(db.count("dead").await, 0);

    // Retrying queued jobs by id: each refused with its reason, exit 1.
    let (code, json, _) = lq(
        &db,
        &[
            "jobs",
            "retry",
            &queued[0].to_string(),
            &queued[1].to_string(),
            "--yes",
        ],
    );
    assert_eq!(code, 1);
    let refused = json["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 2);
    assert!(
        refused[0]["reason"].as_str().unwrap().contains("queued"),
        "{refused:?}"
    );

    // Cancel one queue, delete it.
    let (code, json, _) = lq(&db, &["jobs", "cancel", "--queue", "mail", "--yes"]);
    assert_eq!((code, json["done"].as_array().unwrap().len()), (0, 3));
    let (code, json, _) = lq(
        &db,
        &[
            "jobs",
            "delete",
            "--queue",
            "mail",
            "--state",
            "cancelled",
            "--yes",
        ],
    );
    assert_eq!((code, json["done"].as_array().unwrap().len()), (0, 3));
    assert!(control::get(&db.pool, queued[0]).await.is_err());
}

#[tokio::test]
async fn bad_input_exits_2_with_a_reason_and_changes_nothing() {
    let db = TestDb::new().await;
    insert(&db, "cli.email", "mail", 2).await;
    for (args, needle) in [
        (vec!["jobs", "list", "--state", "deadd"], "unknown state"),
        (
            vec!["jobs", "list", "--older-than", "soon"],
            "not a duration",
        ),
        (vec!["jobs", "list", "--payload", "{bad"], "not JSON"),
        (vec!["jobs", "delete", "--yes"], "--all"),
        (
            vec!["jobs", "delete", "1", "--queue", "mail", "--yes"],
            "not both",
        ),
        (vec!["queues", "pause", "has space"], "invalid queue name"),
        (vec!["status", "--watch", "0s"], "too often"),
        (vec!["status", "--watch", "500ms"], "too often"),
        (vec!["jobs", "show", "999999"], "999999"),
        (vec!["jobs", "list", "--limit=-1"], "limit -1 is negative"),
        (
            vec!["jobs", "delete", "--payload", r#"{"a":"\u0000"}"#, "--yes"],
            "the payload filter holds a NUL character",
        ),
        (
            vec!["jobs", "retry", "--older-than", "5000y", "--yes"],
            "older_than is over 1,000 years",
        ),
    ] {
        let (code, _, err) = lq(&db, &args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert_eq!(db.count("queued").await, 2);
    let out = Command::new(env!("CARGO_BIN_EXE_lq"))
        .args(["status"])
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
}

#[tokio::test]
async fn ids_that_name_no_job_are_reported_and_exit_2_while_the_others_are_acted_on() {
    let db = TestDb::new().await;
    let ids = insert(&db, "cli.email", "mail", 1).await;
    let (missing, other) = (ids[0] + 1_000_000, ids[0] + 1_000_001);

    let (code, json, err) = lq(&db, &["jobs", "retry", &missing.to_string(), "--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("no job {missing}")), "{err}");
    assert_eq!(json["missing"], serde_json::json!([missing]));

    let (code, _, err) = lq(&db, &["jobs", "delete", &missing.to_string(), "--dry-run"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("no job {missing}")), "{err}");

    let (code, json, err) = lq(
        &db,
        &[
            "jobs",
            "cancel",
            &missing.to_string(),
            &ids[0].to_string(),
            &other.to_string(),
            "--yes",
        ],
    );
    assert_eq!(code, 2, "{err}");
    let named: Vec<&str> = err.lines().collect();
    assert_eq!(
        named,
        [
            format!("lq: no job {missing}"),
            format!("lq: no job {other}")
        ],
        "{err}"
    );
    assert_eq!(json["done"], serde_json::json!([ids[0]]));
    assert_eq!(db.count("cancelled").await, 1);
}

#[tokio::test]
async fn queues_runtimes_cron_and_doctor_show_the_cluster() {
    let db = TestDb::new().await;
    let ids = insert(&db, "cli.orphan", "cli-q", 2).await;
    let rt = Runtime::builder(db.pool.clone())
        .queue("cli-q", 2)
        .global_limit("cli-q", 1)
        .owner("cli-runtime")
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the runtime to lead",
        "select exists (select from lq.leader where holder = 'cli-runtime')",
        std::time::Duration::from_secs(30),
    )
    .await;

    let (code, json, _) = lq(&db, &["runtimes"]);
    assert_eq!(code, 0);
    let rts = json["runtimes"].as_array().unwrap();
    assert_eq!(rts.len(), 1);
    assert_eq!(
        (rts[0]["id"].as_str(), rts[0]["leader"].as_bool()),
        (Some("cli-runtime"), Some(true))
    );
    assert_eq!(rts[0]["queues"]["cli-q"], 2);
    assert_eq!(rts[0]["limits"]["cli-q"]["global"], 1);
    // One queue, the default pool: what `RuntimeBuilder::connections` says.
    let one_queue = Runtime::builder(db.pool.clone()).queue("cli-q", 2);
    assert_eq!(rts[0]["connections"], one_queue.connections());

    // Nobody declares cli.orphan: doctor says so, and exits 1.
    let (code, json, _) = lq(&db, &["doctor"]);
    assert_eq!(code, 1);
    let unserved = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "unserved")
        .unwrap()
        .clone();
    assert_eq!(unserved["ok"], false);
    assert!(
        unserved["detail"]
            .as_str()
            .unwrap()
            .contains("2 of cli.orphan on cli-q"),
        "{unserved}"
    );

    let (code, json, err) = lq(&db, &["queues", "pause", "cli-q", "--by", "test"]);
    assert_eq!((code, json["changed"].as_bool()), (0, Some(true)));
    assert_eq!(json["known"], true, "cli-q has queued jobs");
    assert!(err.is_empty(), "{err}");
    // A name nothing uses (a typo, most often) is paused ahead, with a note.
    let (code, json, err) = lq(&db, &["queues", "pause", "cli-qq"]);
    assert_eq!((code, json["known"].as_bool()), (0, Some(false)));
    assert!(err.contains("no live job is in queue \"cli-qq\""), "{err}");
    lq(&db, &["queues", "resume", "cli-qq"]);
    let (_, json, _) = lq(&db, &["queues", "list"]);
    let q = json["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "cli-q")
        .unwrap()
        .clone();
    assert_eq!(q["paused"]["by"], "test");
    let (code, json, _) = lq(&db, &["queues", "resume", "cli-q"]);
    assert_eq!((code, json["changed"].as_bool()), (0, Some(true)));

    let (code, json, _) = lq(&db, &["cron", "list"]);
    assert_eq!(
        (code, json["schedules"].as_array().map(Vec::len)),
        (0, Some(0))
    );

    db.finish(ids[0], "succeeded", 3.0 * 86400.0).await;
    // Counted first; with no terminal and no --yes, nothing goes.
    let prune = ["prune", "--keep-finished", "1d"];
    let (code, json, _) = lq(&db, &[&prune[..], &["--dry-run"]].concat());
    assert_eq!(code, 0);
    // One JSON shape for every prune, whichever way it ran.
    assert_eq!(
        json,
        serde_json::json!({"action": "prune", "dry_run": true, "matched": 1, "pruned": 0, "stopped": null})
    );
    let (code, _, err) = lq(&db, &prune);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("delete 1 finished jobs for good"), "{err}");
    let (code, json, _) = lq(&db, &[&prune[..], &["--yes"]].concat());
    assert_eq!(code, 0);
    assert_eq!(
        json,
        serde_json::json!({"action": "prune", "dry_run": false, "matched": null, "pruned": 1, "stopped": null}),
        "--yes does not count"
    );
    let (code, _, err) = lq(&db, &["prune", "--keep-dead", "5000y", "--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("keep_dead is over 1,000 years"), "{err}");
    rt.shutdown().await.unwrap();
    assert_eq!(
        control::get(&db.pool, ids[1]).await.unwrap().state,
        JobState::Queued
    );
}

#[tokio::test]
async fn a_prune_stopped_partway_reports_what_it_deleted() {
    let db = TestDb::new().await;
    db.stage_prune_refused_after_first_batch(6000).await;
    let (code, json, err) = lq(&db, &["prune", "--keep-finished", "1h", "--yes"]);
    assert_eq!((code, json["pruned"].as_u64()), (2, Some(5000)), "{err}");
    assert!(
        json["stopped"]
            .as_str()
            .is_some_and(|s| s.contains("the second batch is refused")),
        "{json}"
    );
    assert!(
        err.contains("prune stopped partway: 5000 finished jobs were already deleted"),
        "{err}"
    );
}

#[tokio::test]
async fn serve_refuses_to_listen_beyond_loopback_without_auth() {
    let db = TestDb::new().await;
    let (code, _, stderr) = lq(
        &db,
        &[
            "serve",
            "--bind",
            "0.0.0.0:0",
            "--token-env",
            "LQ_TEST_UNSET_TOKEN",
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("refusing to serve on 0.0.0.0:0 without authentication"),
        "{stderr}"
    );
    let (code, _, stderr) = lq(&db, &["serve", "--basic", "nopassword"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("user:password"), "{stderr}");
    let (code, _, stderr) = lq(&db, &["serve", "--db-connections", "0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--db-connections"), "{stderr}");
}

#[tokio::test]
async fn a_confirmed_bulk_action_acts_on_the_jobs_counted_not_on_jobs_enqueued_since() {
    let db = TestDb::new().await;
    let counted = insert(&db, "cli.ping", "pin-q", 3).await;
    let mut later = Vec::new();
    let (code, _) = answer_prompt(
        &db,
        "jobs delete --queue pin-q --state queued",
        "y",
        async {
            // Enqueued while the operator reads "delete 3 jobs?".
            later = insert(&db, "cli.ping", "pin-q", 5).await;
        },
    )
    .await;
    assert_eq!(code, 0);
    for id in counted {
        assert!(control::get(&db.pool, id).await.is_err(), "job {id} left");
    }
    for id in later {
        let job = control::get(&db.pool, id).await.unwrap();
        assert_eq!(job.state, JobState::Queued, "job {id}");
    }

    // `--limit` still caps the count, newest first.
    insert(&db, "cli.ping", "pin-q", 2).await;
    let (code, json, _) = lq(
        &db,
        &[
            "jobs", "cancel", "--queue", "pin-q", "--limit", "4", "--yes",
        ],
    );
    assert_eq!((code, json["done"].as_array().unwrap().len()), (0, 4));
    assert_eq!(db.count("queued").await, 3);
}

#[tokio::test]
async fn a_role_without_the_grant_gets_the_servers_reason_and_where_to_read_the_grants() {
    let db = TestDb::new().await;
    insert(&db, "cli.ping", "ro-q", 2).await;
    let role = format!("lq_cli_ro_{:08x}", fastrand::u32(..));
    sqlx::raw_sql(&format!(
        "create role {role} login password 'ro';
         grant usage on schema lq to {role};
         grant select on lq.jobs, lq.finished_jobs, lq.all_jobs to {role};"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let host_and_db = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let url = format!("{scheme}://{role}:ro@{host_and_db}");
    let out = Command::new(env!("CARGO_BIN_EXE_lq"))
        .args(["jobs", "delete", "--all", "--yes"])
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("permission denied for table"), "{stderr}");
    assert!(stderr.contains("docs/roles.md"), "{stderr}");
    assert_eq!(db.count("queued").await, 2);
    drop(db);
    lq_tests::run_as_admin_from_drop(vec![format!("drop role if exists {role}")]);
}

#[tokio::test]
async fn text_from_applications_reaches_the_terminal_escaped() {
    let db = TestDb::new().await;
    let id = insert(&db, "cli.charge", "esc-q", 1).await[0];
    db.finish(id, "dead", 60.0).await;
    // An upstream's reply quoted in a job's error: clears the screen, sets the
    // clipboard (OSC 52), and a worker name, a payload and metadata with C1 and
    // DEL controls (JSON leaves them unescaped), and a unique key built from
    // the same reply.
    sqlx::query(
        "update lq.finished_jobs set errors = jsonb_build_array(jsonb_build_object(
             'attempt', 1, 'at', '2026-01-01T00:00:00Z', 'worker', 'w' || chr(155) || '2J',
             'error', 'bad gateway ' || chr(27) || '[2J' || chr(27) || ']52;c;aGk=' || chr(7))),
             payload = jsonb_build_object('note', 'csi' || chr(155) || '2J'),
             meta = jsonb_build_object('tag', 'del' || chr(127)),
             unique_key = 'order:' || chr(27) || '[2J'
         where id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    for args in [
        vec!["jobs", "show", &id.to_string()],
        vec!["jobs", "list", "--queue", "esc-q"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_lq"))
            .args(&args)
            .env("DATABASE_URL", &db.url)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            !stdout.chars().any(|c| c.is_control() && c != '\n'),
            "{args:?}: {stdout:?}"
        );
        assert!(
            stdout.contains(r"bad gateway \u{1b}[2J"),
            "{args:?}: {stdout}"
        );
        if args[1] == "show" {
            assert!(stdout.contains(r"order:\u{1b}[2J"), "the key: {stdout}");
        }
    }
}

#[tokio::test]
async fn a_bulk_action_that_fails_partway_prints_what_it_did_then_the_error() {
    let db = TestDb::new().await;
    // Two batches: the newest 500 jobs, then the oldest 100, whose first job the
    // server refuses to remove.
    let ids = insert(&db, "cli.ping", "stop-q", 600).await;
    let oldest = ids[0];
    db.refuse_delete(oldest).await;

    let (code, json, stderr) = lq(&db, &["jobs", "cancel", "--queue", "stop-q", "--yes"]);
    assert_eq!(code, 2, "{stderr}");
    let done: Vec<i64> = serde_json::from_value(json["done"].clone()).unwrap();
    assert_eq!(done, ids[100..], "{json}");
    assert!(
        json["stopped"]
            .as_str()
            .unwrap()
            .contains("refused by the test"),
        "{json}"
    );
    assert!(
        stderr.contains("stopped partway: 500 jobs were already cancelled")
            && stderr.contains("refused by the test"),
        "{stderr}"
    );
    assert_eq!(db.count("cancelled").await, 500);
    assert_eq!(db.count("queued").await, 100);
}

/// `lq jobs run-now` makes queued jobs due at once, by id or by filter, and
/// refuses the others with their reason (exit 1), as the other bulk actions do.
#[tokio::test]
async fn run_now_makes_scheduled_jobs_due_and_refuses_finished_ones() {
    let db = TestDb::new().await;
    let later = insert(&db, "cli.later", "later", 3).await;
    sqlx::query("update lq.jobs set run_at = now() + interval '1 day'")
        .execute(&db.pool)
        .await
        .unwrap();
    let due_now = "select count(*) from lq.jobs where run_at <= now()";

    let (code, json, err) = lq(&db, &["jobs", "run-now", &later[0].to_string(), "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["action"], "run-now");
    assert_eq!(json["done"], serde_json::json!([later[0]]));
    assert_eq!(db.number(due_now).await, 1);

    let by_filter = ["jobs", "run-now", "--state", "queued", "--queue", "later"];
    let (code, json, _) = lq(&db, &[&by_filter[..], &["--dry-run"]].concat());
    assert_eq!((code, json["matched"].as_u64()), (0, Some(3)));
    assert_eq!(db.number(due_now).await, 1, "a dry run changes nothing");
    let (code, json, _) = lq(&db, &[&by_filter[..], &["--yes"]].concat());
    assert_eq!((code, json["done"].as_array().unwrap().len()), (0, 3));
    assert_eq!(db.number(due_now).await, 3);

    // A filter without a state takes the queued jobs only; an id is looked at
    // whatever its state, and refused with it.
    db.finish(later[2], "dead", 1.0).await;
    let (code, json, _) = lq(&db, &["jobs", "run-now", "--queue", "later", "--yes"]);
    assert_eq!(code, 0);
    assert_eq!(json["done"], serde_json::json!([later[0], later[1]]));
    assert_eq!(json["refused"], serde_json::json!([]));
    let (code, json, _) = lq(&db, &["jobs", "run-now", &later[2].to_string(), "--yes"]);
    assert_eq!(code, 1);
    let reason = json["refused"][0]["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        format!("job {} is dead, so it cannot be run now", later[2])
    );
}

/// `--available` and `--scheduled` split the queued jobs by their time, for
/// listing and for bulk actions; `--state scheduled`, an Oban or River habit,
/// is refused with the flag to use.
#[tokio::test]
async fn available_and_scheduled_flags_split_queued_jobs_by_their_time() {
    let db = TestDb::new().await;
    let ids = insert(&db, "cli.mixed", "mixed", 4).await;
    sqlx::query("update lq.jobs set run_at = now() + interval '1 day' where id = any($1)")
        .bind(&ids[2..])
        .execute(&db.pool)
        .await
        .unwrap();
    let listed = |json: &serde_json::Value| -> Vec<i64> {
        (json["jobs"].as_array().unwrap().iter())
            .map(|j| j["id"].as_i64().unwrap())
            .collect()
    };
    let (code, json, err) = lq(&db, &["jobs", "list", "--scheduled"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(listed(&json), [ids[3], ids[2]]);
    let (_, json, _) = lq(&db, &["jobs", "list", "--available", "--queue", "mixed"]);
    assert_eq!(listed(&json), [ids[1], ids[0]]);

    let (code, _, err) = lq(&db, &["jobs", "list", "--available", "--scheduled"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, _, err) = lq(&db, &["jobs", "list", "--state", "scheduled"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("litequeue keeps such jobs queued; use --scheduled"),
        "{err}"
    );

    // Cancel what is scheduled: the due jobs stay.
    let (code, json, err) = lq(&db, &["jobs", "cancel", "--scheduled", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["done"], serde_json::json!([ids[2], ids[3]]));
    assert_eq!(
        db.number("select count(*) from lq.jobs where state = 'queued'")
            .await,
        2
    );
}

/// `lq jobs count` counts what a filter matches per queue and state, with a
/// total; in JSON, one entry per queue and state; a bad filter is refused
/// before connecting.
#[tokio::test]
async fn jobs_count_gives_each_queue_and_state_and_the_total() {
    let db = TestDb::new().await;
    let mail = insert(&db, "cli.count", "mail", 3).await;
    insert(&db, "cli.count", "sms", 2).await;
    insert(&db, "cli.other", "mail", 1).await;
    db.finish(mail[0], "dead", 60.0).await;

    let (code, json, err) = lq(&db, &["jobs", "count", "--kind", "cli.count"]);
    assert_eq!(code, 0, "{err}");
    let mut counts: Vec<(String, String, u64)> = (json["counts"].as_array().unwrap().iter())
        .map(|c| {
            (
                c["queue"].as_str().unwrap().to_owned(),
                c["state"].as_str().unwrap().to_owned(),
                c["count"].as_u64().unwrap(),
            )
        })
        .collect();
    counts.sort();
    assert_eq!(
        counts,
        [
            ("mail".to_owned(), "dead".to_owned(), 1),
            ("mail".to_owned(), "queued".to_owned(), 2),
            ("sms".to_owned(), "queued".to_owned(), 2),
        ]
    );
    assert_eq!(json["total"], 5);

    let (code, text, err) = lq_text(&db.url, &[], &["jobs", "count", "--state", "dead"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["queue", "state", "jobs"],
            vec!["mail", "dead", "1"],
            vec!["total", "1"]
        ]
    );

    let (code, _, err) = lq_text(
        "postgres://nobody@127.0.0.1:1/none",
        &[],
        &["jobs", "count", "--older-than", "5000y"],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("over 1,000 years") && !err.contains("connect"),
        "{err}"
    );
}
