//! Cancel notifications, confirmed against the rows in batches.
//!
//! Any role that can connect may NOTIFY `lq_cancel`, so a notification is only a
//! hint, and a flood of them must neither take the runtime's connections nor
//! fill its log. Hints gather here, one per job however many arrive, and one
//! statement confirms all those gathered. After a batch holding hints the rows
//! did not confirm, the next waits [`AFTER_UNCONFIRMED`]: forged hints cost at
//! most about ten statements a second, and a real cancel among them waits at most
//! that long more (the heartbeat reads the same flag besides).

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
    time::{Duration, Instant},
};

use lq_core::{chain, db};
use tokio::sync::Notify;
use tracing::{debug, warn};
use uuid::Uuid;

use crate::{shared::Shared, stats::Stats};

/// The pause after a batch with hints the rows did not confirm.
const AFTER_UNCONFIRMED: Duration = Duration::from_millis(100);
/// At most one warning this often, counting the hints ignored since the last.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Hints waiting for confirmation: job id to (lease token, notifications).
#[derive(Default)]
pub(crate) struct CancelHints {
    pending: Mutex<HashMap<i64, (Uuid, u64)>>,
    arrived: Notify,
}

impl CancelHints {
    /// Notes a cancel notification for job `id`, which this runtime holds under
    /// lease `token`.
    pub(crate) fn hint(&self, id: i64, token: Uuid) {
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let hint = pending.entry(id).or_insert((token, 0));
            *hint = (token, hint.1 + 1);
        }
        self.arrived.notify_one();
    }

    fn take(&self) -> HashMap<i64, (Uuid, u64)> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Confirms the hints as they arrive, until the runtime stops: signals each
/// handler whose row asks for its cancellation, and counts the rest as ignored
/// (forged, or for an attempt that ended or went back meanwhile).
pub(crate) async fn confirm(shared: &Shared, hints: &CancelHints) {
    let mut ignored_unwarned = 0u64;
    let mut warned_at: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = hints.arrived.notified() => {}
            _ = shared.stopping.cancelled() => return,
        }
        let batch = hints.take();
        if batch.is_empty() {
            continue;
        }
        let (ids, tokens): (Vec<i64>, Vec<Uuid>) =
            batch.iter().map(|(id, (token, _))| (*id, *token)).unzip();
        Stats::add(&shared.stats.cancel_checks, 1);
        let check = shared.with_conn("job_cancels_requested", |mut conn| {
            let (ids, tokens) = (&ids, &tokens);
            async move { db::lease::job_cancels_requested(&mut conn, ids, tokens).await }
        });
        // Shutdown does not wait for a connection or an answer: the jobs still
        // running are signalled by the shutdown itself.
        let confirmed = tokio::select! {
            r = check => r,
            _ = shared.stopping.cancelled() => return,
        };
        let confirmed: HashSet<i64> = match confirmed {
            Ok(ids) => ids.into_iter().collect(),
            Err(e) => {
                // The heartbeat reads the same flag at its next beat.
                debug!(error = %chain(&e), "could not confirm cancel notifications");
                if shared.pause(AFTER_UNCONFIRMED).await {
                    return;
                }
                continue;
            }
        };
        let mut ignored = 0;
        for (id, (token, notifications)) in &batch {
            if confirmed.contains(id) {
                shared.inflight.cancel_if_held(*id, *token);
                debug!(id, "cancel requested: signalled the running handler");
            } else {
                ignored += notifications;
            }
        }
        if ignored == 0 {
            continue;
        }
        Stats::add(&shared.stats.cancel_hints_ignored, ignored);
        ignored_unwarned += ignored;
        if warned_at.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            warn!(
                ignored = ignored_unwarned,
                "ignored cancel notifications their jobs' rows do not confirm: forged (any role that can connect may send one), or for an attempt that ended meanwhile"
            );
            ignored_unwarned = 0;
            warned_at = Some(Instant::now());
        }
        if shared.pause(AFTER_UNCONFIRMED).await {
            return;
        }
    }
}
