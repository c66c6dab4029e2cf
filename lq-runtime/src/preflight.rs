//! Checks `start()` makes before anything runs: settings that cannot work, the
//! privileges the runtime's role needs, the connections it will open, and jobs
//! that no runtime would ever run.

use std::time::Duration;

use lq_core::{db, Registry};
use sqlx::{Connection, PgConnection};
use tracing::warn;

use crate::{Error, RuntimeConfig};

/// Most handlers one queue may run at once.
pub const MAX_CONCURRENCY: usize = 100_000;

/// Queues up to which each claimer keeps a connection of its own; with more,
/// claimers share this many and borrow one per claim.
pub(crate) const MAX_CLAIM_CONNECTIONS: u32 = 16;

/// Connections for a queue's second claim in flight (see `producer`), shared by
/// every queue: each of up to this many queues keeps one, beyond that a busy
/// queue borrows one per claim when one is free.
pub(crate) const OVERLAP_CLAIM_CONNECTIONS: u32 = 2;

/// Longest interval or timeout a setting may have: a day. Longer ones are
/// mistakes (a unit slip), and `Duration::MAX` would overflow the timers.
const MOST_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// Most rows a batch setting may ask one statement for.
const MOST_BATCH: usize = 100_000;
/// Longest retention or grace: exactly what `control::prune` accepts, so a
/// setting `start()` takes never makes the leader's prune fail.
const MOST_RETENTION: Duration = lq_core::control::MAX_AGE;

/// Refuses settings that cannot work (intervals of zero or over a day, batches
/// of zero or over 100,000, an owner name the database cannot store, concurrency beyond what a
/// semaphore holds).
pub(crate) fn validate(config: &RuntimeConfig, queues: &[(String, usize)]) -> Result<(), Error> {
    let bad = |setting: &'static str, reason: &'static str| {
        Err(Error::InvalidSetting { setting, reason })
    };
    let nonzero = [
        ("poll_interval", config.poll_interval),
        ("db_timeout", config.db_timeout),
        ("rescue_interval", config.rescue_interval),
        ("prune_interval", config.prune_interval),
        ("stats_interval", config.stats_interval),
        ("claim_ahead_wait", config.claim_ahead_wait),
        ("gauge_interval", config.gauge_interval),
    ];
    for (setting, d) in nonzero
        .into_iter()
        .chain([("leader_lease", config.leader_lease)])
    {
        if d < Duration::from_millis(1) {
            return bad(setting, "must be at least 1 ms (zero would spin)");
        }
        if d > MOST_INTERVAL {
            return bad(setting, "must be at most a day");
        }
    }
    if config.leader_lease < Duration::from_millis(500) {
        return bad(
            "leader_lease",
            "must be at least 500 ms (it is renewed every fifth of it)",
        );
    }
    if config.max_claim_batch == 0 {
        return bad(
            "max_claim_batch",
            "must be at least 1 (0 would claim nothing)",
        );
    }
    if let Some(slots) = config.claim_slots {
        if slots == 0 || slots > lq_core::db::claim::MOST_CLAIM_SLOTS {
            return bad(
                "claim_slots",
                "must be 1-64, or None for no bound (0 would claim nothing)",
            );
        }
    }
    if config.max_complete_batch == 0 {
        return bad("max_complete_batch", "must be at least 1");
    }
    for (setting, n) in [
        ("max_claim_batch", config.max_claim_batch),
        ("max_complete_batch", config.max_complete_batch),
    ] {
        if n > MOST_BATCH {
            return bad(setting, "must be at most 100,000 (one statement's rows)");
        }
    }
    let unknown_kind_grace = config.unknown_kind_grace.unwrap_or_default();
    for (setting, d) in [
        ("keep_finished", config.keep_finished),
        ("keep_dead", config.keep_dead),
        ("unknown_kind_grace", unknown_kind_grace),
    ] {
        if d > MOST_RETENTION {
            return bad(
                setting,
                "must be at most 1,000 years (the database cannot subtract more from now)",
            );
        }
    }
    if config.pool_size == Some(0) {
        return bad("pool_size", "must be at least 1");
    }
    if config.owner.is_empty() || config.owner.len() > 200 || config.owner.contains('\0') {
        return bad("owner", "must be 1-200 bytes without NUL");
    }
    for (queue, slots) in queues {
        if *slots > MAX_CONCURRENCY {
            return Err(Error::ConcurrencyTooHigh {
                queue: queue.clone(),
                concurrency: *slots,
                max: MAX_CONCURRENCY,
            });
        }
    }
    Ok(())
}

