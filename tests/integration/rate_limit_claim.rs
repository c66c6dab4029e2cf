//! The rate-limited claim itself (`db::claim::job_claim_limited` with a rate
//! limit and no global limit): one statement that locks the queue's bucket row,
//! refills it, claims at most its whole tokens and spends them.

use std::time::Duration;

use lq_core::{db::claim::Limited, QueueLimits, RateLimit};
use lq_runtime::{EnqueueOptions, Job};
use lq_tests::TestDb;
use sqlx::PgConnection;

use crate::jobs::Noop;

/// Ten tokens an hour: no whole token is refilled within a test.
const HOURLY: RateLimit = RateLimit::per_hour(10);

const RATED: QueueLimits = QueueLimits {
    global: None,
    rate: Some(HOURLY),
};

/// Claims up to `limit` noop jobs of the default queue under [`RATED`];
/// returns the jobs' ids and when the next token is due, if the bucket stopped
/// the claim.
async fn claim(conn: &mut PgConnection, limit: usize) -> (Vec<i64>, Option<Duration>) {
    match crate::global_limit_claim::claim_under(conn, RATED, limit, "rated-claimer").await {
        Limited::Claimed {
            jobs,
            at_limit: false,
            next_token,
        } => (jobs.into_iter().map(|j| j.id).collect(), next_token),
        other => panic!("{other:?}"),
    }
}

async fn bucket_tokens(db: &TestDb) -> f64 {
    sqlx::query_scalar("select tokens from lq.rate_limits where queue = 'default'")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn enqueue(db: &TestDb, n: u64) {
    Noop::enqueue_many(&db.pool, (0..n).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap();
}

/// Eight claims at once on a bucket with six tokens left take six jobs between
/// them, each job once, and leave the bucket below one token; the claim that
/// emptied it says when the next comes (six minutes at ten an hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_rated_claims_take_exactly_the_buckets_tokens() {
    let db = TestDb::new().await;
    enqueue(&db, 50).await;
    // The first claim creates the bucket, full, and spends four of its ten.
    let mut conn = db.pool.acquire().await.unwrap();
    let (first, next) = claim(&mut conn, 4).await;
    assert_eq!((first.len(), next), (4, None));
    assert!((bucket_tokens(&db).await - 6.0).abs() < 0.01);

    let mut claims = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let pool = db.pool.clone();
        claims.spawn(async move {
            let mut conn = pool.acquire().await.unwrap();
            claim(&mut conn, 4).await
        });
    }
    let mut ids = first;
    let mut told_when = 0;
    while let Some(r) = claims.join_next().await {
        let (got, next) = r.unwrap();
        if let Some(next) = next {
            told_when += 1;
            assert!(next > Duration::from_secs(300), "{next:?}");
        }
        ids.extend(got);
    }
    assert_eq!(ids.len(), 10, "ten tokens, ten jobs");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 10, "each job claimed once");
    assert!(told_when >= 1, "the claim that emptied the bucket said so");
    let left = bucket_tokens(&db).await;
    assert!((0.0..1.0).contains(&left), "{left} tokens left");
    assert_eq!(db.count("running").await, 10);
}

/// Once its bucket exists, a rated claim does not take the limit lock: it
/// claims while another session holds that lock, which the five-round-trip path
/// would wait for. Without a bucket it takes that path, which makes one.
#[tokio::test]
async fn a_rated_claim_does_not_wait_for_the_limit_lock_once_its_bucket_exists() {
    let db = TestDb::new().await;
    enqueue(&db, 5).await;
    let mut conn = db.pool.acquire().await.unwrap();
    assert_eq!(claim(&mut conn, 1).await.0.len(), 1); // creates the bucket
    let holder = crate::global_limit_claim::hold_limit_lock(&db).await;
    let claimed = tokio::time::timeout(Duration::from_secs(5), claim(&mut conn, 2))
        .await
        .expect("the claim did not wait for the limit lock");
    assert_eq!(claimed.0.len(), 2);
    holder.rollback().await.unwrap();
    // A bucket an operator deleted is made again, full, by the next claim.
    sqlx::query("delete from lq.rate_limits")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(claim(&mut conn, 1).await.0.len(), 1);
    assert!((bucket_tokens(&db).await - 9.0).abs() < 0.01);
}

/// A claim that waited for the bucket's row reads the tokens the holder left
/// when it let go, not those its statement's snapshot saw: the holder spends
/// all but one, and the waiting claim takes one job, not four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rated_claim_that_waited_for_the_bucket_spends_what_the_holder_left() {
    let db = TestDb::new().await;
    enqueue(&db, 20).await;
    let mut conn = db.pool.acquire().await.unwrap();
    assert_eq!(claim(&mut conn, 1).await.0.len(), 1); // nine tokens left
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("select from lq.rate_limits where queue = 'default' for update")
        .execute(&mut *holder)
        .await
        .unwrap();
    let waiter = tokio::spawn(async move { claim(&mut conn, 4).await });
    db.wait_for(
        "the claim to wait for the bucket's row",
        "select exists (select from pg_stat_activity
             where wait_event_type = 'Lock' and query like '%lq.rate_limits%')",
        Duration::from_secs(10),
    )
    .await;
    sqlx::query("update lq.rate_limits set tokens = 1.5 where queue = 'default'")
        .execute(&mut *holder)
        .await
        .unwrap();
    holder.commit().await.unwrap();
    let (got, next) = waiter.await.unwrap();
    assert_eq!(got.len(), 1, "one whole token was left");
    assert!(next.is_some());
    let left = bucket_tokens(&db).await;
    assert!((0.5..0.51).contains(&left), "{left} tokens left");
    assert_eq!(db.count("running").await, 2);
}
