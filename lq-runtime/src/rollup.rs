//! The rollup writer: every `stats_interval`, adds what this runtime counted
//! per queue and kind since its last write (see [`crate::tally`]) to the current
//! minute of `lq.stats_minute`, in one statement. Every runtime writes its own;
//! the rows sum. A failed write leaves the counts to the next one.

use std::sync::Arc;

use lq_core::{chain, db};
use tokio::sync::Mutex;
use tracing::{warn, Instrument};

use crate::{shared::Shared, tally::LastSeen};

/// What the rollup has written, per queue and kind.
#[derive(Default)]
pub(crate) struct Written(Mutex<LastSeen>);

/// Writes the counts every `stats_interval` until the runtime stops; the last
/// counts are written by [`flush`] at shutdown.
pub(crate) async fn run(shared: Arc<Shared>) {
    loop {
        if shared.pause(shared.config.stats_interval).await {
            return;
        }
        flush(&shared)
            .instrument(crate::telemetry::duty_span("rollup"))
            .await;
    }
}

/// Writes what was counted since the last write.
pub(crate) async fn flush(shared: &Shared) {
    let mut written = shared.rollup_written.0.lock().await;
    let grown = written.growth(&shared.tallies);
    let deltas: Vec<_> = grown
        .iter()
        .filter_map(|(q, k, d, _)| d.to_rollup(q, k))
        .collect();
    if deltas.is_empty() {
        return;
    }
    let d = &deltas;
    let r = shared
        .with_conn("stats_minute_add", |mut conn| async move {
            db::stats::stats_minute_add(&mut conn, d).await
        })
        .await;
    match r {
        Ok(()) => {
            for (q, k, _, now) in grown {
                written.advance(q, k, now);
            }
        }
        Err(e) => {
            warn!(error = %chain(&e), "could not write the per-minute rollup; the counts go with the next write")
        }
    }
}
