//! Cluster membership and the maintenance leader.
//!
//! Every runtime writes its row in `lq.runtimes` (queues, kinds, version) every
//! fifth of `leader_lease`, and tries to take or renew the leader lease in
//! `lq.leader` in the same beat. The holder alone runs the duties that need
//! only one runner: rescue, pruning, vacuum, burial of unknown kinds, and the
//! removal of rows of runtimes that stopped beating. All times are the
//! database's, except the holder's own view of its lease: it stops acting as
//! leader at a local deadline that falls before the lease's end, so a frozen
//! leader that wakes up does not act on a lease that has passed to another.
//! Every duty is also safe to run twice (fenced, idempotent), so the lease keeps
//! the cluster from doing work twice, not from doing it wrongly.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use lq_core::{
    chain,
    chrono::{DateTime, Utc},
    db, Error,
};
use sqlx::PgConnection;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::shared::Shared;

/// This runtime's view of the leader lease.
#[derive(Default)]
pub(crate) struct Leadership {
    inner: Mutex<View>,
    /// Signalled when this runtime becomes the leader, so the cron scheduler
    /// fires the ticks the old leader left at once instead of at its next check.
    gained: tokio::sync::Notify,
}

#[derive(Default)]
struct View {
    /// Set while this runtime leads: when it must stop acting as leader if no
    /// renewal succeeds first.
    until: Option<Instant>,
    /// What the current leader (another runtime) declares, if known: the cron
    /// schedules it fires are its to fire.
    leader: Option<LeaderView>,
}

/// The kinds another runtime that leads declares, and the queues it serves.
pub(crate) struct LeaderView {
    kinds: HashSet<String>,
    queues: HashSet<String>,
}

impl Leadership {
    /// Resolves once this runtime next becomes the leader (at once if it became
    /// the leader since the last call).
    pub async fn gained(&self) {
        self.gained.notified().await;
    }

    /// True while this runtime holds a lease it has renewed in time.
    pub fn is_leader(&self) -> bool {
        let view = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        view.until.is_some_and(|until| Instant::now() < until)
    }

    /// Whether this runtime should fire the cron schedule of `kind`, a kind of
    /// `queue`: when it leads, when no leader is known, or when the leader does
    /// not declare the kind or does not serve its queue (a runtime declares the
    /// kinds it can run, and schedules the recurring ones in the queues it
    /// serves). A leader that links a recurring kind without a `Perform` does not
    /// declare it, so the runtimes that can run it fire it.
    /// Firing stays exactly once per tick whoever fires (`lq.cron_ticks`).
    pub fn fires_cron(&self, kind: &str, queue: &str) -> bool {
        if self.is_leader() {
            return true;
        }
        let view = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        view.leader
            .as_ref()
            .is_none_or(|l| !(l.kinds.contains(kind) && l.queues.contains(queue)))
    }

    fn set(&self, until: Option<Instant>, leader: Option<LeaderView>) {
        let mut view = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        view.until = until;
        view.leader = leader;
    }

    fn expire(&self) {
        self.set(None, None);
    }
}

/// What this runtime writes about itself each beat.
struct Presence {
    host: String,
    pid: i32,
    queues: serde_json::Value,
    limits: serde_json::Value,
    kinds: Vec<String>,
}

/// Beats until the runtime starts stopping, then resigns the lease and marks
/// its row as left (the leader removes it after `unknown_kind_grace`).
pub(crate) async fn run(shared: Arc<Shared>, queues: Vec<(String, usize)>) {
    let presence = Presence {
        host: crate::config::host_name(),
        pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
        queues: serde_json::Value::Object(
            queues
                .into_iter()
                .map(|(q, n)| (q, serde_json::Value::from(n)))
                .collect(),
        ),
        limits: serde_json::Value::Object(
            shared
                .limits
                .iter()
                .filter(|(_, l)| !l.is_none())
                .map(|(q, l)| (q.clone(), l.to_json()))
                .collect(),
        ),
        // The kinds it can run, not every kind it links: a kind linked without a
        // `Perform` is one this runtime would neither claim nor schedule.
        kinds: shared.kinds.clone(),
    };
    let lease = shared.config.leader_lease;
    let every = lease / 5;
    let mut conn: Option<PgConnection> = None;
    let mut leading = false;
    let mut row = Row::new();
    loop {
        let started = Instant::now();
        match beat(&shared, &presence, &mut conn, &mut row).await {
            Ok(Beat::Leading) => {
                // Act as leader only while the lease surely holds: it was taken
                // after `started`, for `lease` of database time; a tenth is
                // kept back for clocks that run at different rates.
                shared.leadership.set(Some(started + lease * 9 / 10), None);
                if !leading {
                    info!(owner = %shared.config.owner, "this runtime is now the maintenance leader");
                    crate::telemetry::leader(true);
                    shared.leadership.gained.notify_one();
                }
                leading = true;
            }
            Ok(Beat::Following(leader)) => {
                shared.leadership.set(None, leader);
                if leading {
                    info!("this runtime is no longer the maintenance leader");
                    crate::telemetry::leader(false);
                }
                leading = false;
            }
            Err(e) => {
                conn = None; // reconnect next time
                warn!(error = %chain(&e), "cluster beat failed; retrying (leadership lapses with the lease)");
                if leading && !shared.leadership.is_leader() {
                    info!("leader lease lapsed: no renewal reached the database in time");
                    crate::telemetry::leader(false);
                    leading = false;
                }
            }
        }
        if shared.pause(every).await {
            break;
        }
    }
    shared.leadership.expire();
    if let Err(e) = leave(&shared, &mut conn, &row).await {
        warn!(error = %chain(&e), "could not leave the cluster cleanly; the row and lease expire on their own");
    } else if leading {
        info!("maintenance leadership handed over");
    }
}

