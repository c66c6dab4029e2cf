//! The pruner: deletes finished jobs older than their retention, in small batches.

use std::sync::Arc;

use lq_core::{chain, db, db::maintenance::PruneIds};
use tracing::{debug, warn, Instrument};

use crate::{batch_size::AdaptiveBatch, shared::Shared};

/// Rows deleted per statement at most, so one prune never holds locks for long.
const PRUNE_BATCH: i64 = 5000;

/// Prunes every `prune_interval` until the runtime stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    let keep_finished = shared.config.keep_finished.as_secs_f64();
    let keep_dead = shared.config.keep_dead.as_secs_f64();
    let mut batch = AdaptiveBatch::new(PRUNE_BATCH);
    let mut marks_refused = false;
    loop {
        if shared.pause(shared.config.prune_interval).await {
            return;
        }
        if !shared.is_leader() {
            continue;
        }
        async {
            let mut ids = prune_ids(&shared, keep_finished, keep_dead, &mut marks_refused).await;
            loop {
                let limit = batch.size();
                let r = shared
                    .with_conn("job_prune", |mut conn| async move {
                        db::maintenance::job_prune(&mut conn, keep_finished, keep_dead, None, ids, limit)
                            .await
                    })
                    .await;
                match r {
                    Ok((n, highest)) => {
                        batch.succeeded();
                        crate::telemetry::maintenance("pruned", n);
                        debug!(pruned = n, "pruned finished jobs");
                        if (n as i64) < limit || shared.stopping.is_cancelled() {
                            break;
                        }
                        ids.after = highest.unwrap_or(ids.after);
                    }
                    Err(e) => {
                        batch.failed();
                        warn!(error = %chain(&e), next_batch = batch.size(), "prune failed; will retry");
                        break;
                    }
                }
            }
            let r = shared
                .with_conn("cron_ticks_prune", |mut conn| async move {
                    db::cron::cron_ticks_prune(&mut conn, keep_finished).await
                })
                .await;
            if let Err(e) = r {
                warn!(error = %chain(&e), "pruning cron ticks failed; will retry");
            }
            let r = shared
                .with_conn("stats_minute_prune", |mut conn| async move {
                    db::stats::stats_minute_prune(&mut conn, keep_finished).await
                })
                .await;
            if let Err(e) = r {
                warn!(error = %chain(&e), "pruning the per-minute rollup failed; will retry");
            }
        }
        .instrument(crate::telemetry::duty_span("prune"))
        .await;
    }
}

/// Records a mark of the job id sequence, then reads which ids a prune past
/// the shorter retention reads (see [`db::maintenance::prune_ids`]). Every id
/// (as correct, and slower) when either fails; a role refused the marks is
/// told once which grant it lacks.
async fn prune_ids(
    shared: &Arc<Shared>,
    keep_finished: f64,
    keep_dead: f64,
    refused: &mut bool,
) -> PruneIds {
    let keep_longest = keep_finished.max(keep_dead);
    let keep_shortest = keep_finished.min(keep_dead);
    let r = shared
        .with_conn("id_mark", |mut conn| async move {
            db::maintenance::id_mark(&mut conn, keep_longest).await?;
            db::maintenance::prune_ids(&mut conn, None, keep_shortest).await
        })
        .await;
    match r {
        Ok(ids) => ids,
        Err(e) if lq_core::lacks_grant(&e) => {
            if !std::mem::replace(refused, true) {
                warn!(
                    error = %chain(&e),
                    "the role may not keep lq.id_marks, so every prune reads the whole history; \
                     grant select, insert, delete on lq.id_marks (docs/roles.md)"
                );
            }
            PruneIds::default()
        }
        Err(e) => {
            warn!(error = %chain(&e), "recording an id mark failed; this prune reads the whole history");
            PruneIds::default()
        }
    }
}
