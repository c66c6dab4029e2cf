//! Hostile input and hostile conditions: every job still reaches an end state
//! (or a visible, typed refusal), nothing stays `running`, nothing is lost, and
//! the runtime keeps working and shuts down.
//!
//! Every type here has a queue of its own, and each test's runtime serves only
//! that queue: runtimes of other tests never claim these jobs, nor these tests'
//! runtimes theirs.

use std::{fmt, time::Duration};

use lq_core::db;
use lq_runtime::{
    CoreError, EnqueueOptions, Error, Job, JobContext, JobError, JobState, Perform, Runtime,
    RuntimeConfig, MAX_ERRORS_KEPT, MAX_ERROR_BYTES, MAX_UNIQUE_KEY_BYTES,
};
use lq_tests::TestDb;
use serde::{Deserialize, Deserializer, Serialize};

use crate::jobs::quick;

const LIMIT: Duration = Duration::from_secs(60);

/// A started runtime on `db` serving only `queue` with `slots`.
async fn start(db: &TestDb, queue: &str, slots: usize, config: RuntimeConfig) -> Runtime {
    Runtime::builder(db.pool.clone())
        .config(config)
        .queue(queue, slots)
        .start()
        .await
        .unwrap()
}

/// Waits until `rt` holds no lease (its last outcome writes may land in the
/// database just before it lets go of their jobs), or panics after `LIMIT`.
async fn wait_until_holding_nothing(rt: &Runtime) {
    let start = std::time::Instant::now();
    while rt.running() != 0 {
        assert!(
            start.elapsed() < LIMIT,
            "the runtime still holds {} leases after {LIMIT:?}",
            rt.running()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for every job to end, checks the runtime let go of every lease, and
/// shuts it down.
async fn drain_and_stop(db: &TestDb, rt: Runtime) {
    db.wait_idle(LIMIT).await;
    wait_until_holding_nothing(&rt).await;
    rt.shutdown().await.unwrap();
    assert_eq!(db.count("running").await, 0, "a job was left running");
}

/// `(attempt, error)` of each stored error entry of job `id`, oldest first.
async fn errors_of(db: &TestDb, id: i64) -> Vec<(i64, String)> {
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    row.errors
        .into_iter()
        .map(|e| (i64::from(e.attempt), e.error))
        .collect()
}

async fn state_and_attempts(db: &TestDb, id: i64) -> (JobState, i32) {
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    (row.state, row.attempts)
}

// ---------------------------------------------------------------------------
// 1. NUL characters in error text

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

// ---------------------------------------------------------------------------
// 2. Error text and error history are bounded

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

// ---------------------------------------------------------------------------
// 3. Rescue of a job whose error history is huge

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

// ---------------------------------------------------------------------------
// 4. Panics on the job's path outside its handler

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

// ---------------------------------------------------------------------------
// 5. Ids that collide with the history

/// Succeeds at once.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.collide", queue = "hostile_collide")]
struct Collide {
    n: u32,
}

impl Perform for Collide {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Fails for good on its only attempt.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.collide_doomed",
    queue = "hostile_collide",
    max_attempts = 1
)]
struct CollideDoomed {
    n: u32,
}

impl Perform for CollideDoomed {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Err(format!("doomed {}", self.n).into())
    }
}

#[tokio::test]
async fn jobs_whose_ids_are_already_in_the_history_end_and_replace_it() {
    let db = TestDb::new().await;
    let first = [
        Collide { n: 1 }.enqueue(&db.pool).await.unwrap().id,
        Collide { n: 2 }.enqueue(&db.pool).await.unwrap().id,
        CollideDoomed { n: 3 }.enqueue(&db.pool).await.unwrap().id,
    ];
    assert_eq!(first, [1, 2, 3]);
    let rt = start(&db, "hostile_collide", 4, quick()).await;
    drain_and_stop(&db, rt).await;
    assert_eq!(db.count("succeeded").await, 2);
    assert_eq!(db.count("dead").await, 1);

    // Ids restart: every new job's id up to 3 is taken in the history.
    sqlx::query("truncate lq.jobs restart identity")
        .execute(&db.pool)
        .await
        .unwrap();
    let second = [
        CollideDoomed { n: 11 }.enqueue(&db.pool).await.unwrap().id, // over a success
        Collide { n: 12 }.enqueue(&db.pool).await.unwrap().id,       // over a success
        Collide { n: 13 }.enqueue(&db.pool).await.unwrap().id,       // over a dead job
        Collide { n: 14 }.enqueue(&db.pool).await.unwrap().id,       // no collision
    ];
    assert_eq!(second, [1, 2, 3, 4]);
    let rt = start(&db, "hostile_collide", 4, quick()).await;
    drain_and_stop(&db, rt).await;

    let live: i64 = sqlx::query_scalar("select count(*) from lq.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(live, 0);
    let history: Vec<(i64, String, String, i32)> =
        sqlx::query_as("select id, kind, state::text, attempts from lq.finished_jobs order by id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let expect = |id: i64, kind: &str, state: &str| (id, kind.to_owned(), state.to_owned(), 1);
    assert_eq!(
        history,
        vec![
            expect(1, "hostile.collide_doomed", "dead"),
            expect(2, "hostile.collide", "succeeded"),
            expect(3, "hostile.collide", "succeeded"),
            expect(4, "hostile.collide", "succeeded"),
        ],
        "each history row is the new job's"
    );
    for (id, n) in [(1, 11), (2, 12), (3, 13), (4, 14)] {
        let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
        assert_eq!(row.payload_value().unwrap(), serde_json::json!({ "n": n }));
    }
    assert_eq!(errors_of(&db, 1).await, vec![(1, "doomed 11".to_owned())]);
    assert!(
        errors_of(&db, 3).await.is_empty(),
        "the old dead job's errors went with it"
    );
}

// ---------------------------------------------------------------------------
// 6. Unique keys are per kind, and template values are escaped

/// Unique by `{id}`; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.charge_card",
    queue = "hostile_keys",
    unique_key = "{id}"
)]
struct ChargeCard {
    id: String,
}

/// Unique by `{id}` too, a different kind; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.reset_password",
    queue = "hostile_keys",
    unique_key = "{id}"
)]
struct ResetPassword {
    id: String,
}

