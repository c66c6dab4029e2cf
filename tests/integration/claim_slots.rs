//! The bound on claims in flight per queue (`RuntimeConfig::claim_slots`): a claim
//! beyond it claims nothing, says so, and claims once a slot frees, in turn.

use std::time::Duration;

use lq_core::db::{
    self,
    claim::{GatedClaim, CLAIM_SLOT_LOCK_KEY},
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
               and classid::bigint between {CLAIM_SLOT_LOCK_KEY} and {CLAIM_SLOT_LOCK_KEY} + 15)"
    )
}

/// Takes claim slots `0..slots` of `queue` in a transaction of its own, as claims
/// in flight elsewhere would; they are held until the transaction ends.
async fn hold_slots(
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
    let gated = db::claim::job_claim_gated(&mut conn, "default", &kinds, &[30.0], 10, "a", 2)
        .await
        .unwrap();
    assert!(matches!(gated, GatedClaim::Throttled), "{gated:?}");
    assert_eq!(
        db.count("queued").await,
        3,
        "a throttled claim takes nothing"
    );
    // The slots are the queue's own: another queue claims (and finds it empty).
    let other = db::claim::job_claim_gated(&mut conn, "other", &kinds, &[30.0], 10, "a", 2)
        .await
        .unwrap();
    assert!(
        matches!(other, GatedClaim::Claimed(ref jobs) if jobs.is_empty()),
        "{other:?}"
    );
    // A third slot is free: a claim allowed three goes through.
    let three = db::claim::job_claim_gated(&mut conn, "default", &kinds, &[30.0], 1, "a", 3)
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
        db::claim::job_claim_in_turn(&mut conn, "default", &kinds, &[30.0], 10, "b", 1).await
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
    let rest = in_turn.await.unwrap().unwrap();
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
    let ids = Noop::enqueue_many(&db.pool, (0..20).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
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
    Noop::enqueue_many(&db.pool, (0..20).map(|n| Noop { n }), EnqueueOptions::new())
        .await
        .unwrap();
    let config = RuntimeConfig {
        claim_slots: None,
        ..quick()
    };
    let rt = start_runtime(&db, "default", 4, config, &ledger).await;
    db.wait_idle(LIMIT).await;
    assert_eq!(rt.stats().throttled_claims, 0);
    rt.shutdown().await.unwrap();
    assert_eq!(db.count("succeeded").await, 20);
}
