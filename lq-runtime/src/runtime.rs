//! [`Runtime`]: the running set of claimers, job tasks and background duties.

use std::sync::Arc;

use tokio::{sync::mpsc, task::JoinHandle};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::{info, warn};

use crate::{
    claim_ahead, cluster, completer, heartbeat, listener, poller, producer, pruner, rescuer,
    scheduler, shared::Shared, slots::Slots, stats::StatsSnapshot, unknown_kinds, vacuumer, Error,
    RuntimeBuilder,
};

/// A started runtime. Stop it with [`Runtime::shutdown`]; dropping it stops
/// claiming at once without the graceful hand-back.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_runtime::Error> {
/// let runtime = lq_runtime::Runtime::builder(pool).queue("default", 8).start().await?;
/// runtime.shutdown_on_signal().await?; // SIGTERM or Ctrl-C, then graceful shutdown
/// # Ok(()) }
/// ```
pub struct Runtime {
    shared: Arc<Shared>,
    services: TaskTracker,
    /// The claimers, apart from the other services: shutdown waits for their
    /// last claims even past the grace period, so those jobs are handed back.
    producers: TaskTracker,
    completer: Option<JoinHandle<()>>,
    completer_stop: CancellationToken,
    heartbeat: Option<JoinHandle<()>>,
    heartbeat_stop: CancellationToken,
}

impl Runtime {
    /// Starts configuring a runtime on `pool`: the queues it serves with how
    /// many jobs of each run at once, the application state handlers read, and
    /// [`crate::RuntimeConfig`].
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
    /// let runtime = lq_runtime::Runtime::builder(pool)
    ///     .queue("emails", 8)
    ///     .queue("reports", 1)
    ///     .start()
    ///     .await?;
    /// # runtime.shutdown().await }
    /// ```
    pub fn builder(pool: sqlx::PgPool) -> RuntimeBuilder {
        RuntimeBuilder::new(pool)
    }

    pub(crate) fn launch(
        shared: Arc<Shared>,
        queues: Vec<(String, usize)>,
        completed_rx: mpsc::Receiver<completer::Completion>,
        cron_jobs: Vec<scheduler::CronJob>,
    ) -> Self {
        let services = TaskTracker::new();
        let producers = TaskTracker::new();
        let queue_list: Vec<String> = queues.iter().map(|(q, n)| format!("{q}={n}")).collect();
        let completer_stop = CancellationToken::new();
        let heartbeat_stop = CancellationToken::new();
        let completer = tokio::spawn(completer::run(
            shared.clone(),
            completed_rx,
            completer_stop.clone(),
        ));
        let heartbeat = tokio::spawn(heartbeat::run(shared.clone(), heartbeat_stop.clone()));
        services.spawn(listener::run(shared.clone()));
        services.spawn(poller::run(shared.clone()));
        services.spawn(cluster::run(shared.clone(), queues.clone()));
        services.spawn(rescuer::run(shared.clone()));
        services.spawn(crate::orphan_leases::run(shared.clone()));
        services.spawn(pruner::run(shared.clone()));
        services.spawn(scheduler::run(shared.clone(), cron_jobs));
        services.spawn(vacuumer::run(shared.clone()));
        services.spawn(crate::rollup::run(shared.clone()));
        #[cfg(feature = "metrics")]
        services.spawn(crate::gauges::run(shared.clone()));
        #[cfg(feature = "metrics")]
        services.spawn(crate::publisher::run(shared.clone()));
        if let Some(grace) = shared.config.unknown_kind_grace {
            services.spawn(unknown_kinds::run(shared.clone(), grace));
        }
        for (queue, slots) in queues {
            let wake = shared.wakers[&queue].clone();
            // Under a global limit a job claimed ahead would hold a share of
            // the limit while it waits for a handler here; under a rate limit
            // it would spend a token long before it starts.
            let limits = shared.limits.get(&queue).copied().unwrap_or_default();
            let ahead = match limits.is_none() {
                true => claim_ahead::most(&shared.config, slots),
                false => 0,
            };
            producers.spawn(producer::run(
                shared.clone(),
                queue,
                limits,
                Slots::new(slots, ahead),
                wake,
            ));
        }
        services.close();
        producers.close();
        info!(
            owner = %shared.config.owner,
            queues = ?queue_list,
            kinds = ?shared.kinds,
            "litequeue runtime started (maintenance runs on the elected leader; leader changes are logged)"
        );
        Self {
            shared,
            services,
            producers,
            completer: Some(completer),
            completer_stop,
            heartbeat: Some(heartbeat),
            heartbeat_stop,
        }
    }

    /// The kinds this runtime claims (types with a `Perform` implementation).
    pub fn kinds(&self) -> &[String] {
        &self.shared.kinds
    }

    /// The lease owner name this runtime writes into claimed rows.
    pub fn owner(&self) -> &str {
        &self.shared.config.owner
    }

    /// Whether this runtime is the cluster's maintenance leader now: it holds
    /// the lease in `lq.leader`, renewed in time (see `RuntimeConfig::leader_lease`).
    pub fn is_leader(&self) -> bool {
        self.shared.is_leader()
    }

    /// The bound on each database call (`db_timeout`).
    pub(crate) fn db_timeout(&self) -> std::time::Duration {
        self.shared.config.db_timeout
    }

