//! A claim whose answer is lost after it committed (the connection dropped as
//! the server replied): the runtime minted the claim's lease tokens, so it hands
//! the jobs they leased back, their attempt unspent, and they run at once.
//! Before, they waited out their lease unseen, and the rescuer counted the
//! attempt that never ran: a job with one attempt ended `dead`.

use std::time::Duration;

use lq_runtime::{Job, JobContext, JobError, Perform, Runtime};
use lq_tests::{losing_proxy::LosingProxy, TestDb};
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