/// Unique by two values joined by `:`; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.pair",
    queue = "hostile_keys",
    unique_key = "k:{a}:{b}"
)]
struct Pair {
    a: String,
    b: String,
}

#[tokio::test]
async fn one_unique_key_text_in_two_kinds_is_two_jobs() {
    let db = TestDb::new().await;
    let card = ChargeCard { id: "42".into() }
        .enqueue(&db.pool)
        .await
        .unwrap();
    let reset = ResetPassword { id: "42".into() }
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert!(!card.existing && !reset.existing, "{card:?} {reset:?}");
    assert_ne!(card.id, reset.id);
    // Within a kind the key still holds.
    let again = ChargeCard { id: "42".into() }
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert_eq!((again.id, again.existing), (card.id, true));
    assert_eq!(db.count("queued").await, 2);
}

#[tokio::test]
async fn separators_inside_key_values_do_not_make_two_jobs_collide() {
    let db = TestDb::new().await;
    let pair = |a: &str, b: &str| Pair {
        a: a.into(),
        b: b.into(),
    };
    let one = pair("1:2", "3").enqueue(&db.pool).await.unwrap();
    let two = pair("1", "2:3").enqueue(&db.pool).await.unwrap();
    assert!(!one.existing && !two.existing, "{one:?} {two:?}");
    assert_ne!(one.id, two.id);
    let again = pair("1:2", "3").enqueue(&db.pool).await.unwrap();
    assert_eq!((again.id, again.existing), (one.id, true));
    let keys: Vec<String> = sqlx::query_scalar("select unique_key from lq.jobs order by id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1]);
}

// ---------------------------------------------------------------------------
// 7. Keys and payloads the database cannot store are typed errors

/// A key part whose text holds a NUL for `Tag(0)`, while its JSON (a number)
/// never does: the payload is storable, the key is not.
#[derive(Serialize, Deserialize)]
struct Tag(u8);

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            f.write_str("nul\0tag")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// Unique by a tag and a name; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.bad_key",
    queue = "hostile_bad_keys",
    unique_key = "t:{tag}:{name}"
)]
struct BadKey {
    tag: Tag,
    name: String,
}

/// Carries free text; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.nul_payload", queue = "hostile_bad_keys")]
struct NulPayload {
    text: String,
}

/// Carries numbers, one of them optional; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.reading", queue = "hostile_bad_keys")]
struct Reading {
    value: f64,
    previous: Option<f32>,
}

