//! Transactional enqueue, unique keys, options, bulk, bad input.

use std::time::Duration;

use lq_runtime::{CoreError as Error, EnqueueOptions, Job, MAX_PAYLOAD_BYTES};
use lq_tests::TestDb;

use crate::jobs::{jobs_listener, next_note, Blob, Noop, UniqueOrder};

#[tokio::test]
async fn committed_job_is_visible_and_rolled_back_job_is_not() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let kept = Noop { n: 1 }.enqueue(&mut tx).await.unwrap();
    // Not visible to others before commit.
    assert_eq!(db.count("queued").await, 0);
    tx.commit().await.unwrap();

    let mut tx = db.pool.begin().await.unwrap();
    let dropped = Noop { n: 2 }.enqueue(&mut tx).await.unwrap();
    tx.rollback().await.unwrap();

    let ids: Vec<i64> = sqlx::query_scalar("select id from lq.all_jobs")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(ids, vec![kept.id]);
    assert_ne!(kept.id, dropped.id);
}

#[tokio::test]
async fn enqueue_accepts_pool_and_connection() {
    let db = TestDb::new().await;
    Noop { n: 1 }.enqueue(&db.pool).await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    Noop { n: 2 }.enqueue(&mut *conn).await.unwrap();
    assert_eq!(db.count("queued").await, 2);
}

#[tokio::test]
async fn row_carries_type_settings_and_payload() {
    let db = TestDb::new().await;
    let e = Noop { n: 42 }.enqueue(&db.pool).await.unwrap();
    let row = lq_runtime::control::get(&db.pool, e.id).await.unwrap();
    assert_eq!(row.kind, "test.noop");
    assert_eq!(row.queue, "default");
    assert_eq!(row.priority, 0);
    assert_eq!(row.max_attempts, 20);
    assert_eq!(row.attempts, 0);
    assert_eq!(row.payload_value().unwrap(), serde_json::json!({ "n": 42 }));
}

#[tokio::test]
async fn per_call_options_override_the_type() {
    let db = TestDb::new().await;
    let opts = EnqueueOptions::new()
        .queue("bulk")
        .priority(7)
        .max_attempts(2)
        .delay(Duration::from_secs(3600));
    let e = Noop { n: 1 }.enqueue_with(&db.pool, opts).await.unwrap();
    let row = lq_runtime::control::get(&db.pool, e.id).await.unwrap();
    assert_eq!(
        (row.queue.as_str(), row.priority, row.max_attempts),
        ("bulk", 7, 2)
    );
    let delay: f64 = sqlx::query_scalar(
        "select extract(epoch from run_at - now())::float8 from lq.all_jobs where id = $1",
    )
    .bind(e.id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        (3500.0..=3600.0).contains(&delay),
        "run_at is {delay}s away"
    );

    let at = chrono::Utc::now() + chrono::Duration::days(2);
    let e = Noop { n: 2 }
        .enqueue_with(&db.pool, EnqueueOptions::new().run_at(at))
        .await
        .unwrap();
    let row = lq_runtime::control::get(&db.pool, e.id).await.unwrap();
    assert!((row.run_at - at).num_milliseconds().abs() < 1);
}

