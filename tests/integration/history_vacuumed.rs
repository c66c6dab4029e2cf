//! With autovacuum off, the runtime vacuums the history after many inserts: it
//! is only inserted into between prunes, so no dead rows ever call for it, and
//! until a vacuum marks its pages all-visible the prune's index-only scan of its
//! key reads the table for every entry (`bench/FINDINGS.md`, stops 76 and 77).

use std::time::Duration;

use lq_runtime::Runtime;
use lq_tests::TestDb;

use crate::jobs::quick;

/// Finished jobs written straight into the history: past the vacuumer's
/// bound on rows inserted since the last vacuum (100,000).
const INSERTED: i64 = 150_000;

#[tokio::test]
async fn with_autovacuum_off_the_history_is_vacuumed_after_many_inserts() {
    let db = TestDb::new().await;
    db.fill_history("test.history", INSERTED, 0).await;
    let rt = Runtime::builder(db.pool.clone())
        .config(quick())
        .queue("history_vacuumed", 1)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the history's pages marked all-visible",
        "select relallvisible > 0 from pg_class where oid = 'lq.finished_jobs'::regclass",
        Duration::from_secs(60),
    )
    .await;
    rt.shutdown().await.unwrap();
}
