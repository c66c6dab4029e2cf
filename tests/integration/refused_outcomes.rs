//! Outcomes the database refuses to store (a value it cannot take, a
//! constraint or trigger of the operator's): the job still reaches an end
//! state, its slot is freed, and nothing else is held back.
//!
//! - A failure whose error text is refused is written with a short fixed reason.
//! - A failure refused even so is quarantined: `dead`, the refusal its only error.
//! - A success whose history row is refused leaves its batch, which lands; the
//!   refused job is quarantined.
//! - A rescue refused for one expired lease quarantines that job alone.
//!
//! Each quarantine counts in `quarantined`, not as a lost lease.

use std::time::Duration;

use lq_core::db;
use lq_runtime::{Job, JobState, RuntimeConfig};
use lq_tests::TestDb;

use crate::jobs::{error_texts, quick, start_runtime, stats_once, Flaky, Ledger, Noop};

const LIMIT: Duration = Duration::from_secs(60);

/// The refusals' SQLSTATEs: a value the server cannot store, a check constraint.
const UNTRANSLATABLE: &str = "22P05";
const CHECK_VIOLATION: &str = "23514";

#[tokio::test]
async fn a_failure_whose_error_text_is_refused_is_stored_with_a_fixed_reason() {
    let db = TestDb::new().await;
    db.refuse_rows(
        "lq.jobs",
        "update",
        "new.errors::text like '%flaky failure%'",
        UNTRANSLATABLE,
    )
    .await;
    let ledger = Ledger::default();
    let id = Flaky { fail_times: 1 }.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 2, quick(), &ledger).await;
    db.wait_idle(LIMIT).await;
    let stats = stats_once(&rt, "the success", |s| s.succeeded == 1).await;
    rt.shutdown().await.unwrap();

    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Succeeded, 2));
    assert_eq!(
        error_texts(&db, id).await,
        [format!(
            "error text not stored: the database refused it (SQLSTATE {UNTRANSLATABLE})"
        )],
        "the retry was written, with the fixed reason"
    );
    assert_eq!((stats.retried, stats.quarantined), (1, 0), "{stats:?}");
    assert_eq!(ledger.counts()[&id], 2);
}

#[tokio::test]
async fn a_failure_refused_even_with_a_fixed_reason_is_quarantined_and_frees_its_slot() {
    let db = TestDb::new().await;
    // Any new error entry is refused: the retry, then its fixed reason.
    db.refuse_rows(
        "lq.jobs",
        "update",
        "new.errors is distinct from old.errors",
        CHECK_VIOLATION,
    )
    .await;
    let ledger = Ledger::default();
    let id = Flaky { fail_times: 1 }.enqueue(&db.pool).await.unwrap().id;
    let next = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    // One slot: the job behind runs only once the quarantined one frees it.
    let rt = start_runtime(&db, "default", 1, quick(), &ledger).await;
    db.wait_idle(LIMIT).await;
    let stats = stats_once(&rt, "the quarantine", |s| s.quarantined == 1).await;
    rt.shutdown().await.unwrap();

    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Dead, 1));
    let errors = error_texts(&db, id).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("quarantined: its outcome was refused by the database (")
            && errors[0].contains("refused by the test"),
        "{errors:?}"
    );
    assert_eq!(ledger.counts()[&id], 1, "not run again");
    let behind = lq_runtime::control::get(&db.pool, next).await.unwrap();
    assert_eq!(behind.state, JobState::Succeeded);
    assert_eq!((stats.retried, stats.lease_lost), (0, 0), "{stats:?}");
}

#[tokio::test]
async fn a_success_whose_history_row_is_refused_is_quarantined_and_its_batch_lands() {
    let db = TestDb::new().await;
    let ids = Noop::enqueue_many(
        &db.pool,
        (0..40).map(|n| Noop { n }),
        lq_runtime::EnqueueOptions::new(),
    )
    .await
    .unwrap()
    .ids;
    let refused = ids[17];
    db.refuse_rows(
        "lq.finished_jobs",
        "insert",
        &format!("new.id = {refused} and new.state = 'succeeded'"),
        CHECK_VIOLATION,
    )
    .await;
    let ledger = Ledger::default();
    let rt = start_runtime(&db, "default", 8, quick(), &ledger).await;
    db.wait_idle(LIMIT).await;
    let stats = stats_once(&rt, "every outcome", |s| s.succeeded + s.quarantined == 40).await;
    rt.shutdown().await.unwrap();

    let states: Vec<(i64, String)> =
        sqlx::query_as("select id, state::text from lq.finished_jobs order by id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let expected: Vec<(i64, String)> = ids
        .iter()
        .map(|&id| {
            let state = if id == refused { "dead" } else { "succeeded" };
            (id, state.to_owned())
        })
        .collect();
    assert_eq!(states, expected);
    let errors = error_texts(&db, refused).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("quarantined: the handler succeeded but the success was refused ("),
        "{errors:?}"
    );
    assert!(
        ids.iter().all(|id| ledger.counts().get(id) == Some(&1)),
        "each ran once: {:?}",
        ledger.counts()
    );
    assert_eq!(
        (stats.succeeded, stats.quarantined, stats.lease_lost),
        (39, 1, 0),
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescue_refused_for_one_expired_lease_quarantines_that_job_alone() {
    let db = TestDb::new().await;
    let ids = Noop::enqueue_many(
        &db.pool,
        (0..3).map(|n| Noop { n }),
        lq_runtime::EnqueueOptions::new(),
    )
    .await
    .unwrap()
    .ids;
    // A worker that is gone claimed all three; their leases expire.
    let mut conn = db.pool.acquire().await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    let claimed = db::claim::job_claim(&mut conn, "default", &kinds, &[30.0], 3, "gone")
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    for &id in &ids {
        db.expire_lease(id).await;
    }
    let refused = ids[1];
    db.refuse_rows(
        "lq.jobs",
        "update",
        &format!("old.id = {refused} and old.state = 'running' and new.state = 'queued'"),
        CHECK_VIOLATION,
    )
    .await;
    let ledger = Ledger::default();
    let config = RuntimeConfig {
        rescue_interval: Duration::from_millis(50),
        ..quick()
    };
    let rt = start_runtime(&db, "default", 4, config, &ledger).await;
    db.wait_idle(LIMIT).await;
    // Outcomes are counted just after they commit: final counts after shutdown.
    let stats = rt.shutdown_with_stats().await.unwrap();

    for &id in &ids {
        let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
        if id == refused {
            assert_eq!((row.state, row.attempts), (JobState::Dead, 1));
            let errors = error_texts(&db, id).await;
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(
                errors[0]
                    .starts_with("quarantined: its lease expired and the rescue was refused ("),
                "{errors:?}"
            );
            assert_eq!(ledger.counts().get(&id), None, "not run again");
        } else {
            assert_eq!(
                (row.state, row.attempts),
                (JobState::Succeeded, 2),
                "job {id}"
            );
            assert_eq!(ledger.counts().get(&id), Some(&1), "job {id}");
        }
    }
    assert_eq!((stats.succeeded, stats.quarantined), (2, 1), "{stats:?}");
}