#[tokio::test]
async fn concurrent_enqueues_of_one_unique_key_yield_one_live_job() {
    let db = TestDb::new().await;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let pool = db.pool.clone();
            tokio::spawn(async move {
                let mut tx = pool.begin().await.unwrap();
                let e = UniqueOrder { order_id: 9 }.enqueue(&mut tx).await.unwrap();
                tx.commit().await.unwrap();
                e
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let live: Vec<i64> =
        sqlx::query_scalar("select id from lq.all_jobs where unique_key = 'order:9'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(live.len(), 1);
    assert!(
        results.iter().all(|r| r.id == live[0]),
        "every caller got the live job's id"
    );
    assert_eq!(
        results.iter().filter(|r| !r.existing).count(),
        1,
        "exactly one inserted"
    );
}

#[tokio::test]
async fn a_finished_job_frees_its_unique_key() {
    let db = TestDb::new().await;
    let first = UniqueOrder { order_id: 1 }.enqueue(&db.pool).await.unwrap();
    db.finish(first.id, "succeeded", 0.0).await;
    let second = UniqueOrder { order_id: 1 }.enqueue(&db.pool).await.unwrap();
    assert!(!second.existing);
    assert_ne!(first.id, second.id);
}

#[tokio::test]
async fn bulk_enqueue_inserts_all_in_one_statement_and_skips_live_keys() {
    let db = TestDb::new().await;
    let done = Noop::enqueue_many(
        &db.pool,
        (0..1000).map(|n| Noop { n }),
        EnqueueOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(done.ids.len(), 1000);
    assert_eq!(db.count("queued").await, 1000);

    UniqueOrder { order_id: 3 }.enqueue(&db.pool).await.unwrap();
    let orders = (1..=5).map(|order_id| UniqueOrder { order_id });
    let done = UniqueOrder::enqueue_many(&db.pool, orders, EnqueueOptions::new())
        .await
        .unwrap();
    assert_eq!((done.ids.len(), done.skipped), (4, 1));

    // A key repeated within one batch: the first takes it, the rest are skipped.
    let orders = [10, 11, 10, 10].map(|order_id| UniqueOrder { order_id });
    let done = UniqueOrder::enqueue_many(&db.pool, orders, EnqueueOptions::new())
        .await
        .unwrap();
    assert_eq!((done.ids.len(), done.skipped), (2, 2));
    let keys: Vec<String> =
        sqlx::query_scalar("select unique_key from lq.jobs where id = any($1) order by id")
            .bind(&done.ids)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(keys.len(), 2);
    assert!(
        keys.iter().any(|k| k.ends_with("10")) && keys.iter().any(|k| k.ends_with("11")),
        "{keys:?}"
    );
}

#[tokio::test]
async fn oversized_payload_is_refused_and_nothing_is_written() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let err = Blob {
        data: "x".repeat(MAX_PAYLOAD_BYTES),
    }
    .enqueue(&mut tx)
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::PayloadTooLarge {
                kind: "test.blob",
                ..
            }
        ),
        "{err}"
    );
    // The business transaction is still usable.
    Noop { n: 1 }.enqueue(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(db.count("queued").await, 1);
}

#[tokio::test]
async fn malformed_queue_name_is_a_typed_error() {
    let db = TestDb::new().await;
    for bad in ["", "has space", "semi;colon", &"q".repeat(200)] {
        let err = Noop { n: 1 }
            .enqueue_with(&db.pool, EnqueueOptions::new().queue(bad))
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidName { what: "queue", .. }),
            "{bad:?}: {err}"
        );
    }
    assert_eq!(db.count("queued").await, 0);
}

