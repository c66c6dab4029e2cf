//! Scenario 1: `kill -9` of worker processes mid-job, again and again.
//!
//! 10,000 jobs, 4 workers x 8 slots, 2 s leases. At 10%, 25%, ... 85% succeeded,
//! a randomly chosen worker that holds running jobs is killed and replaced. Its
//! jobs must come back after their lease expires and complete elsewhere.

use std::time::Duration;

use anyhow::Result;

use super::Stage;
use crate::{
    classify::Expect,
    probe::{self, Deadline},
    workers::Fleet,
};

const JOBS: u64 = 10_000;
const KILL_AT: &[f64] = &[0.10, 0.25, 0.40, 0.55, 0.70, 0.85];

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    let specs = st.plain_specs(0, JOBS, 30);
    st.enqueue_work(specs, Expect::Succeed).await?;
    st.info(format!(
        "enqueued {JOBS} jobs; starting 4 workers x 8 slots"
    ));
    let mut fleet = Fleet::new(st.name, st.worker_spec(8));
    fleet.start(4)?;
    let mut faults = Vec::new();
    for (k, frac) in KILL_AT.iter().enumerate() {
        let want = (frac * JOBS as f64) as i64;
        let d = Deadline::new(
            format!("kill {k}: {want} succeeded and a victim holding running jobs"),
            Duration::from_secs(60),
        );
        let victim = loop {
            for e in fleet.supervise()? {
                st.fail(format!(
                    "worker {} exited on its own: {}",
                    e.owner, e.status
                ));
            }
            if probe::count_state(&st.pool, "succeeded").await? >= want {
                let running = probe::running_by_owner(&st.pool).await?;
                let holders: Vec<usize> = fleet
                    .live()
                    .into_iter()
                    .filter(|(_, owner)| running.get(owner).is_some_and(|n| *n > 0))
                    .map(|(i, _)| i)
                    .collect();
                if !holders.is_empty() {
                    break holders[st.rng.usize(..holders.len())];
                }
            }
            d.tick().await?;
        };
        let fault_at = probe::db_now(&st.pool).await?;
        let owner = fleet.kill9_and_restart(victim).await?;
        let held = probe::held_by(&st.pool, &owner).await?;
        st.info(format!(
            "kill -9 #{k} at {want}+ succeeded: {owner} holding {} running jobs; restarted",
            held.len()
        ));
        faults.push((k, fault_at, held));
    }
    st.drain(&mut fleet, Duration::from_secs(90), false).await?;
    for (k, fault_at, held) in faults {
        if !held.is_empty() {
            st.recovery_of_leases(
                &format!("kill #{k} (its jobs completed elsewhere)"),
                fault_at,
                &held,
            )
            .await?;
        }
    }
    Ok(fleet)
}
