//! Scenario 8: the maintenance leader killed with `kill -9`, then the next one
//! frozen with SIGSTOP and resumed.
//!
//! 3,000 jobs, 3 workers x 8 slots, 2 s job leases, 5 s leader lease. The history
//! is seeded with 20 finished jobs past their retention and 20 within it. Each
//! time, once the leader holds running jobs, it is hit; another worker must take
//! the lease within the lease plus one beat, its jobs must be rescued (each
//! attempt once) and completed elsewhere, and a frozen leader that wakes must not
//! take the lease back. At the end, pruning (leader-only) has removed exactly the
//! expired history.

use std::time::Duration;

use anyhow::{Context, Result};

use super::Stage;
use crate::{
    classify::Expect,
    probe::{self, Deadline},
    workers::Fleet,
};

const JOBS: u64 = 3000;
/// The runtime's default leader lease, which the workers run with.
const LEADER_LEASE: f64 = 5.0;
/// A takeover may take the lease plus a beat (a fifth of it) plus this slack.
const SLACK: f64 = 1.0;

/// The runtime holding a valid leader lease, if any.
async fn leader(st: &Stage<'_>) -> Result<Option<String>> {
    Ok(sqlx::query_scalar(
        "select holder from lq.leader where name = 'maintenance' and expires_at >= now()",
    )
    .fetch_optional(&st.pool)
    .await?)
}

/// Waits until `want` jobs succeeded and the leader, one of the fleet, holds
/// running jobs; returns its fleet index and owner name.
async fn leader_at_work(
    st: &mut Stage<'_>,
    fleet: &mut Fleet,
    want: i64,
) -> Result<(usize, String)> {
    let d = Deadline::new(
        format!("{want} succeeded and a leader holding running jobs"),
        Duration::from_secs(60),
    );
    loop {
        for e in fleet.supervise()? {
            st.fail(format!(
                "worker {} exited on its own: {}",
                e.owner, e.status
            ));
        }
        if probe::count_state(&st.pool, "succeeded").await? >= want {
            if let Some(holder) = leader(st).await? {
                let running = probe::running_by_owner(&st.pool).await?;
                let found = fleet.live().into_iter().find(|(_, o)| *o == holder);
                if let Some((i, owner)) =
                    found.filter(|(_, o)| running.get(o).is_some_and(|n| *n > 0))
                {
                    return Ok((i, owner));
                }
            }
        }
        d.tick().await?;
    }
}

/// Waits for a leader other than `old`; checks and returns how long after
/// `fault_at` (database time) it was elected.
async fn takeover(st: &mut Stage<'_>, old: &str, fault_at: f64, what: &str) -> Result<String> {
    let d = Deadline::new(
        format!("a new leader after {what}"),
        Duration::from_secs(30),
    );
    let (holder, elected_at): (String, f64) = loop {
        let row: Option<(String, f64)> = sqlx::query_as(
            "select holder, extract(epoch from elected_at)::float8 from lq.leader
             where name = 'maintenance' and expires_at >= now() and holder <> $1",
        )
        .bind(old)
        .fetch_optional(&st.pool)
        .await?;
        if let Some(row) = row {
            break row;
        }
        d.tick().await?;
    };
    let took = elected_at - fault_at;
    st.note(format!(
        "{what}: {holder} took the leader lease after {took:.2}s"
    ));
    st.check(
        took <= LEADER_LEASE * 1.2 + SLACK,
        format!("leadership moved {took:.2}s after {what}, over the lease ({LEADER_LEASE}s) plus a beat"),
    );
    Ok(holder)
}

