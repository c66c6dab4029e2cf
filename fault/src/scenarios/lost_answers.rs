//! Scenario 12: answers lost after the server committed them.
//!
//! Every worker connection goes through a proxy ([`crate::proxy`]) that, every
//! 20–60 ms (seeded) while jobs are live, loses the next answer the server
//! sends on any connection, and once that statement has committed closes the
//! connection: a claim, a success, a heartbeat, a handler's own write, a
//! wake-up, whatever comes. 2,000 jobs under 60 s leases (`fault.long`), 3
//! workers x 8 slots. Leases that long cannot expire during the storm, so
//! every job must end `succeeded` having spent exactly one attempt per
//! performance: a claim whose answer was lost must hand its jobs back unspent,
//! not leave them to be rescued a minute later with an attempt counted that
//! never ran; and no worker may count a lease lost (a success whose answer was
//! lost landed). A quarter of the jobs panic on their first attempt, so the
//! writes of failures lose answers too: each must count as the retry it
//! wrote, not as a lost lease.

use std::time::Duration;

use anyhow::Result;
use lq_runtime::{EnqueueOptions, Job};

use super::Stage;
use crate::{
    classify::Expect,
    jobs::Long,
    probe::{self, Deadline},
    proxy::LosingProxy,
    workers::Fleet,
};

const JOBS: u64 = 2000;
/// Every this many jobs, one panics on its first attempt.
const PANIC_EVERY: u64 = 4;

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    let mut specs = st.plain_specs(0, JOBS, 20);
    for spec in specs.iter_mut().step_by(PANIC_EVERY as usize) {
        spec.panic_until = 1;
    }
    let panicking = JOBS.div_ceil(PANIC_EVERY) as i64;
    for chunk in specs.chunks(1000) {
        let jobs = chunk.iter().cloned().map(|spec| Long { spec });
        let done = Long::enqueue_many(&st.pool, jobs, EnqueueOptions::new()).await?;
        for id in done.ids {
            st.ledger.ack(id, Expect::Succeed);
        }
    }
    let proxy = LosingProxy::start(&st.url.parse()?, b"").await;
    let mut spec = st.worker_spec(8);
    spec.db_url = proxy.url(&st.url);
    let mut fleet = Fleet::new(st.name, spec);
    fleet.start(3)?;
    // The storm hits running workers, not their start (a runtime whose start
    // fails is the application's to retry).
    let d = Deadline::new("the workers to start", Duration::from_secs(20));
    for (_, owner) in fleet.live() {
        while !probe::has_published(&st.pool, &owner).await? {
            d.tick().await?;
        }
    }
    // The storm lasts while jobs are live. Its pace is the fault, not a wait
    // for a state: the end is found by asking the database.
    let d = Deadline::new("every job to reach a final state", Duration::from_secs(60));
    while probe::live_jobs(&st.pool).await? > 0 {
        for e in fleet.supervise()? {
            st.fail(format!(
                "worker {} exited on its own: {}",
                e.owner, e.status
            ));
        }
        proxy.lose_next();
        tokio::time::sleep(Duration::from_millis(st.rng.u64(20..=60))).await;
        d.check()?;
    }
    let lost = proxy.answers_lost();
    st.note(format!("{lost} answers lost after their commit"));
    st.check(
        lost >= 20,
        format!("only {lost} answers lost: the fault missed"),
    );

    // One attempt spent per performance: none counted for a claim that went
    // unheard, and none rescued (no lease of 60 s expired).
    let unspent: Vec<(i64, i32, i64)> = sqlx::query_as(
        "select j.id, j.attempts, (select count(*) from fault.performed p where p.job_id = j.id)
         from lq.all_jobs j
         where j.attempts <> (select count(*) from fault.performed p where p.job_id = j.id)
         order by j.id limit 5",
    )
    .fetch_all(&st.pool)
    .await?;
    st.check(
        unspent.is_empty(),
        format!("jobs whose attempts differ from their performances (id, attempts, performed): {unspent:?}"),
    );
    st.check_slots(&mut fleet, 8).await?;
    // Counted by the workers (published four times a second; the slot check
    // above took seconds): a success whose answer was lost landed, so no lease
    // was lost.
    let (handed_back, lease_lost, retried): (i64, i64, i64) = sqlx::query_as(
        "select coalesce(sum(released), 0)::bigint, coalesce(sum(lease_lost), 0)::bigint,
             coalesce(sum(retried), 0)::bigint
         from fault.worker_stats",
    )
    .fetch_one(&st.pool)
    .await?;
    st.note(format!(
        "{handed_back} jobs handed back unspent by the workers (leased by claims that got no answer, or claimed ahead)"
    ));
    st.check(
        lease_lost == 0,
        format!("the workers counted {lease_lost} leases lost, with no lease expired"),
    );
    // A failure whose answer was lost landed too: counted as the retry it was.
    st.check(
        retried == panicking,
        format!(
            "the workers counted {retried} retries for {panicking} first attempts that panicked"
        ),
    );
    Ok(fleet)
}
