//! Panics on a job's path outside its handler (its payload's `Deserialize`, its
//! backoff function) end or retry the job and free its slot.

use super::*;

fn panic_on_decode<'de, D: Deserializer<'de>>(_: D) -> Result<u32, D::Error> {
    panic!("this Deserialize panics");
}

/// Its payload's decoder panics: the handler never runs.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.decode_panic",
    queue = "hostile_decode",
    max_attempts = 5
)]
struct DecodePanic {
    #[serde(deserialize_with = "panic_on_decode")]
    v: u32,
}

impl Perform for DecodePanic {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        unreachable!("the payload never decodes")
    }
}

/// Succeeds at once.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.decode_fine", queue = "hostile_decode")]
struct DecodeFine;

impl Perform for DecodeFine {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_panicking_deserialize_ends_the_job_dead_and_frees_its_slot() {
    let db = TestDb::new().await;
    let bad = DecodePanic { v: 7 }.enqueue(&db.pool).await.unwrap().id;
    // One slot: if the panic leaked it, the fine jobs would never run.
    let rt = start(&db, "hostile_decode", 1, quick()).await;
    db.wait_for(
        "the undecodable job to end",
        &format!("select state not in ('queued', 'running') from lq.all_jobs where id = {bad}"),
        LIMIT,
    )
    .await;
    let mut fine = Vec::new();
    for _ in 0..3 {
        fine.push(DecodeFine.enqueue(&db.pool).await.unwrap().id);
    }
    drain_and_stop(&db, rt).await;

    assert_eq!(state_and_attempts(&db, bad).await, (JobState::Dead, 1));
    let errors = errors_of(&db, bad).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].1.contains("panicked"), "{errors:?}");
    assert!(
        errors[0].1.contains("this Deserialize panics"),
        "{errors:?}"
    );
    for id in fine {
        assert_eq!(state_and_attempts(&db, id).await, (JobState::Succeeded, 1));
    }
}

fn panicking_backoff(_attempt: u32) -> Duration {
    panic!("this backoff panics");
}

/// Always fails; its backoff panics.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.bad_backoff", queue = "hostile_backoff", max_attempts = 2, backoff = panicking_backoff)]
struct BadBackoff;

impl Perform for BadBackoff {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        Err(format!("fails on attempt {}", ctx.attempt()).into())
    }
}

/// Succeeds at once.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.backoff_fine", queue = "hostile_backoff")]
struct BackoffFine;

impl Perform for BackoffFine {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_panicking_backoff_falls_back_to_the_default_and_the_job_is_retried() {
    let db = TestDb::new().await;
    let id = BadBackoff.enqueue(&db.pool).await.unwrap().id;
    let rt = start(&db, "hostile_backoff", 1, quick()).await;
    // Retried, not ended, by the first failure.
    db.wait_for(
        "the second attempt",
        &format!("select attempts = 2 from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;
    let fine = BackoffFine.enqueue(&db.pool).await.unwrap().id;
    drain_and_stop(&db, rt).await;

    assert_eq!(state_and_attempts(&db, id).await, (JobState::Dead, 2));
    assert_eq!(
        errors_of(&db, id).await,
        vec![
            (1, "fails on attempt 1".to_owned()),
            (2, "fails on attempt 2".to_owned())
        ],
        "each attempt's own error, no panic recorded"
    );
    assert_eq!(
        state_and_attempts(&db, fine).await,
        (JobState::Succeeded, 1)
    );
}
