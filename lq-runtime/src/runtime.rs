//! [`Runtime`]: the running set of claimers, job tasks and background duties.

use std::sync::Arc;

use tokio::{sync::mpsc, task::JoinHandle};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::info;

use crate::{
    claim_ahead, completer, heartbeat, listener, producer, pruner, rescuer, scheduler,
    shared::Shared, slots::Slots, stats::StatsSnapshot, unknown_kinds, vacuumer, Error,
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
    completer: Option<JoinHandle<()>>,
    completer_stop: CancellationToken,
    heartbeat: Option<JoinHandle<()>>,
    heartbeat_stop: CancellationToken,
}

impl Runtime {
    /// Starts configuring a runtime on `pool`.
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
        let completer_stop = CancellationToken::new();
        let heartbeat_stop = CancellationToken::new();
        let completer = tokio::spawn(completer::run(
            shared.clone(),
            completed_rx,
            completer_stop.clone(),
        ));
        let heartbeat = tokio::spawn(heartbeat::run(shared.clone(), heartbeat_stop.clone()));
        services.spawn(listener::run(shared.clone()));
        services.spawn(rescuer::run(shared.clone()));
        services.spawn(pruner::run(shared.clone()));
        services.spawn(scheduler::run(shared.clone(), cron_jobs));
        services.spawn(vacuumer::run(shared.clone()));
        if let Some(grace) = shared.config.unknown_kind_grace {
            services.spawn(unknown_kinds::run(shared.clone(), grace));
        }
        for (queue, slots) in queues {
            let wake = shared.wakers[&queue].clone();
            services.spawn(producer::run(
                shared.clone(),
                queue,
                Slots::new(slots, claim_ahead::most(&shared.config, slots)),
                wake,
            ));
        }
        services.close();
        info!(owner = %shared.config.owner, kinds = ?shared.kinds, "litequeue runtime started");
        Self {
            shared,
            services,
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

    /// Counters since start.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Jobs whose lease this runtime holds right now.
    pub fn running(&self) -> usize {
        self.shared.inflight.len()
    }

    /// Graceful stop: claim nothing more, let running jobs finish within the grace
    /// period, then stop the rest and hand them back to the queue at once without
    /// spending their attempt; write every pending outcome; return.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        let shared = self.shared.clone();
        info!(
            running = shared.inflight.len(),
            "litequeue runtime shutting down"
        );
        shared.stopping.cancel();
        self.services.wait().await;
        shared.executors.close();
        let grace = shared.config.shutdown_grace;
        if tokio::time::timeout(grace, shared.executors.wait())
            .await
            .is_err()
        {
            info!(
                running = shared.inflight.len(),
                "grace period over: handing unfinished jobs back"
            );
            shared.hard_stop.cancel();
            shared.executors.wait().await;
        }
        self.completer_stop.cancel();
        join("completer", self.completer.take()).await?;
        self.heartbeat_stop.cancel();
        join("heartbeat", self.heartbeat.take()).await?;
        let _ = tokio::time::timeout(shared.config.db_timeout, async {
            tokio::join!(shared.pool.close(), shared.hot_pool.close())
        })
        .await;
        shared.hard_stop.cancel();
        info!("litequeue runtime stopped");
        Ok(())
    }

    /// Waits for SIGTERM or Ctrl-C, then runs [`Runtime::shutdown`].
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
