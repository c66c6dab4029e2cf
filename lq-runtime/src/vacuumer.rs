//! The vacuumer: keeps dead rows in litequeue's tables bounded, and the tables
//! analyzed where autovacuum is off. The queue table (`lq.jobs`) churns dead rows
//! with every claim and completion; without vacuum the claim slows down steadily,
//! and without statistics its plan can turn into a full sort. The history
//! (`lq.finished_jobs`) leaves dead rows behind each prune, and where
//! autovacuum is off only a vacuum after many inserts marks its pages
//! all-visible for the prune's index-only scan.
//!
//! Autovacuum, with the table's own settings from the migrations, remains the
//! baseline. But it visits a database once per `autovacuum_naptime` (1 min by
//! default), and a queue completing 30k jobs a second leaves over a million dead
//! rows in between: in `lq-bench --only sustained` on a server with autovacuum on,
//! they reached 1.5M and completions fell from 26k to 8k/s. So whenever dead rows
//! pass the bound below, the runtime vacuums the table itself, skipping it if
//! a vacuum already holds it.

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

use lq_core::{
    chain, db,
    db::maintenance::{JobTable, JobTableStats, Upkeep},
};
use sqlx::{Connection, PgConnection};
use tracing::{debug, info, warn, Instrument};

use crate::shared::Shared;

/// How often each table's statistics are checked. Each claim walks past the
/// index entries of every job claimed since the last vacuum (a 300-row claim took
/// 3 ms at a clean head, 6 ms behind 300k finished jobs), so the sooner a vacuum
/// follows, the cheaper the claims. Every second, rather than every 5 s, drained
/// backlogs about a tenth faster (`bench/FINDINGS.md`); every half second was no
/// better, as a backend reports its dead rows to the statistics about once a second.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Dead rows tolerated before vacuuming: this many, or this fraction of live rows.
/// A backlog can hold millions of live rows, so a fraction of them can be large:
/// at 20 % a busy queue (26k jobs/s offered, 3M rows after two minutes) let 785k
/// dead rows pile up and completions fell from 28k to 19k/s; at 2 % the dead
/// rows stayed under 265k and the rate stayed flat (`scripts/bench --only
/// sustained`, measured when finished jobs still stayed in `lq.jobs`).
const MIN_DEAD: i64 = 20_000;
const DEAD_FRACTION: f64 = 0.02;
/// Rows inserted since the last vacuum that make one due while autovacuum is
/// off: this many, or this fraction of live rows (autovacuum's own default
/// insert scale factor). The history is only inserted into between prunes, so
/// dead rows never call for its vacuum; without one nothing marks its pages
/// all-visible, and the prune's index-only scan of the history's key read the
/// table for every entry: 1.52M heap fetches, 1.9 s, in `lq-bench --only
/// sustained` with autovacuum off (`bench/FINDINGS.md`, stops 76 and 77).
const MIN_INSERTED: i64 = 100_000;
const INSERTED_FRACTION: f64 = 0.2;
/// A vacuum refreshes the table's column statistics too only when they are at
/// least this old (or were never gathered), the pace of autovacuum's default
/// `autovacuum_naptime`. A draining queue is vacuumed every second, and an
/// ANALYZE each time was 4 % of PostgreSQL's CPU in a drain (of 200,000 queued
/// rows it took 264–342 ms on the benchmark host, against 44–72 ms for the
/// vacuum: `bench/FINDINGS.md`, stops 50 and 51), for statistics the claim does
/// not read: its plan is fixed ([`lq_core::db::HOT_PATH_SETTINGS`]), and every
/// vacuum refreshes the row count the planner scales estimates by.
const ANALYZE_EVERY: Duration = Duration::from_secs(60);
/// An open transaction older than this may hold a snapshot that keeps dead
/// rows from every vacuum (a `pg_dump`, a long report).
const PINNED_AFTER: Duration = Duration::from_secs(60);
/// How often shutdown sends its cancel again until the vacuum returns.
const CANCEL_AGAIN: Duration = Duration::from_millis(100);

