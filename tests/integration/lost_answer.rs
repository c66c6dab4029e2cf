//! Answers lost after the server committed them (the connection dropped as
//! the server replied), through a proxy that loses the answer it is told to.
//!
//! - A claim's: the runtime minted the claim's lease tokens, so it hands the
//!   jobs they leased back, their attempt unspent, and they run at once.
//!   Before, they waited out their lease unseen, and the rescuer counted the
//!   attempt that never ran: a job with one attempt ended `dead`.
//! - A success's: sent again, it finds the row gone, as a lost lease would;
//!   the history tells that it landed, so it counts as a success.

use std::time::Duration;

use lq_fault::proxy::LosingProxy;
use lq_runtime::{Job, JobContext, JobError, Perform, Runtime};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;

use crate::jobs::{quick, Ledger};

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
    let proxy = LosingProxy::start(&server, marker).await;
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
    let stats = rt.stats();
    rt.shutdown().await.unwrap();

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_whose_answer_is_lost_counts_as_a_success_not_a_lost_lease() {
    let db = TestDb::new().await;
    let id = Marked {
        marker: "any".to_owned(),
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id;
    let (proxy, rt, ledger) = start_through_proxy(&db, &success_row(id)).await;
    // The success is written, its answer lost, and written again (finding the
    // row gone) before the runtime counts it one way or the other.
    let started = std::time::Instant::now();
    let stats = loop {
        let stats = rt.stats();
        if stats.succeeded + stats.lease_lost > 0 {
            break stats;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the success was never counted: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
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
