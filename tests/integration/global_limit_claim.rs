//! The global limit's claim itself (`db::claim::job_claim_limited` with a
//! global limit): it waits for the queue's limit lock, then counts the
//! queue's running jobs in the claim's own statement, whose snapshot holds what
//! the previous holder of the lock committed.

use std::time::Duration;

use lq_core::{
    db::{
        self,
        claim::{ClaimSpec, Limited, GLOBAL_LIMIT_LOCK_KEY},
    },
    QueueLimits, RateLimit,
};
use lq_runtime::{EnqueueOptions, Job};
use lq_tests::TestDb;
use sqlx::PgConnection;

use crate::jobs::Noop;

const KINDS: [&str; 1] = ["test.noop"];

/// Claims up to `limit` noop jobs of the default queue under `limits` for
/// `owner`, as the runtime does (a 10 s bound); for this file and
/// `rate_limit_claim.rs`.
pub(crate) async fn claim_under(
    conn: &mut PgConnection,
    limits: QueueLimits,
    limit: usize,
    owner: &str,
) -> Limited {
    let kinds = KINDS.map(str::to_owned);
    let tokens = db::claim::mint_lease_tokens(limit).unwrap();
    let spec = ClaimSpec {
        queue: "default",
        kinds: &kinds,
        lease_secs: &[30.0],
        limit: i64::try_from(limit).unwrap(),
        owner,
        tokens: &tokens,
    };
    db::claim::job_claim_limited(
        conn,
        spec,
        limits,
        Duration::from_secs(10),
        std::future::pending(),
    )
    .await
    .unwrap()
}

/// [`claim_under`]: the claimed ids, and whether the global limit stopped it.
async fn claim(
    conn: &mut PgConnection,
    limits: QueueLimits,
    limit: usize,
    owner: &str,
) -> (Vec<i64>, bool) {
    match claim_under(conn, limits, limit, owner).await {
        Limited::Claimed { jobs, at_limit, .. } => {
            (jobs.into_iter().map(|j| j.id).collect(), at_limit)
        }
        other => panic!("{other:?}"),
    }
}

async fn enqueue(db: &TestDb, n: u64) {
    Noop::enqueue_many(&db.pool, (0..n).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap();
}

/// A transaction holding the default queue's limit lock, as a limited claim
/// in flight elsewhere does, until the caller ends it; for this file and
/// `rate_limit_claim.rs`.
pub(crate) async fn hold_limit_lock(db: &TestDb) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("select pg_advisory_xact_lock($1, hashtext('default'))")
        .bind(GLOBAL_LIMIT_LOCK_KEY)
        .execute(&mut *holder)
        .await
        .unwrap();
    holder
}

/// Holds the queue's limit lock in a transaction that claims `n` jobs of its
/// own, as another runtime's limited claim does, until the caller commits it;
/// then starts `limits`' claim of up to ten jobs, and returns once that claim
/// waits for the lock.
async fn claim_behind_a_holder(
    db: &TestDb,
    limits: QueueLimits,
    n: i64,
) -> (
    sqlx::Transaction<'static, sqlx::Postgres>,
    tokio::task::JoinHandle<(Vec<i64>, bool)>,
) {
    let mut holder = hold_limit_lock(db).await;
    let kinds = KINDS.map(str::to_owned);
    let held = db::claim::job_claim(&mut holder, "default", &kinds, &[30.0], n, "holder")
        .await
        .unwrap();
    assert_eq!(held.len() as i64, n);
    let mut conn = db.pool.acquire().await.unwrap();
    let waiter = tokio::spawn(async move { claim(&mut conn, limits, 10, "waiter").await });
    db.wait_for(
        "the claim to wait for the limit lock",
        &format!(
            "select exists (select from pg_locks
                 where locktype = 'advisory' and not granted and classid::bigint = {}
                   and database = (select oid from pg_database where datname = current_database()))",
            GLOBAL_LIMIT_LOCK_KEY
        ),
        Duration::from_secs(10),
    )
    .await;
    (holder, waiter)
}

/// A claim that waited for the lock counts the jobs its holder claimed and
/// committed meanwhile: with three of them running, a limit of five leaves
/// room for two, and the claim says the limit stopped it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_waited_for_the_limit_lock_counts_what_the_holder_claimed() {
    let db = TestDb::new().await;
    enqueue(&db, 10).await;
    let limits = QueueLimits {
        global: Some(5),
        rate: None,
    };
    let (holder, waiter) = claim_behind_a_holder(&db, limits, 3).await;
    holder.commit().await.unwrap();
    let (got, at_limit) = waiter.await.unwrap();
    assert_eq!(got.len(), 2, "five allowed, three running");
    assert!(at_limit);
    assert_eq!(db.count("running").await, 5);
}

/// With a rate limit too, the one statement counts the room, claims within
/// both limits and spends a token for each job it took, no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_both_limits_a_claim_takes_the_smaller_room_and_spends_only_its_jobs() {
    let db = TestDb::new().await;
    enqueue(&db, 10).await;
    let limits = QueueLimits {
        global: Some(5),
        rate: Some(RateLimit::per_hour(10)),
    };
    let mut conn = db.pool.acquire().await.unwrap();
    // The first claim creates the bucket, full, and spends one of its ten.
    let (first, at_limit) = claim(&mut conn, limits, 1, "first").await;
    assert_eq!((first.len(), at_limit), (1, false));
    let (holder, waiter) = claim_behind_a_holder(&db, limits, 3).await;
    holder.commit().await.unwrap();
    let (got, at_limit) = waiter.await.unwrap();
    assert_eq!(got.len(), 1, "five allowed, four running, nine tokens");
    assert!(at_limit);
    let tokens: f64 =
        sqlx::query_scalar("select tokens from lq.rate_limits where queue = 'default'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!((8.0..8.01).contains(&tokens), "{tokens} tokens left");
}

/// A queue with fewer ready jobs than the room is dry, not at its limit.
#[tokio::test]
async fn a_claim_that_empties_the_queue_below_the_limit_is_not_at_it() {
    let db = TestDb::new().await;
    enqueue(&db, 2).await;
    let limits = QueueLimits {
        global: Some(5),
        rate: None,
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let (got, at_limit) = claim(&mut conn, limits, 10, "claimer").await;
    assert_eq!(got.len(), 2);
    assert!(!at_limit);
}

/// A claim under a global limit alone spends no tokens, even from a bucket a
/// rate limit once set on the queue left behind.
#[tokio::test]
async fn a_claim_under_a_global_limit_alone_leaves_a_bucket_untouched() {
    let db = TestDb::new().await;
    enqueue(&db, 4).await;
    sqlx::query(
        "insert into lq.rate_limits (queue, tokens, allowed, period_secs, updated_at)
         values ('default', 3, 10, 3600, now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let limits = QueueLimits {
        global: Some(5),
        rate: None,
    };
    let mut conn = db.pool.acquire().await.unwrap();
    assert_eq!(claim(&mut conn, limits, 10, "claimer").await.0.len(), 4);
    let tokens: f64 =
        sqlx::query_scalar("select tokens from lq.rate_limits where queue = 'default'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(tokens, 3.0);
}
