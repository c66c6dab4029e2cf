//! `Enqueuer`: autocommit enqueues on connections of its own, concurrent calls
//! sharing statements.
//!
//! A table lock held by the test stalls the enqueuer's first statement, so the
//! calls made meanwhile wait in its queue and go out together once it is released:
//! what a busy producer sees, made deterministic.

use std::{future::Future, pin::Pin, time::Duration};

use futures_util::{future::join_all, poll};
use lq_runtime::{CoreError as Error, EnqueueOptions, Enqueued, Enqueuer, Job};
use lq_tests::TestDb;
use sqlx::{Connection, PgConnection};

use crate::jobs::{Noop, UniqueOrder};

const LIMIT: Duration = Duration::from_secs(30);

type Call<'a> = Pin<Box<dyn Future<Output = Result<Enqueued, Error>> + Send + 'a>>;

/// Holds `lock table lq.jobs in share mode` (which blocks inserts) until dropped
/// or released.
struct InsertBlock {
    conn: PgConnection,
}

impl InsertBlock {
    async fn hold(db: &TestDb) -> Self {
        let mut conn = PgConnection::connect(&db.url).await.unwrap();
        sqlx::raw_sql("begin; lock table lq.jobs in share mode")
            .execute(&mut conn)
            .await
            .unwrap();
        Self { conn }
    }

    async fn release(mut self) {
        sqlx::raw_sql("commit")
            .execute(&mut self.conn)
            .await
            .unwrap();
    }
}

/// Waits until an insert into `lq.jobs` waits for the test's lock.
async fn insert_is_blocked(db: &TestDb) {
    db.wait_for(
        "the enqueuer's insert to wait for the lock",
        "select exists (select 1 from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock'
            and query like '%insert into lq.jobs%')",
        LIMIT,
    )
    .await;
}

/// The first statement (`first` on `opts`) of a one-connection enqueuer, waiting
/// for the test's lock: the calls made until [`Stalled::release`] queue behind it.
struct Stalled {
    block: InsertBlock,
    first: tokio::task::JoinHandle<Result<Enqueued, Error>>,
}

impl Stalled {
    /// The enqueuer, with its first statement stalled.
    async fn new(db: &TestDb, first: Noop, opts: EnqueueOptions) -> (Enqueuer, Self) {
        let enqueuer = Enqueuer::with_connections(&db.pool, 1);
        let block = InsertBlock::hold(db).await;
        let on = enqueuer.clone();
        let first = tokio::spawn(async move { first.enqueue_with(&on, opts).await });
        insert_is_blocked(db).await;
        (enqueuer, Self { block, first })
    }

    /// Releases the lock; the first call then succeeds.
    async fn release(self) {
        self.block.release().await;
        self.first.await.unwrap().unwrap();
    }
}

/// Polls `calls` once, so each has handed its job to the enqueuer, then returns
/// the joined future.
async fn send_all(
    calls: Vec<Call<'_>>,
) -> Pin<Box<impl Future<Output = Vec<Result<Enqueued, Error>>> + '_>> {
    let mut all = Box::pin(join_all(calls));
    assert!(
        poll!(&mut all).is_pending(),
        "answered before the lock was released"
    );
    all
}