/// Fails with [`Error::MissingPrivileges`], naming each one, when the runtime's
/// role lacks a privilege the runtime uses (with `rate_limited`, those on the
/// rate limits' buckets too).
pub(crate) async fn check_privileges(
    conn: &mut PgConnection,
    timeout: Duration,
    rate_limited: bool,
) -> Result<(), Error> {
    let (role, missing) = db::timed("runtime_privileges", timeout, async {
        // On the application's connection: pinned like every litequeue statement.
        let mut tx = conn.begin().await.map_err(db::err("runtime_privileges"))?;
        db::pin_transaction(&mut tx, timeout).await?;
        db::maintenance::runtime_missing_privileges(&mut tx, rate_limited).await
    })
    .await?;
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::MissingPrivileges { role, missing })
    }
}

/// Connections a runtime opens: the general pool (the listener's among them),
/// the claimers' (`claim_conns` and those for overlapping claims) and the
/// completer's hot-path connections, and the heartbeat's and the cluster beat's
/// own.
pub(crate) fn connections_needed(pool_size: u32, claim_conns: u32) -> u32 {
    let (completer, heartbeat, cluster_beat) = (1, 1, 1);
    pool_size
        + claim_conns
        + overlap_connections(claim_conns)
        + completer
        + heartbeat
        + cluster_beat
}

/// Connections for overlapping claims when `claim_conns` serve the queues.
pub(crate) fn overlap_connections(claim_conns: u32) -> u32 {
    claim_conns.min(OVERLAP_CLAIM_CONNECTIONS)
}

/// Fails with [`Error::NotEnoughConnections`] when the server could never give
/// the runtime `needed` connections; warns when it cannot right now.
pub(crate) async fn check_connections(
    conn: &mut PgConnection,
    timeout: Duration,
    needed: u32,
) -> Result<(), Error> {
    let (limit, free) = db::timed("server_connection_room", timeout, async {
        // On the application's connection: pinned like every litequeue statement.
        let mut tx = conn
            .begin()
            .await
            .map_err(db::err("server_connection_room"))?;
        db::pin_transaction(&mut tx, timeout).await?;
        db::maintenance::server_connection_room(&mut tx).await
    })
    .await?;
    let needed_i = i64::from(needed);
    if needed_i > limit {
        return Err(Error::NotEnoughConnections {
            needed,
            limit: limit.max(0) as u32,
        });
    }
    if needed_i > free {
        warn!(
            needed,
            free,
            "the server has fewer free connections than this runtime opens; it may wait for them"
        );
    }
    Ok(())
}

/// Warns about jobs that would wait forever: kinds enqueued on a served queue by
/// default that this binary declares but cannot run (no `Perform`), and cron jobs
/// whose queue this runtime does not serve.
pub(crate) fn warn_unrunnable(registry: &Registry, served: &[String]) {
    for d in registry.iter() {
        let serves = served.iter().any(|q| q == d.options.queue);
        if serves && (d.handler)().is_none() {
            warn!(
                kind = d.kind,
                queue = d.options.queue,
                "job type has no Perform implementation in this binary: its jobs on this queue wait for a runtime that can run them, and are marked dead as unknown once no runtime serving the queue has declared the kind for unknown_kind_grace"
            );
        }
        if d.options.cron.is_some() && !serves {
            warn!(
                kind = d.kind,
                queue = d.options.queue,
                "cron job's queue is not served by this runtime: it is scheduled only by a runtime that serves it"
            );
        }
    }
}

/// Warns about kinds served here whose lease is shorter than three
/// `db_timeout`s: a heartbeat held up by the database (it may take that long)
/// could let such a lease expire while the handler still runs, and the rescuer
/// would give the job to another worker, where it runs a second time.
pub(crate) fn warn_short_leases(
    registry: &Registry,
    served: &[String],
    db_timeout: std::time::Duration,
) {
    for d in registry.iter() {
        let serves = served.iter().any(|q| q == d.options.queue);
        if serves && (d.handler)().is_some() && d.options.lease < db_timeout * 3 {
            warn!(
                kind = d.kind,
                lease = ?d.options.lease,
                ?db_timeout,
                "the job type's lease is shorter than three db_timeouts: a heartbeat held up by the database can let it expire while the handler runs, and another worker may run the job again; give it a longer lease or lower db_timeout"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::validate;
    use crate::{Error, RuntimeConfig};

    fn keep_finished(d: Duration) -> Result<(), Error> {
        let config = RuntimeConfig {
            keep_finished: d,
            ..RuntimeConfig::default()
        };
        validate(&config, &[])
    }

    #[test]
    fn the_longest_retention_start_takes_is_the_longest_prune_takes() {
        let most = lq_core::control::MAX_AGE;
        assert!(keep_finished(most).is_ok());
        let over = keep_finished(most + Duration::from_secs(1));
        assert!(
            matches!(
                over,
                Err(Error::InvalidSetting {
                    setting: "keep_finished",
                    ..
                })
            ),
            "{over:?}"
        );
    }
}
