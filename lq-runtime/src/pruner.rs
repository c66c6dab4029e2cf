//! The pruner: deletes finished jobs older than their retention, in small batches.

use std::sync::Arc;

use lq_core::{chain, db};
use tracing::{debug, warn, Instrument};

use crate::shared::Shared;

/// Rows deleted per statement, so one prune never holds locks for long.
const PRUNE_BATCH: i64 = 5000;

/// Prunes every `prune_interval` until the runtime stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    let keep_finished = shared.config.keep_finished.as_secs_f64();
    let keep_dead = shared.config.keep_dead.as_secs_f64();
    loop {
        if shared.pause(shared.config.prune_interval).await {
            return;
        }
        if !shared.is_leader() {
            continue;
        }
        async {
            loop {
                let r = shared
                    .with_conn("job_prune", |mut conn| async move {
                        db::maintenance::job_prune(&mut conn, keep_finished, keep_dead, PRUNE_BATCH)
                            .await
                    })
                    .await;
                match r {
                    Ok(n) => {
                        crate::telemetry::maintenance("pruned", n);
                        debug!(pruned = n, "pruned finished jobs");
                        if (n as i64) < PRUNE_BATCH || shared.stopping.is_cancelled() {
                            break;
                        }
                    }
                    Err(e) => {
                        warn!(error = %chain(&e), "prune failed; will retry");
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
