//! A health check of the queue and its server, for an operator or a probe.

use std::time::Duration;

use sqlx::PgPool;

use super::pinned;
use crate::{db, Error, SCHEMA_VERSION};

/// An open transaction older than this holds back vacuum: a finding.
const OLD_TRANSACTION: Duration = Duration::from_secs(300);
/// A lease expired longer ago than this and still not rescued: a finding.
const STALE_LEASE: Duration = Duration::from_secs(60);

/// The schema's check: current, newer but still serving this build (a rolling
/// deploy under way, or this build left behind), or unusable by this build.
async fn schema_check(pool: &PgPool, found: i32) -> Result<Check, Error> {
    let (ok, detail) = if found == SCHEMA_VERSION {
        (true, format!("version {found}, current"))
    } else if found < SCHEMA_VERSION {
        (
            false,
            format!("version {found}, this build needs {SCHEMA_VERSION}: run `lq migrate`"),
        )
    } else {
        let served = pinned(pool, "doctor", |conn| {
            Box::pin(async move { crate::ensure_newer_schema_serves_this_build(conn, found).await })
        })
        .await;
        match served {
            Ok(()) => (
                true,
                format!(
                    "version {found}, newer than this build's {SCHEMA_VERSION} and still serving it: \
                     upgrade this build when convenient"
                ),
            ),
            Err(Error::SchemaTooNew { .. }) => (
                false,
                format!(
                    "version {found}, newer than this build's {SCHEMA_VERSION}, which it no longer \
                     serves: upgrade litequeue"
                ),
            ),
            Err(e) => return Err(e),
        }
    };
    Ok(Check {
        name: "schema",
        ok,
        detail,
    })
}

/// One check of [`doctor`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// What was checked, in a word or two (`schema`, `autovacuum`, ...).
    pub name: &'static str,
    /// True when nothing needs an operator.
    pub ok: bool,
    /// What was found, and what to do about it when not ok.
    pub detail: String,
}

/// Checks what makes a queue table slow down or jobs stop: the schema version,
/// autovacuum, the oldest open transaction, dead rows in `lq.jobs`, queued jobs
/// no live runtime would run, expired leases no one rescues, and whether a
/// leader exists while runtimes run. Every check is reported, passing or not,
/// except when the schema check fails: then it is the only one (the others read
/// tables a missing or newer schema may not have).
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let failing: Vec<_> = lq_core::control::doctor(&pool).await?.into_iter().filter(|c| !c.ok).collect();
/// for c in &failing {
///     eprintln!("{}: {}", c.name, c.detail);
/// }
/// # Ok(()) }
/// ```
pub async fn doctor(pool: &PgPool) -> Result<Vec<Check>, Error> {
    let found = crate::schema_version(pool).await?;
    let schema = schema_check(pool, found).await?;
    let usable = schema.ok;
    let mut checks = vec![schema];
    if !usable {
        return Ok(checks);
    }
    let (f, unserved) = pinned(pool, "doctor", |conn| {
        Box::pin(async move {
            let f = db::doctor::doctor_figures(conn, STALE_LEASE.as_secs_f64()).await?;
            let unserved = db::doctor::doctor_unserved(conn).await?;
            Ok((f, unserved))
        })
    })
    .await?;
    let vacuum_ok = f.autovacuum && !f.jobs_autovacuum_off;
    checks.push(Check {
        name: "autovacuum",
        ok: vacuum_ok,
        detail: if vacuum_ok {
            "on for lq.jobs".to_owned()
        } else if !f.autovacuum {
            "off on the server (autovacuum or track_counts is off): with track_counts off no \
             dead row is counted, so neither autovacuum nor the leader vacuums lq.jobs; \
             turn both on"
                .to_owned()
        } else {
            "off for lq.jobs: the leader vacuums it, but turn autovacuum on as the safety net"
                .to_owned()
        },
    });
    let xact = f.oldest_xact_secs.unwrap_or(0.0);
    let young = xact < OLD_TRANSACTION.as_secs_f64();
    checks.push(Check {
        name: "transactions",
        ok: young && f.sees_all_sessions,
        detail: format!(
            "oldest open transaction {xact:.0} s{}{}",
            if young {
                ""
            } else {
                " old: it holds back vacuum, and the queue slows down until it ends \
                 (pg_stat_activity, or pg_prepared_xacts for a prepared transaction)"
            },
            if f.sees_all_sessions {
                ""
            } else {
                " among this role's own sessions: PostgreSQL hides when other roles' \
                 transactions began, so one left open by the application would not show; \
                 grant this role pg_monitor"
            }
        ),
    });
    let total = f.jobs_live_rows + f.jobs_dead_rows;
    let dead_share = if total > 0 {
        f.jobs_dead_rows as f64 / total as f64
    } else {
        0.0
    };
    let bloated = f.jobs_dead_rows > 10_000 && dead_share > 0.5;
    checks.push(Check {
        name: "dead rows",
        ok: !bloated,
        detail: format!(
            "lq.jobs: {} live, {} dead row versions ({:.0} %){}",
            f.jobs_live_rows,
            f.jobs_dead_rows,
            dead_share * 100.0,
            if bloated {
                ": vacuum is falling behind"
            } else {
                ""
            }
        ),
    });
    checks.push(Check {
        name: "unserved",
        ok: unserved.is_empty(),
        detail: if unserved.is_empty() {
            "every queued job has a live runtime that can run it".to_owned()
        } else {
            let list: Vec<String> = unserved
                .iter()
                .map(|(q, k, n)| format!("{n} of {k} on {q}"))
                .collect();
            format!("no live runtime runs: {}", list.join(", "))
        },
    });
    checks.push(Check {
        name: "leases",
        ok: f.expired_leases == 0,
        detail: if f.expired_leases == 0 {
            "no expired lease waits for rescue".to_owned()
        } else {
            format!(
                "{} running jobs' leases expired over {} s ago and were not rescued: is a leader running?",
                f.expired_leases,
                STALE_LEASE.as_secs()
            )
        },
    });
    checks.push(Check {
        name: "leader",
        ok: f.has_leader || f.live_runtimes == 0,
        detail: match (f.live_runtimes, f.has_leader) {
            (0, _) => "no runtime is running".to_owned(),
            (n, true) => format!("{n} live runtimes, one leads"),
            (n, false) => format!("{n} live runtimes and no leader: maintenance is not running"),
        },
    });
    Ok(checks)
}
