//! Scenario 11: an operator's lock on the queue table, held past the leases and
//! the workers' `db_timeout`, mid-run.
//!
//! A careless `ALTER TABLE lq.jobs ...`, `VACUUM FULL`, `CLUSTER` or `LOCK TABLE`
//! takes an ACCESS EXCLUSIVE lock: every claim, completion, heartbeat and
//! rescue of every worker waits on it. 6,000 jobs, 3 workers x 8 slots, 2 s
//! leases, a 3 s `db_timeout`. At 25 % done the lock is held for 5 s (past the
//! leases and one `db_timeout`), at 60 % for 12 s (four of them: every loop's
//! calls are cut short by their bounds and retried, again and again). No worker
//! may exit, none may leak a slot, and every job must end `succeeded`, run
//! again only where its lease had expired.

use std::time::Duration;

use anyhow::{Context, Result};
use sqlx::{Connection, PgConnection};

use super::Stage;
use crate::{classify::Expect, probe, workers::Fleet};

const JOBS: u64 = 6000;

/// When each lock is taken (share of the jobs succeeded) and how long it is held.
const LOCKS: [(f64, Duration); 2] = [
    (0.25, Duration::from_secs(5)),
    (0.60, Duration::from_secs(12)),
];

/// Worker sessions waiting for a lock on a relation (the queue table) now.
async fn sessions_waiting_on_the_table(st: &Stage<'_>) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "select count(*) from pg_stat_activity
         where datname = current_database() and application_name = $1
           and wait_event_type = 'Lock' and wait_event = 'relation'",
    )
    .bind(crate::WORKER_APP)
    .fetch_one(&st.pool)
    .await?)
}

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    let specs = st.plain_specs(0, JOBS, 30);
    st.enqueue_work(specs, Expect::Succeed).await?;
    let mut fleet = Fleet::new(st.name, st.worker_spec(8));
    fleet.start(3)?;
    let mut released = Vec::new();
    for (k, (share, hold)) in LOCKS.into_iter().enumerate() {
        let want = (share * JOBS as f64) as i64;
        st.until_succeeded_and_running(&mut fleet, want, Duration::from_secs(40))
            .await?;
        let mut operator = PgConnection::connect(&st.url).await?;
        sqlx::raw_sql("begin; lock table lq.jobs in access exclusive mode")
            .execute(&mut operator)
            .await
            .context("taking the lock")?;
        st.info(format!("lock {k}: lq.jobs locked for {hold:?}"));
        // The lock is the fault: it is held for its time whatever the workers do,
        // counting the worker sessions queued behind it every half second.
        let until = tokio::time::Instant::now() + hold;
        let mut waiting = 0;
        while tokio::time::Instant::now() < until {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            tokio::time::sleep(Duration::from_millis(500).min(left)).await;
            waiting = waiting.max(sessions_waiting_on_the_table(st).await?);
        }
        st.check(
            waiting > 0,
            format!("lock {k}: no worker session ever waited on it: the fault missed"),
        );
        for e in fleet.supervise()? {
            st.fail(format!(
                "worker {} exited while the table was locked: {}",
                e.owner, e.status
            ));
        }
        sqlx::raw_sql("commit").execute(&mut operator).await?;
        let at = probe::db_now(&st.pool).await?;
        operator.close().await?;
        st.note(format!(
            "lock {k} held {hold:?}: up to {waiting} worker sessions waiting on it at once"
        ));
        released.push((k, at));
    }
    st.drain(&mut fleet, Duration::from_secs(60), false).await?;
    for (k, at) in released {
        st.recovery(&format!("lock {k} released"), at, None).await?;
    }
    st.check_slots(&mut fleet, 8).await?;
    Ok(fleet)
}
