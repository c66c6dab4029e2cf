//! Scenario 6: SIGTERM to a worker with long jobs in flight and a 2 s grace period.
//!
//! The victim (which leaves the signal to `Runtime::shutdown_on_signal`) claims 4
//! jobs of 800 ms and 4 jobs of 30 s (20 ms when run again), all under a 60 s
//! lease. On SIGTERM the short ones must finish within the grace period, and the
//! long ones must go back to the queue at once — not after the lease — without
//! spending an attempt, so that another worker finishes them.

use std::time::Duration;

use anyhow::{Context, Result};
use lq_runtime::{EnqueueOptions, Job};

use super::Stage;
use crate::{
    classify::Expect,
    jobs::{Long, Spec},
    probe::{self, Deadline},
    workers::Fleet,
};

const GRACE_MS: u64 = 2000;

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    let mut fleet = Fleet::new(st.name, st.worker_spec(8));
    let victim_spec = crate::workers::WorkerSpec {
        grace_ms: GRACE_MS,
        builtin_signal: true,
        ..st.worker_spec(8)
    };
    let v = fleet.start_one(victim_spec)?;
    let victim = fleet.get(v).context("victim")?.owner.clone();
    let mut short = Vec::new();
    let mut long = Vec::new();
    for seq in 0..8u64 {
        let spec = if seq < 4 {
            Spec {
                seq,
                work_ms: 800,
                ..Spec::default()
            }
        } else {
            Spec {
                seq,
                work_ms: 30_000,
                rerun_ms: Some(20),
                ..Spec::default()
            }
        };
        let id = Long { spec }
            .enqueue_with(&st.pool, EnqueueOptions::new())
            .await?
            .id;
        st.ledger.ack(id, Expect::Succeed);
        if seq < 4 {
            short.push(id)
        } else {
            long.push(id)
        }
    }
    let d = Deadline::new("the victim to hold all 8 jobs", Duration::from_secs(20));
    while probe::held_by(&st.pool, &victim).await?.len() < 8 {
        d.tick().await?;
    }
    let other = fleet.start(1)?[0];
    let helper = fleet.get(other).context("helper")?.owner.clone();
    let d = Deadline::new("the second worker to be up", Duration::from_secs(20));
    while !probe::has_published(&st.pool, &helper).await? {
        d.tick().await?;
    }

    let fault_at = probe::db_now(&st.pool).await?;
    let mut w = fleet.take(v).context("victim")?;
    w.signal("TERM")?;
    st.info(format!(
        "SIGTERM {victim} holding 8 jobs (grace {GRACE_MS} ms)"
    ));
    let status = w
        .wait_exit(Duration::from_millis(GRACE_MS) + Duration::from_secs(10))
        .await?;
    let exited_after = probe::db_now(&st.pool).await? - fault_at;
    st.info(format!(
        "{victim} exited {status} {exited_after:.2}s after SIGTERM"
    ));
    st.check(status.success(), format!("victim exited with {status}"));
    // Well under the 60 s lease: only the hand-back can bring them back this soon.
    st.drain(&mut fleet, Duration::from_secs(20), false).await?;

    let rows: Vec<(i64, String, i32, i32, String, bool, f64)> = sqlx::query_as(
        "select p.job_id, p.worker, p.attempt, j.attempts, j.errors::text, p.finished_at is not null,
                extract(epoch from p.started_at)::float8
         from fault.performed p join lq.all_jobs j on j.id = p.job_id order by p.job_id, p.started_at",
    )
    .fetch_all(&st.pool)
    .await?;
    for id in &short {
        let runs: Vec<_> = rows.iter().filter(|r| r.0 == *id).collect();
        let ok = runs.len() == 1 && runs[0].1 == victim && runs[0].5 && runs[0].3 == 1;
        st.check(ok, format!("job {id} (800 ms) should have finished on {victim} within the grace period: {runs:?}"));
    }
    for id in &long {
        let runs: Vec<_> = rows.iter().filter(|r| r.0 == *id).collect();
        let ok = runs.len() == 2
            && runs[0].1 == victim
            && !runs[0].5
            && runs[1].1 == helper
            && runs[1].5
            && runs[1].2 == runs[0].2
            && runs[1].3 == 1
            && runs[1].4 == "[]";
        st.check(
            ok,
            format!(
                "job {id} (30 s) should have been handed back with its attempt refunded: {runs:?}"
            ),
        );
        if let Some(r) = runs.get(1) {
            st.info(format!(
                "job {id} restarted by {} {:.2}s after SIGTERM, attempt {}",
                r.1,
                r.6 - fault_at,
                r.2
            ));
        }
    }
    st.recovery(
        "SIGTERM (handed-back jobs completed elsewhere)",
        fault_at,
        Some(&long),
    )
    .await?;
    Ok(fleet)
}
