//! The cluster: every runtime reports itself in `lq.runtimes`, one holds the
//! maintenance leader's lease, and a kind is unknown only when no live runtime
//! serving its queue declares it.

use std::time::Duration;

use lq_runtime::{control, Runtime, RuntimeConfig};
use lq_tests::TestDb;

use crate::jobs::{quick, Ledger};

const LIMIT: Duration = Duration::from_secs(30);

fn fast_lease() -> RuntimeConfig {
    RuntimeConfig {
        leader_lease: Duration::from_millis(500),
        rescue_interval: Duration::from_millis(50),
        ..quick()
    }
}

async fn start(db: &TestDb, owner: &str, config: RuntimeConfig) -> Runtime {
    Runtime::builder(db.pool.clone())
        .config(config)
        .owner(owner)
        .queue("default", 2)
        .queue("other", 1)
        .state(Ledger::default())
        .start()
        .await
        .unwrap()
}

/// The runtime holding a valid leader lease, if any.
async fn leader(db: &TestDb) -> Option<String> {
    sqlx::query_scalar(
        "select holder from lq.leader where name = 'maintenance' and expires_at >= now()",
    )
    .fetch_optional(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn one_runtime_leads_and_hands_over_when_it_stops() {
    let db = TestDb::new().await;
    let a = start(&db, "rt-a", fast_lease()).await;
    db.wait_for(
        "rt-a to lead",
        "select exists (select from lq.leader where holder = 'rt-a')",
        LIMIT,
    )
    .await;
    let b = start(&db, "rt-b", fast_lease()).await;
    db.wait_for(
        "rt-b to report itself",
        "select exists (select from lq.runtimes where id = 'rt-b')",
        LIMIT,
    )
    .await;

    let runtimes = control::runtimes(&db.pool).await.unwrap();
    let ids: Vec<&str> = runtimes.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["rt-a", "rt-b"]);
    let leaders: Vec<&str> = runtimes
        .iter()
        .filter(|r| r.leader)
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(leaders, ["rt-a"], "exactly one leader, the first");
    for rt in &runtimes {
        assert!(rt.alive);
        assert_eq!(rt.queues.get("default"), Some(&2));
        assert_eq!(rt.queues.get("other"), Some(&1));
        assert!(rt.kinds.iter().any(|k| k == "test.noop"));
        assert_eq!(rt.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(rt.pid as u32, std::process::id());
        // Two queues with the default pool, as the builder counts them.
        let builder = Runtime::builder(db.pool.clone())
            .config(fast_lease())
            .queue("default", 2)
            .queue("other", 1);
        assert_eq!(rt.connections, Some(builder.connections()));
    }

    // A graceful stop resigns: rt-b leads at its next beat, not after the lease.
    a.shutdown().await.unwrap();
    db.wait_for(
        "rt-b to take over",
        "select exists (select from lq.leader where holder = 'rt-b')",
        LIMIT,
    )
    .await;
    // rt-a's row says it is gone, and stays (for the unknown-kind grace) to
    // vouch for the kinds it declared while it restarts.
    let alive: Vec<(String, bool)> = control::runtimes(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.alive))
        .collect();
    assert_eq!(
        alive,
        [("rt-a".to_string(), false), ("rt-b".to_string(), true)],
        "rt-a marked its row as left"
    );
    b.shutdown().await.unwrap();
    assert_eq!(leader(&db).await, None);
    assert!(control::runtimes(&db.pool)
        .await
        .unwrap()
        .iter()
        .all(|r| !r.alive));
}

#[tokio::test]
async fn a_dead_leaders_lease_is_taken_over_when_it_runs_out_and_its_row_is_reaped() {
    let db = TestDb::new().await;
    // A leader that died without a word: its lease runs for two more seconds,
    // its runtime row has already expired.
    let ghost_lease_ends: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "insert into lq.leader (holder, expires_at) values ('ghost', now() + interval '2 s')
         returning expires_at",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    sqlx::raw_sql(
        "insert into lq.runtimes (id, host, pid, version, queues, kinds, heartbeat_at, expires_at)
         values ('ghost', 'gone', 1, '0', '{\"default\": 1}', '{}',
                 now() - interval '2 min', now() - interval '2 min'),
                -- gone a second ago: kept for the unknown-kind grace
                ('restarting', 'here', 2, '0', '{\"default\": 1}', '{}',
                 now() - interval '1 s', now() - interval '1 s');",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let config = RuntimeConfig {
        unknown_kind_grace: Some(Duration::from_secs(60)),
        ..fast_lease()
    };
    let rt = start(&db, "rt-heir", config).await;
    db.wait_for(
        "rt-heir to take over the lapsed lease",
        "select exists (select from lq.leader where holder = 'rt-heir')",
        LIMIT,
    )
    .await;
    // The lease was honoured to its end: rt-heir, beating every 100 ms since
    // its start, was elected only after it.
    let elected_at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select elected_at from lq.leader")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        elected_at >= ghost_lease_ends,
        "{elected_at} < {ghost_lease_ends}"
    );
    db.wait_for(
        "the leader to reap the dead runtime's row",
        "select not exists (select from lq.runtimes where id = 'ghost')",
        LIMIT,
    )
    .await;
    // The statement that reaped the ghost kept the row gone for less than the grace.
    let kept: bool =
        sqlx::query_scalar("select exists (select from lq.runtimes where id = 'restarting')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(kept, "a row gone for less than the grace was reaped");
    rt.shutdown().await.unwrap();
}

