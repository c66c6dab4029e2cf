//! The completer's statements keep probing `lq.jobs` by primary key when their
//! one plan was made while the table's statistics said it was nearly empty, as
//! a vacuum of a briefly drained queue leaves them. Such a plan once put the whole
//! table on the outer side of the join and compared every row with every job of
//! the batch: 1.2 s per completion at 7,328 rows, and a stall with a backlog
//! (`bench/FINDINGS.md`, stop 76).

use lq_core::db::{self, finish};
use lq_tests::TestDb;
use sqlx::types::Uuid;
use sqlx::{Connection, PgConnection};

/// Running jobs in the table when the completions are planned and run.
const RUNNING: i64 = 5_000;
/// Jobs each completion ends.
const BATCH: usize = 100;

/// Fills `lq.jobs` with queued rows, deletes all but the last and vacuums it:
/// the statistics then say one live row in many pages. Then adds [`RUNNING`]
/// running jobs (no statistics are taken) and returns their ids and tokens.
async fn table_the_statistics_call_empty(db: &TestDb) -> (Vec<i64>, Vec<Uuid>) {
    sqlx::raw_sql(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
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
                "{how:?}, batch {batch}: read {read} primary-key entries of {RUNNING} rows to end {BATCH} jobs"
            );
        }
    }
}
