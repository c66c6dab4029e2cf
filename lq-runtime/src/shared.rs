//! State shared by every task of one runtime.

use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};

use lq_core::{db, AppState, Error, QueueLimits, Registry};
use sqlx::{pool::PoolConnection, ConnectOptions, PgConnection, PgPool, Postgres};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{inflight::Inflight, stats::Stats, wake::QueueWake, RuntimeConfig};

/// Everything the runtime's tasks share.
pub(crate) struct Shared {
    pub pool: PgPool,
    /// Connections for claims and completions only, which force generic plans
    /// (see `lq_core::db::claim::job_claim`). Each claimer and the completer keeps
    /// one of them ([`crate::hot_conn::HotConn`]).
    pub hot_pool: PgPool,
    /// Whether each claimer keeps a connection of `hot_pool` (one per queue, up
    /// to [`crate::preflight::MAX_CLAIM_CONNECTIONS`] queues) or borrows one per claim.
    pub keep_claim_conns: bool,
    /// Whether each claimer keeps a connection for a second claim in flight (up
    /// to `OVERLAP_CLAIM_CONNECTIONS` queues), or borrows one when one is free.
    pub keep_overlap_conns: bool,
    /// The completer's own hot-path connection, never shared, so no number of
    /// queues can starve the writing of successes.
    pub completer_pool: PgPool,
    /// The most connections the runtime's pools open together
    /// (`RuntimeBuilder::connections`), recorded in its `lq.runtimes` row.
    pub connections: u32,
    pub config: RuntimeConfig,
    pub registry: Registry,
    pub state: AppState,
    pub stats: Arc<Stats>,
    pub inflight: Inflight,
    /// Kinds with a handler, and the lease of each (same order).
    pub kinds: Vec<String>,
    pub lease_secs: Vec<f64>,
    /// The served queues with limits across every runtime: a global limit
    /// (`RuntimeBuilder::global_limit`), a rate limit (`rate_limit`).
    pub limits: HashMap<String, QueueLimits>,
    /// One wake-up per served queue, poked by NOTIFY, the idle poller and retry timers.
    pub wakers: HashMap<String, Arc<QueueWake>>,
    /// Fired by `shutdown()`: stop claiming, stop background duties.
    pub stopping: CancellationToken,
    /// Fired when the grace period ends: stop handlers and hand their jobs back.
    pub hard_stop: CancellationToken,
    /// Every job task, so shutdown can wait for them.
    pub executors: TaskTracker,
    /// Connections of the runtime's pools a failover left read-only.
    pub stale_conns: Arc<crate::stale_conns::StaleConns>,
    /// Whether this runtime is the maintenance leader (see [`crate::cluster`]).
    pub leadership: crate::cluster::Leadership,
    /// Counts per served queue and runnable kind: the rollup's source, and the
    /// per-job metrics' handles.
    pub tallies: crate::tally::Tallies,
    /// What the rollup has written of the tallies.
    pub rollup_written: crate::rollup::Written,
    /// What the metrics publisher has published of the tallies.
    #[cfg(feature = "metrics")]
    pub metrics_published: std::sync::Mutex<crate::publisher::Published>,
    /// Lease tokens of claims and hand-backs that got no answer, whose jobs are
    /// handed back (see [`crate::orphan_leases`]).
    pub orphan_leases: crate::orphan_leases::OrphanLeases,
    /// Sends successes to the batching completer.
    pub completions: tokio::sync::mpsc::Sender<crate::completer::Completion>,
    /// Whether a claim waiting its turn waits in a claim room first
    /// (`lq_core::db::claim::job_claim_in_turn`): true until the server
    /// refuses one.
    pub claim_rooms: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// Runs `f` on a pooled connection. Taking the connection (the pool's acquire
    /// timeout) and `f` (the db timeout) are bounded apart, so a wait for a
    /// connection never shortens `f`'s time: the server, which cancels a statement
    /// at nine tenths of the db timeout from its start, always gives up first,
    /// and a statement the client abandoned cannot commit behind it.
    pub async fn with_conn<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, Error>
    where
        F: FnOnce(PoolConnection<Postgres>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let conn = self.pool.acquire().await.map_err(db::err(op))?;
        let r = db::timed(op, self.config.db_timeout, f(conn)).await;
        if let Err(e) = &r {
            if db::sqlstate(e).as_deref() == Some(db::READ_ONLY_SQL_TRANSACTION) {
                // The session is read-only, and stays so: neither it nor any
                // other opened before now is reused.
                self.stale_conns.mark_now();
            }
        }
        r
    }

    /// `conn`, connected first if it is not: a connection of the task's own,
    /// outside every pool, so no pool's starvation can delay the task (the
    /// heartbeat, the cluster beat). Connecting is bounded by the db timeout on
    /// its own, apart from the statements that follow. The caller drops the
    /// connection after an error.
    pub async fn own_connection<'c>(
        &self,
        conn: &'c mut Option<PgConnection>,
        op: &'static str,
    ) -> Result<&'c mut PgConnection, Error> {
        if conn.is_none() {
            let opts = self.pool.connect_options().as_ref().clone();
            let connect = async { opts.connect().await.map_err(db::err(op)) };
            *conn = Some(db::timed(op, self.config.db_timeout, connect).await?);
        }
        Ok(conn.as_mut().expect("connected above"))
    }

    /// Wakes every queue's claimer (after a reconnect, when notifications may be lost).
    pub fn wake_all(&self) {
        for w in self.wakers.values() {
            w.wake();
        }
    }

    /// Wakes `queue`'s claimer after `delay`, when that comes before its next poll:
    /// a retry or snooze due sooner than the poll interval runs on time.
    pub fn wake_after(&self, queue: &str, delay: Duration) {
        if delay >= self.config.poll_interval {
            return;
        }
        if let Some(w) = self.wakers.get(queue).cloned() {
            let stopping = self.stopping.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => w.wake(),
                    _ = stopping.cancelled() => {}
                }
            });
        }
    }

    /// True while this runtime leads: the duties one runner suffices for run only then.
    pub fn is_leader(&self) -> bool {
        self.leadership.is_leader()
    }

    /// Sleeps for `d` unless the runtime starts stopping; true if it is stopping.
    pub async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => self.stopping.is_cancelled(),
            _ = self.stopping.cancelled() => true,
        }
    }
}

/// Exponential reconnect delay: 100 ms doubling to 5 s.
pub(crate) fn retry_delay(failures: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << failures.min(6))).min(Duration::from_secs(5))
}
