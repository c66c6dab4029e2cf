//! Scenario 4: a storm of `pg_terminate_backend` on every worker connection (pool,
//! LISTEN and heartbeat connections alike, found by `application_name`).
//!
//! 3,000 jobs, 3 workers x 8 slots. At every further 10% done, a round of three
//! waves: terminate every worker backend, wait until the workers have reconnected
//! (by `pg_stat_activity`), terminate again. Workers must reconnect and finish.

use std::time::Duration;

use anyhow::Result;

use super::Stage;
use crate::{
    classify::Expect,
    probe::{self, Deadline},
    workers::Fleet,
};

const JOBS: u64 = 3000;
const WAVES: usize = 3;

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    let specs = st.plain_specs(0, JOBS, 20);
    st.enqueue_work(specs, Expect::Succeed).await?;
    let mut fleet = Fleet::new(st.name, st.worker_spec(8));
    fleet.start(3)?;
    let mut total = 0;
    let mut rounds = Vec::new();
    for round in 1..=8u64 {
        let want = (JOBS * round / 10) as i64;
        st.until_succeeded_and_running(&mut fleet, want, Duration::from_secs(40))
            .await?;
        let mut last_at = 0.0;
        for wave in 0..WAVES {
            if wave > 0 {
                let d = Deadline::new("workers to reconnect", Duration::from_secs(20));
                while probe::worker_backends(&st.pool).await? == 0 {
                    d.tick().await?;
                }
            }
            last_at = probe::db_now(&st.pool).await?;
            total += probe::terminate_workers(&st.pool).await?;
        }
        rounds.push((round, last_at));
    }
    st.info(format!(
        "{} rounds x {WAVES} waves: {total} worker backends terminated",
        rounds.len()
    ));
    st.drain(&mut fleet, Duration::from_secs(60), false).await?;
    for (round, at) in rounds {
        st.recovery(&format!("terminate round {round}"), at, None)
            .await?;
    }
    st.check_slots(&mut fleet, 8).await?;
    Ok(fleet)
}
