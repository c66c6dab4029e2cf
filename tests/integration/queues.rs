//! Queue control: a paused queue is claimed by no runtime, across restarts, until
//! it is resumed; the overview counts each queue's live jobs.

use std::time::Duration;

use lq_core::db;
use lq_runtime::{control, CoreError, EnqueueOptions, Job};
use lq_tests::TestDb;

use crate::jobs::{quick, start_runtime, Ledger, Noop};

const LIMIT: Duration = Duration::from_secs(30);

/// Index scans of `lq.queues` so far, as the statistics system reports them
/// (every claim probes it once).
async fn queue_probes(db: &TestDb) -> i64 {
    sqlx::query_scalar(
        "select coalesce(sum(idx_scan), 0)::int8 from pg_stat_user_indexes
         where schemaname = 'lq' and relname = 'queues'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Waits until claims have probed `lq.queues` at least `n` more times than `from`.
async fn wait_for_claims(db: &TestDb, from: i64, n: i64) {
    let start = std::time::Instant::now();
    loop {
        let _ = sqlx::query("select pg_stat_clear_snapshot()")
            .execute(&db.pool)
            .await;
        if queue_probes(db).await >= from + n {
            return;
        }
        assert!(start.elapsed() < LIMIT, "no claim probed lq.queues");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_paused_queue_is_not_claimed_until_resumed_even_by_a_runtime_started_later() {
    let db = TestDb::new().await;
    let on_q = || EnqueueOptions::new().queue("paused-q");
    assert!(
        control::pause_queue(&db.pool, "paused-q", "test: maintenance")
            .await
            .unwrap()
    );
    assert!(!control::pause_queue(&db.pool, "paused-q", "again")
        .await
        .unwrap());
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(Noop { n }.enqueue_with(&db.pool, on_q()).await.unwrap().id);
    }

    // The claim statement itself takes nothing from a paused queue.
    let mut conn = db.pool.acquire().await.unwrap();
    let kinds = vec![Noop::KIND.to_owned()];
    let claimed = db::claim::job_claim(&mut conn, "paused-q", &kinds, &[30.0], 10, "t")
        .await
        .unwrap();
    assert!(claimed.is_empty(), "{claimed:?}");
    drop(conn);

    // A runtime started while the queue is paused claims nothing from it, poll
    // after poll (and NOTIFY after NOTIFY).
    let ledger = Ledger::default();
    let before = queue_probes(&db).await;
    let rt = start_runtime(&db, "paused-q", 4, quick(), &ledger).await;
    Noop { n: 5 }.enqueue_with(&db.pool, on_q()).await.unwrap();
    wait_for_claims(&db, before, 5).await;
    assert!(ledger.counts().is_empty(), "{:?}", ledger.counts());
    assert_eq!(db.count("queued").await, 6);
    let info = control::queues(&db.pool).await.unwrap();
    let q = info.iter().find(|q| q.name == "paused-q").unwrap();
    let paused = q.paused.as_ref().expect("paused");
    assert_eq!(paused.by, "test: maintenance");
    assert_eq!((q.available, q.running), (6, 0));
    assert!(q.oldest_available_wait.is_some());

    // Resumed: the runtime is woken and runs everything.
    assert!(control::resume_queue(&db.pool, "paused-q").await.unwrap());
    assert!(!control::resume_queue(&db.pool, "paused-q").await.unwrap());
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    let counts = ledger.counts();
    assert_eq!(counts.len(), 6);
    assert!(ids.iter().all(|id| counts[id] == 1));
    let info = control::queues(&db.pool).await.unwrap();
    let q = info.iter().find(|q| q.name == "paused-q").unwrap();
    assert!(q.paused.is_none());
    assert_eq!((q.available, q.scheduled, q.running), (0, 0, 0));
    assert_eq!(q.oldest_available_wait, None);
}

#[tokio::test]
async fn pausing_one_queue_leaves_the_others_running() {
    let db = TestDb::new().await;
    control::pause_queue(&db.pool, "default", "test")
        .await
        .unwrap();
    let held = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let other = Noop { n: 2 }
        .enqueue_with(&db.pool, EnqueueOptions::new().queue("other"))
        .await
        .unwrap()
        .id;
    let ledger = Ledger::default();
    let rt = lq_runtime::Runtime::builder(db.pool.clone())
        .config(quick())
        .queue("default", 2)
        .queue("other", 2)
        .state(ledger.clone())
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the other queue's job",
        &format!("select exists (select from lq.finished_jobs where id = {other})"),
        LIMIT,
    )
    .await;
    let before = queue_probes(&db).await;
    wait_for_claims(&db, before, 3).await;
    assert!(!ledger.counts().contains_key(&held));
    control::resume_queue(&db.pool, "default").await.unwrap();
    db.wait_idle(LIMIT).await;
    rt.shutdown().await.unwrap();
    assert_eq!(ledger.counts()[&held], 1);
}

#[tokio::test]
async fn queue_control_refuses_bad_names_and_stores_any_note() {
    let db = TestDb::new().await;
    for bad in ["", "has space", &"q".repeat(200)] {
        let e = control::pause_queue(&db.pool, bad, "x").await.unwrap_err();
        assert!(matches!(e, CoreError::InvalidName { .. }), "{bad:?}: {e}");
        let e = control::resume_queue(&db.pool, bad).await.unwrap_err();
        assert!(matches!(e, CoreError::InvalidName { .. }), "{bad:?}: {e}");
    }
    let note = format!("nul\0 and {}", "x".repeat(1000));
    assert!(control::pause_queue(&db.pool, "noted", &note)
        .await
        .unwrap());
    let info = control::queues(&db.pool).await.unwrap();
    let by = &info[0].paused.as_ref().unwrap().by;
    assert!(by.starts_with("nul\\0 and xxx"), "{by}");
    assert_eq!(by.len(), 200);
}

#[tokio::test]
async fn an_idle_queue_a_runtime_serves_is_listed_so_it_can_be_paused_before_work_arrives() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    assert!(control::queues(&db.pool).await.unwrap().is_empty());
    let rt = start_runtime(&db, "idle-q", 2, quick(), &ledger).await;
    db.wait_for(
        "the runtime to register",
        "select exists (select from lq.runtimes)",
        LIMIT,
    )
    .await;
    let info = control::queues(&db.pool).await.unwrap();
    let names: Vec<&str> = info.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["idle-q"]);
    assert_eq!(
        (info[0].available, info[0].scheduled, info[0].running),
        (0, 0, 0)
    );
    assert!(info[0].paused.is_none());
    rt.shutdown().await.unwrap();
    // Gone with the runtime that served it (no jobs, no pause record).
    assert!(control::queues(&db.pool).await.unwrap().is_empty());
}