/// Which row of `lq.runtimes` is this runtime's: the one carrying its own
/// `started_at`, minted when it starts. Two runtimes configured with one
/// `owner` share an id; only the one whose row it is writes it, leads, and
/// marks it left. A mark of its own, not one the first write returns: a first
/// beat that committed but whose reply was lost is retried with the same mark
/// and finds its own row (with the server's mark it found a row it did not
/// know, and stood aside until that row expired).
struct Row {
    started_at: DateTime<Utc>,
    /// The last beat found the id held by a live runtime with another mark.
    refused: bool,
}

impl Row {
    fn new() -> Row {
        use lq_core::chrono::SubsecRound;
        Row {
            // Microseconds, as PostgreSQL keeps them, so the mark compares
            // equal to what the row holds.
            started_at: Utc::now().trunc_subsecs(6),
            refused: false,
        }
    }
}

enum Beat {
    Leading,
    /// Another runtime leads; what it declares, when its row was found.
    Following(Option<LeaderView>),
}

async fn beat(
    shared: &Shared,
    presence: &Presence,
    conn: &mut Option<PgConnection>,
    row: &mut Row,
) -> Result<Beat, Error> {
    let lease = shared.config.leader_lease.as_secs_f64();
    let record = db::cluster::RuntimeRecord {
        id: &shared.config.owner,
        host: &presence.host,
        pid: presence.pid,
        version: env!("CARGO_PKG_VERSION"),
        queues: &presence.queues,
        limits: &presence.limits,
        kinds: &presence.kinds,
        // A runtime counts as alive for three leases without a beat.
        ttl_secs: lease * 3.0,
        connections: i32::try_from(shared.connections).unwrap_or(i32::MAX),
    };
    // Each statement has the client's bound of its own, so the server's (nine
    // tenths of it, per statement) always fires first: an election the client
    // gave up on is never won behind its back.
    let t = shared.config.db_timeout;
    let c = shared.own_connection(conn, "cluster_connect").await?;
    let written = db::timed(
        "cluster_beat",
        t,
        db::cluster::runtime_beat(c, &record, row.started_at),
    )
    .await?;
    let owner = &shared.config.owner;
    let leads = if written {
        if row.refused {
            info!(%owner, "this runtime's row in lq.runtimes is its own again");
        }
        row.refused = false;
        db::timed(
            "cluster_beat",
            t,
            db::cluster::leader_acquire(c, owner, lease, row.started_at),
        )
        .await?
    } else {
        if !row.refused {
            warn!(
                %owner,
                "another live runtime has this owner name: this one neither reports itself in lq.runtimes nor leads until that one stops; give each runtime its own owner"
            );
        }
        row.refused = true;
        None
    };
    if leads.is_some() {
        // Rows of runtimes gone are kept for the unknown-kind grace: until then
        // they still vouch for the kinds they declared (a restart's backlog is
        // not buried as unknown).
        // Without a grace of its own (no burial here), the default one: a later
        // leader that buries still finds a restarting runtime's row.
        let keep = (shared.config.unknown_kind_grace).unwrap_or(
            crate::RuntimeConfig::default()
                .unknown_kind_grace
                .unwrap_or_default(),
        );
        // The lease is renewed whatever the reap does: a failed reap is retried
        // at the next beat, not taken for a lost lease.
        match db::timed(
            "cluster_beat",
            t,
            db::cluster::runtimes_reap(c, keep.as_secs_f64()),
        )
        .await
        {
            Ok(gone) if !gone.is_empty() => {
                info!(?gone, "removed runtimes that stopped beating")
            }
            Ok(_) => {}
            Err(e) => {
                warn!(error = %chain(&e), "could not remove the rows of runtimes that stopped beating; retried at the next beat")
            }
        }
        return Ok(Beat::Leading);
    }
    let leader = db::timed("cluster_beat", t, db::cluster::leader_kinds(c)).await?;
    Ok(Beat::Following(leader.map(|(kinds, queues)| LeaderView {
        kinds: kinds.into_iter().collect(),
        queues: queues.into_iter().collect(),
    })))
}

async fn leave(shared: &Shared, conn: &mut Option<PgConnection>, row: &Row) -> Result<(), Error> {
    if row.refused {
        return Ok(()); // no row of its own, nor a lease
    }
    let started_at = row.started_at;
    db::timed(
        "cluster_leave",
        shared.config.db_timeout.min(Duration::from_secs(2)),
        async {
            let c = shared.own_connection(conn, "cluster_connect").await?;
            let owner = &shared.config.owner;
            db::cluster::leader_resign(c, owner, started_at).await?;
            db::cluster::runtime_leave(c, owner, started_at).await
        },
    )
    .await
}
