//! Scenario 10: a rolling deploy whose release adds a job kind.
//!
//! Two workers of the previous release (`lq-fault-worker-old`, no `fault.deploy`)
//! run; one of them leads. A worker of the new release joins, and the new code
//! starts enqueuing `fault.deploy` next to 1,500 ordinary jobs. The old workers
//! are then replaced one by one (SIGTERM, new worker). The old ones bury unknown
//! kinds after 300 ms, yet none of the new kind's jobs may be buried: a kind is
//! unknown only when no live runtime serving its queue declares it. Every job
//! succeeds, and only new workers ran the new kind.

use std::time::Duration;

use anyhow::{Context, Result};

use super::Stage;
use crate::{
    classify::Expect,
    jobs::Spec,
    probe::{self, Deadline},
    workers::{Fleet, WorkerSpec},
};

const WORK: u64 = 1500;
const NEW_KIND: u64 = 300;

/// Inserts `fault.deploy` jobs as the new release's code would, and records them.
async fn enqueue_new_kind(st: &mut Stage<'_>, first: u64, n: u64) -> Result<()> {
    let specs: Vec<String> = (first..first + n)
        .map(|seq| {
            serde_json::to_string(&Spec {
                seq,
                work_ms: 5 + (seq % 20) as u32,
                ..Spec::default()
            })
        })
        .collect::<Result<_, _>>()?;
    let ids: Vec<i64> = sqlx::query_scalar(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         select 'fault.deploy', 'default', p::jsonb, 25 from unnest($1::text[]) p
         returning id",
    )
    .bind(&specs)
    .fetch_all(&st.pool)
    .await?;
    for id in ids {
        st.ledger.ack(id, Expect::Succeed);
    }
    sqlx::query("select pg_notify('lq_jobs', 'default')")
        .execute(&st.pool)
        .await?;
    Ok(())
}

/// Waits until `owner` is in `lq.runtimes`.
async fn wait_registered(st: &Stage<'_>, owner: &str) -> Result<()> {
    let d = Deadline::new(format!("{owner} to report itself"), Duration::from_secs(20));
    loop {
        let there: bool = sqlx::query_scalar(
            "select exists (select from lq.runtimes where id = $1 and expires_at > now())",
        )
        .bind(owner)
        .fetch_one(&st.pool)
        .await?;
        if there {
            return Ok(());
        }
        d.tick().await?;
    }
}

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    let new_exe = st.env.worker_exe.clone();
    let old_exe = new_exe.with_file_name(format!(
        "{}-old",
        new_exe
            .file_name()
            .context("worker exe name")?
            .to_string_lossy()
    ));
    let old_spec = WorkerSpec {
        exe: old_exe,
        unknown_kind_grace_ms: Some(300),
        ..st.worker_spec(8)
    };
    let new_spec = WorkerSpec {
        unknown_kind_grace_ms: Some(300),
        ..st.worker_spec(8)
    };
    let mut fleet = Fleet::new(st.name, new_spec.clone());
    let old: Vec<usize> = (0..2)
        .map(|_| fleet.start_one(old_spec.clone()))
        .collect::<Result<_>>()?;
    let old_owners: Vec<String> = old
        .iter()
        .map(|i| fleet.get(*i).map(|w| w.owner.clone()).context("old worker"))
        .collect::<Result<_>>()?;
    let d = Deadline::new("an old worker to lead", Duration::from_secs(20));
    loop {
        let holder: Option<String> =
            sqlx::query_scalar("select holder from lq.leader where expires_at > now()")
                .fetch_optional(&st.pool)
                .await?;
        if holder.is_some_and(|h| old_owners.contains(&h)) {
            break;
        }
        d.tick().await?;
    }
    st.info(format!(
        "old release running: {old_owners:?}, one of them leads"
    ));

    // The new release arrives: a worker first, then the code that enqueues.
    let first_new = fleet.start_one(new_spec.clone())?;
    let first_new_owner = fleet.get(first_new).context("new worker")?.owner.clone();
    wait_registered(st, &first_new_owner).await?;
    let specs = st.plain_specs(0, WORK, 20);
    st.enqueue_work(specs, Expect::Succeed).await?;
    enqueue_new_kind(st, 100_000, NEW_KIND / 2).await?;

    // Roll: each old worker stopped gracefully and replaced by a new one.
    for (k, i) in old.iter().enumerate() {
        let want = (WORK * (k as u64 + 1) / 3) as i64;
        let d = Deadline::new(format!("{want} succeeded"), Duration::from_secs(60));
        while probe::count_state(&st.pool, "succeeded").await? < want {
            d.tick().await?;
        }
        let mut w = fleet.take(*i).context("old worker")?;
        w.signal("TERM")?;
        let status = w.wait_exit(Duration::from_secs(20)).await?;
        st.check(
            status.success(),
            format!("old worker {} exited with {status}", w.owner),
        );
        let n = fleet.start_one(new_spec.clone())?;
        let owner = fleet.get(n).context("new worker")?.owner.clone();
        st.info(format!("replaced old worker {} with {owner}", w.owner));
        enqueue_new_kind(st, 200_000 + k as u64 * 1000, NEW_KIND / 4).await?;
    }

    st.drain(&mut fleet, Duration::from_secs(60), false).await?;
    let buried: i64 = sqlx::query_scalar(
        "select count(*) from lq.all_jobs where state = 'dead' and kind = 'fault.deploy'",
    )
    .fetch_one(&st.pool)
    .await?;
    st.check(
        buried == 0,
        format!("{buried} jobs of the new kind were buried as unknown"),
    );
    let by_old: i64 = sqlx::query_scalar(
        "select count(*) from fault.performed where kind = 'fault.deploy' and worker = any($1)",
    )
    .bind(&old_owners)
    .fetch_one(&st.pool)
    .await?;
    st.check(
        by_old == 0,
        format!("old workers ran {by_old} jobs of a kind they do not know"),
    );
    let ran: i64 = sqlx::query_scalar(
        "select count(distinct job_id) from fault.performed where kind = 'fault.deploy' and finished_at is not null",
    )
    .fetch_one(&st.pool)
    .await?;
    st.note(format!(
        "{ran} jobs of the new kind ran, all on new workers; none buried"
    ));
    Ok(fleet)
}