/// A runtime that stopped beating a moment ago (restarting, shutting down, cut
/// off from the database) still vouches for its kinds: their jobs are buried
/// only once no runtime serving the queue has declared the kind for the grace.
/// A job of a kind nobody declares is buried only once it has been ready for
/// the grace.
#[tokio::test]
async fn a_runtime_gone_for_less_than_the_grace_still_vouches_for_its_kinds() {
    let db = TestDb::new().await;
    sqlx::raw_sql(
        "insert into lq.runtimes (id, host, pid, version, queues, kinds, heartbeat_at, expires_at)
         values ('serving', 'h', 1, '0', '{\"default\": 4}', '{deploy.other}',
                 now(), now() + interval '1 hour'),
                ('restarting', 'h', 2, '0', '{\"default\": 4}', '{deploy.restarting}',
                 now() - interval '5 s', now() - interval '1 s'),
                ('long-gone', 'h', 3, '0', '{\"default\": 4}', '{deploy.long_gone}',
                 now() - interval '2 hours', now() - interval '2 hours');
         insert into lq.jobs (kind, queue, payload, max_attempts, run_at)
         values ('deploy.restarting', 'default', '{}', 1, now() - interval '10 min'),
                ('deploy.long_gone', 'default', '{}', 1, now() - interval '10 min'),
                -- declared by no runtime: buried once ready for the grace, not before
                ('deploy.undeclared', 'default', '{\"ready\": \"long\"}', 1, now() - interval '10 min'),
                ('deploy.undeclared', 'default', '{\"ready\": \"just\"}', 1, now() - interval '30 s');",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let buried = lq_core::db::maintenance::job_bury_unknown_kinds(&mut conn, 60.0, 100)
        .await
        .unwrap();
    let kinds: Vec<String> =
        sqlx::query_scalar("select kind from lq.finished_jobs where id = any($1) order by kind")
            .bind(&buried)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(kinds, ["deploy.long_gone", "deploy.undeclared"]);
    let waiting: Vec<String> = sqlx::query_scalar(
        "select payload->>'ready' from lq.jobs where kind = 'deploy.undeclared'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        waiting,
        ["just"],
        "ready for less than the grace: left alone"
    );
}

/// A rolling deploy: the jobs of a kind only the new binary declares are not
/// buried by an old runtime while a new one serving their queue is alive; once
/// none is, they are.
#[tokio::test]
async fn a_kind_is_unknown_only_when_no_live_runtime_serving_its_queue_declares_it() {
    let db = TestDb::new().await;
    let insert = |kind: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "insert into lq.jobs (kind, queue, payload, max_attempts)
                 values ($1, 'default', '{}', 1) returning id",
            )
            .bind(kind)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let new_kind = insert("deploy.new_kind").await;
    let nobodys = insert("deploy.nobodys_kind").await;
    // The new binary's runtime, alive and serving `default`.
    sqlx::raw_sql(
        "insert into lq.runtimes (id, host, pid, version, queues, kinds, expires_at)
         values ('new-binary', 'h', 1, '0.2.0', '{\"default\": 4}', '{deploy.new_kind}',
                 now() + interval '1 hour')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let config = RuntimeConfig {
        unknown_kind_grace: Some(Duration::ZERO),
        ..fast_lease()
    };
    let old = start(&db, "old-binary", config).await;
    let state = |id: i64| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>("select state::text from lq.all_jobs where id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    // The burial that took the job nobody declares saw the new kind's job, as
    // old, and left it.
    db.wait_for(
        "the job nobody declares to be buried",
        &format!(
            "select exists (select from lq.finished_jobs where id = {nobodys} and state = 'dead')"
        ),
        LIMIT,
    )
    .await;
    assert_eq!(state(new_kind).await, "queued");

    // The new runtime goes away: nobody serving `default` declares the kind now.
    sqlx::query("delete from lq.runtimes where id = 'new-binary'")
        .execute(&db.pool)
        .await
        .unwrap();
    db.wait_for(
        "the new kind's job to be buried",
        &format!(
            "select exists (select from lq.finished_jobs where id = {new_kind} and state = 'dead')"
        ),
        LIMIT,
    )
    .await;
    old.shutdown().await.unwrap();
}

/// A beat that committed but whose reply was lost is retried with the
/// runtime's own mark and finds its own row; a runtime with another mark (a
/// second one given the same `owner`) is refused while the row lives. With a
/// mark taken from the first write's reply, the retry had none to give, took
/// the row for another runtime's and stood aside until it expired.
#[tokio::test]
async fn a_beat_retried_after_its_reply_was_lost_finds_its_own_row() {
    use chrono::SubsecRound;
    use lq_core::db::cluster::{runtime_beat, RuntimeRecord};
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let queues = serde_json::json!({ "default": 1 });
    let kinds = vec!["test.kind".to_owned()];
    let record = RuntimeRecord {
        id: "lost-reply",
        host: "here",
        pid: 1,
        version: "0",
        queues: &queues,
        limits: &serde_json::json!({}),
        kinds: &kinds,
        ttl_secs: 60.0,
        connections: 10,
    };
    let mark = chrono::Utc::now().trunc_subsecs(6);
    // The first beat commits; its answer is dropped, as a lost reply would be.
    let _ = runtime_beat(&mut conn, &record, mark).await;
    assert!(
        runtime_beat(&mut conn, &record, mark).await.unwrap(),
        "the retry finds its own row"
    );
    let twin = mark + chrono::Duration::milliseconds(1);
    assert!(
        !runtime_beat(&mut conn, &record, twin).await.unwrap(),
        "another mark is refused while the row lives"
    );
    let held: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select started_at from lq.runtimes where id = 'lost-reply'")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    assert_eq!(held, mark, "the row keeps the first runtime's mark");
}

/// Two runtimes configured with one `owner`: the second neither overwrites the
/// first's row nor leads beside it; when the first stops, it takes the row over
/// and leads.
#[tokio::test]
async fn a_second_runtime_with_the_same_owner_neither_takes_the_row_nor_leads() {
    let db = TestDb::new().await;
    let first = start(&db, "twin", fast_lease()).await;
    db.wait_for(
        "the first twin to lead",
        "select exists (select from lq.leader where holder = 'twin')",
        LIMIT,
    )
    .await;
    let first_row: (i32, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("select pid, started_at from lq.runtimes where id = 'twin'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let second = start(&db, "twin", fast_lease()).await;
    // Five renewals of the lease (every 100 ms) give the second twin's beats,
    // every 100 ms too, time to try to lead.
    let mut renewals = 0;
    let mut last: Option<chrono::DateTime<chrono::Utc>> = None;
    while renewals < 5 {
        let expires: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
            "select expires_at from lq.leader, pg_sleep(0.02) where holder = 'twin'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if last.is_some_and(|l| l != expires) {
            renewals += 1;
        }
        last = Some(expires);
        assert!(
            !(first.is_leader() && second.is_leader()),
            "two runtimes lead at once"
        );
    }
    assert!(first.is_leader() && !second.is_leader());
    let row: (i32, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("select pid, started_at from lq.runtimes where id = 'twin'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(row, first_row, "the first twin's row is its own");
    first.shutdown().await.unwrap();
    db.wait_for(
        "the second twin to take the row over and lead",
        "select exists (select from lq.runtimes r join lq.leader l on l.holder = r.id
             where r.id = 'twin' and r.expires_at > now() and l.expires_at > now())",
        LIMIT,
    )
    .await;
    let started_at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select started_at from lq.runtimes where id = 'twin'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(started_at > first_row.1, "taken over as a new row");
    second.shutdown().await.unwrap();
}
