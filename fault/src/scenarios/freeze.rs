//! Scenario 2: a worker frozen with SIGSTOP past its 2 s lease, then resumed.
//!
//! The victim starts alone and claims 8 jobs whose first performance takes 20 s
//! (reruns take 20 ms). Two more workers then run 1,000 short jobs. At 30% done the
//! victim is frozen; once every job it held was rescued and completed elsewhere,
//! it is resumed. Its handlers must be cancelled, and every write it attempts for
//! those jobs refused (its `lease_lost` counter) and absent from the rows.

use std::time::Duration;

use anyhow::{Context, Result};

use super::Stage;
use crate::{
    classify::Expect,
    jobs::{Spec, CANCELLED_MARK},
    probe::{self, Deadline},
    workers::Fleet,
};

const SHORT: u64 = 1000;

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    let mut fleet = Fleet::new(st.name, st.worker_spec(8));
    let v = fleet.start(1)?[0];
    let victim = fleet.get(v).context("victim")?.owner.clone();
    let long: Vec<Spec> = (0..8)
        .map(|seq| Spec {
            seq,
            work_ms: 20_000,
            rerun_ms: Some(20),
            ..Spec::default()
        })
        .collect();
    st.enqueue_work(long, Expect::Succeed).await?;
    let d = Deadline::new("the victim to hold 8 running jobs", Duration::from_secs(20));
    while probe::held_by(&st.pool, &victim).await?.len() < 8 {
        d.tick().await?;
    }
    fleet.start(2)?;
    let specs = st.plain_specs(100, SHORT, 30);
    st.enqueue_work(specs, Expect::Succeed).await?;

    let d = Deadline::new("30% of the short jobs done", Duration::from_secs(30));
    while probe::count_state(&st.pool, "succeeded").await? < (SHORT * 3 / 10) as i64 {
        d.tick().await?;
    }
    fleet.get(v).context("victim")?.signal("STOP")?;
    let fault_at = probe::db_now(&st.pool).await?;
    let held = probe::held_by(&st.pool, &victim).await?;
    let ids: Vec<i64> = held.iter().map(|h| h.id).collect();
    st.info(format!(
        "SIGSTOP {victim} holding {} running jobs",
        held.len()
    ));
    st.check(
        held.len() == 8,
        format!("victim held {} jobs when frozen, expected 8", held.len()),
    );

    // Every held job rescued (its lease expired) and completed by another worker.
    let d = Deadline::new(
        "the frozen worker's jobs to be rescued and completed elsewhere",
        Duration::from_secs(30),
    );
    loop {
        let n: i64 = sqlx::query_scalar(
            "select count(*) from lq.all_jobs j, unnest($1::bigint[], $2::int[]) h(id, attempt)
             where j.id = h.id and j.state = 'succeeded'
               and exists (select 1 from jsonb_array_elements(j.errors) e
                           where (e->>'attempt')::int = h.attempt and e->>'error' like 'lease expired%')",
        )
        .bind(&ids)
        .bind(held.iter().map(|h| h.attempt).collect::<Vec<_>>())
        .fetch_one(&st.pool)
        .await?;
        if n == ids.len() as i64 {
            break;
        }
        d.tick().await?;
    }
    st.recovery_of_leases("freeze (its jobs completed elsewhere)", fault_at, &held)
        .await?;

    fleet.get(v).context("victim")?.signal("CONT")?;
    let resumed_at = probe::db_now(&st.pool).await?;
    st.info(format!("SIGCONT {victim}"));
    let tokens: Vec<_> = held.iter().map(|h| h.token).collect();
    let d = Deadline::new(
        "the resumed worker to cancel its handlers and count its refused writes",
        Duration::from_secs(15),
    );
    let (cancelled, latency) = loop {
        let (cancelled, latest): (i64, Option<f64>) = sqlx::query_as(
            "select count(*), extract(epoch from max(cancelled_at))::float8 from fault.performed
             where lease_token = any($1) and cancelled_at is not null",
        )
        .bind(&tokens)
        .fetch_one(&st.pool)
        .await?;
        let lost = probe::lease_lost_of(&st.pool, &victim).await?.unwrap_or(0);
        if cancelled == tokens.len() as i64 && lost >= tokens.len() as i64 {
            break (cancelled, latest.map(|t| t - resumed_at));
        }
        if d.tick().await.is_err() {
            st.fail(format!(
                "after SIGCONT: {cancelled}/{} handlers cancelled, lease_lost = {lost}",
                tokens.len()
            ));
            break (cancelled, None);
        }
    };
    if let Some(l) = latency {
        st.info(format!(
            "{cancelled} handlers cancelled within {l:.3}s of SIGCONT; their writes were refused"
        ));
    }
    // Nothing the victim did for those attempts reached the rows.
    let finished: i64 =
        sqlx::query_scalar("select count(*) from fault.performed where lease_token = any($1) and finished_at is not null")
            .bind(&tokens)
            .fetch_one(&st.pool)
            .await?;
    st.check(finished == 0, format!("{finished} of the frozen worker's handlers ran to completion instead of being cancelled"));
    let leaked: i64 = sqlx::query_scalar(
        "select count(*) from lq.all_jobs j, jsonb_array_elements(j.errors) e where j.id = any($1) and e->>'error' like $2",
    )
    .bind(&ids)
    .bind(format!("%{CANCELLED_MARK}%"))
    .fetch_one(&st.pool)
    .await?;
    st.check(
        leaked == 0,
        format!("{leaked} writes of the frozen worker changed its lost jobs"),
    );

    st.drain(&mut fleet, Duration::from_secs(30), false).await?;
    Ok(fleet)
}