#[tokio::test]
async fn a_payload_holding_a_nan_or_an_infinity_is_refused_not_stored_as_null() {
    // serde_json writes them as `null`: an `f64` would not decode at the claim,
    // and an `Option` would come back `None`.
    let db = TestDb::new().await;
    let reading = |value: f64, previous: Option<f32>| Reading { value, previous };
    for (i, bad) in [
        reading(f64::NAN, None),
        reading(1.0, Some(f32::INFINITY)),
        reading(f64::NEG_INFINITY, Some(1.0)),
    ]
    .into_iter()
    .enumerate()
    {
        let refused = bad.enqueue(&db.pool).await;
        assert!(
            matches!(
                refused,
                Err(CoreError::NonFiniteNumber {
                    kind: "hostile.reading",
                    position: None,
                })
            ),
            "case {i}: {refused:?}"
        );
    }
    let batch = [reading(1.0, None), reading(2.0, Some(f32::NAN))];
    let mut tx = db.pool.begin().await.unwrap();
    let many = Reading::enqueue_many(&mut *tx, batch, EnqueueOptions::new()).await;
    assert!(
        matches!(
            many,
            Err(CoreError::NonFiniteNumber {
                kind: "hostile.reading",
                position: Some(1),
            })
        ),
        "{many:?}"
    );
    tx.commit().await.unwrap();
    assert_eq!(live_jobs(&db).await, 0, "nothing of a refused call written");
    // A null that is a real `None` is no NaN.
    reading(1.0, None).enqueue(&db.pool).await.unwrap();
    assert_eq!(live_jobs(&db).await, 1);
}

async fn live_jobs(db: &TestDb) -> i64 {
    sqlx::query_scalar("select count(*) from lq.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn keys_and_payloads_postgres_cannot_store_are_refused_naming_the_job() {
    let db = TestDb::new().await;
    let key = |tag: u8, name: &str| BadKey {
        tag: Tag(tag),
        name: name.into(),
    };

    let nul = key(0, "a").enqueue(&db.pool).await;
    assert!(
        matches!(
            nul,
            Err(CoreError::InvalidUniqueKey {
                kind: "hostile.bad_key",
                position: None,
                ..
            })
        ),
        "{nul:?}"
    );

    let long_name = "n".repeat(MAX_UNIQUE_KEY_BYTES + 1);
    let long = key(1, &long_name).enqueue(&db.pool).await;
    assert!(
        matches!(
            long,
            Err(CoreError::InvalidUniqueKey {
                kind: "hostile.bad_key",
                position: None,
                len,
                ..
            }) if len > MAX_UNIQUE_KEY_BYTES
        ),
        "{long:?}"
    );

    let batch = vec![key(1, "a"), key(1, "b"), key(1, &long_name), key(1, "d")];
    let many = BadKey::enqueue_many(&db.pool, batch, EnqueueOptions::new()).await;
    assert!(
        matches!(
            many,
            Err(CoreError::InvalidUniqueKey {
                kind: "hostile.bad_key",
                position: Some(2),
                ..
            })
        ),
        "{many:?}"
    );

    let payload = NulPayload {
        text: "a\0b".into(),
    }
    .enqueue(&db.pool)
    .await;
    assert!(
        matches!(
            payload,
            Err(CoreError::PayloadHasNul {
                kind: "hostile.nul_payload",
                position: None,
            })
        ),
        "{payload:?}"
    );
    let texts = ["fine", "a\0b", "fine too"].map(|t| NulPayload { text: t.into() });
    let many = NulPayload::enqueue_many(&db.pool, texts, EnqueueOptions::new()).await;
    assert!(
        matches!(
            many,
            Err(CoreError::PayloadHasNul {
                kind: "hostile.nul_payload",
                position: Some(1),
            })
        ),
        "{many:?}"
    );
    let big = "x".repeat(lq_core::MAX_PAYLOAD_BYTES);
    let texts = ["fine", "fine too", big.as_str()].map(|t| NulPayload { text: t.into() });
    let many = NulPayload::enqueue_many(&db.pool, texts, EnqueueOptions::new()).await;
    assert!(
        matches!(
            many,
            Err(CoreError::PayloadTooLarge {
                kind: "hostile.nul_payload",
                position: Some(2),
                ..
            })
        ),
        "{many:?}"
    );

    assert_eq!(
        live_jobs(&db).await,
        0,
        "nothing of any refused call written"
    );
    // The same types enqueue fine with storable values.
    key(1, "a").enqueue(&db.pool).await.unwrap();
    NulPayload {
        text: r"a\0b".into(),
    }
    .enqueue(&db.pool)
    .await
    .unwrap();
    assert_eq!(live_jobs(&db).await, 2);
}

// ---------------------------------------------------------------------------
// 8. A payload nested deeper than serde_json decodes

#[tokio::test]
async fn control_shows_a_payload_nested_5000_levels_deep() {
    let db = TestDb::new().await;
    let deep_text = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let insert = |payload: String, state: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at,
                     attempts, max_attempts, errors, created_at, finished_at)
                 values ((select coalesce(max(id), 0) + 1 from lq.finished_jobs),
                     'hostile.deep', 'hostile_deep', 0, $1::text::jsonb, $2::text::lq.job_state,
                     now(), 1, 1,
                     '[{\"attempt\": 1, \"at\": \"2024-01-01T00:00:00Z\", \"error\": \"too deep\"}]',
                     now(), now())
                 returning id",
            )
            .bind(payload)
            .bind(state)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let shallow = insert(r#"{"a": [1, 2]}"#.to_owned(), "dead").await;
    let deep = insert(deep_text.clone(), "dead").await;
    let done = insert(r#"{"b": 3}"#.to_owned(), "succeeded").await;

    let row = lq_runtime::control::get(&db.pool, deep).await.unwrap();
    assert_eq!(row.state, JobState::Dead);
    assert_eq!(row.payload.get(), deep_text);
    assert!(row.payload_value().is_err(), "serde_json's depth limit");

    let dead = lq_runtime::control::list(
        &db.pool,
        &lq_runtime::JobFilter::new().state(JobState::Dead),
        100,
    )
    .await
    .unwrap();
    let ids: Vec<i64> = dead.iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![deep, shallow], "newest first, dead only");
    assert_eq!(dead[0].payload.get(), deep_text);
    assert!(dead[0].payload_value().is_err());
    assert_eq!(
        dead[1].payload_value().unwrap(),
        serde_json::json!({ "a": [1, 2] })
    );

    let all = lq_runtime::control::list(
        &db.pool,
        &lq_runtime::JobFilter::new().queue("hostile_deep"),
        100,
    )
    .await
    .unwrap();
    assert_eq!(all.len(), 3);
    for row in all.iter().filter(|r| r.id != deep) {
        assert!(row.payload_value().is_ok(), "job {}", row.id);
    }
    let row = lq_runtime::control::get(&db.pool, done).await.unwrap();
    assert_eq!(row.payload_value().unwrap(), serde_json::json!({ "b": 3 }));
}