/// What to do about a table now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Need {
    /// Vacuum: dead rows passed the bound.
    vacuum: bool,
    /// Analyze: with the vacuum, statistics older than [`ANALYZE_EVERY`]; on its
    /// own, a table never analyzed that autovacuum will not analyze soon.
    analyze: bool,
}

impl Need {
    /// The statement's work, or `None` for nothing to do.
    fn upkeep(self) -> Option<Upkeep> {
        match (self.vacuum, self.analyze) {
            (true, true) => Some(Upkeep::VacuumAnalyze),
            (true, false) => Some(Upkeep::Vacuum),
            (false, true) => Some(Upkeep::Analyze),
            (false, false) => None,
        }
    }
}

/// Rows inserted into `t` since its last vacuum tolerated while autovacuum is
/// off: the larger of `MIN_INSERTED` and `INSERTED_FRACTION` of its live rows.
fn insert_bound(t: &JobTableStats) -> i64 {
    MIN_INSERTED.max((t.live as f64 * INSERTED_FRACTION) as i64)
}

/// Dead rows tolerated in `t`: the larger of `MIN_DEAD` and `DEAD_FRACTION` of its live rows.
fn bound(t: &JobTableStats) -> i64 {
    MIN_DEAD.max((t.live as f64 * DEAD_FRACTION) as i64)
}

/// What the vacuumer remembers of one table between checks.
#[derive(Debug, Default)]
struct Tended {
    /// Whether the table's warning was logged.
    warned: bool,
    /// Dead rows the last vacuum left (an older snapshot still sees them, so no
    /// vacuum can remove them yet): only dead rows beyond these count toward the
    /// bound, or a long `pg_dump` would have the table vacuumed every second.
    unremovable: i64,
    /// Failed vacuums in a row, and when to try again.
    failures: u32,
    retry_at: Option<tokio::time::Instant>,
}

impl Tended {
    /// Dead rows fell below what the last vacuum left: the snapshot that held
    /// them is gone and something (autovacuum) removed them.
    fn observe(&mut self, t: &JobTableStats) {
        self.unremovable = self.unremovable.min(t.dead);
    }

    /// A vacuum ran; `after` is the table's statistics right after it, and
    /// `pinned` whether a transaction older than [`PINNED_AFTER`] was open as
    /// it began. Only then are the dead rows it left beyond the bound taken
    /// for rows no vacuum can remove yet: otherwise they died while it ran (a
    /// busy queue), or it was skipped (another session held the table).
    fn vacuumed(&mut self, after: Option<&JobTableStats>, pinned: bool) {
        self.unremovable = after
            .filter(|t| pinned && t.dead > bound(t))
            .map_or(0, |t| t.dead);
        self.failures = 0;
        self.retry_at = None;
    }

    /// A vacuum failed (cancelled at its bound, a lock, a lost connection):
    /// the next waits 10 s, doubling to 5 min, rather than a second.
    fn failed(&mut self, now: tokio::time::Instant) {
        self.failures = self.failures.saturating_add(1);
        let wait = Duration::from_secs(10)
            .saturating_mul(1 << self.failures.saturating_sub(1).min(5))
            .min(Duration::from_secs(300));
        self.retry_at = Some(now + wait);
    }

    fn waiting(&self, now: tokio::time::Instant) -> bool {
        self.retry_at.is_some_and(|at| now < at)
    }
}

/// Vacuum whenever dead rows pass the larger of `MIN_DEAD` and `DEAD_FRACTION`
/// of the live rows (beyond the `unremovable` ones the last vacuum left),
/// whether or not autovacuum is on, or, with autovacuum off, when rows inserted
/// since the last vacuum pass the larger of `MIN_INSERTED` and
/// `INSERTED_FRACTION` of them; and analyze with it if the statistics are older
/// than [`ANALYZE_EVERY`]; analyze a table that holds rows but was never
/// analyzed, unless autovacuum is on and will do it soon. Nothing if this role
/// may not vacuum the table (the server would only warn).
fn decide(t: &JobTableStats, unremovable: i64) -> Need {
    let inserted = t.autovacuum_off && t.inserted_since_vacuum > insert_bound(t);
    let vacuum = t.may_vacuum && (t.dead > bound(t).saturating_add(unremovable) || inserted);
    let stale = t
        .analyzed_secs_ago
        .is_none_or(|secs| secs >= ANALYZE_EVERY.as_secs() as i64);
    let never_analyzed = t.may_vacuum
        && t.analyzed_secs_ago.is_none()
        && t.live + t.modified_since_analyze > 1000
        && (t.autovacuum_off || t.modified_since_analyze > 1000);
    Need {
        vacuum,
        analyze: (vacuum && stale) || never_analyzed,
    }
}

