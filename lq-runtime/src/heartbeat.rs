//! The heartbeat: extends the leases this runtime holds, on its own connection, so
//! a starved application pool cannot cost a lease.

use std::{collections::HashSet, sync::Arc, time::Duration};

use lq_core::{chain, db, Error};
use sqlx::{ConnectOptions, PgConnection};
use tracing::warn;

use crate::shared::Shared;

/// How often leases are renewed: a quarter of the shortest lease, at least 100 ms.
pub(crate) fn interval(lease_secs: &[f64]) -> Duration {
    let shortest = lease_secs.iter().copied().fold(f64::INFINITY, f64::min);
    let shortest = if shortest.is_finite() { shortest } else { 60.0 };
    Duration::from_secs_f64((shortest / 4.0).max(0.1))
}

/// Renews leases until `stop` fires (after every job task has finished).
pub(crate) async fn run(shared: Arc<Shared>, stop: tokio_util::sync::CancellationToken) {
    let every = interval(&shared.lease_secs);
    let mut conn: Option<PgConnection> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        if let Err(e) = beat(&shared, &mut conn).await {
            conn = None; // reconnect next time
            warn!(error = %chain(&e), "heartbeat failed; leases are renewed at the next beat");
        }
    }
}

async fn beat(shared: &Shared, conn: &mut Option<PgConnection>) -> Result<(), Error> {
    let held = shared.inflight.snapshot();
    if held.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = held.iter().map(|(id, _)| *id).collect();
    let tokens: Vec<_> = held.iter().map(|(_, h)| h.token).collect();
    let secs: Vec<f64> = held.iter().map(|(_, h)| h.lease_secs).collect();
    let timeout = shared.config.db_timeout;
    let renewed = db::timed("job_heartbeat_many", timeout, async {
        if conn.is_none() {
            let opts = shared.pool.connect_options();
            *conn = Some(
                opts.as_ref()
                    .clone()
                    .connect()
                    .await
                    .map_err(db::err("heartbeat_connect"))?,
            );
        }
        let c = conn.as_mut().expect("connected above");
        db::lease::job_heartbeat_many(c, &ids, &tokens, &secs).await
    })
    .await?;
    let still: HashSet<i64> = renewed.iter().map(|r| r.id).collect();
    for r in renewed.iter().filter(|r| r.cancel_requested) {
        shared.inflight.cancel(r.id);
    }
    for (id, h) in held.iter().filter(|(id, _)| !still.contains(id)) {
        // Finished meanwhile (then it is gone from the map) or lost to expiry.
        if shared.inflight.snapshot_has(*id, h.token) {
            warn!(
                id,
                "lease lost: the job's handler is told to stop and its writes will be refused"
            );
            shared.inflight.cancel_if_held(*id, h.token);
        }
    }
    Ok(())
}
