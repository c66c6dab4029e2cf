//! An enqueue on a pool keeps its connection for a moment, so the next one skips
//! the pool's acquire and release; it never keeps one another caller needs, nor
//! past the pool's close or its runtime's end.

use std::{
    str::FromStr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use lq_runtime::Job;
use lq_tests::TestDb;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::jobs::Noop;

const LIMIT: Duration = Duration::from_secs(30);

/// A pool on the test's database whose `after_release` hook counts the
/// connections sqlx takes back.
async fn counting_pool(db: &TestDb, max: u32, app: &str) -> (PgPool, Arc<AtomicUsize>) {
    let released = Arc::new(AtomicUsize::new(0));
    let counter = released.clone();
    let opts = PgConnectOptions::from_str(&db.url)
        .unwrap()
        .application_name(app);
    let pool = PgPoolOptions::new()
        .max_connections(max)
        .after_release(move |_, _| {
            counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(true) })
        })
        .connect_with(opts)
        .await
        .unwrap();
    (pool, released)
}

#[tokio::test]
async fn serial_enqueues_on_a_pool_do_not_give_the_connection_back_each_time() {
    let db = TestDb::new().await;
    let (pool, released) = counting_pool(&db, 4, "lq-hold-serial").await;
    for n in 0..50 {
        Noop { n }.enqueue(&pool).await.unwrap();
    }
    assert_eq!(db.count("queued").await, 50);
    // Without the hold every enqueue releases (up to the last, maybe still in
    // flight); with it only a gap longer than the hold does.
    let back = released.load(Ordering::SeqCst);
    assert!(back < 25, "{back} releases for 50 enqueues");
}

#[tokio::test]
async fn a_pool_of_one_gets_its_connection_back_after_every_enqueue() {
    let db = TestDb::new().await;
    let (pool, released) = counting_pool(&db, 1, "lq-hold-one").await;
    for n in 0..5 {
        Noop { n }.enqueue(&pool).await.unwrap();
    }
    // Each enqueue after the first acquired the only connection, so the one
    // before it had been released; this acquire waits for the fifth.
    let conn = tokio::time::timeout(LIMIT, pool.acquire())
        .await
        .expect("acquire")
        .unwrap();
    assert_eq!(released.load(Ordering::SeqCst), 5);
    drop(conn);
}

#[tokio::test]
async fn closing_the_pool_right_after_an_enqueue_finishes() {
    let db = TestDb::new().await;
    let (pool, _) = counting_pool(&db, 4, "lq-hold-close").await;
    Noop { n: 1 }.enqueue(&pool).await.unwrap();
    tokio::time::timeout(LIMIT, pool.close())
        .await
        .expect("close() waited for a connection nobody gave back");
    assert_eq!(pool.size(), 0);
    // A closed pool refuses, held connection or not.
    assert!(Noop { n: 2 }.enqueue(&pool).await.is_err());
    assert_eq!(db.count("queued").await, 1);
}

#[tokio::test]
async fn a_connection_held_on_a_runtime_that_ends_is_closed_with_it() {
    let db = TestDb::new().await;
    let url = db.url.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let opts = PgConnectOptions::from_str(&url)
                .unwrap()
                .application_name("lq-hold-ended");
            let pool = PgPoolOptions::new()
                .max_connections(4)
                .connect_with(opts)
                .await
                .unwrap();
            Noop { n: 1 }.enqueue(&pool).await.unwrap();
        });
        // Dropped at once: the held connection must go with the runtime.
        drop(runtime);
    })
    .join()
    .unwrap();
    assert_eq!(db.count("queued").await, 1);
    db.wait_for(
        "the ended runtime's connections to close",
        "select not exists (select 1 from pg_stat_activity
          where datname = current_database() and application_name = 'lq-hold-ended')",
        LIMIT,
    )
    .await;
}
