//! The bound on claims in flight per queue (`RuntimeConfig::claim_slots`): a claim
//! beyond it claims nothing, says so, and claims once a slot frees, in turn.

use std::time::Duration;

use lq_core::db::{
    self,
    claim::{ClaimSpec, GatedClaim, Turn, CLAIM_SLOT_LOCK_KEY},
};
use lq_runtime::{EnqueueOptions, Job, RuntimeConfig};
use lq_tests::TestDb;

use crate::jobs::{quick, start_runtime, Ledger, Noop};

const LIMIT: Duration = Duration::from_secs(60);

/// A query true once a session waits for one of litequeue's claim slots.
fn waits_for_a_claim_slot() -> String {
    format!(
        "select exists (select from pg_locks
             where locktype = 'advisory' and not granted
               and database = (select oid from pg_database where datname = current_database())
               and classid::bigint between {CLAIM_SLOT_LOCK_KEY} and {CLAIM_SLOT_LOCK_KEY} + 63)"
    )
}

/// A claim of up to `limit` jobs of `kinds` from `queue` for `owner`, 30 s leases.
pub(crate) fn spec<'a>(
    queue: &'a str,
    kinds: &'a [String],
    limit: i64,
    owner: &'a str,
) -> ClaimSpec<'a> {
    let tokens = db::claim::mint_lease_tokens(usize::try_from(limit).unwrap()).unwrap();
    ClaimSpec {
        queue,
        kinds,
        lease_secs: &[30.0],
        limit,
        owner,
        // A few per test, kept for the test's life.
        tokens: Vec::leak(tokens),
    }
}

/// [`db::claim::job_claim_in_turn`] of up to `limit` jobs of `kinds` from
/// `default` for `owner` on claim slot `slot`: waits up to [`LIMIT`], never
/// given up.
pub(crate) async fn claim_in_turn(
    conn: &mut sqlx::PgConnection,
    kinds: &[String],
    limit: i64,
    owner: &str,
    slot: u32,
    in_room: bool,
) -> Result<Turn, lq_core::Error> {
    let spec = spec("default", kinds, limit, owner);
    db::claim::job_claim_in_turn(conn, spec, slot, in_room, LIMIT, never()).await
}

/// A `give_up` that never fires.
pub(crate) fn never() -> std::future::Pending<()> {
    std::future::pending()
}