/// Enqueues job `n` on the pool, then waits for the NOTIFY that must follow it.
async fn enqueue_then_notify(db: &TestDb, listener: &mut sqlx::postgres::PgListener, n: u64) {
    Noop { n }.enqueue(&db.pool).await.unwrap();
    let note = next_note(listener, &format!("after enqueue {n}")).await;
    assert_eq!(note, "default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pool_enqueue_is_followed_by_a_notify() {
    let db = TestDb::new().await;
    let mut listener = jobs_listener(&db).await;
    // Each enqueue follows the previous NOTIFY closely, so once the notifier's
    // burst is spent many come faster than its rate: those must still get one
    // when the rate allows.
    for n in 0..50 {
        enqueue_then_notify(&db, &mut listener, n).await;
    }
}

#[tokio::test]
async fn bulk_enqueue_in_a_transaction_notifies_only_for_inserted_jobs_that_are_due() {
    let db = TestDb::new().await;
    let mut listener = jobs_listener(&db).await;
    let opts = |queue: &str| EnqueueOptions::new().queue(queue);

    // Delayed: no NOTIFY.
    let mut tx = db.pool.begin().await.unwrap();
    let later = (0..100).map(|n| Noop { n });
    let delay = Duration::from_secs(3600);
    let done = Noop::enqueue_many(&mut tx, later, opts("later").delay(delay))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(done.ids.len(), 100);
    assert!(done.ids.windows(2).all(|w| w[0] < w[1]), "ids ascend");

    // Due, but every key already live, so nothing inserted: no NOTIFY.
    let mut tx = db.pool.begin().await.unwrap();
    let quiet = EnqueueOptions::new().queue("skipped").notify(false);
    UniqueOrder { order_id: 7 }
        .enqueue_with(&mut tx, quiet)
        .await
        .unwrap();
    let dup = [UniqueOrder { order_id: 7 }];
    let done = UniqueOrder::enqueue_many(&mut tx, dup, opts("skipped"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!((done.ids.len(), done.skipped), (0, 1));

    // Due and inserted: one NOTIFY at commit. Notifications arrive in commit
    // order, so had either batch above sent one, it would come first.
    let mut tx = db.pool.begin().await.unwrap();
    let now = (0..100).map(|n| Noop { n });
    Noop::enqueue_many(&mut tx, now, opts("now")).await.unwrap();
    tx.commit().await.unwrap();
    let note = next_note(&mut listener, "for the due batch").await;
    assert_eq!(note, "now");
}

#[tokio::test]
async fn a_single_enqueue_in_a_transaction_notifies_at_commit_only_when_due_and_inserted() {
    let db = TestDb::new().await;
    let mut listener = jobs_listener(&db).await;
    let opts = |queue: &str| EnqueueOptions::new().queue(queue);

    // Delayed, NOTIFY off, rolled back, or a live key's duplicate: no NOTIFY.
    let mut tx = db.pool.begin().await.unwrap();
    let later = opts("later").delay(Duration::from_secs(3600));
    Noop { n: 1 }.enqueue_with(&mut tx, later).await.unwrap();
    let quiet = opts("quiet").notify(false).meta("tenant", "acme");
    Noop { n: 2 }.enqueue_with(&mut tx, quiet).await.unwrap();
    let quiet_key = opts("keyed").notify(false);
    let first = UniqueOrder { order_id: 7 };
    let held = first.enqueue_with(&mut tx, quiet_key).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let dup = UniqueOrder { order_id: 7 }
        .enqueue_with(&mut tx, opts("keyed"))
        .await
        .unwrap();
    assert_eq!((dup.id, dup.existing), (held.id, true));
    tx.commit().await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    Noop { n: 3 }
        .enqueue_with(&mut tx, opts("rolled"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.count("queued").await, 3);

    // Due and inserted, with metadata: one NOTIFY at commit, and none before.
    // Notifications arrive in commit order, so had anything above sent one, it
    // would come first.
    let mut tx = db.pool.begin().await.unwrap();
    let now = opts("now").meta("tenant", "acme");
    let job = Noop { n: 4 }.enqueue_with(&mut tx, now).await.unwrap();
    assert!(!job.existing);
    tx.commit().await.unwrap();
    let note = next_note(&mut listener, "for the due job").await;
    assert_eq!(note, "now");
    assert_eq!(db.count("queued").await, 4);
}

/// The notifier's backends on the current database.
const NOTIFIER_BACKENDS: &str =
    "from pg_stat_activity where datname = current_database() and application_name = 'lq-notifier'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_enqueue_notify_uses_a_connection_of_its_own_and_survives_losing_it() {
    let db = TestDb::new().await;
    let mut listener = jobs_listener(&db).await;
    let count = format!("select count(*) {NOTIFIER_BACKENDS}");
    let notifiers = || async {
        sqlx::query_scalar::<_, i64>(&count)
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };

    enqueue_then_notify(&db, &mut listener, 0).await;
    // Not a connection borrowed from the application's pool, and only one.
    assert_eq!(notifiers().await, 1, "after enqueue 0");

    let killed: Vec<bool> = sqlx::query_scalar(&format!(
        "select pg_terminate_backend(pid) {NOTIFIER_BACKENDS}"
    ))
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(killed, [true]);
    db.wait_for(
        "the notifier's backend to exit",
        &format!("select ({count}) = 0"),
        Duration::from_secs(10),
    )
    .await;

    // Sent through the pool: the killed connection failed and was dropped.
    enqueue_then_notify(&db, &mut listener, 1).await;
    // Then the notifier connects again.
    enqueue_then_notify(&db, &mut listener, 2).await;
    assert_eq!(notifiers().await, 1, "after enqueue 2");
}

#[tokio::test]
async fn the_wake_up_notify_skips_the_wal_flush_for_its_own_transaction_only() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let setting = "select current_setting('synchronous_commit')";
    let before: String = sqlx::query_scalar(setting)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_ne!(
        before, "off",
        "the test needs a server that waits for its flushes"
    );

    // Inside a transaction, to see the setting the NOTIFY's commit will use.
    sqlx::query("begin").execute(&mut *conn).await.unwrap();
    lq_core::db::enqueue::queues_notify(&mut *conn, &["default".to_owned()])
        .await
        .unwrap();
    let during: String = sqlx::query_scalar(setting)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    sqlx::query("commit").execute(&mut *conn).await.unwrap();
    assert_eq!(during, "off");

    // Nothing after it, on a connection that goes back to the application's pool.
    let after: String = sqlx::query_scalar(setting)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(after, before);
}

#[tokio::test]
async fn a_delay_or_run_time_past_what_postgres_stores_is_bounded_not_an_error() {
    // `Duration::MAX` ("never") and a time before 4713 BC would each fail the
    // insert with a raw database error.
    let db = TestDb::new().await;
    let never = Noop { n: 1 }
        .enqueue_with(&db.pool, EnqueueOptions::new().delay(Duration::MAX))
        .await
        .unwrap()
        .id;
    let long_ago = Noop { n: 2 }
        .enqueue_with(
            &db.pool,
            EnqueueOptions::new().run_at(chrono::DateTime::<chrono::Utc>::MIN_UTC),
        )
        .await
        .unwrap()
        .id;
    let (years_ahead, due_now): (f64, bool) = sqlx::query_as(
        "select extract(year from age(a.run_at, now()))::float8, b.run_at <= now()
         from lq.jobs a, lq.jobs b where a.id = $1 and b.id = $2",
    )
    .bind(never)
    .bind(long_ago)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!((99.0..=100.0).contains(&years_ahead), "{years_ahead}");
    assert!(due_now);
}
