//! `lq cron list`.

use clap::Subcommand;
use serde_json::json;
use sqlx::PgPool;

use crate::{output::Out, Failure, Outcome};

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Every schedule: expression, zone, queue, last tick, next fire time.
    List,
}

pub(crate) async fn run(
    pool: &PgPool,
    out: &Out,
    command: CronCommand,
) -> Result<Outcome, Failure> {
    let CronCommand::List = command;
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