    /// Counters since start. An outcome is counted a moment after its write
    /// commits, so right after the database shows a job finished its count may
    /// still be on the way; [`Runtime::shutdown_with_stats`] gives final figures.
    ///
    /// ```no_run
    /// # async fn f(runtime: lq_runtime::Runtime) {
    /// let s = runtime.stats();
    /// println!("{} succeeded, {} retried, {} dead", s.succeeded, s.retried, s.dead);
    /// # }
    /// ```
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Jobs whose lease this runtime holds right now.
    pub fn running(&self) -> usize {
        self.shared.inflight.len()
    }

    /// Graceful stop: claim nothing more, let running jobs finish within the grace
    /// period, then stop the rest and hand them back to the queue at once without
    /// spending their attempt; write every pending outcome; return. Jobs of a
    /// claim still in flight go back when it returns, without running.
    ///
    /// Returns within `shutdown_grace` plus one `db_timeout`, whatever the database
    /// does: writes still pending then are abandoned, and their jobs return to the
    /// queue when their leases expire (at-least-once holds).
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool, stop: tokio::sync::oneshot::Receiver<()>) -> lq_runtime::Result<()> {
    /// let runtime = lq_runtime::Runtime::builder(pool).queue("default", 10).start().await?;
    /// let _ = stop.await; // the application's own stop signal
    /// runtime.shutdown().await
    /// # }
    /// ```
    pub async fn shutdown(mut self) -> Result<(), Error> {
        let shared = self.shared.clone();
        info!(
            running = shared.inflight.len(),
            "litequeue runtime shutting down"
        );
        // A grace meant as "forever" (`Duration::MAX`) waits a century, not panics.
        let century = std::time::Duration::from_secs(100 * 365 * 86_400);
        let grace = shared.config.shutdown_grace.min(century);
        let deadline = tokio::time::Instant::now() + grace;
        shared.stopping.cancel();
        let services = async { tokio::join!(self.services.wait(), self.producers.wait()) };
        let _ = tokio::time::timeout_at(deadline, services).await;
        shared.executors.close();
        if tokio::time::timeout_at(deadline, shared.executors.wait())
            .await
            .is_err()
        {
            info!(
                running = shared.inflight.len(),
                "grace period over: handing unfinished jobs back"
            );
            shared.hard_stop.cancel();
        }
        let (completer, heartbeat) = (self.completer.take(), self.heartbeat.take());
        let (completer_stop, heartbeat_stop) =
            (self.completer_stop.clone(), self.heartbeat_stop.clone());
        let aborts = [&completer, &heartbeat].map(|h| h.as_ref().map(|h| h.abort_handle()));
        let producers = self.producers.clone();
        let finish = async {
            // A claim still in flight (held up past the grace period) spawns its
            // jobs when it returns; they are handed back before the pool closes.
            producers.wait().await;
            shared.executors.wait().await;
            completer_stop.cancel();
            join("completer", completer).await?;
            heartbeat_stop.cancel();
            join("heartbeat", heartbeat).await?;
            crate::rollup::flush(&shared).await;
            #[cfg(feature = "metrics")]
            crate::publisher::publish(&shared);
            tokio::join!(
                shared.pool.close(),
                shared.hot_pool.close(),
                shared.completer_pool.close()
            );
            Ok::<_, Error>(())
        };
        let finished = tokio::time::timeout(shared.config.db_timeout, finish).await;
        shared.hard_stop.cancel();
        match finished {
            Ok(r) => r?,
            Err(_) => {
                for abort in aborts.into_iter().flatten() {
                    abort.abort();
                }
                warn!(
                    running = shared.inflight.len(),
                    "shutdown gave up on pending database writes; their jobs return to the queue when their leases expire"
                );
            }
        }
        info!("litequeue runtime stopped");
        Ok(())
    }

    /// [`Runtime::shutdown`], then the counters with every outcome it wrote
    /// counted: the final figures of a run, which [`Runtime::stats`] read just
    /// before stopping can miss (the last outcomes are counted after they commit).
    ///
    /// ```no_run
    /// # async fn f(runtime: lq_runtime::Runtime) -> lq_runtime::Result<()> {
    /// let s = runtime.shutdown_with_stats().await?;
    /// println!("{} succeeded, {} retried, {} dead", s.succeeded, s.retried, s.dead);
    /// # Ok(()) }
    /// ```
    pub async fn shutdown_with_stats(self) -> Result<StatsSnapshot, Error> {
        let stats = self.shared.stats.clone();
        self.shutdown().await?;
        Ok(stats.snapshot())
    }

    /// Waits for SIGTERM or Ctrl-C, then runs [`Runtime::shutdown`].
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
    /// let runtime = lq_runtime::Runtime::builder(pool).queue("default", 10).start().await?;
    /// runtime.shutdown_on_signal().await // returns once the jobs are handed back or done
    /// # }
    /// ```
    pub async fn shutdown_on_signal(self) -> Result<(), Error> {
        wait_for_signal().await;
        self.shutdown().await
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shared.stopping.cancel();
        self.shared.hard_stop.cancel();
        self.completer_stop.cancel();
        self.heartbeat_stop.cancel();
    }
}

async fn join(task: &'static str, handle: Option<JoinHandle<()>>) -> Result<(), Error> {
    let Some(h) = handle else { return Ok(()) };
    h.await.map_err(|e| Error::TaskFailed {
        task,
        message: e.to_string(),
    })
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
