//! A rate limit: at most N jobs of a queue start per period across every
//! runtime sharing the database, as a token bucket in `lq.rate_limits`.

use std::time::Duration;

use lq_runtime::{EnqueueOptions, Error, Job, JobContext, JobError, Perform, RateLimit, Runtime};
use lq_runtime::{RuntimeBuilder, RuntimeConfig};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

use crate::roles::{grant, pool_as, Roles, WORKER_GRANTS};

/// Does nothing: what is measured is when each attempt started.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.rated", queue = "rated")]
struct RatedWork;

impl Perform for RatedWork {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Five tokens, refilled at ten a second.
const RATE: RateLimit = RateLimit::new(5, Duration::from_millis(500));

/// Each attempt's start by the database's clock, in seconds, earliest first.
async fn starts(db: &TestDb) -> Vec<f64> {
    sqlx::query_scalar(
        "select extract(epoch from started_at)::float8 from lq.finished_jobs
         where kind = 'test.rated' order by started_at",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// The most attempts that started in a window, beyond what the bucket allows
/// there: `allowed` at once, then `allowed / period` a second. `slack` covers
/// the time between a claim's refill of the bucket and the start it stamps, two
/// statements of one transaction.
fn most_over_the_rate(starts: &[f64], rate: RateLimit, slack: f64) -> f64 {
    let mut worst = f64::MIN;
    for i in 0..starts.len() {
        for j in i..starts.len() {
            let started = (j - i + 1) as f64;
            let allowed =
                f64::from(rate.allowed()) + rate.per_second_f64() * (starts[j] - starts[i]) + slack;
            worst = worst.max(started - allowed);
        }
    }
    worst
}

fn rated(db: &TestDb, handlers: usize) -> RuntimeBuilder {
    // Polls once a minute: a claimer that found the bucket empty must wake on
    // its own when the next token is due, or the jobs take minutes.
    Runtime::builder(db.pool.clone())
        .config(RuntimeConfig {
            poll_interval: Duration::from_secs(60),
            ..RuntimeConfig::default()
        })
        .queue("rated", handlers)
        .rate_limit("rated", RATE)
}

/// Enqueues `jobs`, waits for every one to succeed, then stops `runtimes`.
async fn run_to_the_end<J: Job>(db: &TestDb, jobs: Vec<J>, runtimes: Vec<Runtime>) {
    let n = jobs.len();
    J::enqueue_many(&db.pool, jobs, EnqueueOptions::new())
        .await
        .unwrap();
    db.wait_for(
        "every job to succeed",
        &format!("select count(*) = {n} from lq.finished_jobs where state = 'succeeded'"),
        Duration::from_secs(30),
    )
    .await;
    for rt in runtimes {
        rt.shutdown().await.unwrap();
    }
}

/// Two runtimes of four handlers each start the queue's 25 jobs no faster than
/// its rate limit across both, each claimer waking when its next token is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_start_a_queues_jobs_no_faster_than_its_rate_limit() {
    let db = TestDb::new().await;
    let a = rated(&db, 4).start().await.unwrap();
    let b = rated(&db, 4).start().await.unwrap();
    run_to_the_end(&db, (0..25).map(|_| RatedWork).collect(), vec![a, b]).await;

    let starts = starts(&db).await;
    assert_eq!(starts.len(), 25);
    // Slack of one token: 100 ms between a claim's two statements.
    let over = most_over_the_rate(&starts, RATE, 1.0);
    assert!(
        over <= 0.0,
        "{over:.1} more jobs started in a window than 5 at once and 10 a second allow: {starts:?}"
    );
    // 20 jobs beyond the first five at 10 a second: two seconds at least.
    let span = starts[24] - starts[0];
    assert!(span >= 1.8, "25 jobs started within {span:.2} s");
    // The bucket is in the database for operators, with the rate it ran at.
    let (allowed, period): (i32, f64) = sqlx::query_as(
        "select allowed, period_secs from lq.rate_limits where queue = 'rated' and tokens >= 0",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((allowed, period), (5, 0.5));
}

/// A queue without a rate limit has no bucket and is not slowed: the check
/// above fails for it.
#[tokio::test]
async fn without_the_limit_the_same_jobs_start_faster_than_the_rate() {
    let db = TestDb::new().await;
    let rt = Runtime::builder(db.pool.clone())
        .queue("rated", 8)
        .start()
        .await
        .unwrap();
    run_to_the_end(&db, (0..25).map(|_| RatedWork).collect(), vec![rt]).await;
    assert!(most_over_the_rate(&starts(&db).await, RATE, 1.0) > 0.0);
    assert_eq!(db.number("select count(*) from lq.rate_limits").await, 0);
}

#[tokio::test]
async fn a_rate_limit_that_cannot_work_fails_start() {
    let db = TestDb::new().await;
    let start = |queue: &'static str, limit: RateLimit| {
        Runtime::builder(db.pool.clone())
            .queue("rated", 2)
            .rate_limit(queue, limit)
            .start()
    };
    match start("elsewhere", RateLimit::per_second(5)).await {
        Err(e @ Error::RateLimit { .. }) => assert_eq!(
            e.to_string(),
            "rate limit of 5 per 1s on queue \"elsewhere\": this runtime does not serve the queue: add it with .queue()"
        ),
        other => panic!("{:?}", other.map(|_| ())),
    }
    match start("rated", RateLimit::per_minute(0)).await {
        Err(Error::RateLimit { queue, reason, .. }) => {
            assert_eq!(queue, "rated");
            assert!(reason.contains("pause the queue"), "{reason}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    match start("rated", RateLimit::new(5, Duration::ZERO)).await {
        Err(Error::RateLimit { reason, .. }) => assert!(reason.contains("millisecond"), "{reason}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert_eq!(db.number("select count(*) from lq.rate_limits").await, 0);
}

/// Works for 20 ms: long enough for two to overlap.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.rated_work", queue = "rated")]
struct RatedSlowWork;

impl Perform for RatedSlowWork {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }
}

/// A queue with both limits keeps both: at most two of its jobs run at once
/// (by the database's record of each attempt), and they start no faster than
/// the rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_and_a_global_limit_on_one_queue_both_hold() {
    let db = TestDb::new().await;
    let a = rated(&db, 4)
        .global_limit("rated", 2)
        .start()
        .await
        .unwrap();
    let b = rated(&db, 4)
        .global_limit("rated", 2)
        .start()
        .await
        .unwrap();
    run_to_the_end(&db, (0..15).map(|_| RatedSlowWork).collect(), vec![a, b]).await;
    let most_at_once = db
        .number(
            "select max(n) from (
                 select count(*) as n from lq.finished_jobs a join lq.finished_jobs b
                     on b.started_at <= a.started_at and a.started_at < b.finished_at
                 group by a.id) as running_at_each_start",
        )
        .await;
    assert!(
        most_at_once <= 2,
        "{most_at_once} jobs ran at once, over the limit of 2"
    );
    let starts: Vec<f64> = sqlx::query_scalar(
        "select extract(epoch from started_at)::float8 from lq.finished_jobs order by started_at",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let over = most_over_the_rate(&starts, RATE, 1.0);
    assert!(
        over <= 0.0,
        "{over:.1} more jobs started in a window than the rate allows: {starts:?}"
    );
}

/// A worker role granted what docs/roles.md gives a runtime without rate limits
/// runs one, and is refused a rate limit at start, each missing privilege named:
/// a deployment upgraded to schema 13 needs the new grant only to use them.
#[tokio::test]
async fn a_role_without_the_buckets_grant_is_refused_a_rate_limit_at_start() {
    let mut roles = Roles::default();
    let db = TestDb::new().await;
    let worker = roles.create("lq_unrated", "").await;
    const BUCKETS: &str = "grant select, insert, update on lq.rate_limits to {role};";
    assert!(WORKER_GRANTS.contains(BUCKETS));
    grant(&db.pool, &WORKER_GRANTS.replace(BUCKETS, ""), &worker).await;
    let pool = pool_as(&db, &worker, 10).await;
    let plain = Runtime::builder(pool.clone())
        .queue("rated", 2)
        .start()
        .await
        .unwrap();
    plain.shutdown().await.unwrap();
    match Runtime::builder(pool)
        .queue("rated", 2)
        .rate_limit("rated", RATE)
        .start()
        .await
    {
        Err(Error::MissingPrivileges { role, missing }) => {
            assert_eq!(role, worker);
            assert_eq!(
                missing,
                [
                    "SELECT on lq.rate_limits",
                    "INSERT on lq.rate_limits",
                    "UPDATE on lq.rate_limits"
                ]
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// Each runtime records its limits: `control::runtimes` shows them, and the
/// doctor names the runtimes serving one queue that set different ones (one
/// without the limit claims as if there were none).
#[tokio::test]
async fn the_doctor_names_runtimes_that_disagree_on_a_queues_limits() {
    let db = TestDb::new().await;
    let limited = rated(&db, 2)
        .global_limit("rated", 3)
        .owner("rt-limited")
        .start()
        .await
        .unwrap();
    let plain = Runtime::builder(db.pool.clone())
        .queue("rated", 2)
        .owner("rt-plain")
        .start()
        .await
        .unwrap();
    db.wait_for(
        "both runtimes to beat",
        "select count(*) = 2 from lq.runtimes where expires_at > now()",
        Duration::from_secs(30),
    )
    .await;
    let runtimes = lq_runtime::control::runtimes(&db.pool).await.unwrap();
    let of = |id: &str| runtimes.iter().find(|r| r.id == id).unwrap();
    let limits = of("rt-limited").limits["rated"];
    assert_eq!((limits.global, limits.rate), (Some(3), Some(RATE)));
    assert_eq!(
        of("rt-limited").queues_described(),
        ["rated×2 (at most 3 at once, 5 per 500ms)"]
    );
    assert!(of("rt-plain").limits.is_empty());
    let check = |checks: Vec<lq_runtime::control::Check>| {
        checks.into_iter().find(|c| c.name == "limits").unwrap()
    };
    let found = check(lq_runtime::control::doctor(&db.pool).await.unwrap());
    assert!(!found.ok);
    assert!(
        found
            .detail
            .contains("rated: at most 3 at once, 5 per 500ms (rt-limited); none (rt-plain)"),
        "{}",
        found.detail
    );
    plain.shutdown().await.unwrap();
    db.wait_for(
        "the plain runtime's row to expire",
        "select count(*) = 1 from lq.runtimes where expires_at > now()",
        Duration::from_secs(30),
    )
    .await;
    assert!(check(lq_runtime::control::doctor(&db.pool).await.unwrap()).ok);
    limited.shutdown().await.unwrap();
}
