//! Statements that write one attempt's outcome keep probing `lq.jobs` by
//! primary key when they are planned while the table's statistics say it is
//! nearly empty, as a vacuum of a briefly drained queue leaves them. Such a plan
//! once put the whole table on the outer side of the completer's join and
//! compared every row with every job of the batch: 1.2 s per completion at 7,328
//! rows, and a stall with a backlog (`bench/FINDINGS.md`, stop 76). A failure's
//! write read the whole table three times with those statistics (stop 77). With
//! the history's statistics calling it empty, a bulk retry read the whole
//! history for each batch, and a bulk delete its whole key (stop 78).

use lq_core::db::{self, bulk, control, finish, lease, maintenance};
use lq_core::{JobFilter, JobState};
use lq_tests::TestDb;
use sqlx::types::Uuid;
use sqlx::{Connection, PgConnection};

/// Running jobs in the table when the completions are planned and run.
const RUNNING: i64 = 5_000;
/// Queued jobs (due in an hour) in the table besides them.
const QUEUED: i64 = 5_000;
/// Jobs each completion ends.
const BATCH: usize = 100;

/// Fills `lq.jobs` with queued rows, deletes all but the last and vacuums it:
/// the statistics then say one live row in many pages. Then adds [`QUEUED`]
/// queued jobs and [`RUNNING`] running ones (no statistics are taken) and
/// returns the running ones' ids and tokens.
async fn table_the_statistics_call_empty(db: &TestDb) -> (Vec<i64>, Vec<Uuid>) {
    sqlx::raw_sql(
        "alter table lq.jobs set (autovacuum_enabled = false);
         insert into lq.jobs (kind, queue, payload, max_attempts)
         select 'filler', 'default', '{}', 1 from generate_series(1, 20000);
         delete from lq.jobs where id < (select max(id) from lq.jobs);",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::raw_sql("vacuum lq.jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    let (pages, tuples): (i32, f32) =
        sqlx::query_as("select relpages, reltuples from pg_class where oid = 'lq.jobs'::regclass")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        pages > 10 && tuples <= 1.0,
        "the statistics should say one row in many pages: {tuples} rows in {pages} pages"
    );
    sqlx::query(
        "insert into lq.jobs (kind, queue, payload, max_attempts, run_at)
         select 'test.planned', 'default', '{}', 3, now() + interval '1 hour'
         from generate_series(1, $1)",
    )
    .bind(QUEUED)
    .execute(&db.pool)
    .await
    .unwrap();
    let rows: Vec<(i64, Uuid)> = sqlx::query_as(
        "insert into lq.jobs (kind, queue, payload, max_attempts, state, attempts,
             lease_token, lease_owner, lease_expires_at, started_at)
         select 'test.planned', 'default', '{}', 3, 'running', 1,
             gen_random_uuid(), 'w', now() + interval '1 hour', now()
         from generate_series(1, $1)
         returning id, lease_token",
    )
    .bind(RUNNING)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    rows.into_iter().unzip()
}

/// A connection with the hot path's settings, as the completer has.
async fn hot_connection(db: &TestDb) -> PgConnection {
    let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    PgConnection::connect_with(&options.options(db::HOT_PATH_SETTINGS))
        .await
        .unwrap()
}

/// Rows of `lq.jobs` read so far in the open transaction, by table scans and
/// through any of its indexes.
async fn rows_read(conn: &mut PgConnection) -> i64 {
    sqlx::query_scalar(
        "select seq_tup_read + coalesce(idx_tup_fetch, 0) from pg_stat_xact_user_tables
         where relid = 'lq.jobs'::regclass",
    )
    .fetch_one(conn)
    .await
    .unwrap()
}

/// Index entries of `lq.jobs`' primary key read so far in the open transaction.
async fn key_entries_read(conn: &mut PgConnection) -> i64 {
    sqlx::query_scalar("select pg_stat_get_xact_tuples_returned('lq.jobs_pkey'::regclass)")
        .fetch_one(conn)
        .await
        .unwrap()
}

