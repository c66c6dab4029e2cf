//! Scenario 3: PostgreSQL stopped with `-m immediate` mid-run and restarted, twice,
//! with producers enqueueing throughout. Every acknowledged enqueue must survive
//! and run; enqueues whose commit reply was lost are "in doubt" and, if committed,
//! must run too.
//!
//! At 30% done the server is stopped and restarted as soon as every producer has
//! seen an enqueue fail (a short outage); at 65% it stays down until every lease
//! held at the stop has expired (by the database clock, read just before), so the
//! workers come back to leases they no longer hold.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Result};
use lq_runtime::Job;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::Stage;
use crate::{
    classify::Expect,
    jobs::{Spec, Work},
    probe::{self, Deadline},
    workers::Fleet,
    PRODUCER_APP,
};

const INITIAL: u64 = 3000;
const PRODUCERS: u64 = 2;

#[derive(Default)]
struct Produced {
    acked: Mutex<Vec<i64>>,
    in_doubt: Mutex<Vec<u64>>,
    acks: AtomicU64,
    failures: Vec<AtomicU64>,
    stop: AtomicBool,
}

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    if !st.env.cluster.is_private() {
        bail!("needs the private cluster (run under LQ_FORCE_PRIVATE=1 scripts/with-postgres)");
    }
    let specs = st.plain_specs(0, INITIAL, 20);
    st.enqueue_work(specs, Expect::Succeed).await?;
    let mut fleet = Fleet::new(st.name, st.worker_spec(8));
    fleet.start(3)?;

    let produced = Arc::new(Produced {
        failures: (0..PRODUCERS).map(|_| AtomicU64::new(0)).collect(),
        ..Default::default()
    });
    let opts: PgConnectOptions = st
        .url
        .parse::<PgConnectOptions>()?
        .application_name(PRODUCER_APP);
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy_with(opts);
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let (pool, produced, seed) = (pool.clone(), produced.clone(), st.rng.u64(..));
        tasks.push(tokio::spawn(produce(p, pool, produced, seed)));
    }
    for (round, frac, long) in [(1, 0.30, false), (2, 0.65, true)] {
        outage(st, &mut fleet, &produced, round, frac, long).await?;
    }
    produced.stop.store(true, Relaxed);
    for t in tasks {
        t.await?;
    }
    for id in produced.acked.lock().expect("acked").iter() {
        st.ledger.ack(*id, Expect::Succeed);
    }
    st.ledger
        .in_doubt
        .extend(produced.in_doubt.lock().expect("in doubt").iter());
    st.info(format!(
        "producers: {} enqueues acknowledged",
        produced.acks.load(Relaxed)
    ));
    st.check_slots(&mut fleet, 8).await?;
    Ok(fleet)
}

/// One stop/start of the server, when `frac` of the initial jobs are done.
async fn outage(
    st: &mut Stage<'_>,
    fleet: &mut Fleet,
    produced: &Produced,
    round: u32,
    frac: f64,
    long: bool,
) -> Result<()> {
    let d = Deadline::new(
        format!("restart {round}: {frac} done, jobs running, producers acknowledged"),
        Duration::from_secs(30),
    );
    loop {
        for e in fleet.supervise()? {
            st.fail(format!(
                "worker {} exited on its own: {}",
                e.owner, e.status
            ));
        }
        let done = probe::count_state(&st.pool, "succeeded").await?;
        let running: i64 = probe::running_by_owner(&st.pool).await?.values().sum();
        if done >= (INITIAL as f64 * frac) as i64
            && running > 0
            && produced.acks.load(Relaxed) >= 50 * u64::from(round)
        {
            break;
        }
        d.tick().await?;
    }
    let leases_left: f64 = sqlx::query_scalar(
        "select coalesce(extract(epoch from max(lease_expires_at) - now())::float8, 0) from lq.all_jobs where state = 'running'",
    )
    .fetch_one(&st.pool)
    .await?;
    let fault_at = probe::db_now(&st.pool).await?;
    let before: Vec<u64> = produced.failures.iter().map(|f| f.load(Relaxed)).collect();
    let down = Instant::now();
    st.env.cluster.stop_immediate().await?;
    st.info(format!(
        "restart {round}: server stopped with -m immediate ({} enqueues acknowledged so far)",
        produced.acks.load(Relaxed)
    ));
    let d = Deadline::new(
        "every producer to see the server gone",
        Duration::from_secs(15),
    );
    while produced
        .failures
        .iter()
        .zip(&before)
        .any(|(f, b)| f.load(Relaxed) <= *b)
    {
        if d.tick().await.is_err() {
            st.fail("producers did not notice the server was down");
            break;
        }
    }
    if long {
        // Every lease held at the stop has expired by now (plus a margin for clocks).
        let expiry = Duration::from_secs_f64(leases_left.max(0.0) + 0.3);
        tokio::time::sleep(expiry.saturating_sub(down.elapsed())).await;
    }
    st.env.cluster.start().await?;
    let acks_at_restart = produced.acks.load(Relaxed);
    st.info(format!(
        "restart {round}: server accepting connections {:.2}s after the stop began",
        down.elapsed().as_secs_f64()
    ));

    let d = Deadline::new(
        "producers to get 100 more enqueues acknowledged",
        Duration::from_secs(40),
    );
    while produced.acks.load(Relaxed) < acks_at_restart + 100 {
        for e in fleet.supervise()? {
            st.fail(format!(
                "worker {} exited on its own: {}",
                e.owner, e.status
            ));
        }
        d.tick().await?;
    }
    // Nothing commits between the stop and the new postmaster's start: the first
    // completion after that start is the first after the fault.
    let back = probe::server_started(&st.pool).await?;
    let d = Deadline::new("a completion after the restart", Duration::from_secs(30));
    let first = loop {
        if let Some(t) = probe::first_completion_after(&st.pool, back, None).await? {
            break t;
        }
        d.tick().await?;
    };
    st.info(format!(
        "restart {round}: first completion {:.3}s after the stop ({:.3}s after the postmaster started)",
        first - fault_at,
        first - back
    ));
    st.recoveries.push(first - fault_at);
    Ok(())
}

/// Enqueues one job per transaction until told to stop; an enqueue that fails is
/// in doubt (its commit may have landed without the reply).
async fn produce(p: u64, pool: sqlx::PgPool, produced: Arc<Produced>, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut n = 0u64;
    while !produced.stop.load(Relaxed) {
        let seq = 1_000_000 * (p + 1) + n;
        n += 1;
        let job = Work {
            spec: Spec {
                seq,
                work_ms: rng.u32(5..=20),
                ..Spec::default()
            },
        };
        let r = tokio::time::timeout(Duration::from_secs(5), async {
            let mut tx = pool.begin().await?;
            let e = job.enqueue(&mut tx).await?;
            tx.commit().await?;
            anyhow::Ok(e.id)
        })
        .await;
        match r {
            Ok(Ok(id)) => {
                produced.acked.lock().expect("acked").push(id);
                produced.acks.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await; // pacing, not a trigger
            }
            _ => {
                produced.in_doubt.lock().expect("in doubt").push(seq);
                produced.failures[p as usize].fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