/// Holds any JSON value: decoding one nested past serde_json's limit fails.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.deep_value", queue = "hostile_deep_run")]
struct DeepValue {
    v: serde_json::Value,
}

impl Perform for DeepValue {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_payload_nested_too_deep_to_decode_ends_dead_at_once_and_is_kept() {
    let db = TestDb::new().await;
    let deep_text = format!(r#"{{"v": {}{}}}"#, "[".repeat(5000), "]".repeat(5000));
    // Written as another client could: enqueue would not build it.
    let deep: i64 = sqlx::query_scalar(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         values ('hostile.deep_value', 'hostile_deep_run', $1::text::jsonb, 3) returning id",
    )
    .bind(&deep_text)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let fine = DeepValue {
        v: serde_json::json!([[1]]),
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id;
    let rt = start(&db, "hostile_deep_run", 2, quick()).await;
    drain_and_stop(&db, rt).await;

    assert_eq!(state_and_attempts(&db, deep).await, (JobState::Dead, 1));
    let errors = errors_of(&db, deep).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].1.starts_with("payload does not deserialise into")
            && errors[0].1.contains("recursion limit"),
        "{errors:?}"
    );
    let row = lq_runtime::control::get(&db.pool, deep).await.unwrap();
    assert_eq!(row.payload.get(), deep_text, "the payload is kept");
    assert_eq!(
        state_and_attempts(&db, fine).await,
        (JobState::Succeeded, 1)
    );
}

/// Pairs written as one JSON object, in their order, duplicates included.
#[derive(Debug, PartialEq)]
struct Pairs(Vec<(String, u32)>);

impl Serialize for Pairs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs = serde_json::Map::deserialize(d)?;
        let pairs = pairs
            .into_iter()
            .map(|(k, v)| (k, v.as_u64().map_or(u32::MAX, |v| v as u32)))
            .collect();
        Ok(Pairs(pairs))
    }
}

/// The pairs [`KeyedPayload`] handlers were handed, in the order they got them.
type Handed = std::sync::Arc<std::sync::Mutex<Vec<(String, u32)>>>;

