//! The runtimes of the cluster, as they report themselves.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::pinned;
use crate::{db, Error, QueueLimits};

/// Every runtime that has reported itself in `lq.runtimes`, oldest first: its
/// host, queues, kinds and version, when it last beat, and whether it is the
/// maintenance leader. A runtime that stopped beating shows `alive: false` until
/// the leader removes its row.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// for rt in lq_core::control::runtimes(&pool).await? {
///     let role = if rt.leader { "leader" } else { "" };
///     println!("{} on {} serving {:?} {role}", rt.id, rt.host, rt.queues);
/// }
/// # Ok(()) }
/// ```
pub async fn runtimes(pool: &PgPool) -> Result<Vec<RuntimeInfo>, Error> {
    let rows = pinned(pool, "runtimes_list", |conn| {
        Box::pin(async move { db::cluster::runtimes_list(conn).await })
    })
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| RuntimeInfo {
            queues: r
                .queues
                .as_object()
                .map(|q| {
                    q.iter()
                        .map(|(name, n)| (name.clone(), n.as_u64().unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default(),
            limits: r
                .limits
                .as_ref()
                .and_then(|l| l.as_object())
                .map(|l| {
                    l.iter()
                        .map(|(name, v)| (name.clone(), QueueLimits::from_json(v)))
                        .filter(|(_, l)| !l.is_none())
                        .collect()
                })
                .unwrap_or_default(),
            id: r.id,
            host: r.host,
            pid: r.pid,
            version: r.version,
            kinds: r.kinds,
            connections: r.connections.and_then(|n| u32::try_from(n).ok()),
            started_at: r.started_at,
            heartbeat_at: r.heartbeat_at,
            alive: r.alive,
            leader: r.leader,
        })
        .collect())
}

/// One runtime, as [`runtimes`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeInfo {
    /// Its owner name (the `lease_owner` of the jobs it runs).
    pub id: String,
    /// The machine it runs on.
    pub host: String,
    /// Its process id there.
    pub pid: i32,
    /// The litequeue version it was built with.
    pub version: String,
    /// The queues it serves, with the concurrency of each.
    pub queues: BTreeMap<String, u64>,
    /// The limits across runtimes it sets on its queues, for those with any
    /// (`RuntimeBuilder::global_limit`, `rate_limit`); empty for a runtime
    /// built before schema 13.
    pub limits: BTreeMap<String, QueueLimits>,
    /// Every kind it can run (a `Perform` linked into its binary).
    pub kinds: Vec<String>,
    /// The most connections it opens of its own, besides its application's
    /// pool (`RuntimeBuilder::connections`); `None` for a runtime built before
    /// schema 16.
    pub connections: Option<u32>,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its last beat (every fifth of its leader lease).
    pub heartbeat_at: DateTime<Utc>,
    /// False once it has missed beats for three leases.
    pub alive: bool,
    /// True while it holds the maintenance leader's lease.
    pub leader: bool,
}

impl RuntimeInfo {
    /// Each queue it serves as `lq runtimes` and the dashboard show it: its
    /// concurrency, and its limits across runtimes if it sets any, as
    /// `partner_api×10 (at most 4 at once, 600 per 60s)`.
    pub fn queues_described(&self) -> Vec<String> {
        self.queues
            .iter()
            .map(|(q, n)| match self.limits.get(q) {
                Some(limits) => format!("{q}×{n} ({limits})"),
                None => format!("{q}×{n}"),
            })
            .collect()
    }
}
