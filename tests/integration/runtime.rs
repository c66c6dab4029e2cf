//! The runtime across processes: exactly-once without faults, kinds it claims,
//! fencing, heartbeats and rescue.

use std::time::Duration;

use lq_core::db;
use lq_runtime::{EnqueueOptions, Job, JobContext, JobError, Perform, Runtime, RuntimeConfig};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

use crate::jobs::{quick, start_runtime, Ledger, Noop, ProducerOnly};

const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_jobs_across_four_runtimes_run_exactly_once() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let mut runtimes = Vec::new();
    for _ in 0..4 {
        let pool = db.another_pool(6).await;
        let rt = Runtime::builder(pool)
            .queue("default", 8)
            .state(ledger.clone())
            .start()
            .await
            .unwrap();
        runtimes.push(rt);
    }
    let mut ids = Vec::new();
    for chunk in 0..10 {
        let jobs = (0..1000).map(|n| Noop {
            n: chunk * 1000 + n,
        });
        ids.extend(
            Noop::enqueue_many(&db.pool, jobs, EnqueueOptions::new())
                .await
                .unwrap()
                .ids,
        );
    }
    db.wait_idle(LIMIT).await;
    let mut claimed = 0;
    for rt in runtimes {
        claimed += rt.stats().claimed;
        rt.shutdown().await.unwrap();
    }
    let counts = ledger.counts();
    let lost = ids.iter().filter(|id| !counts.contains_key(id)).count();
    let duplicated = counts.values().filter(|&&c| c > 1).count();
    let unexpected = counts.keys().filter(|id| !ids.contains(id)).count();
    assert_eq!((lost, duplicated, unexpected), (0, 0, 0));
    assert_eq!(claimed, 10_000);
    assert_eq!(db.count("succeeded").await, 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_runtime_serving_two_queues_completes_both() {
    // Successes of both queues share completion batches; each queue's leases
    // must go back to its own limit.
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let rt = Runtime::builder(db.pool.clone())
        .queue("default", 4)
        .queue("other", 3)
        .state(ledger.clone())
        .start()
        .await
        .unwrap();
    for round in 0..5u64 {
        for queue in ["default", "other"] {
            let jobs = (0..200).map(|n| Noop {
                n: round * 1000 + n,
            });
            Noop::enqueue_many(&db.pool, jobs, EnqueueOptions::new().queue(queue))
                .await
                .unwrap();
        }
    }
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    assert_eq!(db.count("succeeded").await, 2000);
    let counts = ledger.counts();
    assert_eq!(counts.len(), 2000);
    assert!(counts.values().all(|&c| c == 1));
}

#[tokio::test]
async fn the_runtime_claims_only_kinds_it_can_run() {
    let db = TestDb::new().await;
    let waiting = ProducerOnly {
        note: "no Perform here".into(),
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id;
    let done = Noop { n: 1 }
        .enqueue_with(&db.pool, EnqueueOptions::new().queue("elsewhere"))
        .await
        .unwrap()
        .id;
    let config = RuntimeConfig {
        unknown_kind_grace: None,
        ..RuntimeConfig::default()
    };
    let rt = start_runtime(&db, "elsewhere", 2, config, &Ledger::default()).await;
    assert!(!rt.kinds().iter().any(|k| k == "test.producer_only"));
    db.wait_for(
        "the noop to succeed",
        &format!("select state = 'succeeded' from lq.all_jobs where id = {done}"),
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, waiting).await.unwrap();
    assert_eq!((row.state, row.attempts), (lq_runtime::JobState::Queued, 0));
}

/// Enqueues a no-op job for each of `ns` on `default`.
async fn enqueue_noops(db: &TestDb, ns: std::ops::Range<u64>) {
    Noop::enqueue_many(&db.pool, ns.map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap();
}

/// Enqueues `queued` no-op jobs and claims up to `claim` of them as worker `t`,
/// on a connection kept for the test's later writes.
async fn claim_noops(
    db: &TestDb,
    queued: u64,
    claim: i64,
) -> (
    sqlx::pool::PoolConnection<sqlx::Postgres>,
    Vec<db::claim::ClaimedJob>,
) {
    enqueue_noops(db, 0..queued).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    let got = db::claim::job_claim(&mut conn, "default", &kinds, &[30.0], claim, "t")
        .await
        .unwrap();
    (conn, got)
}

#[tokio::test]
async fn the_claim_never_takes_more_than_asked() {
    let db = TestDb::new().await;
    let (_conn, got) = claim_noops(&db, 50, 7).await;
    assert_eq!(got.len(), 7);
    assert!(got.iter().all(|j| j.attempts == 1));
    assert_eq!(db.count("running").await, 7);
}

/// A claim rewrites every row on a page in one transaction, so the table keeps
/// room for the new versions (schema version 7): no claimed row leaves its page.
/// A row that moves costs an extra WAL record and its whole new version logged.
#[tokio::test]
async fn a_claim_rewrites_its_rows_in_place() {
    let db = TestDb::new().await;
    let page_of = "select id, (ctid::text::point)[0]::bigint as page from lq.jobs order by id";
    enqueue_noops(&db, 0..500).await;
    let before: Vec<(i64, i64)> = sqlx::query_as(page_of).fetch_all(&db.pool).await.unwrap();
    let pages: std::collections::HashSet<i64> = before.iter().map(|(_, page)| *page).collect();
    assert!(pages.len() > 1, "the jobs must span pages: {pages:?}");

    let mut conn = db.pool.acquire().await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    let got = db::claim::job_claim(&mut conn, "default", &kinds, &[30.0], 500, "t")
        .await
        .unwrap();
    assert_eq!(got.len(), 500);

    let after: Vec<(i64, i64)> = sqlx::query_as(page_of).fetch_all(&db.pool).await.unwrap();
    let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    assert_eq!(moved, 0, "{moved} of 500 claimed rows left their page");
}

/// The success write's fence is each job's own `(id, token)` pair: tokens
/// swapped between two jobs of one batch finish neither, and a batch given out
/// of id order finishes both.
#[tokio::test]
async fn a_success_batch_is_fenced_pair_by_pair() {
    let db = TestDb::new().await;
    let (mut conn, got) = claim_noops(&db, 2, 2).await;
    let (a, b) = (&got[0], &got[1]);
    let swapped =
        db::finish::job_complete_many(&mut conn, &[a.id, b.id], &[b.lease_token, a.lease_token])
            .await
            .unwrap();
    assert!(swapped.is_empty(), "swapped tokens finished {swapped:?}");
    assert_eq!(db.count("running").await, 2);

    let (lo, hi) = if a.id < b.id { (a, b) } else { (b, a) };
    let mut done = db::finish::job_complete_many(
        &mut conn,
        &[hi.id, lo.id],
        &[hi.lease_token, lo.lease_token],
    )
    .await
    .unwrap();
    done.sort_unstable();
    assert_eq!(done, vec![lo.id, hi.id]);
    assert_eq!(db.count("running").await, 0);
}

#[tokio::test]
async fn a_stale_lease_token_changes_nothing() {
    let db = TestDb::new().await;
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let mut conn = db.pool.acquire().await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    let first = db::claim::job_claim(&mut conn, "default", &kinds, &[30.0], 1, "a")
        .await
        .unwrap()
        .remove(0);
    // The lease expires and the rescuer hands the job to another worker.
    db.expire_lease(id).await;
    assert_eq!(
        db::lease::job_rescue_expired(&mut conn, 10, None)
            .await
            .unwrap(),
        vec![id]
    );
    let second = db::claim::job_claim(&mut conn, "default", &kinds, &[30.0], 1, "b")
        .await
        .unwrap()
        .remove(0);
    assert_eq!((second.id, second.attempts), (id, 2));

    // Every write of the first worker is refused.
    assert!(
        db::finish::job_complete_many(&mut conn, &[id], &[first.lease_token])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        db::finish::job_fail(&mut conn, id, first.lease_token, "x", Some(1.0))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        db::finish::job_snooze(&mut conn, id, first.lease_token, 1.0)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !db::finish::job_cancel_own(&mut conn, id, first.lease_token, "x")
            .await
            .unwrap()
    );
    assert!(
        db::finish::job_release_many(&mut conn, &[id], &[first.lease_token])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        db::lease::job_heartbeat_many(&mut conn, &[id], &[first.lease_token], &[30.0])
            .await
            .unwrap()
            .is_empty()
    );
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(
        (row.state, row.lease_owner.as_deref()),
        (lq_runtime::JobState::Running, Some("b"))
    );

    // The current holder's write lands.
    assert_eq!(
        db::finish::job_complete_many(&mut conn, &[id], &[second.lease_token])
            .await
            .unwrap(),
        vec![id]
    );
}

#[tokio::test]
async fn a_job_that_keeps_killing_its_worker_goes_dead_after_max_attempts() {
    let db = TestDb::new().await;
    let id = Noop { n: 1 }
        .enqueue_with(&db.pool, EnqueueOptions::new().max_attempts(2))
        .await
        .unwrap()
        .id;
    let mut conn = db.pool.acquire().await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    for round in 1..=2 {
        // Claimed, then the worker "dies": the lease runs out.
        let got = db::claim::job_claim(&mut conn, "default", &kinds, &[30.0], 1, "w")
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "round {round}");
        db.expire_lease(id).await;
        db::lease::job_rescue_expired(&mut conn, 10, None)
            .await
            .unwrap();
    }
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (lq_runtime::JobState::Dead, 2));
    assert_eq!(row.errors.len(), 2);
}

/// Holds its lease (2 s) until cancelled: only heartbeats keep it. (With 1 s,
/// a loaded CI host once stalled the heartbeat past the lease and the job was
/// rescued, so it never outlived three leases on its first attempt.)
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.long_lease", lease = "2s")]
struct LongRunner;

impl Perform for LongRunner {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.cancelled().await;
        Ok(())
    }
}