#[derive(Debug, Clone, Copy)]
enum Completion {
    Plain,
    Unlocked,
    Replacing,
}

async fn complete(
    how: Completion,
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
) -> Vec<i64> {
    match how {
        Completion::Plain => finish::job_complete_many(conn, ids, tokens).await,
        Completion::Unlocked => finish::job_complete_unlocked(conn, ids, tokens).await,
        Completion::Replacing => finish::job_complete_many_replacing(conn, ids, tokens).await,
    }
    .unwrap()
}

#[tokio::test]
async fn completions_planned_on_an_apparently_empty_table_read_only_their_own_rows() {
    for how in [
        Completion::Plain,
        Completion::Unlocked,
        Completion::Replacing,
    ] {
        let db = TestDb::new().await;
        let (ids, tokens) = table_the_statistics_call_empty(&db).await;
        let mut conn = hot_connection(&db).await;
        // Two batches on one connection: the plan made for the first (with the
        // statistics above) serves the second, as on the completer's connection.
        for batch in 0..2 {
            let span = batch * BATCH..(batch + 1) * BATCH;
            let mut tx = conn.begin().await.unwrap();
            let before = key_entries_read(&mut tx).await;
            let done = complete(how, &mut tx, &ids[span.clone()], &tokens[span.clone()]).await;
            let read = key_entries_read(&mut tx).await - before;
            tx.commit().await.unwrap();
            assert_eq!(done.len(), BATCH, "{how:?}, batch {batch}: jobs completed");
            assert!(
                read <= 3 * BATCH as i64,
                "{how:?}, batch {batch}: read {read} primary-key entries of {} rows to end {BATCH} jobs",
                RUNNING + QUEUED
            );
        }
    }
}

#[tokio::test]
async fn claims_planned_on_an_apparently_empty_table_read_only_the_jobs_they_take() {
    let db = TestDb::new().await;
    table_the_statistics_call_empty(&db).await;
    // Of the queued jobs, the first two batches' worth are due now.
    sqlx::query(
        "update lq.jobs set run_at = now() - interval '1 second'
         where id in (select id from lq.jobs where state = 'queued' and kind = 'test.planned'
                      order by id limit $1)",
    )
    .bind(2 * BATCH as i64)
    .execute(&db.pool)
    .await
    .unwrap();
    let kinds = ["test.planned".to_string()];
    let mut conn = hot_connection(&db).await;
    // Two claims on one connection, the second with the plan made for the first.
    for claim in 0..2 {
        let mut tx = conn.begin().await.unwrap();
        let before = rows_read(&mut tx).await;
        let claimed = db::claim::job_claim(&mut tx, "default", &kinds, &[30.0], BATCH as i64, "w")
            .await
            .unwrap();
        let read = rows_read(&mut tx).await - before;
        tx.commit().await.unwrap();
        assert_eq!(claimed.len(), BATCH, "claim {claim}: jobs claimed");
        assert!(
            read <= 3 * BATCH as i64,
            "claim {claim}: read {read} rows of {} to claim {BATCH} jobs",
            RUNNING + QUEUED
        );
    }
}

/// The runtime's other writes and reads of one attempt, each on jobs of its own.
#[derive(Debug, Clone, Copy)]
enum AttemptWrite {
    Retry,
    Die,
    Snooze,
    CancelOwn,
    Quarantine,
    Release,
    Heartbeat,
    CancelsRequested,
    LeasesStillHeld,
    Rescue,
}

/// Jobs each [`AttemptWrite`] is given.
const JOBS_PER_WRITE: usize = 10;

