//! The rescuer: returns jobs whose lease expired (their worker died, froze or lost
//! the database) to the queue, in one guarded statement.

use std::sync::Arc;

use lq_core::{chain, db};
use tracing::{error, info, warn, Instrument};

use crate::{batch_size::AdaptiveBatch, shared::Shared, stats::Stats};

/// Rows rescued per statement at most.
const RESCUE_BATCH: i64 = 1000;

/// Rescues expired leases every `rescue_interval` until the runtime stops. Any
/// number of runtimes may run it at once: the statement skips rows another holds.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut batch = AdaptiveBatch::new(RESCUE_BATCH);
    loop {
        if shared.pause(shared.config.rescue_interval).await {
            return;
        }
        if !shared.is_leader() {
            continue;
        }
        async {
            loop {
                let limit = batch.size();
                let r = shared
                    .with_conn("job_rescue_expired", |mut conn| async move {
                        db::lease::job_rescue_expired(&mut conn, limit, None).await
                    })
                    .await;
                if r.is_ok() {
                    batch.succeeded();
                }
                match r {
                    Ok(ids) if ids.is_empty() => break,
                    Ok(ids) => {
                        crate::telemetry::maintenance("rescued", ids.len() as u64);
                        info!(
                            rescued = ids.len(),
                            "returned jobs with expired leases to the queue"
                        );
                        shared.wake_all();
                        if (ids.len() as i64) < limit {
                            break;
                        }
                    }
                    Err(e) if db::is_data_rejection(&e) => {
                        warn!(error = %chain(&e), "batch rescue refused; rescuing one job at a time");
                        one_by_one(&shared).await;
                        break;
                    }
                    Err(e) => {
                        batch.failed();
                        warn!(error = %chain(&e), next_batch = batch.size(), "rescue failed; will retry");
                        break;
                    }
                }
            }
        }
        .instrument(crate::telemetry::duty_span("rescue"))
        .await;
    }
}

/// Rescues expired jobs one at a time, so a row the database refuses (its
/// history too large, its id taken in the history) cannot strand the others; a
/// row refused on its own is quarantined: ended `dead` with the reason as its
/// only error.
async fn one_by_one(shared: &Shared) {
    let ids = shared
        .with_conn("job_expired_ids", |mut conn| async move {
            db::lease::job_expired_ids(&mut conn, RESCUE_BATCH).await
        })
        .await
        .unwrap_or_else(|e| {
            warn!(error = %chain(&e), "could not list expired leases; rescue retries next interval");
            Vec::new()
        });
    for id in ids {
        let r = shared
            .with_conn("job_rescue_expired", |mut conn| async move {
                db::lease::job_rescue_expired(&mut conn, 1, Some(id)).await
            })
            .await;
        let Err(e) = r else { continue };
        if !db::is_data_rejection(&e) {
            warn!(id, error = %chain(&e), "rescue failed; will retry");
            continue;
        }
        let reason = format!(
            "quarantined: its lease expired and the rescue was refused ({}); earlier errors dropped",
            chain(&e)
        );
        let q = shared
            .with_conn("job_quarantine", |mut conn| {
                let reason = &reason;
                async move { db::finish::job_quarantine(&mut conn, id, None, reason).await }
            })
            .await;
        match q {
            Ok(true) => {
                Stats::add(&shared.stats.quarantined, 1);
                error!(id, error = %chain(&e), "job quarantined as dead: its rescue was refused")
            }
            Ok(false) => {}
            Err(q) => {
                error!(id, error = %chain(&q), "could not quarantine a job whose rescue was refused")
            }
        }
    }
    shared.wake_all();
}