/// Waits until every job of `held` has succeeded.
async fn wait_completed(st: &Stage<'_>, held: &[probe::HeldLease], what: &str) -> Result<()> {
    let ids: Vec<i64> = held.iter().map(|h| h.id).collect();
    let d = Deadline::new(what, Duration::from_secs(30));
    loop {
        let done: i64 = sqlx::query_scalar(
            "select count(*) from lq.all_jobs where id = any($1) and state = 'succeeded'",
        )
        .bind(&ids)
        .fetch_one(&st.pool)
        .await?;
        if done == ids.len() as i64 {
            return Ok(());
        }
        d.tick().await?;
    }
}

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    // History: 20 jobs past the 24 h retention, 20 within it.
    sqlx::query(
        "insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at, attempts,
             max_attempts, errors, created_at, finished_at)
         select 900000000 + g, 'fault.history', 'default', 0, '{}', 'succeeded', now(), 1, 1, '[]',
             now() - interval '2 days',
             now() - case when g <= 20 then interval '25 hours' else interval '23 hours' end
         from generate_series(1, 40) g",
    )
    .execute(&st.pool)
    .await?;
    // Jobs of up to 150 ms keep every worker's slots busy, so a leader holds
    // running jobs whenever it is hit.
    let specs = st.plain_specs(0, JOBS, 150);
    st.enqueue_work(specs, Expect::Succeed).await?;
    st.info(format!(
        "enqueued {JOBS} jobs; starting 3 workers x 8 slots"
    ));
    let mut fleet = Fleet::new(st.name, st.worker_spec(8));
    fleet.start(3)?;

    // 1. kill -9 of the leader.
    let (victim, victim_owner) = leader_at_work(st, &mut fleet, (JOBS / 5) as i64).await?;
    let fault_at = probe::db_now(&st.pool).await?;
    let killed = fleet.kill9_and_restart(victim).await?;
    let held = probe::held_by(&st.pool, &killed).await?;
    st.info(format!(
        "kill -9 of leader {victim_owner} holding {} running jobs; restarted",
        held.len()
    ));
    let heir = takeover(st, &killed, fault_at, "kill -9 of the leader").await?;
    // Its jobs come back before the next fault, which may hit the new leader.
    wait_completed(st, &held, "the killed leader's jobs to complete elsewhere").await?;
    let kill = (fault_at, held);

    // 2. SIGSTOP of the next leader, then SIGCONT.
    let (frozen, frozen_owner) = leader_at_work(st, &mut fleet, (JOBS / 2) as i64).await?;
    st.check(
        frozen_owner == heir,
        format!("the leader changed on its own from {heir} to {frozen_owner}"),
    );
    fleet.get(frozen).context("frozen leader")?.signal("STOP")?;
    let fault_at = probe::db_now(&st.pool).await?;
    let held = probe::held_by(&st.pool, &frozen_owner).await?;
    st.info(format!(
        "SIGSTOP of leader {frozen_owner} holding {} running jobs",
        held.len()
    ));
    let successor = takeover(st, &frozen_owner, fault_at, "SIGSTOP of the leader").await?;
    st.check(!held.is_empty(), "the frozen leader held no running jobs");
    wait_completed(st, &held, "the frozen leader's jobs to complete elsewhere").await?;
    let freeze = (fault_at, held);
    fleet.get(frozen).context("frozen leader")?.signal("CONT")?;
    // The woken runtime publishes its counters again once it runs: by then its
    // beats have run too, and the lease must still be its successor's.
    let resumed_at = probe::db_now(&st.pool).await?;
    let d = Deadline::new("the woken leader to run again", Duration::from_secs(15));
    loop {
        let published: bool = sqlx::query_scalar(
            "select exists (select from fault.worker_stats
                            where owner = $1 and at > to_timestamp($2) + interval '1.5 s')",
        )
        .bind(&frozen_owner)
        .bind(resumed_at)
        .fetch_one(&st.pool)
        .await?;
        if published {
            break;
        }
        d.tick().await?;
    }
    let now_leads = leader(st).await?;
    st.check(
        now_leads.as_deref() == Some(successor.as_str()),
        format!("after SIGCONT the lease is held by {now_leads:?}, not by {successor}"),
    );

    st.drain(&mut fleet, Duration::from_secs(60), false).await?;
    for (what, (fault_at, held)) in [("leader kill", kill), ("leader freeze", freeze)] {
        st.check(
            !held.is_empty(),
            format!("{what}: the leader held no running jobs"),
        );
        st.recovery_of_leases(
            &format!("{what} (its jobs completed elsewhere)"),
            fault_at,
            &held,
        )
        .await?;
    }

    // Each lost attempt was rescued once.
    let twice: Vec<(i64, String)> = sqlx::query_as(
        "select j.id, e->>'attempt' from lq.all_jobs j, jsonb_array_elements(j.errors) e
         where e->>'error' like 'lease expired%'
         group by j.id, e->>'attempt' having count(*) > 1",
    )
    .fetch_all(&st.pool)
    .await?;
    st.check(
        twice.is_empty(),
        format!("attempts rescued twice: {twice:?}"),
    );
    // Pruning ran on a leader, and only on what had expired.
    let d = Deadline::new("the expired history to be pruned", Duration::from_secs(20));
    let (expired, kept) = loop {
        let (expired, kept): (i64, i64) = sqlx::query_as(
            "select count(*) filter (where finished_at < now() - interval '24 hours'),
                    count(*) filter (where finished_at >= now() - interval '24 hours')
             from lq.finished_jobs where kind = 'fault.history'",
        )
        .fetch_one(&st.pool)
        .await?;
        if expired == 0 || d.tick().await.is_err() {
            break (expired, kept);
        }
    };
    st.check(
        expired == 0,
        format!("{expired} expired history rows were never pruned"),
    );
    st.check(
        kept == 20,
        format!(
            "{} history rows within retention were pruned early",
            20 - kept
        ),
    );
    Ok(fleet)
}