#[tokio::test]
async fn heartbeats_keep_a_long_job_leased_and_rescue_leaves_it_alone() {
    let db = TestDb::new().await;
    let id = LongRunner.enqueue(&db.pool).await.unwrap().id;
    let config = RuntimeConfig {
        rescue_interval: Duration::from_millis(100),
        shutdown_grace: Duration::from_millis(10),
        ..quick()
    };
    let rt = Runtime::builder(db.pool.clone())
        .config(config)
        .queue("default", 2)
        .start()
        .await
        .unwrap();
    // Running for over three lease lengths and still on its first attempt: the
    // lease was renewed and never rescued.
    db.wait_for(
        "the job to outlive three leases",
        &format!("select state = 'running' and now() - started_at > interval '6 seconds' and attempts = 1 and lease_expires_at > now() from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(
        (row.state, row.attempts),
        (lq_runtime::JobState::Queued, 0),
        "handed back, attempt refunded"
    );
}

#[tokio::test]
async fn a_rescued_job_keeps_its_place_in_the_queue() {
    let db = TestDb::new().await;
    let first = Noop { n: 0 }.enqueue(&db.pool).await.unwrap().id;
    let mut conn = db.pool.acquire().await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    db::claim::job_claim(&mut conn, "default", &kinds, &[30.0], 1, "dies")
        .await
        .unwrap();
    enqueue_noops(&db, 1..100).await;
    db.expire_lease(first).await;
    db::lease::job_rescue_expired(&mut conn, 10, None)
        .await
        .unwrap();
    let next = db::claim::job_claim(&mut conn, "default", &kinds, &[30.0], 1, "next")
        .await
        .unwrap();
    assert_eq!(
        next[0].id, first,
        "the rescued job goes first, not behind the backlog"
    );
}

/// Tracks how many of its handlers run at once.
#[derive(Default)]
struct Gauge {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

/// Holds its handler open briefly so overlaps show.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.gauged")]
struct Gauged;

impl Perform for Gauged {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        use std::sync::atomic::Ordering::SeqCst;
        let g = ctx.state::<std::sync::Arc<Gauge>>();
        let now = g.now.fetch_add(1, SeqCst) + 1;
        g.most.fetch_max(now, SeqCst);
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        g.now.fetch_sub(1, SeqCst);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_runs_at_most_its_concurrency_and_leases_at_most_three_times_that_and_the_jobs_ahead(
) {
    let (most_running, most_leased) = gauge_a_queue_of_four(RuntimeConfig::default()).await;
    assert!(
        (1..=4).contains(&most_running),
        "{most_running} handlers ran at once with 4 slots"
    );
    // The documented bound, 30n: three leases for each handler and for each of
    // the at most 9n jobs claimed ahead.
    assert!(
        most_leased <= (4 + 4 * 9) * 3,
        "{most_leased} jobs leased at once by a queue with 4 slots"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_claim_ahead_a_queue_leases_at_most_three_times_its_concurrency() {
    let config = RuntimeConfig {
        claim_ahead: false,
        ..RuntimeConfig::default()
    };
    let (most_running, most_leased) = gauge_a_queue_of_four(config).await;
    assert!(
        (1..=4).contains(&most_running),
        "{most_running} ran at once"
    );
    assert!(most_leased <= 12, "{most_leased} jobs leased at once");
}

/// Runs 1,000 gauged jobs on a queue of 4 slots; returns the most handlers seen
/// running at once and the most jobs seen leased at once.
async fn gauge_a_queue_of_four(config: RuntimeConfig) -> (usize, i64) {
    let db = TestDb::new().await;
    Gauged::enqueue_many(&db.pool, (0..1000).map(|_| Gauged), EnqueueOptions::new())
        .await
        .unwrap();
    let gauge = std::sync::Arc::new(Gauge::default());
    let rt = Runtime::builder(db.pool.clone())
        .config(config)
        .queue("default", 4)
        .state(gauge.clone())
        .start()
        .await
        .unwrap();
    let mut most_leased = 0;
    loop {
        let (running, left): (i64, i64) = sqlx::query_as(
            "select count(*) filter (where state = 'running'), count(*) filter (where state in ('queued', 'running')) from lq.all_jobs",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        most_leased = most_leased.max(running).max(rt.running() as i64);
        if left == 0 {
            break;
        }
    }
    rt.shutdown().await.unwrap();
    let most_running = gauge.most.load(std::sync::atomic::Ordering::SeqCst);
    (most_running, most_leased)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_jobs_are_claimed_ahead_of_idle_handlers_and_each_runs_once() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let ids = Noop::enqueue_many(
        &db.pool,
        (0..2000).map(|n| Noop { n }),
        EnqueueOptions::new(),
    )
    .await
    .unwrap()
    .ids;
    let rt = start_runtime(&db, "default", 2, quick(), &ledger).await;
    db.wait_idle(LIMIT).await;
    let stats = rt.shutdown_with_stats().await.unwrap();
    assert_eq!(db.count("succeeded").await, 2000);
    let counts = ledger.counts();
    assert_eq!(counts.len(), 2000);
    assert!(ids.iter().all(|id| counts.get(id) == Some(&1)));
    assert!(
        stats.claimed_ahead > 0,
        "2,000 no-op jobs on two handlers never outpaced a claim: {stats:?}"
    );
    assert_eq!(stats.claimed, 2000);
}

/// A drain of short jobs makes the claimer send a second claim while the first
/// is in flight; the two never take the same job, and every job ends succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_claims_in_flight_never_take_the_same_job() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let ids = Noop::enqueue_many(
        &db.pool,
        (0..6000).map(|n| Noop { n }),
        EnqueueOptions::new(),
    )
    .await
    .unwrap()
    .ids;
    let config = RuntimeConfig {
        max_claim_batch: 40,
        ..quick()
    };
    let rt = start_runtime(&db, "default", 20, config, &ledger).await;
    db.wait_idle(LIMIT).await;
    let stats = rt.shutdown_with_stats().await.unwrap();
    assert_eq!(db.count("succeeded").await, 6000);
    let counts = ledger.counts();
    assert!(ids.iter().all(|id| counts.get(id) == Some(&1)));
    assert_eq!(stats.claimed, 6000, "{stats:?}");
    assert!(
        stats.overlapping_claims > 0,
        "6,000 no-op jobs on 20 handlers never had two claims in flight: {stats:?}"
    );
}

#[tokio::test]
async fn the_runtime_vacuums_the_queue_table_when_autovacuum_is_off() {
    let db = TestDb::new().await;
    runtime_vacuums_after(&db, "alter table lq.jobs set (autovacuum_enabled = false)").await;
}

/// Autovacuum is on but will not come (as when it visits once a minute and a busy
/// queue piles up dead rows in between): the runtime vacuums all the same.
#[tokio::test]
async fn the_runtime_vacuums_the_queue_table_when_autovacuum_lags_behind() {
    let db = TestDb::new().await;
    runtime_vacuums_after(
        &db,
        "alter table lq.jobs set (autovacuum_enabled = true,
             autovacuum_vacuum_threshold = 2000000000, autovacuum_vacuum_insert_threshold = 2000000000)",
    )
    .await;
}

/// Applies `table_setting`, leaves 30,000 dead row versions, and waits for the
/// runtime's own vacuum (`last_vacuum` is stamped by VACUUM, never by autovacuum).
async fn runtime_vacuums_after(db: &TestDb, table_setting: &str) {
    sqlx::query(table_setting).execute(&db.pool).await.unwrap();
    for chunk in 0..30 {
        let jobs = (0..1000).map(|n| Noop {
            n: chunk * 1000 + n,
        });
        Noop::enqueue_many(&db.pool, jobs, EnqueueOptions::new().notify(false))
            .await
            .unwrap();
    }
    // 30,000 dead row versions, as a busy queue leaves behind.
    sqlx::query("delete from lq.jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    let rt = Runtime::builder(db.pool.clone())
        .queue("default", 2)
        .state(Ledger::default())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the runtime to vacuum lq.jobs",
        "select last_vacuum is not null from pg_stat_user_tables where relid = 'lq.jobs'::regclass",
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn notify_wakes_workers_for_pool_and_transaction_enqueues() {
    let db = TestDb::new().await;
    // Polling once a minute: only NOTIFY can get these jobs run within the limit.
    let config = RuntimeConfig {
        poll_interval: Duration::from_secs(60),
        ..RuntimeConfig::default()
    };
    let rt = start_runtime(&db, "default", 8, config, &Ledger::default()).await;
    // Let the listener subscribe: the runtime polls once at start, after LISTEN.
    db.wait_for(
        "the listener to subscribe",
        "select exists (select 1 from pg_stat_activity where datname = current_database() and query like 'LISTEN%')",
        Duration::from_secs(30),
    )
    .await;
    for round in 0..5u64 {
        // Bursts from 4 concurrent producers on the pool (coalesced NOTIFYs) ...
        let tasks: Vec<_> = (0..4u64)
            .map(|p| {
                let pool = db.pool.clone();
                tokio::spawn(async move {
                    for n in 0..10 {
                        Noop {
                            n: round * 1000 + p * 100 + n,
                        }
                        .enqueue(&pool)
                        .await
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // The last of a burst is notified too, after the notifier's gap.
        db.wait_idle(Duration::from_secs(20)).await;
        // ... and one in a transaction (NOTIFY at commit).
        let mut tx = db.pool.begin().await.unwrap();
        Noop { n: round }.enqueue(&mut tx).await.unwrap();
        tx.commit().await.unwrap();
        db.wait_idle(Duration::from_secs(20)).await;
    }
    rt.shutdown().await.unwrap();
    assert_eq!(db.count("succeeded").await, 5 * 41);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_completions_go_on_after_the_runtime_loses_its_connections() {
    // The claimer and the completer keep their connections between statements:
    // after these are terminated they must take new ones, not retry on dead ones.
    let db = TestDb::new().await;
    const APP: &str = "lq-test-terminated";
    let opts = db
        .pool
        .connect_options()
        .as_ref()
        .clone()
        .application_name(APP);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_lazy_with(opts);
    let rt = Runtime::builder(pool)
        .queue("default", 4)
        .state(Ledger::default())
        .start()
        .await
        .unwrap();
    let succeeded =
        |n: i64| format!("select count(*) = {n} from lq.all_jobs where state = 'succeeded'");

    Noop { n: 1 }.enqueue(&db.pool).await.unwrap();
    db.wait_for("the first job", &succeeded(1), LIMIT).await;
    let terminated: Vec<bool> = sqlx::query_scalar(
        "select pg_terminate_backend(pid) from pg_stat_activity
         where datname = current_database() and application_name = $1",
    )
    .bind(APP)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    // At least the claimer's and the completer's.
    assert!(terminated.len() >= 2, "{terminated:?}");

    for n in 2..=5 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    db.wait_for("the jobs after the loss", &succeeded(5), LIMIT)
        .await;
    rt.shutdown().await.unwrap();
}
