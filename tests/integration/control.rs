//! Job control: cancel, retry, list.

use std::time::Duration;

use lq_core::db;
use lq_runtime::{control, CoreError as Error, EnqueueOptions, Job, JobFilter, JobState};
use lq_tests::{finish_job, TestDb};

use crate::jobs::{quick, start_runtime, Doomed, Ledger, Noop, Patient};

const LIMIT: Duration = Duration::from_secs(30);

/// Waits until some session of the test's database waits for a lock.
async fn wait_for_a_lock_wait(db: &TestDb, what: &str) {
    db.wait_for(
        what,
        "select exists (select 1 from pg_stat_activity
                        where datname = current_database() and wait_event_type = 'Lock')",
        LIMIT,
    )
    .await;
}

#[tokio::test]
async fn cancelling_a_queued_job_ends_it_at_once() {
    let db = TestDb::new().await;
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    assert_eq!(
        control::cancel(&db.pool, id).await.unwrap(),
        JobState::Queued
    );
    assert_eq!(
        control::get(&db.pool, id).await.unwrap().state,
        JobState::Cancelled
    );
    let again = control::cancel(&db.pool, id).await.unwrap_err();
    assert!(
        matches!(
            again,
            Error::WrongState {
                state: JobState::Cancelled,
                ..
            }
        ),
        "{again}"
    );
    assert!(matches!(
        control::cancel(&db.pool, 999_999).await.unwrap_err(),
        Error::NotFound { id: 999_999 }
    ));
}

