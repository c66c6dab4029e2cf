//! The rescuer: returns jobs whose lease expired (their worker died, froze or lost
//! the database) to the queue, in one guarded statement.

use std::sync::Arc;

use lq_core::{chain, db};
use tracing::{info, warn};

use crate::shared::Shared;

/// Rows rescued per statement.
const RESCUE_BATCH: i64 = 1000;

/// Rescues expired leases every `rescue_interval` until the runtime stops. Any
/// number of runtimes may run it at once: the statement skips rows another holds.
pub(crate) async fn run(shared: Arc<Shared>) {
    loop {
        if shared.pause(shared.config.rescue_interval).await {
            return;
        }
        loop {
            let r = shared
                .with_conn("job_rescue_expired", |mut conn| async move {
                    db::lease::job_rescue_expired(&mut conn, RESCUE_BATCH).await
                })
                .await;
            match r {
                Ok(ids) if ids.is_empty() => break,
                Ok(ids) => {
                    info!(
                        rescued = ids.len(),
                        "returned jobs with expired leases to the queue"
                    );
                    shared.wake_all();
                    if (ids.len() as i64) < RESCUE_BATCH {
                        break;
                    }
                }
                Err(e) => {
                    warn!(error = %chain(&e), "rescue failed; will retry");
                    break;
                }
            }
        }
    }
}
