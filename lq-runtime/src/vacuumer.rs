//! The vacuumer: keeps dead rows in `lq.jobs` bounded, and the table analyzed
//! where autovacuum is off. A queue table churns dead rows; without vacuum the
//! claim slows down steadily, and without statistics its plan can turn into a
//! full sort.
//!
//! Autovacuum, with the table's own settings from the migrations, remains the
//! baseline. But it visits a database once per `autovacuum_naptime` (1 min by
//! default), and a queue completing 30k jobs a second leaves over a million dead
//! rows in between: in `lq-bench --only sustained` on a server with autovacuum on,
//! they reached 1.5M and completions fell from 26k to 8k/s. So whenever dead rows
//! pass the bound below, the runtime vacuums the table itself, skipping it if
//! a vacuum already holds it.

use std::{sync::Arc, time::Duration};

use lq_core::{chain, db, db::maintenance::JobsTableStats};
use tracing::{debug, info, warn};

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

/// What to do about `lq.jobs` now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Need {
    /// Vacuum (and analyze): dead rows passed the bound.
    vacuum: bool,
    /// Analyze only: the table was never analyzed and autovacuum will not do it.
    analyze: bool,
}

/// Vacuum whenever dead rows pass `MIN_DEAD` or `DEAD_FRACTION` of the live rows,
/// whether or not autovacuum is on; analyze a table that holds rows but was
/// never analyzed, unless autovacuum is on and will do it soon. Nothing if this
/// role may not vacuum the table (the server would only warn).
fn decide(t: &JobsTableStats) -> Need {
    let bound = MIN_DEAD.max((t.live as f64 * DEAD_FRACTION) as i64);
    Need {
        vacuum: t.may_vacuum && t.dead > bound,
        analyze: t.may_vacuum
            && !t.analyzed
            && t.live + t.modified_since_analyze > 1000
            && (t.autovacuum_off || t.modified_since_analyze > 1000),
    }
}

/// Checks and vacuums until the runtime stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut warned = false;
    loop {
        if shared.pause(CHECK_EVERY).await {
            return;
        }
        let stats = shared
            .with_conn("jobs_table_stats", |mut conn| async move {
                db::maintenance::jobs_table_stats(&mut conn).await
            })
            .await;
        let stats = match stats {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %chain(&e), "could not read lq.jobs statistics");
                continue;
            }
        };
        let need = decide(&stats);
        if !(need.vacuum || need.analyze) {
            continue;
        }
        if need.vacuum && !warned {
            warned = true;
            if stats.autovacuum_off {
                warn!("autovacuum is off for lq.jobs: litequeue vacuums the table itself; turn autovacuum on");
            } else {
                info!(
                    dead = stats.dead,
                    "autovacuum has not kept up with lq.jobs: litequeue vacuums it too"
                );
            }
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
            Ok(()) => debug!(
                vacuum = need.vacuum,
                dead = stats.dead,
                "vacuumed/analyzed lq.jobs"
            ),
            Err(e) => warn!(error = %chain(&e), "vacuum of lq.jobs failed; will retry"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(live: i64, dead: i64) -> JobsTableStats {
        JobsTableStats {
            live,
            dead,
            modified_since_analyze: 0,
            analyzed: true,
            autovacuum_off: false,
            may_vacuum: true,
        }
    }

    #[test]
    fn dead_rows_past_the_bound_are_vacuumed_whether_or_not_autovacuum_is_on() {
        for autovacuum_off in [false, true] {
            let t = JobsTableStats {
                autovacuum_off,
                ..table(100_000, 20_001)
            };
            assert!(decide(&t).vacuum, "autovacuum off: {autovacuum_off}");
        }
    }

    #[test]
    fn the_bound_is_twenty_thousand_or_two_percent_of_live_rows() {
        assert!(!decide(&table(100_000, 20_000)).vacuum);
        assert!(!decide(&table(3_000_000, 60_000)).vacuum);
        assert!(decide(&table(3_000_000, 60_001)).vacuum);
    }

    #[test]
    fn a_role_that_may_not_vacuum_does_nothing() {
        let t = JobsTableStats {
            may_vacuum: false,
            analyzed: false,
            autovacuum_off: true,
            ..table(100_000, 1_000_000)
        };
        assert_eq!(
            decide(&t),
            Need {
                vacuum: false,
                analyze: false
            }
        );
    }

    #[test]
    fn a_never_analyzed_table_is_analyzed_unless_autovacuum_is_on_and_it_barely_changed() {
        let never = |autovacuum_off, modified_since_analyze| JobsTableStats {
            analyzed: false,
            autovacuum_off,
            modified_since_analyze,
            ..table(5_000, 0)
        };
        assert!(decide(&never(true, 0)).analyze);
        assert!(!decide(&never(false, 0)).analyze);
        assert!(decide(&never(false, 5_000)).analyze);
        assert!(!decide(&table(5_000, 0)).analyze);
    }
}