#[tokio::test]
async fn cancelling_a_running_job_signals_its_handler_and_ends_it_cancelled() {
    let db = TestDb::new().await;
    let id = Patient.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 2, quick(), &Ledger::default()).await;
    db.wait_for(
        "the job to run",
        &format!("select state = 'running' from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;
    assert_eq!(
        control::cancel(&db.pool, id).await.unwrap(),
        JobState::Running
    );
    db.wait_for(
        "the job to end",
        &format!("select state = 'cancelled' from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
    let row = control::get(&db.pool, id).await.unwrap();
    assert!(row.cancel_requested_at.is_some());
    assert_eq!(row.attempts, 1);
}

/// A cancel that waits for the row while the job's completion commits reports the
/// state the job ended in, not "no such job": the job has left `lq.jobs`, and only a
/// fresh snapshot finds it in the history.
#[tokio::test]
async fn a_cancel_that_waits_out_the_jobs_completion_reports_its_final_state() {
    let db = TestDb::new().await;
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let mut completion = db.pool.begin().await.unwrap();
    finish_job(&mut completion, id, "succeeded", 0.0).await;
    let pool = db.pool.clone();
    let cancel = tokio::spawn(async move { control::cancel(&pool, id).await });
    wait_for_a_lock_wait(&db, "the cancel to wait for the completion's row lock").await;
    completion.commit().await.unwrap();
    let err = cancel.await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            Error::WrongState {
                state: JobState::Succeeded,
                ..
            }
        ),
        "{err}"
    );
}

/// A completion that waits for a cancel request's row lock ends the job
/// `cancelled`: it re-reads the row once the request commits, so the request is
/// not lost to a success acknowledged from an older version of the row.
#[tokio::test]
async fn a_success_written_while_a_cancel_request_commits_ends_the_job_cancelled() {
    let db = TestDb::new().await;
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let kinds = vec!["test.noop".to_owned()];
    let mut worker = db.pool.acquire().await.unwrap();
    let claimed = db::claim::job_claim(&mut worker, "default", &kinds, &[30.0], 1, "w")
        .await
        .unwrap()
        .remove(0);
    // The cancel request's write, held open while the completion runs.
    let mut request = db.pool.begin().await.unwrap();
    sqlx::query("update lq.jobs set cancel_requested_at = now() where id = $1")
        .bind(id)
        .execute(&mut *request)
        .await
        .unwrap();
    let completion = tokio::spawn(async move {
        db::finish::job_complete_many(&mut worker, &[id], &[claimed.lease_token]).await
    });
    wait_for_a_lock_wait(
        &db,
        "the completion to wait for the cancel request's row lock",
    )
    .await;
    request.commit().await.unwrap();
    assert_eq!(completion.await.unwrap().unwrap(), vec![id]);
    let row = control::get(&db.pool, id).await.unwrap();
    assert_eq!(row.state, JobState::Cancelled);
    assert!(row.cancel_requested_at.is_some());
}

#[tokio::test]
async fn a_dead_job_can_be_retried_now_and_runs_again() {
    let db = TestDb::new().await;
    let id = Doomed.enqueue(&db.pool).await.unwrap().id;
    sqlx::query("update lq.jobs set attempts = 3 where id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    db.finish(id, "dead", 0.0).await;
    control::retry_now(&db.pool, id).await.unwrap();
    let row = control::get(&db.pool, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Queued, 0));
    assert!(matches!(
        control::retry_now(&db.pool, id).await.unwrap_err(),
        Error::WrongState { .. }
    ));
}

#[tokio::test]
async fn retrying_a_dead_job_whose_key_is_live_again_is_refused() {
    let db = TestDb::new().await;
    use crate::jobs::UniqueOrder;
    let old = UniqueOrder { order_id: 5 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id;
    db.finish(old, "dead", 0.0).await;
    let live = UniqueOrder { order_id: 5 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id;
    let err = control::retry_now(&db.pool, old).await.unwrap_err();
    assert!(
        matches!(err, Error::UniqueKeyHeld { holder, .. } if holder == live),
        "{err}"
    );
    assert_eq!(
        control::get(&db.pool, old).await.unwrap().state,
        JobState::Dead
    );
}

/// Ids of the jobs `filter` lists, fetched `page` at a time through the keyset cursor.
async fn listed(db: &TestDb, filter: &JobFilter, page: i64) -> Vec<i64> {
    let mut filter = filter.clone();
    let mut ids = Vec::new();
    loop {
        let rows = control::list(&db.pool, &filter, page).await.unwrap();
        assert!(rows.len() as i64 <= page);
        let Some(last) = rows.last() else { break };
        filter = filter.before_id(last.id);
        ids.extend(rows.iter().map(|r| r.id));
    }
    ids
}

#[tokio::test]
async fn list_and_count_filter_by_state_queue_kind_id_age_and_payload() {
    let db = TestDb::new().await;
    let other = EnqueueOptions::new().queue("other");
    let mut noops = Vec::new();
    for n in 0..7 {
        let opts = if n % 2 == 0 {
            EnqueueOptions::new()
        } else {
            other.clone()
        };
        noops.push(Noop { n }.enqueue_with(&db.pool, opts).await.unwrap().id);
    }
    let doomed = Doomed
        .enqueue_with(&db.pool, other.clone())
        .await
        .unwrap()
        .id;
    control::cancel(&db.pool, noops[0]).await.unwrap();
    control::cancel(&db.pool, noops[1]).await.unwrap();
    db.finish(noops[2], "dead", 3600.0).await;
    sqlx::query("update lq.jobs set created_at = now() - interval '2 hours' where id = $1")
        .bind(noops[3])
        .execute(&db.pool)
        .await
        .unwrap();
    let desc = |mut v: Vec<i64>| {
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    };

    // Every job, newest first, whatever the page size.
    let mut all = noops.clone();
    all.push(doomed);
    for page in [1, 2, 3, 100] {
        assert_eq!(
            listed(&db, &JobFilter::new(), page).await,
            desc(all.clone())
        );
    }
    let cancelled = JobFilter::new().state(JobState::Cancelled);
    assert_eq!(
        listed(&db, &cancelled, 10).await,
        desc(vec![noops[0], noops[1]])
    );
    let finished = cancelled.clone().state(JobState::Dead);
    assert_eq!(listed(&db, &finished, 10).await, desc(noops[..3].to_vec()));
    let queued_other = JobFilter::new().state(JobState::Queued).queue("other");
    assert_eq!(
        listed(&db, &queued_other, 2).await,
        desc(vec![noops[3], noops[5], doomed])
    );
    let by_kind = JobFilter::new().kind(Doomed::KIND);
    assert_eq!(listed(&db, &by_kind, 10).await, vec![doomed]);
    let range = JobFilter::new().id_range(noops[2], noops[4]);
    assert_eq!(listed(&db, &range, 10).await, desc(noops[2..=4].to_vec()));
    let old = JobFilter::new().older_than(Duration::from_secs(3600));
    assert_eq!(listed(&db, &old, 10).await, vec![noops[3]]);
    let young = JobFilter::new()
        .newer_than(Duration::from_secs(3600))
        .queue("other");
    assert_eq!(
        listed(&db, &young, 10).await,
        desc(vec![noops[1], noops[5], doomed])
    );
    let payload = JobFilter::new().payload_contains(serde_json::json!({"n": 6}));
    assert_eq!(listed(&db, &payload, 10).await, vec![noops[6]]);
    let nothing = JobFilter::new().meta_contains(serde_json::json!({"tag": "x"}));
    assert!(listed(&db, &nothing, 10).await.is_empty());

    // Counts per queue and state, in the database.
    let counts: Vec<(String, JobState, u64)> = control::count(&db.pool, &JobFilter::new())
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.queue, c.state, c.count))
        .collect();
    let q = |name: &str, state, n| (name.to_owned(), state, n);
    assert_eq!(
        counts,
        vec![
            q("default", JobState::Queued, 2),
            q("default", JobState::Dead, 1),
            q("default", JobState::Cancelled, 1),
            q("other", JobState::Queued, 3),
            q("other", JobState::Cancelled, 1),
        ]
    );
    let live_noops = control::count(
        &db.pool,
        &JobFilter::new().kind(Noop::KIND).state(JobState::Queued),
    )
    .await
    .unwrap();
    let total: u64 = live_noops.iter().map(|c| c.count).sum();
    assert_eq!(total, 4);
}

#[tokio::test]
async fn pruning_removes_only_old_finished_jobs() {
    let db = TestDb::new().await;
    let ids: Vec<i64> = Noop::enqueue_many(
        &db.pool,
        (0..4).map(|n| Noop { n }),
        lq_runtime::EnqueueOptions::new(),
    )
    .await
    .unwrap()
    .ids;
    // old succeeded, recent succeeded, old dead (kept longer), still queued
    db.finish(ids[0], "succeeded", 7200.0).await;
    db.finish(ids[1], "succeeded", 0.0).await;
    db.finish(ids[2], "dead", 7200.0).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let every_id = lq_core::db::maintenance::PruneIds::default();
    let pruned =
        lq_core::db::maintenance::job_prune(&mut conn, 3600.0, 86_400.0, None, every_id, 100)
            .await
            .unwrap();
    assert_eq!(pruned, (1, Some(ids[0])));
    let left: Vec<i64> = sqlx::query_scalar("select id from lq.all_jobs order by id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, ids[1..].to_vec());
}

#[tokio::test]
async fn a_prune_that_fails_after_a_batch_committed_says_how_many_it_deleted() {
    let db = TestDb::new().await;
    // Two batches of the prune's 5,000: the first commits, the second is refused.
    db.stage_prune_refused_after_first_batch(6000).await;
    let hour = Duration::from_secs(3600);
    let err = control::prune(&db.pool, hour, hour).await.unwrap_err();
    let Error::PruneStopped { pruned, source } = &err else {
        panic!("expected PruneStopped, got {err:?}");
    };
    assert_eq!(*pruned, 5000);
    assert!(
        lq_runtime::chain(source.as_ref()).contains("the second batch is refused"),
        "{}",
        lq_runtime::chain(&err)
    );
    let left: i64 = sqlx::query_scalar("select count(*) from lq.finished_jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        left, 1000,
        "the committed batch stays deleted, the rest untouched"
    );
}

/// Counting and listing dead jobs read the partial index over them (schema
/// version 9), not the whole history: the state filter is written so that the
/// planner can match the index's predicate. Table scans are ruled out on the
/// session, so the index is used exactly when it can be.
#[tokio::test]
async fn dead_jobs_are_counted_and_listed_through_their_index() {
    let db = TestDb::new().await;
    let ids: Vec<i64> =
        Noop::enqueue_many(&db.pool, (0..3).map(|n| Noop { n }), EnqueueOptions::new())
            .await
            .unwrap()
            .ids;
    db.finish(ids[0], "dead", 0.0).await;
    db.finish(ids[1], "succeeded", 0.0).await;
    let no_seqscan = pool_without_table_scans(&db).await;
    let dead = JobFilter::new().state(JobState::Dead);
    let counts = control::count(&no_seqscan, &dead).await.unwrap();
    assert_eq!(counts.iter().map(|c| c.count).sum::<u64>(), 1);
    let listed = control::list(&no_seqscan, &dead, 10).await.unwrap();
    assert_eq!(
        listed.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![ids[0]]
    );
    let scans = index_scans_reaching(&no_seqscan, "finished_jobs_dead", 2).await;
    assert!(scans >= 2, "the dead jobs' index was scanned {scans} times");
}

#[tokio::test]
async fn live_jobs_by_state_are_listed_through_the_queue_tables_partial_indexes() {
    // A backlog the running jobs' list and a small queue's list must not walk.
    let db = TestDb::new().await;
    let backlog = Noop::enqueue_many(
        &db.pool,
        (0..5000).map(|n| Noop { n }),
        EnqueueOptions::new(),
    )
    .await
    .unwrap()
    .ids;
    let small = Noop::enqueue_many(
        &db.pool,
        (0..3).map(|n| Noop { n }),
        EnqueueOptions::new().queue("small"),
    )
    .await
    .unwrap()
    .ids;
    let running = &backlog[..2];
    sqlx::query(
        "update lq.jobs set state = 'running', lease_token = gen_random_uuid(),
             lease_owner = 'w-1', lease_expires_at = now() + interval '1 hour',
             attempts = 1, started_at = now()
         where id = any($1)",
    )
    .bind(running)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("analyze lq.jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    let no_seqscan = pool_without_table_scans(&db).await;

    let by_state = JobFilter::new().state(JobState::Running);
    let listed = control::list(&no_seqscan, &by_state, 10).await.unwrap();
    let mut ids: Vec<i64> = listed.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, running);
    let counts = control::count(&no_seqscan, &by_state).await.unwrap();
    assert_eq!(counts.iter().map(|c| c.count).sum::<u64>(), 2);
    let scans = index_scans_reaching(&no_seqscan, "jobs_lease_expiry", 2).await;
    assert!(
        scans >= 2,
        "the running jobs' index was scanned {scans} times"
    );

    // A plan for the queue asked (as the dashboard's pool makes its first
    // ones), not a generic one, which cannot tell a small queue from the backlog.
    let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    let custom_plans = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.options([("enable_seqscan", "off")]))
        .await
        .unwrap();
    let queued_in_small = JobFilter::new().state(JobState::Queued).queue("small");
    let listed = control::list(&custom_plans, &queued_in_small, 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), small.len());
    let scans = index_scans_reaching(&custom_plans, "jobs_pickup", 1).await;
    assert!(scans >= 1, "the pickup index was scanned {scans} times");
}