/// Runs `write` on the jobs `ids` (held with `tokens`; for the rescue, the only
/// ones whose lease expired; for the cancel hints, each with a cancel
/// requested); returns how many it found.
async fn attempt_write(
    write: AttemptWrite,
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
) -> usize {
    let mut found = 0;
    match write {
        AttemptWrite::Retry | AttemptWrite::Die | AttemptWrite::Snooze => {
            for (&id, &token) in ids.iter().zip(tokens) {
                let state = match write {
                    AttemptWrite::Retry => {
                        finish::job_fail(conn, id, token, "boom", Some(1.0)).await
                    }
                    AttemptWrite::Die => finish::job_fail(conn, id, token, "boom", None).await,
                    _ => finish::job_snooze(conn, id, token, 1.0).await,
                };
                found += usize::from(state.unwrap().is_some());
            }
        }
        AttemptWrite::CancelOwn => {
            for (&id, &token) in ids.iter().zip(tokens) {
                found += usize::from(finish::job_cancel_own(conn, id, token, "no").await.unwrap());
            }
        }
        AttemptWrite::Quarantine => {
            for (&id, &token) in ids.iter().zip(tokens) {
                let ended = finish::job_quarantine(conn, id, Some(token), "refused").await;
                found += usize::from(ended.unwrap());
            }
        }
        AttemptWrite::Release => {
            found = finish::job_release_many(conn, ids, tokens)
                .await
                .unwrap()
                .len();
        }
        AttemptWrite::Heartbeat => {
            let secs = vec![30.0; ids.len()];
            found = lease::job_heartbeat_many(conn, ids, tokens, &secs)
                .await
                .unwrap()
                .len();
        }
        AttemptWrite::CancelsRequested => {
            found = lease::job_cancels_requested(conn, ids, tokens)
                .await
                .unwrap()
                .len();
        }
        AttemptWrite::LeasesStillHeld => {
            found = lease::job_leases_still_held(conn, ids, tokens)
                .await
                .unwrap()
                .len();
        }
        AttemptWrite::Rescue => {
            found = lease::job_rescue_expired(conn, 100, None)
                .await
                .unwrap()
                .len();
        }
    }
    found
}

#[tokio::test]
async fn attempt_writes_planned_on_an_apparently_empty_table_read_only_their_own_rows() {
    let writes = [
        AttemptWrite::Retry,
        AttemptWrite::Die,
        AttemptWrite::Snooze,
        AttemptWrite::CancelOwn,
        AttemptWrite::Quarantine,
        AttemptWrite::Release,
        AttemptWrite::Heartbeat,
        AttemptWrite::CancelsRequested,
        AttemptWrite::LeasesStillHeld,
        AttemptWrite::Rescue,
    ];
    let db = TestDb::new().await;
    let (ids, tokens) = table_the_statistics_call_empty(&db).await;
    // The runtime's general pool plans each statement afresh at first and may
    // keep a generic plan later: both, on connections of their own.
    let mut chunks = ids
        .chunks(JOBS_PER_WRITE)
        .zip(tokens.chunks(JOBS_PER_WRITE));
    for plans in ["auto", "force_generic_plan"] {
        let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
        let mut conn = PgConnection::connect_with(&options.options([("plan_cache_mode", plans)]))
            .await
            .unwrap();
        for write in writes {
            let (ids, tokens) = chunks.next().unwrap();
            let mut tx = conn.begin().await.unwrap();
            let setup = match write {
                AttemptWrite::Rescue => {
                    "update lq.jobs set lease_expires_at = now() - interval '1 minute' where id = any($1)"
                }
                AttemptWrite::CancelsRequested => {
                    "update lq.jobs set cancel_requested_at = now() where id = any($1)"
                }
                _ => "select $1::bigint[]",
            };
            sqlx::query(setup)
                .bind(ids)
                .execute(&mut *tx)
                .await
                .unwrap();
            let before = rows_read(&mut tx).await;
            let found = attempt_write(write, &mut tx, ids, tokens).await;
            let read = rows_read(&mut tx).await - before;
            tx.commit().await.unwrap();
            assert_eq!(found, ids.len(), "{write:?} ({plans} plans): jobs found");
            assert!(
                read <= 10 * ids.len() as i64,
                "{write:?} ({plans} plans): read {read} rows of {} for {} jobs",
                RUNNING + QUEUED,
                ids.len()
            );
        }
    }
}

