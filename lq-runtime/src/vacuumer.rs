//! The vacuumer: keeps `lq.jobs` vacuumed and analyzed on servers where autovacuum
//! is turned off. A queue table churns dead rows; without vacuum the claim slows
//! down steadily, and without statistics its plan can turn into a full sort.
//! Where autovacuum runs (the normal case), the table's own autovacuum settings
//! from the migrations do the work and this duty only watches.

use std::{sync::Arc, time::Duration};

use lq_core::{chain, db};
use tracing::{info, warn};

use crate::shared::Shared;

/// How often the table's statistics are checked.
const CHECK_EVERY: Duration = Duration::from_secs(5);
/// Dead rows tolerated before vacuuming: this many, or this fraction of live rows.
/// Finished jobs stay in the table, so a fraction of live rows grows with the
/// history: at 20 % a busy queue (26k jobs/s offered, 3M rows after two minutes)
/// let 785k dead rows pile up and completions fell from 28k to 19k/s; at 2 % the
/// dead rows stayed under 265k and the rate stayed flat (`scripts/bench --only
/// sustained`).
const MIN_DEAD: i64 = 20_000;
const DEAD_FRACTION: f64 = 0.02;

/// Checks and vacuums until the runtime stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut warned = false;
    loop {
        if shared.pause(CHECK_EVERY).await {
            return;
        }
        let need = shared
            .with_conn("jobs_vacuum_need", |mut conn| async move {
                db::maintenance::jobs_vacuum_need(&mut conn, MIN_DEAD, DEAD_FRACTION).await
            })
            .await;
        let need = match need {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %chain(&e), "could not read lq.jobs statistics");
                continue;
            }
        };
        if !(need.vacuum || need.analyze) {
            continue;
        }
        if need.vacuum && !warned {
            warned = true;
            warn!("autovacuum is off for lq.jobs: litequeue vacuums the table itself; turn autovacuum on");
        }
        // Vacuum may take longer than a statement normally should; it is bounded
        // by a generous multiple of the db timeout.
        let r = db::timed("jobs_vacuum", shared.config.db_timeout * 6, async {
            let mut conn = shared
                .pool
                .acquire()
                .await
                .map_err(db::err("jobs_vacuum"))?;
            db::maintenance::jobs_vacuum(&mut conn, need.vacuum).await
        })
        .await;
        match r {
            Ok(()) => info!(vacuum = need.vacuum, "vacuumed/analyzed lq.jobs"),
            Err(e) => warn!(error = %chain(&e), "vacuum of lq.jobs failed; will retry"),
        }
    }
}
