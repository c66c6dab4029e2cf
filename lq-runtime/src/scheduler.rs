//! The cron scheduler: fires each recurring kind's due ticks, exactly once per tick
//! across every runtime, sleeping until the next tick by the database's clock.
//!
//! The leader fires every schedule it knows. A runtime that is not the leader
//! fires only the schedules of kinds the leader does not declare (another
//! service's recurring jobs): the leader cannot build those jobs, and a tick
//! must not wait for it. Whoever fires, `lq.cron_ticks` keeps each tick to one job.

use std::{sync::Arc, time::Duration};

use lq_core::{
    chain,
    cron::{fire_due, FireReport, MissedTicks, Schedule},
    db, CatchUp, JobDescriptor,
};
use tracing::{debug, info, warn, Instrument};

use crate::shared::Shared;

/// Longest sleep between passes, so a changed clock or a lost pass costs little.
const MAX_WAIT: Duration = Duration::from_secs(5);
/// Retry delay when another runtime holds a schedule.
const BUSY_WAIT: Duration = Duration::from_millis(100);

/// A recurring kind this runtime schedules.
pub(crate) struct CronJob {
    pub desc: &'static JobDescriptor,
    pub schedule: Schedule,
    pub catch_up: CatchUp,
    pub payload: String,
}

/// The recurring kinds among `descs` whose queue this runtime serves.
pub(crate) fn cron_jobs(
    shared_queues: &[String],
    descs: &[&'static JobDescriptor],
) -> Result<Vec<CronJob>, lq_core::Error> {
    let mut jobs = Vec::new();
    for desc in descs {
        let Some(spec) = desc.options.cron else {
            continue;
        };
        if !shared_queues.iter().any(|q| q == desc.options.queue) {
            continue;
        }
        let schedule = Schedule::parse(spec.expr, spec.tz)?;
        let payload = (spec.build)().to_string();
        jobs.push(CronJob {
            desc,
            schedule,
            catch_up: spec.catch_up,
            payload,
        });
    }
    Ok(jobs)
}

/// How late a tick may be seen and still fire as on time: while every runtime
/// is up, a pass can come this late. After a leader dies, the others fire its
/// schedules once its lease has run out (`leader_lease`, then up to a fifth of
/// it to the next beat), and a pass that failed is retried within two
/// database bounds; [`lq_core::cron::LATE_AFTER`] at least.
pub(crate) fn late_after(config: &crate::RuntimeConfig) -> Duration {
    (config.leader_lease * 6 / 5 + config.db_timeout * 2).max(lq_core::cron::LATE_AFTER)
}

/// One bounded scheduling pass for one kind.
async fn pass(shared: &Shared, job: &CronJob) -> Result<FireReport, lq_core::Error> {
    let (kind, options) = (job.desc.kind, job.desc.options);
    shared
        .with_conn("cron_fire_due", |mut conn| async move {
            fire_due(
                &mut conn,
                kind,
                options,
                &job.schedule,
                MissedTicks {
                    catch_up: job.catch_up,
                    late_after: late_after(&shared.config),
                },
                &job.payload,
                None,
            )
            .await
        })
        .await
}

/// Records each schedule's declaration in `lq.cron_schedules`, with the job its
/// ticks fire, for tools that do not have the job types (to show it, and to run
/// it now). A failure costs only the description.
async fn describe(shared: &Shared, jobs: &[CronJob]) {
    for job in jobs {
        let Some(spec) = job.desc.options.cron else {
            continue;
        };
        let options = job.desc.options;
        let unique_key = (spec.unique_key)();
        let declaration = db::cron::ScheduleDeclaration {
            kind: job.desc.kind,
            expr: spec.expr,
            tz: spec.tz,
            catch_up: spec.catch_up.as_str(),
            queue: options.queue,
            payload: &job.payload,
            priority: options.priority,
            max_attempts: options.max_attempts.min(i32::MAX as u32) as i32,
            unique_key: unique_key.as_deref(),
            declared_by: &shared.config.owner,
        };
        let r = shared
            .with_conn("cron_schedule_describe", |mut conn| async move {
                db::cron::cron_schedule_describe(&mut conn, declaration).await
            })
            .await;
        if let Err(e) = r {
            warn!(kind = job.desc.kind, error = %chain(&e), "could not record the cron schedule's declaration");
        }
    }
}

/// Runs scheduling passes until the runtime stops.
pub(crate) async fn run(shared: Arc<Shared>, jobs: Vec<CronJob>) {
    if jobs.is_empty() {
        return;
    }
    describe(&shared, &jobs).await;
    loop {
        let mut wait = MAX_WAIT;
        for job in &jobs {
            // The leader fires the schedules it has; the others fire only those
            // it does not (a kind it does not declare, or whose queue it does
            // not serve).
            if !shared
                .leadership
                .fires_cron(job.desc.kind, job.desc.options.queue)
            {
                continue;
            }
            match pass(&shared, job)
                .instrument(crate::telemetry::duty_span("cron"))
                .await
            {
                Ok(rep) if rep.busy => wait = wait.min(BUSY_WAIT),
                Ok(rep) => {
                    if let Some(stored) = rep.rewound_from {
                        warn!(kind = job.desc.kind, %stored, "cron schedule's last tick lay in the future; moved it back to now");
                    }
                    if rep.missed > 0 {
                        info!(kind = job.desc.kind, missed = rep.missed, policy = ?job.catch_up, "cron ticks missed while no runtime ran");
                    }
                    crate::telemetry::maintenance("cron_ticks", rep.fired.len() as u64);
                    for (tick, id) in &rep.fired {
                        debug!(kind = job.desc.kind, %tick, id, "cron tick fired");
                    }
                    if let (Some(now), Some(next)) = (rep.now, rep.next_tick) {
                        let until = (next - now).to_std().unwrap_or_default();
                        wait = wait.min(until);
                    }
                }
                Err(e) => {
                    warn!(kind = job.desc.kind, error = %chain(&e), "cron pass failed; retrying");
                    wait = wait.min(Duration::from_secs(1));
                }
            }
        }
        // A little jitter so runtimes do not all contend at the tick's first instant.
        let jitter = Duration::from_millis(fastrand::u64(1..20));
        tokio::select! {
            stopping = shared.pause(wait + jitter) => if stopping { return },
            // A runtime that is not the leader checks every `MAX_WAIT`; when it
            // takes the lead it fires the ticks the old leader left at once.
            _ = shared.leadership.gained() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_may_be_as_late_as_a_dead_leaders_lease_and_two_database_bounds() {
        let config = crate::RuntimeConfig::default();
        assert_eq!(
            late_after(&config),
            config.leader_lease * 6 / 5 + config.db_timeout * 2
        );
        let short = crate::RuntimeConfig {
            leader_lease: Duration::from_millis(500),
            db_timeout: Duration::from_secs(1),
            ..config
        };
        assert_eq!(late_after(&short), lq_core::cron::LATE_AFTER);
    }
}