/// Jobs in a history that was never analyzed.
const FINISHED: i64 = 50_000;
/// Of them, the oldest ids finished two days ago; the rest just now.
const PAST_RETENTION: i64 = 100;

/// A guard on the prune's settings (`KEY_ORDER_ONLY`): at this size the
/// planner keeps to the key even without them, but psql on 300,000 such rows
/// chose a table scan for the recent ids' branch (86 ms against 2.7 ms), as the
/// benchmark's prune did on 5.66M rows (`bench/FINDINGS.md`, stops 76 and 77).
#[tokio::test]
async fn a_prune_of_a_history_never_analyzed_reads_only_the_ids_it_may_delete() {
    let db = TestDb::new().await;
    db.fill_history("test.pruned", FINISHED, PAST_RETENTION)
        .await;
    // The ids a prune a day back reads: those up to the mark before its cutoff,
    // and those drawn since the newest mark (ten, not yet past it).
    let ids = maintenance::PruneIds {
        after: 0,
        upto: Some(PAST_RETENTION),
        drawn: Some(FINISHED - 10),
    };
    let day = 86_400.0;
    let mut tx = db.pool.begin().await.unwrap();
    let (deleted, highest) = maintenance::job_prune(&mut tx, day, day, None, ids, 5_000)
        .await
        .unwrap();
    let (scanned, entries): (i64, i64) = sqlx::query_as(
        "select seq_tup_read, pg_stat_get_xact_tuples_returned('lq.finished_jobs_pkey'::regclass)
         from pg_stat_xact_user_tables where relid = 'lq.finished_jobs'::regclass",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        (deleted, highest),
        (PAST_RETENTION as u64, Some(PAST_RETENTION)),
        "the jobs past their retention are pruned"
    );
    assert_eq!(scanned, 0, "the prune read the history by a table scan");
    assert!(
        entries <= 3 * PAST_RETENTION + 20,
        "the prune read {entries} entries of the history's key to delete {deleted}"
    );
}

/// An operator's actions on live jobs, each on queued and running jobs of its own.
#[derive(Debug, Clone, Copy)]
enum OperatorAction {
    Cancel,
    CancelMany,
    RunNowMany,
    DeleteMany,
}

/// Runs `action` on the queued jobs `queued` and the running ones `running`;
/// returns how many jobs it reported on.
async fn operator_action(
    action: OperatorAction,
    conn: &mut PgConnection,
    queued: &[i64],
    running: &[i64],
) -> usize {
    let both: Vec<i64> = queued.iter().chain(running).copied().collect();
    match action {
        OperatorAction::Cancel => {
            let mut found = 0;
            for &id in &both {
                found += usize::from(control::job_cancel(conn, id).await.unwrap().is_some());
            }
            found
        }
        OperatorAction::CancelMany => bulk::jobs_cancel_many(conn, &both, &[])
            .await
            .unwrap()
            .len(),
        OperatorAction::RunNowMany => {
            let made_due = bulk::jobs_run_now_many(conn, queued, &[JobState::Queued])
                .await
                .unwrap();
            made_due.iter().filter(|(_, _, due)| *due).count() + running.len()
        }
        OperatorAction::DeleteMany => bulk::jobs_delete_many(conn, &both, &[])
            .await
            .unwrap()
            .len(),
    }
}

