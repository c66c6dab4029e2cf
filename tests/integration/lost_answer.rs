//! Answers lost after the server committed them (the connection dropped as
//! the server replied), through a proxy that loses the answer it is told to.
//!
//! - A claim's: the runtime minted the claim's lease tokens, so it hands the
//!   jobs they leased back, their attempt unspent, and they run at once.
//!   Before, they waited out their lease unseen, and the rescuer counted the
//!   attempt that never ran: a job with one attempt ended `dead`.
//! - A success's: sent again, it finds the row gone, as a lost lease would;
//!   the history tells that it landed, so it counts as a success.
//! - A failure's, a snooze's or a cancel's: the same, told by the attempt's
//!   error entry (or, for a snooze, the attempt it gave back), so each counts
//!   as what it wrote, not as a lost lease.

use std::time::Duration;

use lq_fault::proxy::LosingProxy;
use lq_runtime::{Job, JobContext, JobError, Perform, Runtime};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;

use crate::jobs::{quick, stats_once, Ledger, Noop};

const LIMIT: Duration = Duration::from_secs(60);

/// One attempt, a lease long enough that the rescuer cannot take the job
/// before the hand-back; the marker lets the proxy find the claim's answer.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.lost_claim_answer", max_attempts = 1, lease = "20s")]
struct Marked {
    marker: String,
}

impl Perform for Marked {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>().record(ctx.id());
        Ok(())
    }
}

/// A runtime serving `default` whose connections go through a proxy that loses
/// the answer `marker` identifies (see [`LosingProxy::start`]).
async fn start_through_proxy(db: &TestDb, marker: &[u8]) -> (LosingProxy, Runtime, Ledger) {
    let server = db.pool.connect_options();
    start_through(db, LosingProxy::start(&server, marker).await).await
}

