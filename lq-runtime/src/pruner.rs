//! The pruner: deletes finished jobs older than their retention, in small batches.

use std::sync::Arc;

use lq_core::{chain, db};
use tracing::{debug, warn, Instrument};

use crate::{batch_size::AdaptiveBatch, shared::Shared};

/// Rows deleted per statement at most, so one prune never holds locks for long.
const PRUNE_BATCH: i64 = 5000;

/// Prunes every `prune_interval` until the runtime stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    let keep_finished = shared.config.keep_finished.as_secs_f64();
    let keep_dead = shared.config.keep_dead.as_secs_f64();
    let mut batch = AdaptiveBatch::new(PRUNE_BATCH);
    loop {
        if shared.pause(shared.config.prune_interval).await {
            return;
        }
        if !shared.is_leader() {
            continue;
        }
        async {
            loop {
                let limit = batch.size();
                let r = shared
                    .with_conn("job_prune", |mut conn| async move {
                        db::maintenance::job_prune(&mut conn, keep_finished, keep_dead, None, limit).await
                    })
                    .await;
                match r {
                    Ok(n) => {
                        batch.succeeded();
                        crate::telemetry::maintenance("pruned", n);
                        debug!(pruned = n, "pruned finished jobs");
                        if (n as i64) < limit || shared.stopping.is_cancelled() {
                            break;
                        }
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