#[tokio::test]
async fn operator_actions_planned_on_an_apparently_empty_table_read_only_their_own_rows() {
    let db = TestDb::new().await;
    let (running, _) = table_the_statistics_call_empty(&db).await;
    let queued: Vec<i64> = sqlx::query_scalar(
        "select id from lq.jobs where kind = 'test.planned' and state = 'queued' order by id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut chunks = queued
        .chunks(JOBS_PER_WRITE)
        .zip(running.chunks(JOBS_PER_WRITE));
    let mut conn = db.pool.acquire().await.unwrap();
    for action in [
        OperatorAction::Cancel,
        OperatorAction::CancelMany,
        OperatorAction::RunNowMany,
        OperatorAction::DeleteMany,
    ] {
        let (queued, running) = chunks.next().unwrap();
        let jobs = queued.len() + running.len();
        let mut tx = conn.begin().await.unwrap();
        let before = rows_read(&mut tx).await;
        let found = operator_action(action, &mut tx, queued, running).await;
        let read = rows_read(&mut tx).await - before;
        tx.commit().await.unwrap();
        assert_eq!(found, jobs, "{action:?}: jobs reported on");
        assert!(
            read <= 10 * jobs as i64,
            "{action:?}: read {read} rows of {} for {jobs} jobs",
            RUNNING + QUEUED
        );
    }
}

/// Dead jobs in the history when its statistics call it empty.
const DEAD: i64 = 5_000;

/// Fills the history, deletes all but its last row and vacuums it (the
/// statistics then say one row in many pages), then adds [`DEAD`] dead jobs
/// above those ids and [`QUEUED`] queued jobs above theirs in `lq.jobs`, as a
/// queue's newest jobs are. Returns the dead ids and the queued ones.
async fn history_the_statistics_call_empty(db: &TestDb) -> (Vec<i64>, Vec<i64>) {
    db.fill_history("filler", 20_000, 0).await;
    for sql in [
        "delete from lq.finished_jobs where id < 20000",
        "vacuum lq.finished_jobs",
    ] {
        sqlx::raw_sql(sql).execute(&db.pool).await.unwrap();
    }
    let (pages, tuples): (i32, f32) = sqlx::query_as(
        "select relpages, reltuples from pg_class where oid = 'lq.finished_jobs'::regclass",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        pages > 10 && tuples <= 1.0,
        "the history's statistics should say one row in many pages: {tuples} rows in {pages} pages"
    );
    let dead: Vec<i64> = sqlx::query_scalar(
        "insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at,
             attempts, max_attempts, errors, created_at, finished_at)
         select g, 'test.planned', 'default', 0, '{}', 'dead', now(), 3, 3, '[]', now(), now()
         from generate_series(20001, 20000 + $1) g
         returning id",
    )
    .bind(DEAD)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let queued: Vec<i64> = sqlx::query_scalar(
        "insert into lq.jobs (id, kind, queue, payload, max_attempts, run_at)
         overriding system value
         select g, 'test.planned', 'default', '{}', 3, now() + interval '1 hour'
         from generate_series(100001, 100000 + $1) g
         returning id",
    )
    .bind(QUEUED)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    (dead, queued)
}

/// Rows of `lq.finished_jobs` read so far in the open transaction: by table
/// scans, and entries of its primary key (its only index the actions use).
async fn history_rows_read(conn: &mut PgConnection) -> i64 {
    sqlx::query_scalar(
        "select seq_tup_read + pg_stat_get_xact_tuples_returned('lq.finished_jobs_pkey'::regclass)
         from pg_stat_xact_user_tables where relid = 'lq.finished_jobs'::regclass",
    )
    .fetch_one(conn)
    .await
    .unwrap()
}

/// An operator's bulk actions that read or write the history, each on dead
/// jobs and queued ones of its own.
#[derive(Debug, Clone, Copy)]
enum HistoryAction {
    Retry,
    Delete,
    Cancel,
    RunNow,
}

