//! Scenario 5: poison jobs among 600 ordinary ones, 3 workers x 8 slots.
//!
//! - 4 jobs panic on attempts 1-2 (max 4 attempts): succeed on attempt 3 with two
//!   `panicked: ...` errors;
//! - 3 jobs always panic (max 3): dead after 3 attempts, each error `panicked: ...`;
//! - in both sets an attempt may instead end by lease expiry, when an aborting
//!   job took its worker down before the panic was recorded; each set must still
//!   record a panic;
//! - 2 jobs abort the worker process (max 2): each attempt ends by lease expiry,
//!   dead after 2 attempts (one of them may never start, if the other took down
//!   both workers that held it); every crashed worker is restarted;
//! - 3 rows inserted by SQL with kind `fault.work` and a payload that does not
//!   deserialise: dead on attempt 1 with the reason stored, payload unchanged.
//!
//! Ordinary jobs must all succeed; no worker may exit except by an abort.

use std::{os::unix::process::ExitStatusExt, time::Duration};

use anyhow::Result;
use lq_runtime::{EnqueueOptions, Job};

use super::Stage;
use crate::{
    classify::Expect,
    jobs::{Spec, Work, PANIC_MARK},
    probe::{self, Deadline},
    workers::Fleet,
};

const BAD_PAYLOAD: &str = r#"{"seq": "not a number", "work_ms": 5}"#;

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    let mut panic_then_ok = Vec::new();
    let mut panic_always = Vec::new();
    let mut aborts = Vec::new();
    let mut bad = Vec::new();
    for part in 0..3u64 {
        let specs = st.plain_specs(part * 1000, 200, 20);
        st.enqueue_work(specs, Expect::Succeed).await?;
        let n = 10_000 + part * 100;
        let poison: Vec<(Spec, u32)> = match part {
            0 => (0..4)
                .map(|i| {
                    (
                        Spec {
                            seq: n + i,
                            work_ms: 5,
                            panic_until: 2,
                            ..Spec::default()
                        },
                        4,
                    )
                })
                .collect(),
            1 => (0..3)
                .map(|i| {
                    (
                        Spec {
                            seq: n + i,
                            work_ms: 5,
                            panic_until: 99,
                            ..Spec::default()
                        },
                        3,
                    )
                })
                .collect(),
            _ => (0..2)
                .map(|i| {
                    (
                        Spec {
                            seq: n + i,
                            work_ms: 5,
                            abort: true,
                            ..Spec::default()
                        },
                        2,
                    )
                })
                .collect(),
        };
        for (spec, max) in poison {
            let id = Work { spec }
                .enqueue_with(&st.pool, EnqueueOptions::new().max_attempts(max))
                .await?
                .id;
            match part {
                0 => (panic_then_ok.push(id), st.ledger.ack(id, Expect::Succeed)),
                1 => (
                    panic_always.push(id),
                    // Its last attempt may also be lost to a worker that an aborting job took down.
                    st.ledger
                        .ack(id, Expect::Dead(&["panicked: ", "lease expired"])),
                ),
                _ => (
                    aborts.push(id),
                    st.ledger.ack(id, Expect::Dead(&["lease expired"])),
                ),
            };
        }
        let id: i64 = sqlx::query_scalar(
            "insert into lq.jobs (kind, queue, payload, max_attempts) values ('fault.work', 'default', $1::jsonb, 3) returning id",
        )
        .bind(BAD_PAYLOAD)
        .fetch_one(&st.pool)
        .await?;
        st.ledger
            .ack(id, Expect::Dead(&["payload does not deserialise"]));
        bad.push(id);
    }
    let mut fleet = Fleet::new(st.name, st.worker_spec(8));
    fleet.start(3)?;

    // Drain, restarting workers that abort; each exit is a fault whose recovery we time.
    let d = Deadline::new("every job to reach a final state", Duration::from_secs(70));
    let mut exits = Vec::new();
    loop {
        for e in fleet.supervise()? {
            let at = probe::db_now(&st.pool).await?;
            let held = probe::held_by(&st.pool, &e.owner).await?;
            st.info(format!(
                "{} exited ({}) holding {} jobs; restarted",
                e.owner,
                e.status,
                held.len()
            ));
            exits.push((e, at, held));
        }
        if probe::live_jobs(&st.pool).await? == 0 {
            break;
        }
        d.tick().await?;
    }
    // Two aborting jobs may start together on one worker: count the workers they ran on.
    let abort_workers: i64 = sqlx::query_scalar(
        "select count(distinct worker) from fault.performed where job_id = any($1)",
    )
    .bind(&aborts)
    .fetch_one(&st.pool)
    .await?;
    let aborted = exits
        .iter()
        .filter(|(e, _, _)| e.status.signal() == Some(6))
        .count();
    st.check(
        aborted == exits.len() && aborted as i64 == abort_workers,
        format!(
            "{} worker exits ({aborted} by SIGABRT); aborting jobs ran on {abort_workers} workers",
            exits.len()
        ),
    );
    for (k, (e, at, held)) in exits.iter().enumerate() {
        let others: Vec<_> = held
            .iter()
            .copied()
            .filter(|h| !aborts.contains(&h.id))
            .collect();
        if !others.is_empty() {
            st.recovery_of_leases(
                &format!("abort #{k} of {} (its jobs completed elsewhere)", e.owner),
                *at,
                &others,
            )
            .await?;
        }
    }

    let rows: Vec<(i64, i32, String, bool, i64)> = sqlx::query_as(
        "select j.id, j.attempts, j.errors::text, j.payload = $1::jsonb,
                (select count(*) from fault.performed p where p.job_id = j.id)
         from lq.all_jobs j where j.id = any($2)",
    )
    .bind(BAD_PAYLOAD)
    .bind([panic_then_ok.as_slice(), &panic_always, &aborts, &bad].concat())
    .fetch_all(&st.pool)
    .await?;
    let panicked = format!("panicked: {PANIC_MARK}");
    // Panics recorded for the jobs that panic on attempts 1-2, and for those that
    // always panic: each set must show the panic path at least once.
    let (mut panics_then_ok, mut panics_always) = (0, 0);
    for (id, attempts, errors, same_payload, runs) in rows {
        let count = |s: &str| errors.matches(s).count() as i32;
        // An attempt may also end by lease expiry when an aborting job took its
        // worker down, even one whose panic the worker had not yet recorded: a job
        // rescued together with an aborting job can be claimed with it again and
        // lose both of its panicking attempts that way.
        let (panics, expired, all) = (count(&panicked), count("lease expired"), count("\"error\""));
        let (ok, want) = if panic_then_ok.contains(&id) {
            panics_then_ok += panics;
            (
                attempts >= 3 && panics + expired == all && all == attempts - 1,
                "succeeded on attempt 3 or later, earlier attempts panicked (or lost to an abort)",
            )
        } else if panic_always.contains(&id) {
            panics_always += panics;
            (
                attempts == 3 && panics + expired == 3 && all == 3,
                "dead after 3 attempts that panicked (or were lost to an abort)",
            )
        } else if aborts.contains(&id) {
            // It may never have run: when both its attempts were claimed by workers
            // that the other aborting job took down before this one started, it is
            // dead after two lease expiries all the same (guarantee 4). That every
            // worker exit was an aborting job's own doing is checked above.
            (
                attempts == 2 && expired == 2 && all == 2 && runs <= 2,
                "dead after 2 attempts, each ended by lease expiry",
            )
        } else {
            let ok = same_payload
                && runs == 0
                && count("payload does not deserialise") == 1
                && all == 1 + expired;
            (
                ok && attempts == all,
                "dead on its first decoded attempt, reason stored, payload kept",
            )
        };
        st.check(ok, format!("job {id}: expected {want}; attempts {attempts}, {runs} performances, errors {errors}"));
    }
    st.check(
        panics_then_ok >= 1 && panics_always >= 1,
        format!(
            "panics recorded: {panics_then_ok} for the jobs that panic twice, \
             {panics_always} for those that always panic (at least one each)"
        ),
    );
    Ok(fleet)
}
