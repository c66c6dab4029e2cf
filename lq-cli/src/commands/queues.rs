//! `lq queues list|pause|resume`.

use clap::Subcommand;
use lq_runtime::control;
use serde_json::json;
use sqlx::PgPool;

use crate::{output::Out, Failure, Outcome};

#[derive(Debug, Subcommand)]
pub enum QueuesCommand {
    /// Every queue with live jobs, recent history or a pause (as `lq status`).
    List,
    /// Stop every runtime claiming from a queue (running jobs finish); it stays
    /// paused across restarts.
    Pause {
        /// The queue.
        queue: String,
        /// Who pauses it and why, recorded with the pause.
        #[arg(long, default_value_t = default_by())]
        by: String,
    },
    /// Let runtimes claim from a paused queue again, at once.
    Resume {
        /// The queue.
        queue: String,
    },
}

/// Whether `queue` has live jobs or a live runtime serving it: a pause of a
/// name nothing uses is most often a typo, which the operator should hear of.
async fn in_use(pool: &PgPool, queue: &str) -> Result<bool, Failure> {
    let live = control::queues(pool)
        .await?
        .iter()
        .any(|q| q.name == queue && q.available + q.scheduled + q.running > 0);
    if live {
        return Ok(true);
    }
    let served = control::runtimes(pool)
        .await?
        .iter()
        .any(|r| r.alive && r.queues.contains_key(queue));
    Ok(served)
}

/// `$USER@lq`, or `lq`.
pub(crate) fn default_by() -> String {
    std::env::var("USER").map_or_else(|_| "lq".to_owned(), |u| format!("{u} (lq)"))
}

pub(crate) async fn run(
    pool: &PgPool,
    out: &Out,
    command: QueuesCommand,
) -> Result<Outcome, Failure> {
    match command {
        QueuesCommand::List => {
            return super::status::run(pool, out, super::status::StatusArgs::default()).await;
        }
        QueuesCommand::Pause { queue, by } => {
            let changed = control::pause_queue(pool, &queue, &by).await?;
            // Only a note: the pause is done, whatever this lookup meets.
            let known = in_use(pool, &queue).await.unwrap_or(true);
            if !known {
                eprintln!(
                    "lq: note: no live job is in queue {queue:?} and no running runtime serves it; \
                     check the name (the pause holds for whatever uses it later; \
                     `lq queues resume {queue}` lifts it)"
                );
            }
            out.emit(
                &json!({"queue": queue, "paused": true, "changed": changed, "known": known}),
                || {
                    let mut t = crate::output::table(&["queue", "state"]);
                    t.add_row(vec![
                        queue.clone(),
                        if changed {
                            "paused".into()
                        } else {
                            "already paused".to_owned()
                        },
                    ]);
                    t
                },
            );
        }
        QueuesCommand::Resume { queue } => {
            let changed = control::resume_queue(pool, &queue).await?;
            out.emit(
                &json!({"queue": queue, "paused": false, "changed": changed}),
                || {
                    let mut t = crate::output::table(&["queue", "state"]);
                    t.add_row(vec![
                        queue.clone(),
                        if changed {
                            "resumed".into()
                        } else {
                            "was not paused".to_owned()
                        },
                    ]);
                    t
                },
            );
        }
    }
    Ok(Outcome::Clean)
}
