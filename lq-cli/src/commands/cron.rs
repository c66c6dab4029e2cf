//! `lq cron list|run`.

use clap::Subcommand;
use serde_json::json;
use sqlx::PgPool;

use crate::{output::Out, Failure, Outcome};

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Every schedule: expression, zone, queue, last tick, next fire time.
    List,
    /// Enqueue one job of a recurring kind now, outside its schedule.
    ///
    /// The job is the one its ticks enqueue (payload, queue, priority,
    /// attempts, unique key), as the runtime that declares the schedule
    /// recorded it; the schedule fires as before. Nothing is enqueued while a
    /// live job of the kind holds the schedule's unique key (exit 2, naming it).
    Run {
        /// The recurring job's kind, as `lq cron list` shows it.
        kind: String,
        /// Who runs it, kept in the job's metadata.
        #[arg(long, default_value_t = super::queues::default_by())]
        by: String,
    },
}

pub(crate) async fn run(
    pool: &PgPool,
    out: &Out,
    command: CronCommand,
) -> Result<Outcome, Failure> {
    let CronCommand::Run { kind, by } = command else {
        return list(pool, out).await;
    };
    let id = lq_runtime::control::cron_run_now(pool, &kind, &by).await?;
    out.emit(&json!({"kind": kind, "id": id}), || {
        let mut t = crate::output::table(&["kind", "job"]);
        t.add_row(vec![kind.clone(), id.to_string()]);
        t
    });
    Ok(Outcome::Clean)
}

/// `lq cron list`.
async fn list(pool: &PgPool, out: &Out) -> Result<Outcome, Failure> {
    let schedules = lq_runtime::control::cron_schedules(pool).await?;
    out.emit(
        &json!({"schedules": schedules.iter().map(|s| json!({
            "kind": s.kind, "expr": s.expr, "tz": s.tz, "catch_up": s.catch_up,
            "queue": s.queue, "last_tick": s.last_tick, "next_tick": s.next_tick,
            "last_job_id": s.last_job_id,
        })).collect::<Vec<_>>()}),
        || {
            let mut t = crate::output::table(&[
                "kind",
                "cron",
                "zone",
                "queue",
                "last tick",
                "next tick",
                "last job",
            ]);
            let opt = |s: &Option<String>| s.clone().unwrap_or_else(|| "?".to_owned());
            for s in &schedules {
                t.add_row(vec![
                    s.kind.clone(),
                    opt(&s.expr),
                    opt(&s.tz),
                    opt(&s.queue),
                    s.last_tick.format("%F %T").to_string(),
                    s.next_tick
                        .map_or("?".to_owned(), |t| t.format("%F %T").to_string()),
                    s.last_job_id.map_or(String::new(), |id| id.to_string()),
                ]);
            }
            t
        },
    );
    Ok(Outcome::Clean)
}