#[tokio::test]
async fn bulk_actions_planned_on_an_apparently_empty_history_read_only_their_own_rows() {
    let db = TestDb::new().await;
    let (dead, queued) = history_the_statistics_call_empty(&db).await;
    let mut chunks = dead
        .chunks(JOBS_PER_WRITE)
        .zip(queued.chunks(JOBS_PER_WRITE));
    for plans in ["auto", "force_generic_plan"] {
        let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
        let mut conn = PgConnection::connect_with(&options.options([("plan_cache_mode", plans)]))
            .await
            .unwrap();
        for action in [
            HistoryAction::Retry,
            HistoryAction::Delete,
            HistoryAction::Cancel,
            HistoryAction::RunNow,
        ] {
            let (dead, queued) = chunks.next().unwrap();
            let both: Vec<i64> = dead.iter().chain(queued).copied().collect();
            let ids = match action {
                HistoryAction::Retry => dead,
                _ => &both[..],
            };
            let mut tx = conn.begin().await.unwrap();
            let before = history_rows_read(&mut tx).await;
            let seen = match action {
                HistoryAction::Retry => bulk::jobs_retry_many(&mut tx, ids, &[]).await,
                HistoryAction::Delete => bulk::jobs_delete_many(&mut tx, ids, &[]).await,
                HistoryAction::Cancel => bulk::jobs_cancel_many(&mut tx, ids, &[]).await,
                HistoryAction::RunNow => bulk::jobs_run_now_many(&mut tx, ids, &[]).await,
            }
            .unwrap();
            let (found, acted) = (seen.len(), seen.iter().filter(|(_, _, done)| *done).count());
            let read = history_rows_read(&mut tx).await - before;
            tx.commit().await.unwrap();
            let wanted = match action {
                HistoryAction::Retry | HistoryAction::Delete => (ids.len(), ids.len()),
                HistoryAction::Cancel | HistoryAction::RunNow => (both.len(), queued.len()),
            };
            assert_eq!(
                (found, acted),
                wanted,
                "{action:?} ({plans} plans): jobs found, acted on"
            );
            assert!(
                read <= 10 * ids.len() as i64,
                "{action:?} ({plans} plans): read {read} rows of the history's {DEAD} for {} jobs",
                ids.len()
            );
        }
    }
}

/// Rows of `lq.finished_jobs` read so far in the open transaction: by table
/// scans, and entries of any of its indexes.
async fn history_entries_read(conn: &mut PgConnection) -> i64 {
    sqlx::query_scalar(
        "select seq_tup_read + (
             select coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)), 0)::bigint
             from pg_index where indrelid = 'lq.finished_jobs'::regclass)
         from pg_stat_xact_user_tables where relid = 'lq.finished_jobs'::regclass",
    )
    .fetch_one(conn)
    .await
    .unwrap()
}

/// Jobs a page of [`control::job_ids`] asks for.
const PAGE: i64 = 50;

/// A page of one queue's dead jobs (a bulk action's batch, the dashboard's
/// list) reads about that page, whatever the history's statistics say, not
/// every dead job of the queue each time.
#[tokio::test]
async fn pages_of_one_queues_dead_jobs_planned_on_an_apparently_empty_history_read_only_their_page()
{
    let db = TestDb::new().await;
    let (dead, _) = history_the_statistics_call_empty(&db).await;
    let mut newest_first = dead.iter().rev().copied();
    let mut filter = JobFilter::new().state(JobState::Dead).queue("default");
    for plans in ["auto", "force_generic_plan"] {
        let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
        let mut conn = PgConnection::connect_with(&options.options([("plan_cache_mode", plans)]))
            .await
            .unwrap();
        for page in 1..=3 {
            let mut tx = conn.begin().await.unwrap();
            let before = history_entries_read(&mut tx).await;
            let ids = control::job_ids(&mut tx, &filter, PAGE).await.unwrap();
            let read = history_entries_read(&mut tx).await - before;
            tx.commit().await.unwrap();
            let wanted: Vec<i64> = newest_first.by_ref().take(PAGE as usize).collect();
            assert_eq!(ids, wanted, "page {page} ({plans} plans)");
            assert!(
                read <= 2 * PAGE,
                "page {page} ({plans} plans): read {read} rows of the history's {DEAD} dead for {PAGE}"
            );
            filter = filter.before_id(*ids.last().unwrap());
        }
    }
}