/// Checks and vacuums both tables until the runtime stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut tended: [Tended; JobTable::ALL.len()] = Default::default();
    loop {
        if shared.pause(CHECK_EVERY).await {
            return;
        }
        if !shared.is_leader() {
            continue;
        }
        for (table, tended) in JobTable::ALL.into_iter().zip(&mut tended) {
            if tended.waiting(tokio::time::Instant::now()) {
                continue;
            }
            tend(&shared, table, tended)
                .instrument(crate::telemetry::duty_span("vacuum"))
                .await;
        }
    }
}

/// `table`'s statistics, or `None` (logged) when they cannot be read.
async fn read_stats(shared: &Shared, table: JobTable) -> Option<JobTableStats> {
    let stats = shared
        .with_conn("job_table_stats", |mut conn| async move {
            db::maintenance::job_table_stats(&mut conn, table).await
        })
        .await;
    match stats {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(table = table.name(), error = %chain(&e), "could not read table statistics");
            None
        }
    }
}

/// Reads `table`'s statistics and vacuums or analyzes it if [`decide`] says so.
async fn tend(shared: &Shared, table: JobTable, tended: &mut Tended) {
    let Some(stats) = read_stats(shared, table).await else {
        return;
    };
    tended.observe(&stats);
    let need = decide(&stats, tended.unremovable);
    let warned = &mut tended.warned;
    if stats.autovacuum_off && !stats.may_vacuum && !*warned {
        *warned = true;
        warn!(
            table = table.name(),
            "autovacuum is off for this table and this runtime's role does not own it, so nothing vacuums it and claims will slow down: turn autovacuum on, or run one runtime as the owner"
        );
    }
    let Some(upkeep) = need.upkeep() else {
        return;
    };
    if need.vacuum && !*warned {
        *warned = true;
        if stats.autovacuum_off {
            warn!(
                table = table.name(),
                "autovacuum is off: litequeue vacuums the table itself; turn autovacuum on"
            );
        } else {
            info!(
                table = table.name(),
                dead = stats.dead,
                "autovacuum has not kept up: litequeue vacuums the table too"
            );
        }
    }
    // Vacuum may take longer than a statement normally should; it is bounded
    // by a generous multiple of the db timeout, counted from when it has its
    // connection, so the server's bound (nine tenths of it) always ends it first
    // and the connection goes back with its usual setting. Shutdown does not wait
    // for it: the server is asked to cancel it.
    if shared.stopping.is_cancelled() {
        return;
    }
    // Whether an old transaction may pin dead rows through this vacuum (among
    // the sessions this role may see).
    let pinned = need.vacuum
        && shared
            .with_conn("oldest_transaction_age", |mut conn| async move {
                db::maintenance::oldest_transaction_age(&mut conn).await
            })
            .await
            .is_ok_and(|secs| secs >= PINNED_AFTER.as_secs_f64());
    let bound = shared.config.db_timeout * 6;
    let mut stopped = false;
    let r: Result<(), lq_core::Error> = async {
        let mut conn = db::timed("job_table_vacuum", shared.config.db_timeout, async {
            shared
                .pool
                .acquire()
                .await
                .map_err(db::err("job_table_vacuum"))
        })
        .await?;
        let pid = db::timed(
            "backend_pid",
            shared.config.db_timeout,
            db::maintenance::backend_pid(&mut conn),
        )
        .await?;
        let r = {
            let vacuum = db::timed(
                "job_table_vacuum",
                bound,
                db::maintenance::job_table_vacuum(&mut conn, table, upkeep, bound),
            );
            tokio::pin!(vacuum);
            tokio::select! {
                r = &mut vacuum => r,
                _ = shared.stopping.cancelled() => {
                    stopped = true;
                    let cancelled = cancel_until_returned(shared, pid, vacuum.as_mut());
                    db::timed("job_table_vacuum", shared.config.db_timeout, cancelled).await
                }
            }
        };
        if r.is_err() || stopped {
            // Its statement_timeout may still be raised, or a cancel still on its
            // way: neither is for another task's statement.
            conn.close_on_drop();
        }
        r
    }
    .await;
    match r {
        Ok(()) => {
            crate::telemetry::maintenance("vacuums", 1);
            let after = read_stats(shared, table).await;
            debug!(
                table = table.name(),
                ?upkeep,
                dead = stats.dead,
                left = after.as_ref().map(|t| t.dead),
                "vacuumed/analyzed"
            );
            if need.vacuum {
                tended.vacuumed(after.as_ref(), pinned);
            }
        }
        Err(e) if stopped => {
            debug!(table = table.name(), error = %chain(&e), "vacuum cancelled: the runtime is stopping")
        }
        Err(e) => {
            tended.failed(tokio::time::Instant::now());
            warn!(table = table.name(), error = %chain(&e), failures = tended.failures, "vacuum failed; will retry later")
        }
    }
}

