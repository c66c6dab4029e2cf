//! Error text a job cannot store as given: NUL characters are made visible, a
//! megabyte is cut to the limit with a marker, the history keeps the newest
//! entries, and a huge history does not stop a rescue.

use super::*;

/// Fails with a NUL in its error, by `JobError::retry` and then by `.into()`.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.nul_error", queue = "hostile_nul", max_attempts = 2, backoff = fixed("10ms"))]
struct NulError;

impl Perform for NulError {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.attempt() == 1 {
            Err(JobError::retry("x\0y"))
        } else {
            Err("x\0y".into())
        }
    }
}

/// Panics with a NUL in its message.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.nul_panic", queue = "hostile_nul", max_attempts = 2, backoff = fixed("10ms"))]
struct NulPanic;

impl Perform for NulPanic {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        panic!("boom\0here");
    }
}

/// Succeeds at once.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.nul_fine", queue = "hostile_nul")]
struct NulFine;

impl Perform for NulFine {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn errors_and_panics_holding_nul_are_stored_with_the_nul_made_visible() {
    let db = TestDb::new().await;
    let failing = NulError.enqueue(&db.pool).await.unwrap().id;
    let panicking = NulPanic.enqueue(&db.pool).await.unwrap().id;
    let fine = NulFine.enqueue(&db.pool).await.unwrap().id;
    // Two slots, both taken by the NUL jobs first: if their outcome writes never
    // landed, the slots would never free and the fine job would never run.
    let rt = start(&db, "hostile_nul", 2, quick()).await;
    drain_and_stop(&db, rt).await;

    assert_eq!(state_and_attempts(&db, failing).await, (JobState::Dead, 2));
    assert_eq!(
        errors_of(&db, failing).await,
        vec![(1, r"x\0y".to_owned()), (2, r"x\0y".to_owned())]
    );
    assert_eq!(
        state_and_attempts(&db, panicking).await,
        (JobState::Dead, 2)
    );
    assert_eq!(
        errors_of(&db, panicking).await,
        vec![
            (1, r"panicked: boom\0here".to_owned()),
            (2, r"panicked: boom\0here".to_owned())
        ]
    );
    assert_eq!(
        state_and_attempts(&db, fine).await,
        (JobState::Succeeded, 1)
    );
}

// Error text and error history are bounded.

/// Fails once with a 1 MB error.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.huge_error", queue = "hostile_huge", max_attempts = 1)]
struct HugeError;

impl Perform for HugeError {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Err("E".repeat(1 << 20).into())
    }
}

#[tokio::test]
async fn a_megabyte_error_is_stored_cut_to_the_limit_with_a_marker() {
    let db = TestDb::new().await;
    lq_tests::init_tracing();
    let id = HugeError.enqueue(&db.pool).await.unwrap().id;
    let rt = start(&db, "hostile_huge", 1, quick()).await;
    drain_and_stop(&db, rt).await;

    assert_eq!(state_and_attempts(&db, id).await, (JobState::Dead, 1));
    let errors = errors_of(&db, id).await;
    assert_eq!(errors.len(), 1);
    let (attempt, text) = &errors[0];
    assert_eq!(*attempt, 1);
    assert!(
        text.len() <= MAX_ERROR_BYTES,
        "stored error is {} bytes",
        text.len()
    );
    assert!(text.starts_with("EEEE"), "{}", &text[..40.min(text.len())]);
    assert!(
        text.ends_with("bytes cut]"),
        "{}",
        &text[text.len().saturating_sub(40)..]
    );
}

/// Fails every one of its 25 attempts.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.relentless", queue = "hostile_relentless", max_attempts = 25, backoff = fixed("10ms"))]
struct Relentless;

impl Perform for Relentless {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        Err(format!("failure {}", ctx.attempt()).into())
    }
}

#[tokio::test]
async fn a_job_failing_25_times_keeps_only_its_newest_20_errors() {
    let db = TestDb::new().await;
    let id = Relentless.enqueue(&db.pool).await.unwrap().id;
    let rt = start(&db, "hostile_relentless", 1, quick()).await;
    drain_and_stop(&db, rt).await;

    assert_eq!(state_and_attempts(&db, id).await, (JobState::Dead, 25));
    let errors = errors_of(&db, id).await;
    assert_eq!(errors.len(), MAX_ERRORS_KEPT);
    let expected: Vec<(i64, String)> = (6..=25).map(|a| (a, format!("failure {a}"))).collect();
    assert_eq!(errors, expected, "the newest 20, oldest first");
}

// Rescue of a job whose error history is huge.

/// Succeeds at once; its jobs are set up as abandoned by a dead worker.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.rescued", queue = "hostile_rescue", max_attempts = 3)]
struct Rescued {
    n: u32,
}

impl Perform for Rescued {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn expired_leases_are_rescued_even_with_a_huge_error_history() {
    let db = TestDb::new().await;
    let small = Rescued { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let big = Rescued { n: 2 }.enqueue(&db.pool).await.unwrap().id;
    // Both "claimed" by a worker that died: running, their leases expired.
    sqlx::query(
        "update lq.jobs set state = 'running', lease_token = gen_random_uuid(),
             lease_owner = 'gone', lease_expires_at = now() - interval '1 second',
             attempts = 1, started_at = now()
         where id = any($1)",
    )
    .bind(vec![small, big])
    .execute(&db.pool)
    .await
    .unwrap();
    // The big one carries 30 error entries of 100 kB each (3 MB of history).
    sqlx::query(
        "update lq.jobs set errors = (
             select jsonb_agg(jsonb_build_object('attempt', i, 'at', now(), 'error', repeat('e', 100000)))
             from generate_series(1, 30) i)
         where id = $1",
    )
    .bind(big)
    .execute(&db.pool)
    .await
    .unwrap();

    let mut conn = db.pool.acquire().await.unwrap();
    let mut rescued = db::lease::job_rescue_expired(&mut conn, 1000, None)
        .await
        .unwrap();
    drop(conn);
    rescued.sort_unstable();
    assert_eq!(rescued, vec![small, big]);

    for id in [small, big] {
        let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
        assert_eq!((row.state, row.attempts), (JobState::Queued, 1), "job {id}");
        assert!(row.lease_owner.is_none(), "job {id}");
    }
    let small_errors = errors_of(&db, small).await;
    assert_eq!(small_errors.len(), 1);
    assert!(
        small_errors[0].1.starts_with("lease expired"),
        "{small_errors:?}"
    );
    let big_errors = errors_of(&db, big).await;
    assert_eq!(big_errors.len(), MAX_ERRORS_KEPT, "bounded at the rescue");
    let (attempt, text) = big_errors.last().unwrap();
    assert_eq!(*attempt, 1);
    assert!(text.starts_with("lease expired: worker gone"), "{text}");

    // And they run to their end.
    let rt = start(&db, "hostile_rescue", 2, quick()).await;
    drain_and_stop(&db, rt).await;
    assert_eq!(
        state_and_attempts(&db, small).await,
        (JobState::Succeeded, 2)
    );
    assert_eq!(state_and_attempts(&db, big).await, (JobState::Succeeded, 2));
}
