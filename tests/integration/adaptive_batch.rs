//! A maintenance batch too slow for the server's statement bound shrinks until
//! it fits: the server cancels a statement at nine tenths of `db_timeout`, and a
//! cancelled batch commits nothing, so a batch that stayed at its full size would
//! fail the same way at every pass and a large backlog of old history on a slow
//! server would never be pruned.

use std::time::Duration;

use lq_runtime::{EnqueueOptions, Job, Runtime, RuntimeConfig};
use lq_tests::TestDb;

use crate::jobs::{quick, Noop};

const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_too_slow_for_the_bound_halves_its_batch_until_it_commits() {
    let db = TestDb::new().await;
    let jobs = (0..400).map(|n| Noop { n });
    let ids = Noop::enqueue_many(&db.pool, jobs, EnqueueOptions::new().queue("elsewhere"))
        .await
        .unwrap()
        .ids;
    for id in ids {
        db.finish(id, "succeeded", 7200.0).await;
    }
    // Each history row deleted costs the server 8 ms: a batch of all 400 rows
    // (3.2 s) outlasts the 1.8 s bound, one of 156 fits.
    sqlx::raw_sql(
        "create function lq.slow_delete() returns trigger language plpgsql as
             $$ begin perform pg_sleep(0.008); return old; end $$;
         create trigger slow_delete before delete on lq.finished_jobs
             for each row execute function lq.slow_delete();",
    )
    .execute(&db.pool)
    .await
    .unwrap();

    let rt = Runtime::builder(db.pool.clone())
        .config(RuntimeConfig {
            db_timeout: Duration::from_secs(2),
            prune_interval: Duration::from_millis(200),
            keep_finished: Duration::from_secs(3600),
            keep_dead: Duration::from_secs(3600),
            ..quick()
        })
        .queue("default", 1)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the old history to be pruned",
        "select not exists (select from lq.finished_jobs)",
        LIMIT,
    )
    .await;
    rt.shutdown().await.unwrap();
}
