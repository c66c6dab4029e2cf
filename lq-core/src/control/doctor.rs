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
/// autovacuum, the oldest open transaction, replication slots no client reads
/// (they keep WAL until the disk fills, and may hold back vacuum), dead rows in
/// `lq.jobs`, queued jobs no live runtime would run, live runtimes that set
/// different limits on one queue, expired leases no one rescues, whether a
/// leader exists while runtimes run, whether checkpoints come from
/// `max_wal_size` rather than `checkpoint_timeout`, and whether the server has
/// connections to spare for another runtime. Every check is
/// reported, passing or not, except when the schema check fails: then it is the
/// only one (the others read tables a missing or newer schema may not have).
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
    let (f, unserved, idle_slots, runtimes, checkpoints, connections) =
        pinned(pool, "doctor", |conn| {
            Box::pin(async move {
                let f = db::doctor::doctor_figures(conn, STALE_LEASE.as_secs_f64()).await?;
                let unserved = db::doctor::doctor_unserved(conn).await?;
                let idle_slots = db::doctor::doctor_idle_slots(conn).await?;
                let runtimes = db::cluster::runtimes_list(conn).await?;
                let checkpoints = db::doctor::doctor_checkpoints(conn).await?;
                let connections = db::doctor::doctor_connections(conn).await?;
                Ok((f, unserved, idle_slots, runtimes, checkpoints, connections))
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
    checks.push(slots_check(&idle_slots, f.slot_wal_bound));
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
    checks.push(super::limits_check::limits_check(&runtimes));
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
    checks.push(super::checkpoints_check::checkpoints_check(&checkpoints));
    checks.push(super::connections_check::connections_check(&connections));
    Ok(checks)
}

/// The replication slots' check: every slot no client reads, with the WAL it
/// keeps and whether it holds back vacuum. A reader that is only restarting (a
/// standby reconnecting, a CDC connector, a client polling between reads) leaves
/// its slot idle for a while, so a slot is a finding only once it keeps more
/// than `wal_bound` bytes of WAL, or holds back vacuum, which swells `lq.jobs`
/// while it lasts.
fn slots_check(idle: &[db::doctor::IdleSlot], wal_bound: i64) -> Check {
    if idle.is_empty() {
        return Check {
            name: "replication slots",
            ok: true,
            detail: "no replication slot without a reader keeps WAL".to_owned(),
        };
    }
    let failing: Vec<&str> = idle
        .iter()
        .filter(|s| s.holds_back_vacuum || s.kept_wal_bytes.is_some_and(|b| b > wal_bound))
        .map(|s| s.name.as_str())
        .collect();
    let named: Vec<String> = idle.iter().map(describe_slot).collect();
    let Some(first) = failing.first() else {
        return Check {
            name: "replication slots",
            ok: true,
            detail: format!(
                "{}: each under {} of WAL and holding back no vacuum",
                named.join("; "),
                wal_size(wal_bound)
            ),
        };
    };
    Check {
        name: "replication slots",
        ok: false,
        detail: format!(
            "{}: a slot keeps every WAL segment written since the position its reader last \
             confirmed (a queue writes about a kilobyte a job) until the disk fills, or until \
             max_slot_wal_keep_size invalidates it and its standby must be rebuilt; over {} \
             or holding back vacuum: {}. Drop a slot whose standby or client is gone, as a \
             role with REPLICATION: select pg_drop_replication_slot('{first}')",
            named.join("; "),
            wal_size(wal_bound),
            failing.join(", ")
        ),
    }
}

/// One idle slot as the check lists it: name, kind (and database), the WAL it
/// keeps, and whether it holds back vacuum.
fn describe_slot(s: &db::doctor::IdleSlot) -> String {
    let wal = match s.kept_wal_bytes {
        Some(b) => format!("keeps {} of WAL", wal_size(b)),
        None => "keeps WAL from an unknown position".to_owned(),
    };
    let vacuum = if s.holds_back_vacuum {
        " and holds back vacuum"
    } else {
        ""
    };
    let database = s
        .database
        .as_ref()
        .map(|d| format!(" on {d}"))
        .unwrap_or_default();
    format!("{} ({}{database}, no reader) {wal}{vacuum}", s.name, s.kind)
}

/// `bytes` of WAL in the largest unit that keeps it above one (`512 B`,
/// `16.0 MB`, `3.2 GB`).
pub(super) fn wal_size(bytes: i64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if bytes < 1024 {
        return format!("{} B", bytes.max(0));
    }
    let mut size = bytes as f64 / 1024.0;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_sizes_read_in_the_largest_unit_above_one() {
        assert_eq!(wal_size(0), "0 B");
        assert_eq!(wal_size(1023), "1023 B");
        assert_eq!(wal_size(1024), "1.0 kB");
        assert_eq!(wal_size(16 * 1024 * 1024), "16.0 MB");
        assert_eq!(
            wal_size(3 * 1024 * 1024 * 1024 + 200 * 1024 * 1024),
            "3.2 GB"
        );
        assert_eq!(wal_size(5 << 50), "5120.0 TB");
    }

    fn idle(name: &str, kept: Option<i64>, holds_back_vacuum: bool) -> db::doctor::IdleSlot {
        db::doctor::IdleSlot {
            name: name.to_owned(),
            kind: "physical".to_owned(),
            database: None,
            kept_wal_bytes: kept,
            holds_back_vacuum,
        }
    }

    #[test]
    fn an_idle_slot_is_a_finding_past_the_wal_bound_or_when_it_holds_back_vacuum() {
        const GB: i64 = 1 << 30;
        let small = idle("restarting_standby", Some(48 << 20), false);
        let c = slots_check(std::slice::from_ref(&small), GB);
        assert!(c.ok, "{c:?}");
        assert!(
            c.detail
                .starts_with("restarting_standby (physical, no reader) keeps 48.0 MB of WAL"),
            "{}",
            c.detail
        );
        let big = idle("old_standby", Some(3 * GB), false);
        let c = slots_check(&[small, big], GB);
        assert!(!c.ok);
        assert!(
            c.detail
                .contains("over 1.0 GB or holding back vacuum: old_standby."),
            "{}",
            c.detail
        );
        assert!(
            c.detail
                .ends_with("pg_drop_replication_slot('old_standby')"),
            "{}",
            c.detail
        );
        let feedback = idle("hot_standby", Some(1 << 20), true);
        let c = slots_check(&[feedback], GB);
        assert!(!c.ok);
        assert!(
            c.detail
                .contains("keeps 1.0 MB of WAL and holds back vacuum"),
            "{}",
            c.detail
        );
        assert!(slots_check(&[], GB).ok);
    }
}
