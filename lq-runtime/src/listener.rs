//! The listener: LISTEN for wake-ups (queue names), pauses (queue names) and
//! cancel requests (job ids).
//!
//! NOTIFY is only a hint. After any connection loss every queue polls at once, and
//! queues poll on their own interval regardless. A LISTEN connection that stays
//! silent for [`REFRESH_AFTER`] is replaced, so a silently dropped (black-holed)
//! connection costs at most that long of poll-only latency.

use std::sync::Arc;

use lq_core::db::{CANCEL_CHANNEL, JOBS_CHANNEL, PAUSE_CHANNEL};
use sqlx::postgres::PgListener;
use tracing::{debug, warn};

use crate::{
    cancel_hints::{self, CancelHints},
    shared::{retry_delay, Shared},
};

/// Reconnect after this long without any notification.
const REFRESH_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// Listens until the runtime stops, reconnecting with backoff; cancel
/// notifications are confirmed alongside ([`cancel_hints`]).
pub(crate) async fn run(shared: Arc<Shared>) {
    let hints = CancelHints::default();
    tokio::join!(
        listen_until_stopped(&shared, &hints),
        cancel_hints::confirm(&shared, &hints)
    );
}

async fn listen_until_stopped(shared: &Arc<Shared>, hints: &CancelHints) {
    let mut failures = 0u32;
    loop {
        match listen(shared, hints, &mut failures).await {
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

async fn listen(
    shared: &Arc<Shared>,
    hints: &CancelHints,
    failures: &mut u32,
) -> Result<Exit, sqlx::Error> {
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
            PAUSE_CHANNEL => {
                // Acted on once the database confirms it: anyone may NOTIFY.
                if let Some(w) = shared.wakers.get(n.payload()) {
                    let queue = n.payload().to_owned();
                    let paused = shared
                        .with_conn("queue_is_paused", |mut conn| async move {
                            lq_core::db::queues::queue_is_paused(&mut conn, &queue).await
                        })
                        .await;
                    match paused {
                        Ok(true) => w.mark_paused(),
                        Ok(false) => {}
                        Err(e) => {
                            debug!(error = %e, "could not confirm a pause; claimed-ahead jobs start as usual")
                        }
                    }
                }
            }
            CANCEL_CHANNEL => {
                if let Ok(id) = n.payload().parse::<i64>() {
                    if let Some(token) = shared.inflight.token(id) {
                        hints.hint(id, token);
                    }
                }
            }
            _ => {}
        }
    }
}

async fn connect(shared: &Shared) -> Result<PgListener, sqlx::Error> {
    let mut l = PgListener::connect_with(&shared.pool).await?;
    l.listen_all([JOBS_CHANNEL, CANCEL_CHANNEL, PAUSE_CHANNEL])
        .await?;
    Ok(l)
}
