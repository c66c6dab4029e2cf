//! Run now: an operator makes a queued job due at once (scheduled for later,
//! snoozed, or waiting out a retry's backoff), one by one or by filter.

use std::time::Duration;

use lq_runtime::{
    control, CoreError as Error, EnqueueOptions, Job, JobContext, JobError, JobFilter, JobState,
    Perform, RuntimeConfig,
};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

use crate::jobs::{start_runtime, Ledger, Noop, Patient};

const LIMIT: Duration = Duration::from_secs(30);

/// Fails its first attempt and would wait an hour for its second.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.backs_off", max_attempts = 5, backoff = fixed("1h"))]
pub struct BacksOff;

impl Perform for BacksOff {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>().record(ctx.id());
        if ctx.attempt() == 1 {
            return Err("the provider is down".into());
        }
        Ok(())
    }
}

/// A runtime that polls once a minute: a job made due starts within seconds
/// only if run now's wake-up NOTIFY reached it.
fn polling_rarely() -> RuntimeConfig {
    RuntimeConfig {
        poll_interval: Duration::from_secs(60),
        ..RuntimeConfig::default()
    }
}

#[tokio::test]
async fn a_job_waiting_out_its_backoff_runs_now_with_its_attempts_and_error_kept() {
    let db = TestDb::new().await;
    let ledger = Ledger::default();
    let rt = start_runtime(&db, "default", 2, polling_rarely(), &ledger).await;
    let id = BacksOff.enqueue(&db.pool).await.unwrap().id;
    db.wait_for(
        "the first attempt to fail and be put off an hour",
        &format!(
            "select state = 'queued' and attempts = 1 and run_at > now() + interval '50 minutes'
             from lq.jobs where id = {id}"
        ),
        LIMIT,
    )
    .await;

    control::run_now(&db.pool, id).await.unwrap();
    // Well before the next poll, or the listener's refresh after 30 s of
    // silence: the wake-up NOTIFY started it.
    db.wait_for(
        "the job to succeed",
        &format!("select state = 'succeeded' from lq.all_jobs where id = {id}"),
        Duration::from_secs(15),
    )
    .await;
    let row = control::get(&db.pool, id).await.unwrap();
    assert_eq!(row.attempts, 2, "the second attempt, not a fresh first");
    let errors: Vec<_> = row
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(errors, [(1, "the provider is down")]);
    assert_eq!(ledger.counts()[&id], 2);
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn run_now_makes_a_scheduled_job_due_leaves_a_due_one_and_refuses_the_others() {
    let db = TestDb::new().await;
    let later = EnqueueOptions::new().delay(Duration::from_secs(3600));
    let scheduled = Noop { n: 1 }
        .enqueue_with(&db.pool, later)
        .await
        .unwrap()
        .id;
    assert!(!db.is_due(scheduled).await);
    control::run_now(&db.pool, scheduled).await.unwrap();
    assert!(db.is_due(scheduled).await);
    let row = control::get(&db.pool, scheduled).await.unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Queued, 0));

    // Already due: left as it was, and not an error (a second click).
    let before = control::get(&db.pool, scheduled).await.unwrap().run_at;
    control::run_now(&db.pool, scheduled).await.unwrap();
    assert_eq!(
        control::get(&db.pool, scheduled).await.unwrap().run_at,
        before
    );

    let dead = Noop { n: 2 }.enqueue(&db.pool).await.unwrap().id;
    db.finish(dead, "dead", 1.0).await;
    let e = control::run_now(&db.pool, dead).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::WrongState {
                state: JobState::Dead,
                action: "run now",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        format!("job {dead} is dead, so it cannot be run now")
    );
    assert!(matches!(
        control::run_now(&db.pool, 999_999).await.unwrap_err(),
        Error::NotFound { id: 999_999 }
    ));

    let ledger = Ledger::default();
    let patient = Patient.enqueue(&db.pool).await.unwrap().id;
    let rt = start_runtime(&db, "default", 2, crate::jobs::quick(), &ledger).await;
    db.wait_for(
        "the patient job to run",
        &format!("select state = 'running' from lq.jobs where id = {patient}"),
        LIMIT,
    )
    .await;
    let e = control::run_now(&db.pool, patient).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::WrongState {
                state: JobState::Running,
                ..
            }
        ),
        "{e}"
    );
    control::cancel(&db.pool, patient).await.unwrap();
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn run_now_matching_makes_every_queued_match_due_and_names_each_refusal() {
    let db = TestDb::new().await;
    let later = || {
        EnqueueOptions::new()
            .delay(Duration::from_secs(3600))
            .queue("later")
    };
    let mut scheduled = Vec::new();
    for n in 0..3 {
        scheduled.push(Noop { n }.enqueue_with(&db.pool, later()).await.unwrap().id);
    }
    let dead = Noop { n: 9 }
        .enqueue_with(&db.pool, later())
        .await
        .unwrap()
        .id;
    db.finish(dead, "dead", 1.0).await;
    let elsewhere = (Noop { n: 10 })
        .enqueue_with(
            &db.pool,
            EnqueueOptions::new().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .id;

    let queued_later = JobFilter::new().state(JobState::Queued).queue("later");
    let report = control::run_now_matching(&db.pool, &queued_later, None)
        .await
        .unwrap();
    assert_eq!(report.matched, 3);
    assert_eq!(report.done, scheduled);
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    let due: Vec<(i64, bool)> =
        sqlx::query_as("select id, run_at <= now() from lq.jobs order by id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let expected: Vec<(i64, bool)> = (scheduled.iter().map(|&id| (id, true)))
        .chain([(elsewhere, false)])
        .collect();
    assert_eq!(due, expected, "only the filter's jobs moved");

    // Without a state in the filter, the dead job is looked at and refused.
    let report = control::run_now_matching(&db.pool, &JobFilter::new().queue("later"), None)
        .await
        .unwrap();
    assert_eq!((report.matched, report.done.len()), (4, 3));
    match report.refused.as_slice() {
        [(id, Error::WrongState { state, .. })] => {
            assert_eq!((*id, *state), (dead, JobState::Dead));
        }
        other => panic!("{other:?}"),
    }
}