/// A runtime serving `default` whose connections go through `proxy`.
async fn start_through(db: &TestDb, proxy: LosingProxy) -> (LosingProxy, Runtime, Ledger) {
    let server = db.pool.connect_options();
    let through_proxy = PgPoolOptions::new()
        .max_connections(10)
        .connect_with(proxy.options(&server))
        .await
        .unwrap();
    let ledger = Ledger::default();
    let rt = Runtime::builder(through_proxy)
        .config(quick())
        .queue("default", 2)
        .state(ledger.clone())
        .start()
        .await
        .unwrap();
    (proxy, rt, ledger)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_answer_is_lost_hands_its_jobs_back_unspent() {
    let db = TestDb::new().await;
    let marker = "lost-claim-answer-3f9c";
    let id = Marked {
        marker: marker.to_owned(),
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id;
    let (proxy, rt, ledger) = start_through_proxy(&db, marker.as_bytes()).await;
    db.wait_for(
        "the job to end",
        &format!("select exists (select from lq.finished_jobs where id = {id})"),
        LIMIT,
    )
    .await;
    let stats = rt.shutdown_with_stats().await.unwrap();

    assert_eq!(proxy.answers_lost(), 1, "the claim's answer was lost");
    let (state, attempts, errors): (String, i32, String) = sqlx::query_as(
        "select state::text, attempts, errors::text from lq.finished_jobs where id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(state, "succeeded", "errors: {errors}");
    assert_eq!(
        attempts, 1,
        "the attempt the lost claim counted was given back"
    );
    assert_eq!(errors, "[]");
    assert_eq!(ledger.counts().get(&id), Some(&1), "it ran once");
    assert_eq!(stats.released, 1, "{stats:?}");
    assert_eq!(
        stats.claimed, 1,
        "only the second claim was heard: {stats:?}"
    );
}

/// The data row a success write answers with for job `id` (its one `bigint`
/// column, in binary): the proxy's cue.
fn success_row(id: i64) -> Vec<u8> {
    let mut row = vec![b'D', 0, 0, 0, 18, 0, 1, 0, 0, 0, 8];
    row.extend_from_slice(&id.to_be_bytes());
    row
}

/// One job whose marker cues nothing: the tests that use it cue on its id.
async fn one_job(db: &TestDb) -> i64 {
    let job = Marked {
        marker: "any".to_owned(),
    };
    job.enqueue(&db.pool).await.unwrap().id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_whose_answer_is_lost_counts_as_a_success_not_a_lost_lease() {
    let db = TestDb::new().await;
    let id = one_job(&db).await;
    let (proxy, rt, ledger) = start_through_proxy(&db, &success_row(id)).await;
    // The success is written, its answer lost, and written again (finding the
    // row gone) before the runtime counts it one way or the other.
    let stats = stats_once(&rt, "the success to be counted", |s| {
        s.succeeded + s.lease_lost > 0
    })
    .await;
    rt.shutdown().await.unwrap();

    assert_eq!(proxy.answers_lost(), 1, "the success's answer was lost");
    let state: String =
        sqlx::query_scalar("select state::text from lq.finished_jobs where id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(state, "succeeded");
    assert_eq!(ledger.counts().get(&id), Some(&1), "it ran once");
    assert_eq!((stats.succeeded, stats.lease_lost), (1, 0), "{stats:?}");
}

/// The success's answer is lost, and so are the answers of the first three
/// lookups that ask whether it landed (each carries the same row: the job's
/// id): the runtime asks again, as often as it would write, and still counts
/// a success. (The fault scenario `lost-answers` once lost three lookups in a
/// row, when the runtime asked three times only.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_counts_as_one_though_three_lookups_after_it_go_unanswered() {
    let db = TestDb::new().await;
    let id = one_job(&db).await;
    let server = db.pool.connect_options();
    let proxy = LosingProxy::start_times(&server, &success_row(id), 4).await;
    let (proxy, rt, ledger) = start_through(&db, proxy).await;
    let stats = stats_once(&rt, "the success to be counted", |s| {
        s.succeeded + s.lease_lost > 0
    })
    .await;
    rt.shutdown().await.unwrap();

    assert_eq!(proxy.answers_lost(), 4, "the write's and three lookups'");
    assert_eq!(ledger.counts().get(&id), Some(&1), "it ran once");
    assert_eq!((stats.succeeded, stats.lease_lost), (1, 0), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_whose_answer_is_lost_counts_as_a_quarantine_not_a_lost_lease() {
    let db = TestDb::new().await;
    let id = one_job(&db).await;
    // Its success is refused, alone too, so it is quarantined: the first
    // answer naming the job is the quarantine's, and it is lost.
    db.refuse_rows(
        "lq.finished_jobs",
        "insert",
        &format!("new.id = {id} and new.state = 'succeeded'"),
        "23514",
    )
    .await;
    let (proxy, rt, ledger) = start_through_proxy(&db, &success_row(id)).await;
    let stats = stats_once(&rt, "the quarantine to be counted", |s| {
        s.quarantined + s.lease_lost > 0
    })
    .await;
    rt.shutdown().await.unwrap();

    assert_eq!(proxy.answers_lost(), 1, "the quarantine's answer was lost");
    let (state, errors): (String, String) =
        sqlx::query_as("select state::text, errors::text from lq.finished_jobs where id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(state, "dead");
    assert!(
        errors.contains("quarantined: the handler succeeded but the success was refused"),
        "{errors}"
    );
    assert_eq!(ledger.counts().get(&id), Some(&1), "it ran once");
    assert_eq!(
        (stats.quarantined, stats.lease_lost, stats.succeeded),
        (1, 0, 0),
        "{stats:?}"
    );
}

/// The data row of a one-column answer holding `value` in binary (an enum's
/// label, or a `bigint`'s eight bytes): the proxy's cue.
fn one_column_row(value: &[u8]) -> Vec<u8> {
    let len = (4 + 2 + 4 + value.len()) as u32;
    let mut row = vec![b'D'];
    row.extend_from_slice(&len.to_be_bytes());
    row.extend_from_slice(&1u16.to_be_bytes());
    row.extend_from_slice(&(value.len() as u32).to_be_bytes());
    row.extend_from_slice(value);
    row
}

#[test]
fn one_column_row_of_an_id_is_the_success_row() {
    assert_eq!(one_column_row(&42i64.to_be_bytes()), success_row(42));
}

/// How the outcome jobs below end their first run; later runs succeed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug)]
enum FirstRun {
    /// A retryable failure: the job is queued again (`queued`).
    Retry,
    /// A permanent failure: the job ends `dead`.
    Permanent,
    /// A snooze: queued again, its attempt given back (`queued`).
    Snooze,
    /// The handler cancels its own job (the write answers with the id).
    Cancel,
}

#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.lost_outcome_answer", max_attempts = 3, lease = "20s",
      backoff = fixed("10ms"))]
struct FailsFirst {
    first: FirstRun,
}

impl Perform for FailsFirst {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let ledger = ctx.state::<Ledger>();
        let runs_before = ledger.counts().get(&ctx.id()).copied().unwrap_or(0);
        ledger.record(ctx.id());
        if runs_before > 0 {
            return Ok(());
        }
        Err(match self.first {
            FirstRun::Retry => JobError::retry("first run fails"),
            FirstRun::Permanent => JobError::permanent("first run fails for good"),
            FirstRun::Snooze => JobError::snooze(Duration::from_millis(10)),
            FirstRun::Cancel => JobError::cancel("not wanted"),
        })
    }
}

/// Runs one `FailsFirst` job whose first outcome write's answer (cued by
/// `answer`) is lost, until it ends; returns the runtime's stats, the job's
/// final state, its attempts and the number of error entries it holds.
async fn lose_the_first_outcome(
    first: FirstRun,
    answer: impl FnOnce(i64) -> Vec<u8>,
) -> (lq_runtime::StatsSnapshot, String, i32, i64) {
    lose_the_first_outcome_and_lookups(first, answer, 1).await
}

/// [`lose_the_first_outcome`], losing also the answers of the first
/// `times - 1` lookups that ask whether the write landed (they answer with the
/// same row).
async fn lose_the_first_outcome_and_lookups(
    first: FirstRun,
    answer: impl FnOnce(i64) -> Vec<u8>,
    times: usize,
) -> (lq_runtime::StatsSnapshot, String, i32, i64) {
    let db = TestDb::new().await;
    let id = FailsFirst { first }.enqueue(&db.pool).await.unwrap().id;
    // Alone: sqlx lists an enum's labels, a row each, as a connection first
    // meets the type, and the state written is one of them.
    let server = db.pool.connect_options();
    let proxy = LosingProxy::start_alone_times(&server, &answer(id), times).await;
    let (proxy, rt, ledger) = start_through(&db, proxy).await;
    db.wait_for(
        "the job to end",
        &format!("select exists (select from lq.finished_jobs where id = {id})"),
        LIMIT,
    )
    .await;
    // The job's row may end before the runtime, its answer lost, writes it
    // again and counts it: wait for every outcome the job had to be counted.
    let outcomes = |s: &lq_runtime::StatsSnapshot| {
        s.succeeded + s.retried + s.dead + s.snoozed + s.cancelled + s.lease_lost
    };
    let ends_at_once = matches!(first, FirstRun::Permanent | FirstRun::Cancel);
    let expected = if ends_at_once { 1 } else { 2 };
    let stats = stats_once(
        &rt,
        &format!("{first:?}: the outcomes to be counted"),
        |s| outcomes(s) >= expected,
    )
    .await;
    rt.shutdown().await.unwrap();

    assert_eq!(
        proxy.answers_lost(),
        times,
        "{first:?}: the outcome's answer was lost, and the lookups' after it"
    );
    let runs = ledger.counts().get(&id).copied();
    let (state, attempts, entries): (String, i32, i64) = sqlx::query_as(
        "select state::text, attempts, jsonb_array_length(errors)::bigint
         from lq.finished_jobs where id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(runs, Some(expected as u32), "{first:?}");
    assert_eq!(stats.lease_lost, 0, "{first:?}: {stats:?}");
    (stats, state, attempts, entries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_whose_answer_is_lost_counts_as_a_retry_not_a_lost_lease() {
    let (stats, state, attempts, entries) =
        lose_the_first_outcome(FirstRun::Retry, |_| one_column_row(b"queued")).await;
    assert_eq!((state.as_str(), attempts, entries), ("succeeded", 2, 1));
    assert_eq!((stats.retried, stats.succeeded), (1, 1), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_end_whose_answer_is_lost_counts_as_dead_not_a_lost_lease() {
    let (stats, state, attempts, entries) =
        lose_the_first_outcome(FirstRun::Permanent, |_| one_column_row(b"dead")).await;
    assert_eq!((state.as_str(), attempts, entries), ("dead", 1, 1));
    assert_eq!(stats.dead, 1, "{stats:?}");
}

/// As for a success: the dead end's answer and three lookups' answers lost,
/// it still counts as dead, not as a lost lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_end_counts_as_dead_though_three_lookups_after_it_go_unanswered() {
    let (stats, state, attempts, entries) =
        lose_the_first_outcome_and_lookups(FirstRun::Permanent, |_| one_column_row(b"dead"), 4)
            .await;
    assert_eq!((state.as_str(), attempts, entries), ("dead", 1, 1));
    assert_eq!(stats.dead, 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snooze_whose_answer_is_lost_counts_as_a_snooze_not_a_lost_lease() {
    let (stats, state, attempts, entries) =
        lose_the_first_outcome(FirstRun::Snooze, |_| one_column_row(b"queued")).await;
    assert_eq!((state.as_str(), attempts, entries), ("succeeded", 1, 0));
    assert_eq!((stats.snoozed, stats.succeeded), (1, 1), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_whose_answer_is_lost_counts_as_cancelled_not_a_lost_lease() {
    let (stats, state, attempts, entries) =
        lose_the_first_outcome(FirstRun::Cancel, success_row).await;
    assert_eq!((state.as_str(), attempts, entries), ("cancelled", 1, 1));
    assert_eq!(stats.cancelled, 1, "{stats:?}");
}

/// The lookup behind the counts above, on the races it must tell apart: a
/// write that landed and whose job moved on since, and a lease really lost.
#[tokio::test]
async fn the_outcome_lookup_tells_a_landed_write_from_a_lost_lease() {
    use lq_core::{db, JobState};
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let kinds = vec!["test.noop".to_owned()];
    let claim = |owner: &'static str| {
        let (pool, kinds) = (db.pool.clone(), kinds.clone());
        async move {
            let mut conn = pool.acquire().await.unwrap();
            let mut got = db::claim::job_claim(&mut conn, "default", &kinds, &[30.0], 1, owner)
                .await
                .unwrap();
            assert_eq!(got.len(), 1, "{owner} claims one job");
            got.remove(0)
        }
    };
    let expire_and_rescue = |id: i64| {
        let db = &db;
        async move {
            db.expire_lease(id).await;
            let mut conn = db.pool.acquire().await.unwrap();
            let rescued = db::lease::job_rescue_expired(&mut conn, 10, Some(id)).await;
            assert_eq!(rescued.unwrap(), vec![id]);
        }
    };
    let landed = |id: i64, attempt: i32, owner: &'static str, text: Option<&'static str>| {
        let pool = db.pool.clone();
        async move {
            let mut conn = pool.acquire().await.unwrap();
            db::finish::job_outcome_landed(&mut conn, id, attempt, owner, text)
                .await
                .unwrap()
        }
    };

    // A retry that landed, whose job another worker then ran to success.
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id;
    let a = claim("a").await;
    let queued = db::finish::job_fail(&mut conn, id, a.lease_token, "boom", Some(0.0));
    assert_eq!(queued.await.unwrap(), Some(JobState::Queued));
    let b = claim("b").await;
    db::finish::job_complete_many(&mut conn, &[id], &[b.lease_token])
        .await
        .unwrap();
    assert_eq!(
        landed(id, 1, "a", Some("boom")).await,
        Some(JobState::Queued)
    );
    assert_eq!(
        landed(id, 1, "a", Some("other")).await,
        None,
        "another text"
    );
    assert_eq!(
        landed(id, 2, "a", Some("boom")).await,
        None,
        "another attempt"
    );

    // A lease really lost: rescued, then ended by its next attempt's failure.
    let id = Noop { n: 2 }.enqueue(&db.pool).await.unwrap().id;
    let a = claim("a").await;
    expire_and_rescue(id).await;
    assert_eq!(landed(id, a.attempts, "a", Some("boom")).await, None);
    assert_eq!(
        landed(id, a.attempts, "a", None).await,
        None,
        "not a snooze"
    );
    let b = claim("b").await;
    let dead = db::finish::job_fail(&mut conn, id, b.lease_token, "boom", None);
    assert_eq!(dead.await.unwrap(), Some(JobState::Dead));
    assert_eq!(landed(id, a.attempts, "a", Some("boom")).await, None);
    assert_eq!(
        landed(id, b.attempts, "b", Some("boom")).await,
        Some(JobState::Dead)
    );

    // A snooze that landed, its job claimed again (the same attempt number)
    // by the same worker: no rescue recorded, so it landed.
    let id = Noop { n: 3 }.enqueue(&db.pool).await.unwrap().id;
    let a = claim("a").await;
    let snoozed = db::finish::job_snooze(&mut conn, id, a.lease_token, 0.0);
    assert_eq!(snoozed.await.unwrap(), Some(JobState::Queued));
    assert_eq!(
        landed(id, a.attempts, "a", None).await,
        Some(JobState::Queued)
    );
    let again = claim("a").await;
    assert_eq!(
        again.attempts, a.attempts,
        "the snooze gave its attempt back"
    );
    assert_eq!(
        landed(id, a.attempts, "a", None).await,
        Some(JobState::Queued)
    );
    // ... and when that attempt's lease is then lost, it is no longer told.
    expire_and_rescue(id).await;
    assert_eq!(landed(id, a.attempts, "a", None).await, None);
    sqlx::query("delete from lq.jobs where id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await
        .unwrap();

    // A cancel by the handler ends the job there.
    let id = Noop { n: 4 }.enqueue(&db.pool).await.unwrap().id;
    let a = claim("a").await;
    assert_eq!(a.id, id);
    let cancelled = db::finish::job_cancel_own(&mut conn, id, a.lease_token, "stop");
    assert!(cancelled.await.unwrap());
    assert_eq!(
        landed(id, a.attempts, "a", Some("stop")).await,
        Some(JobState::Cancelled)
    );
}