/// Takes claim slots `0..slots` of `queue` in a transaction of its own, as claims
/// in flight elsewhere would; they are held until the transaction ends.
pub(crate) async fn hold_slots(
    db: &TestDb,
    queue: &str,
    slots: i32,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query(
        "select pg_advisory_xact_lock($1 + slot, hashtext($2)) from generate_series(0, $3 - 1) slot",
    )
    .bind(CLAIM_SLOT_LOCK_KEY)
    .bind(queue)
    .bind(slots)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_beyond_the_queues_slots_claims_nothing_then_claims_in_turn() {
    let db = TestDb::new().await;
    let ids = Noop::enqueue_many(&db.pool, (0..3).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    let kinds = vec!["test.noop".to_owned()];
    let holder = hold_slots(&db, "default", 2).await;

    let mut conn = db.pool.acquire().await.unwrap();
    let gated = db::claim::job_claim_gated(&mut conn, spec("default", &kinds, 10, "a"), 2)
        .await
        .unwrap();
    assert!(matches!(gated, GatedClaim::Throttled), "{gated:?}");
    assert_eq!(
        db.count("queued").await,
        3,
        "a throttled claim takes nothing"
    );
    // The slots are the queue's own: another queue claims (and finds it empty).
    let other = db::claim::job_claim_gated(&mut conn, spec("other", &kinds, 10, "a"), 2)
        .await
        .unwrap();
    assert!(
        matches!(other, GatedClaim::Claimed(ref jobs) if jobs.is_empty()),
        "{other:?}"
    );
    // A third slot is free: a claim allowed three goes through.
    let three = db::claim::job_claim_gated(&mut conn, spec("default", &kinds, 1, "a"), 3)
        .await
        .unwrap();
    let GatedClaim::Claimed(first) = three else {
        panic!("{three:?}")
    };
    assert_eq!(first.len(), 1);

    // In turn: waits for slot 1 while the holder keeps it, then claims the rest.
    let pool = db.pool.clone();
    let in_turn = tokio::spawn(async move {
        let mut conn = pool.acquire().await.unwrap();
        claim_in_turn(&mut conn, &kinds, 10, "b", 1, true).await
    });
    db.wait_for(
        "the claim to wait for its slot",
        &waits_for_a_claim_slot(),
        LIMIT,
    )
    .await;
    assert_eq!(
        db.count("queued").await,
        2,
        "nothing is claimed while it waits"
    );
    holder.commit().await.unwrap();
    let Turn::Claimed(rest) = in_turn.await.unwrap().unwrap() else {
        panic!("claimed once its turn came")
    };
    let mut claimed: Vec<i64> = first.iter().chain(&rest).map(|j| j.id).collect();
    claimed.sort_unstable();
    assert_eq!(claimed, ids);
    assert!(rest.iter().all(|j| j.attempts == 1));
    assert_eq!(db.count("running").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_whose_queue_slots_are_taken_waits_then_runs_every_job() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let holder = hold_slots(&db, "default", 1).await;
    let ids = enqueue_twenty(&db).await;
    let config = RuntimeConfig {
        claim_slots: Some(1),
        ..quick()
    };
    let rt = start_runtime(&db, "default", 4, config, &ledger).await;
    db.wait_for(
        "the runtime's claim to wait for the slot",
        &waits_for_a_claim_slot(),
        LIMIT,
    )
    .await;
    assert_eq!(
        db.count("queued").await,
        20,
        "no job is claimed past the bound"
    );
    assert!(rt.stats().throttled_claims >= 1);
    holder.commit().await.unwrap();
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let counts = ledger.counts();
    assert!(
        ids.iter().all(|id| counts.get(id) == Some(&1)),
        "{counts:?}"
    );
    assert_eq!(db.count("succeeded").await, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_bound_a_runtime_claims_past_held_slots() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let _holder = hold_slots(&db, "default", 2).await;
    enqueue_twenty(&db).await;
    let config = RuntimeConfig {
        claim_slots: None,
        ..quick()
    };
    let rt = start_runtime(&db, "default", 4, config, &ledger).await;
    runs_all_twenty_unthrottled(&db, rt).await;
}

/// Twenty no-op jobs on the default queue.
async fn enqueue_twenty(db: &TestDb) -> Vec<i64> {
    Noop::enqueue_many(&db.pool, (0..20).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids
}

/// `rt` runs the twenty jobs of [`enqueue_twenty`] without waiting for a slot.
async fn runs_all_twenty_unthrottled(db: &TestDb, rt: lq_runtime::Runtime) {
    db.wait_idle(LIMIT).await;
    assert_eq!(rt.stats().throttled_claims, 0);
    rt.shutdown().await.unwrap();
    assert_eq!(db.count("succeeded").await, 20);
}

#[tokio::test]
async fn a_gated_claim_takes_one_free_slot_and_only_while_it_runs() {
    let db = TestDb::new().await;
    Noop { n: 1 }.enqueue(&db.pool).await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    let mut tx = db.pool.begin().await.unwrap();
    let gated = db::claim::job_claim_gated(&mut tx, spec("default", &kinds, 10, "a"), 4)
        .await
        .unwrap();
    assert!(
        matches!(gated, GatedClaim::Claimed(ref jobs) if jobs.len() == 1),
        "{gated:?}"
    );
    let held: i64 = sqlx::query_scalar(
        "select count(*) from pg_locks where pid = pg_backend_pid() and locktype = 'advisory'",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(held, 1, "one slot of the four");
    tx.commit().await.unwrap();
    let after: i64 = sqlx::query_scalar(
        "select count(*) from pg_locks where locktype = 'advisory'
           and database = (select oid from pg_database where datname = current_database())",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(after, 0, "the slot goes with the commit");
}

#[tokio::test]
async fn a_job_numbered_zero_is_claimed_like_any_other() {
    // The gate's "all slots taken" row is told apart by its nil lease token, not
    // its id: an operator may insert a job with any id.
    let db = TestDb::new().await;
    sqlx::query(
        "insert into lq.jobs (id, kind, queue, payload, max_attempts)
         overriding system value values (0, 'test.noop', 'default', '{\"n\": 0}', 3)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    let gated = db::claim::job_claim_gated(&mut conn, spec("default", &kinds, 10, "a"), 2)
        .await
        .unwrap();
    let GatedClaim::Claimed(jobs) = gated else {
        panic!("{gated:?}")
    };
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [0]);
    assert_eq!(db.count("running").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_does_not_come_within_its_bound_claims_nothing_and_keeps_the_connection() {
    let db = TestDb::new().await;
    Noop { n: 1 }.enqueue(&db.pool).await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    let holder = hold_slots(&db, "default", 1).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let settings = "select current_setting('lock_timeout')";
    let lock_timeout_before: String = sqlx::query_scalar(settings)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let waited = db::claim::job_claim_in_turn(
        &mut conn,
        spec("default", &kinds, 10, "a"),
        0,
        true,
        Duration::from_millis(500),
        never(),
    )
    .await
    .unwrap();
    assert!(matches!(waited, Turn::TimedOut), "{waited:?}");
    assert_eq!(db.count("queued").await, 1);
    // The transaction's settings are gone with it.
    let lock_timeout: String = sqlx::query_scalar(settings)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(lock_timeout, lock_timeout_before);
    holder.commit().await.unwrap();
    let claimed = claim_in_turn(&mut conn, &kinds, 10, "a", 0, true)
        .await
        .unwrap();
    let Turn::Claimed(claimed) = claimed else {
        panic!("the slot is free: {claimed:?}")
    };
    assert_eq!(claimed.len(), 1);
    // Committed, seen from another session: the first try left no transaction
    // open on the connection (the second would have nested in it).
    assert_eq!(db.count("running").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_with_more_queues_than_claim_connections_claims_without_the_bound() {
    // Its claimers share 16 connections: one waiting its turn would hold a
    // connection the other queues' claims need, so none waits.
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let _holder = hold_slots(&db, "default", 2).await;
    enqueue_twenty(&db).await;
    let mut builder = lq_runtime::Runtime::builder(db.pool.clone())
        .config(quick())
        .queue("default", 4)
        .state(ledger.clone());
    for q in 0..16 {
        builder = builder.queue(format!("other_{q}"), 1);
    }
    let rt = builder.start().await.unwrap();
    runs_all_twenty_unthrottled(&db, rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_given_up_while_it_waits_its_turn_claims_nothing() {
    // A shutdown cuts the wait short; the cut-off connection is closed, and the
    // server rolls its transaction back.
    let db = TestDb::new().await;
    Noop { n: 1 }.enqueue(&db.pool).await.unwrap();
    let holder = hold_slots(&db, "default", 1).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let pool = db.pool.clone();
    let in_turn = tokio::spawn(async move {
        let mut conn = pool.acquire().await.unwrap();
        let kinds = vec!["test.noop".to_owned()];
        let give_up = async {
            let _ = stopped.await;
        };
        let turn = db::claim::job_claim_in_turn(
            &mut conn,
            spec("default", &kinds, 10, "a"),
            0,
            true,
            LIMIT,
            give_up,
        )
        .await;
        drop(conn.detach());
        turn
    });
    db.wait_for(
        "the claim to wait for its slot",
        &waits_for_a_claim_slot(),
        LIMIT,
    )
    .await;
    stop.send(()).unwrap();
    let turn = in_turn.await.unwrap().unwrap();
    assert!(matches!(turn, Turn::GaveUp), "{turn:?}");
    holder.commit().await.unwrap();
    assert_eq!(db.count("queued").await, 1);
    assert_eq!(db.count("running").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_turn_starts_its_jobs_and_their_leases_when_it_claims_not_when_it_began_to_wait()
{
    // The in-turn claim's transaction begins before its wait: were the attempt
    // timed from the transaction's start, a wait longer than the lease would hand
    // the rescuer jobs a healthy worker had only just claimed.
    let db = TestDb::new().await;
    Noop { n: 1 }.enqueue(&db.pool).await.unwrap();
    let mut holder = hold_slots(&db, "default", 1).await;
    let pool = db.pool.clone();
    let in_turn = tokio::spawn(async move {
        let mut conn = pool.acquire().await.unwrap();
        let kinds = vec!["test.noop".to_owned()];
        claim_in_turn(&mut conn, &kinds, 10, "a", 0, true).await
    });
    db.wait_for(
        "the claim to wait for its slot",
        &waits_for_a_claim_slot(),
        LIMIT,
    )
    .await;
    // Read on the server while the claim waits, so its transaction began before.
    let released_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("select clock_timestamp()")
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    holder.commit().await.unwrap();
    let Turn::Claimed(jobs) = in_turn.await.unwrap().unwrap() else {
        panic!("claimed once its turn came")
    };
    assert_eq!(jobs.len(), 1);
    assert!(
        jobs[0].started_at >= released_at,
        "started {} before its turn came at {released_at}",
        jobs[0].started_at
    );
    let whole_lease_from_turn: bool = sqlx::query_scalar(
        "select lease_expires_at >= $1 + interval '30 seconds' from lq.jobs where id = $2",
    )
    .bind(released_at)
    .bind(jobs[0].id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(whole_lease_from_turn, "the 30 s lease runs from the claim");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_claim_on_a_borrowed_connection_takes_a_slot_or_claims_nothing() {
    // With more than two queues, a queue's second claim in flight borrows a
    // connection. It may not wait its turn there, but it may not pass the bound
    // either: with one slot, the queue's two claims in flight contend for it,
    // and whichever finds it taken is throttled (a second claim claims
    // nothing, a first waits its turn). Claims past the bound would never be
    // throttled here: one runtime's first claims never meet each other.
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let ids = Noop::enqueue_many(
        &db.pool,
        (0..3000).map(|n| Noop { n }),
        EnqueueOptions::new(),
    )
    .await
    .unwrap()
    .ids;
    let config = RuntimeConfig {
        claim_slots: Some(1),
        max_claim_batch: 20,
        ..quick()
    };
    let rt = lq_runtime::Runtime::builder(db.pool.clone())
        .config(config)
        .queue("default", 2)
        .queue("other_a", 1)
        .queue("other_b", 1)
        .state(ledger.clone())
        .start()
        .await
        .unwrap();
    db.wait_idle(LIMIT).await;
    let stats = rt.shutdown_with_stats().await.unwrap();
    let counts = ledger.counts();
    assert!(
        ids.iter().all(|id| counts.get(id) == Some(&1)),
        "every job ran once"
    );
    assert!(
        stats.overlapping_claims > 0,
        "the drain sent second claims: {stats:?}"
    );
    assert!(
        stats.throttled_claims > 0,
        "the two claims in flight took turns at the one slot: {stats:?}"
    );
}
