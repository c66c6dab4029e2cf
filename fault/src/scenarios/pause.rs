//! Scenario 9: a queue paused mid-run, every worker restarted while it is
//! paused, then resumed.
//!
//! 2,000 jobs, 3 workers x 8 slots. At 30% done the queue is paused: no claim
//! may start after the pause returned (running jobs finish), none after every
//! worker was killed and replaced, and after resuming everything completes.

use std::time::Duration;

use anyhow::Result;
use lq_runtime::control;

use super::Stage;
use crate::{
    classify::Expect,
    probe::{self, Deadline},
    workers::Fleet,
};

const JOBS: u64 = 2000;

/// Claims (attempt starts) after `t` (epoch seconds, database time).
async fn claims_after(st: &Stage<'_>, t: f64) -> Result<i64> {
    Ok(
        sqlx::query_scalar("select count(*) from lq.all_jobs where started_at > to_timestamp($1)")
            .bind(t)
            .fetch_one(&st.pool)
            .await?,
    )
}

/// Waits until every live worker of `fleet` has published its counters after
/// `t`: each has started and run its loops since.
async fn all_published_after(st: &Stage<'_>, fleet: &Fleet, t: f64) -> Result<()> {
    let owners: Vec<String> = fleet.live().into_iter().map(|(_, o)| o).collect();
    let d = Deadline::new("every worker to run", Duration::from_secs(30));
    loop {
        let n: i64 = sqlx::query_scalar(
            "select count(*) from fault.worker_stats where owner = any($1) and at > to_timestamp($2)",
        )
        .bind(&owners)
        .bind(t)
        .fetch_one(&st.pool)
        .await?;
        if n == owners.len() as i64 {
            return Ok(());
        }
        d.tick().await?;
    }
}

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    let specs = st.plain_specs(0, JOBS, 30);
    st.enqueue_work(specs, Expect::Succeed).await?;
    let mut fleet = Fleet::new(st.name, st.worker_spec(8));
    fleet.start(3)?;
    let d = Deadline::new("30% done", Duration::from_secs(60));
    while probe::count_state(&st.pool, "succeeded").await? < (JOBS * 3 / 10) as i64 {
        d.tick().await?;
    }
    control::pause_queue(&st.pool, "default", "fault suite").await?;
    let paused_at = probe::db_now(&st.pool).await?;
    st.info("paused queue default");

    // Running jobs finish; nothing new starts.
    let d = Deadline::new("the running jobs to finish", Duration::from_secs(30));
    while probe::count_state(&st.pool, "running").await? > 0 {
        d.tick().await?;
    }
    // Two more seconds of polls (ten poll intervals) claim nothing.
    let watch_until = paused_at + 2.0;
    while probe::db_now(&st.pool).await? < watch_until {
        tokio::time::sleep(probe::POLL).await;
    }
    let late = claims_after(st, paused_at).await?;
    st.check(
        late == 0,
        format!("{late} jobs started after the pause returned"),
    );
    let left = probe::count_state(&st.pool, "queued").await?;
    st.note(format!(
        "paused with {left} jobs queued; running jobs finished"
    ));

    // Every worker killed and replaced: the pause is in the database.
    let restarted_at = probe::db_now(&st.pool).await?;
    for (i, _) in fleet.live() {
        fleet.kill9_and_restart(i).await?;
    }
    all_published_after(st, &fleet, restarted_at).await?;
    let watch_until = probe::db_now(&st.pool).await? + 2.0;
    while probe::db_now(&st.pool).await? < watch_until {
        tokio::time::sleep(probe::POLL).await;
    }
    let late = claims_after(st, paused_at).await?;
    st.check(
        late == 0,
        format!("{late} jobs started after every worker restarted while paused"),
    );

    let resumed_at = probe::db_now(&st.pool).await?;
    control::resume_queue(&st.pool, "default").await?;
    st.drain(&mut fleet, Duration::from_secs(60), false).await?;
    let first: Option<f64> = sqlx::query_scalar(
        "select extract(epoch from min(started_at))::float8 from lq.all_jobs
         where started_at > to_timestamp($1)",
    )
    .bind(resumed_at)
    .fetch_one(&st.pool)
    .await?;
    if let Some(first) = first {
        st.note(format!(
            "first claim {:.3}s after resume",
            first - resumed_at
        ));
    }
    Ok(fleet)
}