/// Cancels the vacuum session `pid` runs until `vacuum` returns, so that
/// shutdown need not wait up to six db timeouts for it. A cancel reaching the
/// session between the vacuum's statements is ignored by the server, so it goes
/// again every [`CANCEL_AGAIN`], only while a vacuum or analyze runs there. It
/// is sent on a connection of its own, outside the pool, which may be short at
/// shutdown.
async fn cancel_until_returned<F>(shared: &Shared, pid: i32, mut vacuum: Pin<&mut F>) -> F::Output
where
    F: Future,
{
    let mut canceller: Option<PgConnection> = None;
    let returned = loop {
        let sent = async {
            let conn = shared
                .own_connection(&mut canceller, "cancel_vacuum")
                .await?;
            db::maintenance::cancel_vacuum(conn, pid).await
        };
        tokio::select! {
            r = &mut vacuum => break r,
            sent = sent => if let Err(e) = sent {
                canceller = None;
                debug!(error = %chain(&e), "could not cancel the vacuum yet; trying again");
            },
        }
        tokio::select! {
            r = &mut vacuum => break r,
            _ = tokio::time::sleep(CANCEL_AGAIN) => {}
        }
    };
    if let Some(conn) = canceller {
        // Closed with a goodbye, so the server logs no lost client.
        let _ = tokio::time::timeout(CANCEL_AGAIN, conn.close()).await;
    }
    returned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(live: i64, dead: i64) -> JobTableStats {
        JobTableStats {
            live,
            dead,
            modified_since_analyze: 0,
            inserted_since_vacuum: 0,
            analyzed_secs_ago: Some(1),
            autovacuum_off: false,
            may_vacuum: true,
        }
    }

    #[test]
    fn dead_rows_past_the_bound_are_vacuumed_whether_or_not_autovacuum_is_on() {
        for autovacuum_off in [false, true] {
            let t = JobTableStats {
                autovacuum_off,
                ..table(100_000, 20_001)
            };
            assert!(decide(&t, 0).vacuum, "autovacuum off: {autovacuum_off}");
        }
    }

    #[test]
    fn rows_inserted_past_their_bound_are_vacuumed_only_while_autovacuum_is_off() {
        let inserted = |autovacuum_off, live, inserted_since_vacuum| JobTableStats {
            autovacuum_off,
            inserted_since_vacuum,
            ..table(live, 0)
        };
        assert!(decide(&inserted(true, 100_000, 100_001), 0).vacuum);
        assert!(!decide(&inserted(true, 100_000, 100_000), 0).vacuum);
        assert!(!decide(&inserted(true, 5_000_000, 1_000_000), 0).vacuum);
        assert!(decide(&inserted(true, 5_000_000, 1_000_001), 0).vacuum);
        // Autovacuum's own insert threshold does it when it is on.
        assert!(!decide(&inserted(false, 100_000, 10_000_000), 0).vacuum);
    }

    #[test]
    fn the_bound_is_twenty_thousand_or_two_percent_of_live_rows() {
        assert!(!decide(&table(100_000, 20_000), 0).vacuum);
        assert!(!decide(&table(3_000_000, 60_000), 0).vacuum);
        assert!(decide(&table(3_000_000, 60_001), 0).vacuum);
    }

    #[test]
    fn dead_rows_a_vacuum_could_not_remove_do_not_count_toward_the_bound() {
        let mut tended = Tended::default();
        // An old snapshot held 50,000 dead rows through the vacuum.
        tended.vacuumed(Some(&table(500_000, 50_000)), true);
        assert!(!decide(&table(500_000, 50_000), tended.unremovable).vacuum);
        assert!(!decide(&table(500_000, 60_000), tended.unremovable).vacuum);
        assert!(decide(&table(500_000, 70_001), tended.unremovable).vacuum);
        // The snapshot went and autovacuum removed them: the bound is back.
        tended.observe(&table(500_000, 100));
        assert!(decide(&table(500_000, 20_101), tended.unremovable).vacuum);
        // A vacuum that left fewer than the bound (rows that died while it ran)
        // leaves the bound as it is.
        tended.vacuumed(Some(&table(500_000, 15_000)), true);
        assert_eq!(tended.unremovable, 0);
        // Without an old transaction open, what a vacuum left died while it
        // ran, or it was skipped: nothing is taken for unremovable.
        tended.vacuumed(Some(&table(500_000, 50_000)), false);
        assert_eq!(tended.unremovable, 0);
    }

    #[test]
    fn a_failed_vacuum_is_retried_after_ten_seconds_doubling_to_five_minutes() {
        let now = tokio::time::Instant::now();
        let mut tended = Tended::default();
        let mut waits = Vec::new();
        for _ in 0..7 {
            tended.failed(now);
            waits.push(tended.retry_at.unwrap() - now);
        }
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300]);
        assert!(tended.waiting(now + Duration::from_secs(299)));
        tended.vacuumed(None, false);
        assert!(!tended.waiting(now));
    }

    #[test]
    fn a_role_that_may_not_vacuum_does_nothing() {
        let t = JobTableStats {
            may_vacuum: false,
            analyzed_secs_ago: None,
            autovacuum_off: true,
            ..table(100_000, 1_000_000)
        };
        assert_eq!(
            decide(&t, 0),
            Need {
                vacuum: false,
                analyze: false
            }
        );
    }

    #[test]
    fn a_never_analyzed_table_is_analyzed_unless_autovacuum_is_on_and_it_barely_changed() {
        let never = |autovacuum_off, modified_since_analyze| JobTableStats {
            analyzed_secs_ago: None,
            autovacuum_off,
            modified_since_analyze,
            ..table(5_000, 0)
        };
        assert!(decide(&never(true, 0), 0).analyze);
        assert!(!decide(&never(false, 0), 0).analyze);
        assert!(decide(&never(false, 5_000), 0).analyze);
        assert!(!decide(&table(5_000, 0), 0).analyze);
    }

    fn upkeep(t: &JobTableStats) -> Option<Upkeep> {
        decide(t, 0).upkeep()
    }

    #[test]
    fn a_vacuum_analyzes_only_statistics_a_minute_old_or_never_gathered() {
        let dead = |analyzed_secs_ago| JobTableStats {
            analyzed_secs_ago,
            ..table(100_000, 50_000)
        };
        assert_eq!(upkeep(&dead(Some(59))), Some(Upkeep::Vacuum));
        assert_eq!(upkeep(&dead(Some(60))), Some(Upkeep::VacuumAnalyze));
        assert_eq!(upkeep(&dead(None)), Some(Upkeep::VacuumAnalyze));
        // Old statistics alone are autovacuum's to refresh, not a reason to run.
        assert_eq!(upkeep(&table(100_000, 0)), None);
        let old = JobTableStats {
            analyzed_secs_ago: Some(3_600),
            ..table(100_000, 0)
        };
        assert_eq!(upkeep(&old), None);
    }
}