#[tokio::test]
async fn a_shared_statement_answers_each_call_with_its_own_job() {
    let db = TestDb::new().await;
    let (enqueuer, stalled) = Stalled::new(&db, Noop { n: 1_000 }, EnqueueOptions::new()).await;
    let jobs: Vec<Noop> = (0..50u64).map(|n| Noop { n }).collect();
    // Queued behind the stalled statement, so they go out together.
    let all = send_all(
        jobs.iter()
            .map(|job| Box::pin(job.enqueue(&enqueuer)) as Call)
            .collect(),
    )
    .await;
    stalled.release().await;
    let done = all.await;

    for (n, result) in done.into_iter().enumerate() {
        let e = result.unwrap();
        assert!(!e.existing);
        let stored: i64 =
            sqlx::query_scalar("select (payload->>'n')::int8 from lq.all_jobs where id = $1")
                .bind(e.id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(
            stored, n as i64,
            "call {n} got job {} holding {stored}",
            e.id
        );
    }
    let (jobs, transactions): (i64, i64) = sqlx::query_as(
        "select count(*), count(distinct xmin::text) from lq.jobs
          where kind = 'test.noop' and payload->>'n' <> '1000'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (jobs, transactions),
        (50, 1),
        "the fifty share one statement"
    );
}

#[tokio::test]
async fn a_shared_statement_keeps_each_calls_own_settings() {
    let db = TestDb::new().await;
    let (enqueuer, stalled) = Stalled::new(&db, Noop { n: 100 }, EnqueueOptions::new()).await;
    let jobs: Vec<Noop> = (0..12u64).map(|n| Noop { n }).collect();
    // Queued behind the stalled statement, so they go out together.
    let opts = |n: u64| {
        let opts = EnqueueOptions::new()
            .queue(format!("q{}", n % 3))
            .priority(n as i16)
            .max_attempts(n as u32 + 1);
        let opts = if n.is_multiple_of(2) {
            opts.delay(Duration::from_secs(3600))
        } else {
            opts
        };
        if n % 4 == 1 {
            opts.meta("n", n)
        } else {
            opts
        }
    };
    let rest = send_all(
        jobs.iter()
            .map(|job| Box::pin(job.enqueue_with(&enqueuer, opts(job.n))) as Call)
            .collect(),
    )
    .await;
    stalled.release().await;

    let now = chrono::Utc::now();
    for (n, result) in (0..12u64).zip(rest.await) {
        let row = lq_runtime::control::get(&db.pool, result.unwrap().id)
            .await
            .unwrap();
        let payload: serde_json::Value = serde_json::from_str(row.payload.get()).unwrap();
        assert_eq!(payload, serde_json::json!({ "n": n }));
        assert_eq!(row.queue, format!("q{}", n % 3), "n = {n}");
        assert_eq!((row.priority, row.max_attempts), (n as i16, n as i32 + 1));
        let delayed = row.run_at > now + chrono::Duration::minutes(59);
        assert_eq!(
            delayed,
            n.is_multiple_of(2),
            "n = {n}: run_at {}",
            row.run_at
        );
        let meta = row
            .meta
            .map(|m| serde_json::from_str::<serde_json::Value>(m.get()).unwrap());
        let expected = (n % 4 == 1).then(|| serde_json::json!({ "n": n }));
        assert_eq!(meta, expected, "n = {n}");
    }
    let (jobs, transactions): (i64, i64) = sqlx::query_as(
        "select count(*), count(distinct xmin::text) from lq.jobs where payload->>'n' <> '100'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (jobs, transactions),
        (12, 1),
        "the twelve share one statement"
    );
}

#[tokio::test]
async fn a_job_the_server_refuses_fails_its_own_call_only() {
    let db = TestDb::new().await;
    // A rule of the application's: the server refuses n = 13.
    sqlx::raw_sql(
        "alter table lq.jobs add constraint no_thirteen
           check (kind <> 'test.noop' or (payload->>'n')::int8 <> 13)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let (enqueuer, stalled) = Stalled::new(&db, Noop { n: 1 }, EnqueueOptions::new()).await;
    let jobs: Vec<Noop> = (10..20u64).map(|n| Noop { n }).collect();
    let rest = send_all(
        jobs.iter()
            .map(|job| Box::pin(job.enqueue(&enqueuer)) as Call)
            .collect(),
    )
    .await;
    stalled.release().await;

    for (n, result) in (10..20).zip(rest.await) {
        match result {
            Err(Error::Database { source, .. }) if n == 13 => {
                let db_error = source.as_database_error().expect("the server's error");
                assert_eq!(db_error.constraint(), Some("no_thirteen"));
            }
            Ok(e) if n != 13 => {
                let stored: i64 =
                    sqlx::query_scalar("select (payload->>'n')::int8 from lq.jobs where id = $1")
                        .bind(e.id)
                        .fetch_one(&db.pool)
                        .await
                        .unwrap();
                assert_eq!(stored, n);
            }
            other => panic!("n = {n}: {other:?}"),
        }
    }
    assert_eq!(db.count("queued").await, 10);
}

#[tokio::test]
async fn a_caller_that_gives_up_before_its_job_is_sent_gets_nothing_written() {
    let db = TestDb::new().await;
    let (enqueuer, stalled) = Stalled::new(&db, Noop { n: 1 }, EnqueueOptions::new()).await;
    let two = Noop { n: 2 };
    // Queued behind the stalled statement, then abandoned (a timeout, a dropped
    // request handler).
    let gave_up = send_all(vec![Box::pin(two.enqueue(&enqueuer))]).await;
    drop(gave_up);
    stalled.release().await;
    Noop { n: 3 }.enqueue(&enqueuer).await.unwrap();

    let stored: Vec<i64> =
        sqlx::query_scalar("select (payload->>'n')::int8 from lq.jobs order by id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored, vec![1, 3]);
}

#[tokio::test]
async fn unique_keys_batches_delays_and_metadata_work_as_on_a_pool() {
    let db = TestDb::new().await;
    let enqueuer = Enqueuer::new(&db.pool);
    let first = UniqueOrder { order_id: 7 }
        .enqueue(&enqueuer)
        .await
        .unwrap();
    let again = UniqueOrder { order_id: 7 }
        .enqueue(&enqueuer)
        .await
        .unwrap();
    assert_eq!(
        again,
        Enqueued {
            id: first.id,
            existing: true
        }
    );

    let many = Noop::enqueue_many(
        &enqueuer,
        (0..100).map(|n| Noop { n }),
        EnqueueOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!((many.ids.len(), many.skipped), (100, 0));

    let opts = EnqueueOptions::new()
        .queue("later")
        .priority(4)
        .max_attempts(3)
        .delay(Duration::from_secs(3600))
        .meta("tenant", "acme");
    let later = Noop { n: 500 }.enqueue_with(&enqueuer, opts).await.unwrap();
    let row = lq_runtime::control::get(&db.pool, later.id).await.unwrap();
    assert_eq!(
        (row.queue.as_str(), row.priority, row.max_attempts),
        ("later", 4, 3)
    );
    let meta: serde_json::Value = serde_json::from_str(row.meta.unwrap().get()).unwrap();
    assert_eq!(meta, serde_json::json!({ "tenant": "acme" }));
    assert!(row.run_at > chrono::Utc::now() + chrono::Duration::minutes(59));
    assert_eq!(db.count("queued").await, 102);

    // Bad input is refused before anything is sent, as on a pool.
    let bad = Noop { n: 1 }
        .enqueue_with(&enqueuer, EnqueueOptions::new().queue("no spaces"))
        .await;
    assert!(
        matches!(bad, Err(Error::InvalidName { what: "queue", .. })),
        "{bad:?}"
    );
    assert_eq!(db.count("queued").await, 102);
}

#[tokio::test]
async fn a_broken_connection_fails_at_most_the_call_on_it_and_the_next_reconnects() {
    let db = TestDb::new().await;
    let enqueuer = Enqueuer::with_connections(&db.pool, 1);
    Noop { n: 1 }.enqueue(&enqueuer).await.unwrap();
    let killed: i64 = sqlx::query_scalar(
        "select count(pg_terminate_backend(pid)) from pg_stat_activity
          where datname = current_database() and application_name = 'lq-enqueuer'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(killed, 1, "the enqueuer keeps one connection");
    let after_kill = Noop { n: 2 }.enqueue(&enqueuer).await;
    Noop { n: 3 }.enqueue(&enqueuer).await.unwrap();
    let stored: Vec<i64> =
        sqlx::query_scalar("select (payload->>'n')::int8 from lq.jobs order by id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    match after_kill {
        Ok(_) => assert_eq!(stored, vec![1, 2, 3]),
        Err(_) => assert_eq!(stored, vec![1, 3]),
    }
}

#[tokio::test]
async fn a_call_abandoned_mid_statement_gives_its_connection_back() {
    let db = TestDb::new().await;
    let enqueuer = Enqueuer::with_connections(&db.pool, 1);
    Noop { n: 1 }.enqueue(&enqueuer).await.unwrap();
    // The only connection is free, so the next call sends its statement from its
    // own task, and the statement waits for the lock.
    let block = InsertBlock::hold(&db).await;
    let on = enqueuer.clone();
    let abandoned = tokio::spawn(async move { Noop { n: 2 }.enqueue(&on).await });
    insert_is_blocked(&db).await;
    abandoned.abort();
    assert!(abandoned.await.unwrap_err().is_cancelled());
    // The line is free again (its connection, which had a statement out, is
    // replaced), so the next call does not wait for a line that is never given back.
    let next = Noop { n: 3 }.enqueue(&enqueuer);
    block.release().await;
    let next = tokio::time::timeout(LIMIT, next).await.unwrap().unwrap();
    let stored: i64 = sqlx::query_scalar("select (payload->>'n')::int8 from lq.jobs where id = $1")
        .bind(next.id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 3);
    // The abandoned insert was sent: like any statement whose answer was not
    // waited for, it may have been written.
    let ns: Vec<i64> = sqlx::query_scalar("select (payload->>'n')::int8 from lq.jobs order by id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(ns == [1, 3] || ns == [1, 2, 3], "{ns:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueuer_outlives_the_runtime_that_opened_its_connection() {
    let db = TestDb::new().await;
    let enqueuer = Enqueuer::with_connections(&db.pool, 1);
    let on = enqueuer.clone();
    // A runtime of its own, gone once the call returns, with the I/O driver its
    // connection's socket was registered with.
    let first = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move { Noop { n: 1 }.enqueue(&on).await })
    })
    .join()
    .unwrap()
    .unwrap();
    let second = Noop { n: 2 }.enqueue(&enqueuer).await.unwrap();
    assert_ne!(first.id, second.id);
    assert_eq!(db.count("queued").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_jobs_on_an_enqueuer_are_followed_by_a_notify_alone_or_shared() {
    let db = TestDb::new().await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    listener.listen("lq_jobs").await.unwrap();
    let enqueuer = Enqueuer::with_connections(&db.pool, 1);
    let on = |queue: &str| EnqueueOptions::new().queue(queue);

    // Alone: a delayed job sends none, a due one sends one. Notifications
    // arrive in commit order, so had the delayed one sent any, it would come first.
    let delay = Duration::from_secs(3600);
    Noop { n: 1 }
        .enqueue_with(&enqueuer, on("later").delay(delay))
        .await
        .unwrap();
    Noop { n: 2 }
        .enqueue_with(&enqueuer, on("alone"))
        .await
        .unwrap();
    assert_eq!(next_note(&mut listener).await, "alone");

    // Shared: the statement that carries several calls is followed by one too.
    let (enqueuer, stalled) = Stalled::new(&db, Noop { n: 3 }, on("first")).await;
    let jobs: Vec<Noop> = (10..15u64).map(|n| Noop { n }).collect();
    let rest = send_all(
        jobs.iter()
            .map(|job| Box::pin(job.enqueue_with(&enqueuer, on("shared"))) as Call)
            .collect(),
    )
    .await;
    stalled.release().await;
    assert!(rest.await.iter().all(Result::is_ok));
    let mut notes = vec![
        next_note(&mut listener).await,
        next_note(&mut listener).await,
    ];
    notes.sort();
    assert_eq!(notes, ["first", "shared"]);
}

/// The payload (the queue) of the next NOTIFY on `listener`, waiting at most 5 s.
async fn next_note(listener: &mut sqlx::postgres::PgListener) -> String {
    let note = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("a NOTIFY")
        .unwrap();
    note.payload().to_owned()
}
