//! The rollup writer: every `stats_interval`, adds this runtime's counts per
//! queue and kind (see [`crate::tally`]) to the current minute of
//! `lq.stats_minute`, in one statement. Every runtime writes its own; the rows
//! sum. A failed write keeps the counts for the next one.

use std::sync::Arc;

use lq_core::{chain, db};
use tracing::{warn, Instrument};

use crate::shared::Shared;

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
    let deltas = shared.tallies.take();
    if deltas.is_empty() {
        return;
    }
    let d = &deltas;
    let r = shared
        .with_conn("stats_minute_add", |mut conn| async move {
            db::stats::stats_minute_add(&mut conn, d).await
        })
        .await;
    if let Err(e) = r {
        warn!(error = %chain(&e), "could not write the per-minute rollup; keeping the counts for the next try");
        shared.tallies.restore(&deltas);
    }
}
