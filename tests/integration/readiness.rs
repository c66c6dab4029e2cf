//! Readiness: queued jobs split into those due (`available`) and those not yet
//! due (`scheduled`: later, snoozed, or waiting out a retry's backoff), as
//! Oban's and River's operators see them, for listing, counting and bulk
//! actions.

use std::time::Duration;

use lq_runtime::{control, EnqueueOptions, Job, JobFilter, JobState};
use lq_tests::TestDb;

use crate::{bulk::cancel_while_the_first_is_claimed, jobs::Noop};

/// Enqueues `n` no-op jobs on queue `q`, due in `delay` (none: now).
async fn noops(db: &TestDb, n: u64, q: &str, delay: Option<Duration>) -> Vec<i64> {
    let mut opts = EnqueueOptions::new().queue(q);
    if let Some(d) = delay {
        opts = opts.delay(d);
    }
    Noop::enqueue_many(&db.pool, (0..n).map(|n| Noop { n }), opts)
        .await
        .unwrap()
        .ids
}

/// The ids `filter` lists, newest first.
async fn listed(db: &TestDb, filter: &JobFilter) -> Vec<i64> {
    let rows = control::list(&db.pool, filter, 100).await.unwrap();
    rows.iter().map(|r| r.id).collect()
}

#[tokio::test]
async fn available_and_scheduled_split_the_queued_jobs_by_their_time() {
    let db = TestDb::new().await;
    let due = noops(&db, 2, "q", None).await;
    let later = noops(&db, 1, "q", Some(Duration::from_secs(3600))).await;
    // Failed once and waiting out an hour's backoff.
    let backing_off = noops(&db, 1, "q", None).await;
    sqlx::query(
        "update lq.jobs set attempts = 1, run_at = now() + interval '1 hour',
             errors = '[{\"attempt\": 1, \"at\": \"2026-01-01T00:00:00Z\", \"error\": \"down\"}]'
         where id = $1",
    )
    .bind(backing_off[0])
    .execute(&db.pool)
    .await
    .unwrap();
    // Finished and running jobs are neither, whatever their run_at.
    let dead = noops(&db, 1, "q", None).await[0];
    db.finish(dead, "dead", 1.0).await;
    let running = noops(&db, 1, "q", None).await[0];
    sqlx::query(
        "update lq.jobs set state = 'running', lease_token = gen_random_uuid(),
             lease_owner = 'test', lease_expires_at = now() + interval '1 hour',
             attempts = 1, started_at = now(), run_at = now() + interval '1 hour'
         where id = $1",
    )
    .bind(running)
    .execute(&db.pool)
    .await
    .unwrap();

    let available = JobFilter::new().available();
    let scheduled = JobFilter::new().scheduled();
    assert_eq!(listed(&db, &available).await, [due[1], due[0]]);
    assert_eq!(listed(&db, &scheduled).await, [backing_off[0], later[0]]);
    // With states: they must hold too (and only queued jobs can).
    assert_eq!(
        listed(&db, &scheduled.clone().state(JobState::Queued)).await,
        [backing_off[0], later[0]]
    );
    for state in [JobState::Running, JobState::Dead] {
        assert!(listed(&db, &scheduled.clone().state(state))
            .await
            .is_empty());
    }
    // Across live and finished states, through the view of both tables.
    let both = scheduled
        .clone()
        .state(JobState::Queued)
        .state(JobState::Dead);
    assert_eq!(listed(&db, &both).await, [backing_off[0], later[0]]);

    let counts = control::count(&db.pool, &scheduled).await.unwrap();
    let counts: Vec<_> = counts.iter().map(|c| (c.state, c.count)).collect();
    assert_eq!(counts, [(JobState::Queued, 2)]);
    let tabs = control::count_by_state_capped(&db.pool, &available, 10)
        .await
        .unwrap();
    let tabs: Vec<_> = tabs.iter().map(|c| (c.state, c.count)).collect();
    assert_eq!(
        tabs,
        [
            (JobState::Queued, 2),
            (JobState::Running, 0),
            (JobState::Succeeded, 0),
            (JobState::Dead, 0),
            (JobState::Cancelled, 0)
        ]
    );

    // Made due, a scheduled job is available.
    control::run_now(&db.pool, later[0]).await.unwrap();
    assert_eq!(listed(&db, &scheduled).await, [backing_off[0]]);
    assert_eq!(listed(&db, &available).await, [later[0], due[1], due[0]]);
}

/// A bulk action on scheduled jobs acts on queued jobs only: one claimed
/// after the filter chose it is reported as having left the filter, not
/// flagged for cancelling while it runs; a due job is not scheduled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_scheduled_jobs_leaves_one_claimed_while_it_waited() {
    let db = TestDb::new().await;
    let ids = noops(&db, 2, "later-q", Some(Duration::from_secs(3600))).await;
    let due = noops(&db, 1, "later-q", None).await[0];
    let waiting = JobFilter::new().queue("later-q").scheduled();
    cancel_while_the_first_is_claimed(&db, &ids, waiting).await;
    assert_eq!(
        control::get(&db.pool, due).await.unwrap().state,
        JobState::Queued
    );
}