/// Records the pairs it was handed, in the order it got them.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.pairs", queue = "hostile_pairs")]
struct KeyedPayload {
    pairs: Pairs,
}

impl Perform for KeyedPayload {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let got = ctx.state::<Handed>();
        got.lock().unwrap().extend(self.pairs.0.iter().cloned());
        Ok(())
    }
}

#[tokio::test]
async fn an_objects_keys_come_back_sorted_and_the_last_of_duplicates_kept() {
    let db = TestDb::new().await;
    let pairs = [("b", 1), ("a", 2), ("b", 3)];
    let job = KeyedPayload {
        pairs: Pairs(pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()),
    };
    let id = job.enqueue(&db.pool).await.unwrap().id;
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(row.payload.get(), r#"{"pairs": {"a": 2, "b": 3}}"#);
    let got = Handed::default();
    let rt = Runtime::builder(db.pool.clone())
        .config(quick())
        .queue("hostile_pairs", 1)
        .state(got.clone())
        .start()
        .await
        .unwrap();
    drain_and_stop(&db, rt).await;
    assert_eq!(state_and_attempts(&db, id).await, (JobState::Succeeded, 1));
    let got = got.lock().unwrap().clone();
    assert_eq!(got, [("a".to_owned(), 2), ("b".to_owned(), 3)]);
}

// ---------------------------------------------------------------------------
// 9. Settings that cannot work are refused at start

/// Succeeds at once; only here so its queue has a handler.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.settings", queue = "hostile_settings")]
struct SettingsProbe;

impl Perform for SettingsProbe {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn settings_that_cannot_work_are_refused_at_start() {
    let db = TestDb::new().await;
    let try_start = |config: RuntimeConfig, slots: usize| {
        Runtime::builder(db.pool.clone())
            .queue("hostile_settings", slots)
            .config(config)
            .start()
    };
    let cases = [
        (
            "max_claim_batch",
            RuntimeConfig {
                max_claim_batch: 0,
                ..RuntimeConfig::default()
            },
        ),
        (
            "claim_slots",
            RuntimeConfig {
                claim_slots: Some(0),
                ..RuntimeConfig::default()
            },
        ),
        (
            "keep_dead",
            RuntimeConfig {
                keep_dead: Duration::MAX,
                ..RuntimeConfig::default()
            },
        ),
        (
            "keep_finished",
            RuntimeConfig {
                keep_finished: Duration::from_secs(2000 * 365 * 24 * 3600),
                ..RuntimeConfig::default()
            },
        ),
        (
            "db_timeout",
            RuntimeConfig {
                db_timeout: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        (
            "poll_interval",
            RuntimeConfig {
                poll_interval: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        (
            "rescue_interval",
            RuntimeConfig {
                rescue_interval: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        (
            "stats_interval",
            RuntimeConfig {
                stats_interval: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        (
            "gauge_interval",
            RuntimeConfig {
                gauge_interval: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        (
            "claim_ahead_wait",
            RuntimeConfig {
                claim_ahead_wait: Duration::ZERO,
                ..RuntimeConfig::default()
            },
        ),
        // "Forever" would overflow the timers: refused, not a panic later.
        (
            "poll_interval",
            RuntimeConfig {
                poll_interval: Duration::MAX,
                ..RuntimeConfig::default()
            },
        ),
        (
            "leader_lease",
            RuntimeConfig {
                leader_lease: Duration::MAX,
                ..RuntimeConfig::default()
            },
        ),
        (
            "max_complete_batch",
            RuntimeConfig {
                max_complete_batch: usize::MAX,
                ..RuntimeConfig::default()
            },
        ),
        (
            "owner",
            RuntimeConfig {
                owner: String::new(),
                ..RuntimeConfig::default()
            },
        ),
        (
            "owner",
            RuntimeConfig {
                owner: "host\0pid".to_owned(),
                ..RuntimeConfig::default()
            },
        ),
    ];
    for (name, config) in cases {
        match try_start(config, 2).await {
            Err(Error::InvalidSetting { setting, .. }) => assert_eq!(setting, name),
            Err(e) => panic!("{name}: wrong error {e:?}"),
            Ok(rt) => {
                rt.shutdown().await.unwrap();
                panic!("{name}: started with an invalid setting");
            }
        }
    }
    match try_start(RuntimeConfig::default(), usize::MAX).await {
        Err(Error::ConcurrencyTooHigh {
            queue, concurrency, ..
        }) => assert_eq!(
            (queue.as_str(), concurrency),
            ("hostile_settings", usize::MAX)
        ),
        Err(e) => panic!("usize::MAX slots: wrong error {e:?}"),
        Ok(rt) => {
            rt.shutdown().await.unwrap();
            panic!("started with usize::MAX slots");
        }
    }
    for queue in ["", "two words", "semi;colon", &"q".repeat(200)] {
        let started = Runtime::builder(db.pool.clone())
            .queue(queue, 1)
            .start()
            .await;
        match started {
            Err(Error::Core(CoreError::InvalidName { what, name, .. })) => {
                assert_eq!((what, name.as_str()), ("queue", queue))
            }
            Err(e) => panic!("queue {queue:?}: wrong error {e:?}"),
            Ok(rt) => {
                rt.shutdown().await.unwrap();
                panic!("started serving queue {queue:?}");
            }
        }
    }
    // The same builder with sound settings starts.
    let rt = try_start(RuntimeConfig::default(), 2).await.unwrap();
    rt.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// 10. Shutdown returns while the database refuses writes

/// Holds its (1 s) lease until cancelled.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.holder",
    queue = "hostile_shutdown",
    lease = "1s",
    max_attempts = 3
)]
struct Holder;

impl Perform for Holder {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.cancelled().await;
        Err("stopped by its cancellation signal".into())
    }
}

#[tokio::test]
async fn shutdown_returns_while_the_queue_table_is_locked_and_the_job_is_not_lost() {
    let db = TestDb::new().await;
    let id = Holder.enqueue(&db.pool).await.unwrap().id;
    let config = RuntimeConfig {
        shutdown_grace: Duration::from_millis(200),
        db_timeout: Duration::from_secs(2),
        ..quick()
    };
    let rt = start(&db, "hostile_shutdown", 1, config).await;
    db.wait_for(
        "the job to run",
        &format!("select state = 'running' from lq.all_jobs where id = {id}"),
        LIMIT,
    )
    .await;

    // Every write (and read) of lq.jobs now waits for this transaction.
    let mut locker = db.pool.begin().await.unwrap();
    sqlx::query("lock table lq.jobs in access exclusive mode")
        .execute(&mut *locker)
        .await
        .unwrap();
    // Not a timed assertion: only a net so a hang fails instead of blocking forever.
    let stopped = tokio::time::timeout(Duration::from_secs(30), rt.shutdown()).await;
    locker.rollback().await.unwrap();
    stopped
        .expect("shutdown() never returned while the table was locked")
        .unwrap();

    // The job comes back: handed back by a write that waited for the lock, or
    // rescued when its lease expires (a runtime on an idle queue of its own
    // rescues every queue's expired leases).
    let config = RuntimeConfig {
        rescue_interval: Duration::from_millis(100),
        unknown_kind_grace: None,
        ..quick()
    };
    let rescuer = start(&db, "hostile_shutdown_idle", 1, config).await;
    db.wait_for(
        "the job to be queued again",
        &format!("select state = 'queued' from lq.jobs where id = {id}"),
        LIMIT,
    )
    .await;
    rescuer.shutdown().await.unwrap();

    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(row.state, JobState::Queued);
    assert!(row.lease_owner.is_none());
    let errors = errors_of(&db, id).await;
    match row.attempts {
        // Handed back by the shutdown's write, its attempt refunded.
        0 => assert!(errors.is_empty(), "{errors:?}"),
        // Rescued after its lease expired.
        1 => {
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].1.starts_with("lease expired"), "{errors:?}");
        }
        n => panic!("job {id} came back with {n} attempts: {errors:?}"),
    }
}

/// A shutdown grace meant as "wait forever" is honoured, not an overflow panic
/// in `shutdown()` (which would stop running jobs with no grace at all).
#[tokio::test]
async fn a_shutdown_grace_of_forever_shuts_down_cleanly() {
    let db = TestDb::new().await;
    let rt = Runtime::builder(db.pool.clone())
        .queue("hostile_settings", 1)
        .config(RuntimeConfig {
            shutdown_grace: Duration::MAX,
            ..RuntimeConfig::default()
        })
        .start()
        .await
        .unwrap();
    let id = SettingsProbe.enqueue(&db.pool).await.unwrap().id;
    db.wait_for(
        "the probe to succeed",
        &format!("select state = 'succeeded' from lq.all_jobs where id = {id}"),
        Duration::from_secs(30),
    )
    .await;
    rt.shutdown().await.unwrap();
}
