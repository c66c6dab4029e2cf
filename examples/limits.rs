//! Limits across every runtime: a partner API that takes at most 3 calls at
//! once and 20 a second, served by two runtimes of 8 handlers each.

use std::time::Duration;

use lq_runtime::{control, EnqueueOptions, Job, JobContext, JobError, Perform, RateLimit, Runtime};
use serde::{Deserialize, Serialize};

/// One call to the partner's API, 50 ms of its time.
#[derive(Serialize, Deserialize, Job)]
#[job(queue = "partner_api")]
struct SyncInvoice {
    invoice_id: i64,
}

impl Perform for SyncInvoice {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lq_examples::init_logging();
    let pool = lq_examples::fresh_database("lq_ex_limits").await?;
    let start = |owner: &'static str| {
        Runtime::builder(pool.clone())
            .queue("partner_api", 8)
            .global_limit("partner_api", 3)
            .rate_limit("partner_api", RateLimit::per_second(20))
            .owner(owner)
            .start()
    };
    let (a, b) = (start("worker-a").await?, start("worker-b").await?);
    let jobs = (0..60).map(|invoice_id| SyncInvoice { invoice_id });
    SyncInvoice::enqueue_many(&pool, jobs, EnqueueOptions::new()).await?;

    let finished = lq_runtime::JobFilter::new().state(lq_runtime::JobState::Succeeded);
    let succeeded = |counts: Vec<control::JobCount>| counts.iter().map(|c| c.count).sum::<u64>();
    while succeeded(control::count(&pool, &finished).await?) < 60 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for rt in control::runtimes(&pool).await? {
        println!("{}: {}", rt.id, rt.queues_described().join(", "));
    }
    for q in control::queues(&pool).await? {
        if let Some(rate) = q.rate_limit {
            println!("queue {}: rate limit {rate}", q.name);
        }
    }
    a.shutdown().await?;
    b.shutdown().await?;

    // What the database recorded: starts in each clock second, and the most
    // running at once. The bucket starts full, so the first second may start
    // its 20 tokens and the 20 it refills; each later one starts 20.
    let (per_second, at_once): (Vec<i64>, i64) = sqlx::query_as(
        "select array(select count(*) from lq.finished_jobs
                      group by date_trunc('second', started_at)
                      order by date_trunc('second', started_at)),
                (select max(n) from (
                    select count(*) as n from lq.finished_jobs a join lq.finished_jobs b
                        on b.started_at <= a.started_at and a.started_at < b.finished_at
                    group by a.id) as running)",
    )
    .fetch_one(&pool)
    .await?;
    println!("started in each clock second: {per_second:?}");
    println!("most running at once: {at_once}");
    Ok(())
}
