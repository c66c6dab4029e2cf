//! The listener: LISTEN for wake-ups (queue names) and cancel requests (job ids).
//!
//! NOTIFY is only a hint. After any connection loss every queue polls at once, and
//! queues poll on their own interval regardless. A LISTEN connection that stays
//! silent for [`REFRESH_AFTER`] is replaced, so a silently dropped (black-holed)
//! connection costs at most that long of poll-only latency.

use std::sync::Arc;

use lq_core::db::{CANCEL_CHANNEL, JOBS_CHANNEL};
use sqlx::postgres::PgListener;
use tracing::{debug, warn};

use crate::shared::{retry_delay, Shared};

/// Reconnect after this long without any notification.
const REFRESH_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// Listens until the runtime stops, reconnecting with backoff.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut failures = 0u32;
    loop {
        match listen(&shared, &mut failures).await {
            Ok(Exit::Stopping) => return,
            Ok(Exit::Idle) => {
                debug!("listener idle; refreshing its connection");
                shared.wake_all();
            }
            Err(e) => {
                failures += 1;
                warn!(error = %e, "listener lost its connection; reconnecting");
                shared.wake_all();
                if shared.pause(retry_delay(failures)).await {
                    return;
                }
            }
        }
    }
}

/// Why a listening session ended without an error.
enum Exit {
    Stopping,
    Idle,
}

/// Signals job `id`'s handler once its row shows the cancellation: any role that
/// can connect may send a NOTIFY, so the notification alone proves nothing.
async fn confirm_cancel(shared: Arc<Shared>, id: i64, token: uuid::Uuid) {
    let confirmed = shared
        .with_conn("job_cancel_requested", |mut conn| async move {
            lq_core::db::lease::job_cancel_requested(&mut conn, id, token).await
        })
        .await;
    match confirmed {
        Ok(true) => {
            shared.inflight.cancel_if_held(id, token);
            debug!(id, "cancel requested: signalled the running handler");
        }
        Ok(false) => warn!(
            id,
            "ignored a cancel notification the job's row does not confirm"
        ),
        // The heartbeat reads the same flag at its next beat.
        Err(e) => {
            debug!(id, error = %lq_core::chain(&e), "could not confirm a cancel notification")
        }
    }
}

async fn listen(shared: &Arc<Shared>, failures: &mut u32) -> Result<Exit, sqlx::Error> {
    let timeout = shared.config.db_timeout;
    let mut listener = match tokio::time::timeout(timeout, connect(shared)).await {
        Ok(l) => l?,
        Err(_) => return Err(sqlx::Error::PoolTimedOut),
    };
    *failures = 0;
    shared.wake_all(); // anything enqueued while we were not listening
    loop {
        let next = tokio::select! {
            n = tokio::time::timeout(REFRESH_AFTER, listener.try_recv()) => match n {
                Ok(n) => n?,
                Err(_) => return Ok(Exit::Idle), // silent too long: reconnect
            },
            _ = shared.stopping.cancelled() => return Ok(Exit::Stopping),
        };
        let Some(n) = next else {
            // The connection dropped and was re-established: notifications may be lost.
            shared.wake_all();
            continue;
        };
        crate::telemetry::maintenance("notifies_received", 1);
        match n.channel() {
            JOBS_CHANNEL => {
                if let Some(w) = shared.wakers.get(n.payload()) {
                    w.wake();
                }
            }
            CANCEL_CHANNEL => {
                if let Ok(id) = n.payload().parse::<i64>() {
                    if let Some(token) = shared.inflight.token(id) {
                        tokio::spawn(confirm_cancel(shared.clone(), id, token));
                    }
                }
            }
            _ => {}
        }
    }
}

async fn connect(shared: &Shared) -> Result<PgListener, sqlx::Error> {
    let mut l = PgListener::connect_with(&shared.pool).await?;
    l.listen_all([JOBS_CHANNEL, CANCEL_CHANNEL]).await?;
    Ok(l)
}