/// A pool of one connection whose planner avoids table scans wherever an index
/// can serve (`enable_seqscan = off`), with generic plans from the first run,
/// to show which index a call reads.
async fn pool_without_table_scans(db: &TestDb) -> sqlx::PgPool {
    let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.options([
            ("enable_seqscan", "off"),
            ("plan_cache_mode", "force_generic_plan"),
        ]))
        .await
        .unwrap()
}

/// How often `index` was scanned, read until it reaches `at_least` (or 30 s
/// pass): a session reports its statistics at the end of a transaction, at
/// most once a second.
async fn index_scans_reaching(pool: &sqlx::PgPool, index: &str, at_least: i64) -> i64 {
    let started = std::time::Instant::now();
    loop {
        let scans: i64 =
            sqlx::query_scalar("select idx_scan from pg_stat_user_indexes where indexrelname = $1")
                .bind(index)
                .fetch_one(pool)
                .await
                .unwrap();
        if scans >= at_least || started.elapsed() > Duration::from_secs(30) {
            return scans;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn pruning_the_rollup_removes_only_minutes_past_the_retention() {
    let db = TestDb::new().await;
    for age_secs in [7200.0, 60.0] {
        sqlx::query(
            "insert into lq.stats_minute (minute, queue, kind, succeeded, wait_buckets)
             select date_trunc('minute', now() - make_interval(secs => $1)), 'q', 'k', 1,
                    array_fill(0::int8, array[15])",
        )
        .bind(age_secs)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let mut conn = db.pool.acquire().await.unwrap();
    let pruned = lq_core::db::stats::stats_minute_prune(&mut conn, 3600.0)
        .await
        .unwrap();
    assert_eq!(pruned, 1);
    let left: Vec<f64> = sqlx::query_scalar(
        "select extract(epoch from now() - minute)::float8 from lq.stats_minute",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(left.len(), 1);
    assert!(left[0] < 3600.0, "the recent minute stays: {left:?}");
}

/// A control call held up past its bound (here by a table locked elsewhere) is
/// cancelled by the server before the client gives up, so nothing of it keeps
/// running on the application's pool once the call has failed. The bound is the
/// caller's `with_timeout` scope (one second here; 30 s without one), and the
/// same call succeeds, bounded by the default again, once the lock is gone.
#[tokio::test]
async fn a_control_call_held_up_past_its_bound_is_cancelled_on_the_server() {
    let db = TestDb::new().await;
    let dead = JobFilter::new().state(JobState::Dead);
    let lock = db.lock_table("lq.finished_jobs").await;
    let started = std::time::Instant::now();
    let e = control::with_timeout(Duration::from_secs(1), control::count(&db.pool, &dead))
        .await
        .unwrap_err();
    assert_eq!(
        lq_core::sqlstate_in(&e).as_deref(),
        Some("57014"),
        "the server cancelled the statement (query_canceled): {e}"
    );
    // Not a timing assertion: a call bounded by the 30 s default cannot fail
    // in under 27 s, so this tells which bound the call had.
    assert!(
        started.elapsed() < control::DEFAULT_TIMEOUT * 9 / 10,
        "the scope's bound, not the default, was applied"
    );
    let waiting = db.sessions_waiting_on_locks().await;
    assert_eq!(waiting, 0, "the count still waits on the server");
    lock.rollback().await.unwrap();
    let counts = control::count(&db.pool, &dead).await.unwrap();
    assert!(counts.is_empty(), "no dead job: {counts:?}");
}

/// Capped counts per state: exact below the cap, the cap and `more` past it,
/// every state listed (zero included), the filter's other terms kept and its
/// own states ignored.
#[tokio::test]
async fn counts_by_state_stop_at_the_cap_and_say_so() {
    let db = TestDb::new().await;
    let ids = Noop::enqueue_many(&db.pool, (0..6).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    Noop { n: 99 }
        .enqueue_with(&db.pool, EnqueueOptions::new().queue("elsewhere"))
        .await
        .unwrap();
    db.finish(ids[0], "dead", 1.0).await;
    db.finish(ids[1], "succeeded", 1.0).await;
    db.finish(ids[2], "succeeded", 1.0).await;
    let filter = JobFilter::new().queue("default").state(JobState::Dead);

    // Each state but succeeded is counted through its partial index, with a
    // generic plan too (a bound state would match no partial index there).
    // First, so that no other session's scans are still to be reported.
    let indexes = [
        "jobs_pickup",
        "jobs_lease_expiry",
        "finished_jobs_dead",
        "finished_jobs_cancelled",
    ];
    let no_seqscan = pool_without_table_scans(&db).await;
    let mut before = Vec::new();
    for index in indexes {
        before.push(index_scans_reaching(&no_seqscan, index, 0).await);
    }
    let through_indexes = control::count_by_state_capped(&no_seqscan, &filter, 1_000)
        .await
        .unwrap();
    for (index, before) in indexes.into_iter().zip(before) {
        let scans = index_scans_reaching(&no_seqscan, index, before + 1).await;
        assert!(scans > before, "{index} was not read");
    }

    let counts = control::count_by_state_capped(&db.pool, &filter, 2)
        .await
        .unwrap();
    let found: Vec<(JobState, u64, bool)> =
        counts.iter().map(|c| (c.state, c.count, c.more)).collect();
    assert_eq!(
        found,
        vec![
            (JobState::Queued, 2, true),
            (JobState::Running, 0, false),
            (JobState::Succeeded, 2, false),
            (JobState::Dead, 1, false),
            (JobState::Cancelled, 0, false),
        ]
    );
    let exact = control::count_by_state_capped(&db.pool, &filter, 1_000)
        .await
        .unwrap();
    assert_eq!((exact[0].count, exact[0].more), (3, false));
    assert_eq!(through_indexes, exact);

    // A filter on finish time leaves out every live job without reading one.
    let recent = JobFilter::new().finished_within(Duration::from_secs(3600));
    let counts = control::count_by_state_capped(&db.pool, &recent, 1_000)
        .await
        .unwrap();
    let found: Vec<(JobState, u64)> = counts.iter().map(|c| (c.state, c.count)).collect();
    assert_eq!(
        found,
        vec![
            (JobState::Queued, 0),
            (JobState::Running, 0),
            (JobState::Succeeded, 2),
            (JobState::Dead, 1),
            (JobState::Cancelled, 0),
        ]
    );
}
