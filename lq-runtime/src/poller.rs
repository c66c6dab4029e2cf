//! The idle poller: once a poll interval, one statement asks which of the queues
//! whose claimers wait for work have some now, and wakes those claimers.
//!
//! Without it each waiting claimer polled on its own with an empty claim: a
//! runtime serving 1,000 idle queues sent 1,000 statements a second. Now idle
//! queues cost one statement a poll interval, an index probe per queue. NOTIFY
//! still wakes a queue at once; the poll is what finds a job whose NOTIFY was
//! missed, a scheduled job coming due, or a queue just resumed.

use std::sync::Arc;

use lq_core::db;
use tracing::warn;

use crate::{shared::Shared, stats::Stats};

/// Polls until the runtime stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    loop {
        if shared.pause(shared.config.poll_interval).await {
            return;
        }
        poll(&shared).await;
    }
}

/// One poll: wakes each waiting queue that has a claimable job. When the poll
/// itself fails, wakes every queue, so each claims on its own (and backs off on
/// its own errors) as if there were no poller.
async fn poll(shared: &Shared) {
    let waiting: Vec<String> = shared
        .wakers
        .iter()
        .filter(|(_, w)| w.is_waiting())
        .map(|(queue, _)| queue.clone())
        .collect();
    if waiting.is_empty() {
        return;
    }
    let ready = shared
        .with_conn("queues_ready", |mut conn| async move {
            db::claim::queues_ready(&mut conn, &waiting, &shared.kinds).await
        })
        .await;
    Stats::add(&shared.stats.idle_polls, 1);
    crate::telemetry::maintenance("idle_polls", 1);
    match ready {
        Ok(ready) => {
            for queue in ready {
                if let Some(w) = shared.wakers.get(&queue) {
                    w.wake();
                }
            }
        }
        Err(e) => {
            warn!(error = %lq_core::chain(&e), "idle poll failed; every queue claims on its own");
            shared.wake_all();
        }
    }
}
