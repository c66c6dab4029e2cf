//! [`RuntimeBuilder`]: queues, shared state and settings, then `start()`.

use std::{collections::HashMap, sync::Arc, time::Duration};

use lq_core::{db, validate_name, AppState, QueueLimits, RateLimit, Registry};
use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    PgConnection, PgPool,
};
use tokio::sync::mpsc;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    preflight, scheduler, shared::Shared, stale_conns::StaleConns, stats::Stats, wake::QueueWake,
    Error, Runtime, RuntimeConfig,
};

/// Configures a [`Runtime`]; made by [`Runtime::builder`].
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_runtime::Error> {
/// use lq_runtime::Runtime;
/// use std::time::Duration;
/// let runtime = Runtime::builder(pool)
///     .queue("default", 10)
///     .queue("emails", 4)
///     .state(String::from("shared config"))
///     .shutdown_grace(Duration::from_secs(10))
///     .start()
///     .await?;
/// runtime.shutdown().await?;
/// # Ok(()) }
/// ```
#[must_use = "call .start().await to run the runtime"]
pub struct RuntimeBuilder {
    pool: PgPool,
    queues: Vec<(String, usize)>,
    /// Queues with limits across every runtime: a global limit, a rate limit.
    limits: HashMap<String, QueueLimits>,
    state: AppState,
    config: RuntimeConfig,
    /// Settings made one at a time; they win over `.config(..)` in either order.
    set: NamedSettings,
}

/// The settings the builder has one method each for.
#[derive(Default)]
struct NamedSettings {
    shutdown_grace: Option<Duration>,
    poll_interval: Option<Duration>,
    owner: Option<String>,
}

impl NamedSettings {
    fn apply(self, mut config: RuntimeConfig) -> RuntimeConfig {
        if let Some(grace) = self.shutdown_grace {
            config.shutdown_grace = grace;
        }
        if let Some(every) = self.poll_interval {
            config.poll_interval = every;
        }
        if let Some(owner) = self.owner {
            config.owner = owner;
        }
        config
    }
}

impl RuntimeBuilder {
    pub(crate) fn new(pool: PgPool) -> Self {
        Self {
            pool,
            queues: Vec::new(),
            limits: HashMap::new(),
            state: AppState::default(),
            config: RuntimeConfig::default(),
            set: NamedSettings::default(),
        }
    }

    /// Serves `queue`, running at most `concurrency` of its jobs at once. Calling it
    /// again for the same queue replaces the concurrency.
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        let queue = queue.into();
        self.queues.retain(|(q, _)| *q != queue);
        self.queues.push((queue, concurrency));
        self
    }

    /// Runs at most `limit` of `queue`'s jobs at once across every runtime that
    /// shares the database (Oban's and River's global limit): for a partner's
    /// API that takes so many calls at once, or a report that must never run
    /// twice at the same time (`1`). Each runtime still runs at most the
    /// queue's own concurrency. Set the same limit on every runtime serving the
    /// queue: a runtime without it claims as if there were none.
    ///
    /// The queue's claims take turns on one advisory lock, and each claims at
    /// most the room its count of the running jobs leaves; jobs are not
    /// claimed ahead of idle handlers, so a runtime holds no capacity it does
    /// not use. A runtime that found the queue at its limit claims again when
    /// one of its own jobs of the queue finishes, and otherwise at its next
    /// poll (`poll_interval`) or enqueue wake-up, so capacity another runtime
    /// frees is taken within a poll interval. Fails `start()` with
    /// [`Error::GlobalLimit`] for a queue the runtime does not serve, or a
    /// limit of 0.
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
    /// let runtime = lq_runtime::Runtime::builder(pool)
    ///     .queue("partner_api", 10)
    ///     .global_limit("partner_api", 4) // 4 at once across the fleet
    ///     .start()
    ///     .await?;
    /// # runtime.shutdown().await?; Ok(()) }
    /// ```
    pub fn global_limit(mut self, queue: impl Into<String>, limit: u32) -> Self {
        self.limits.entry(queue.into()).or_default().global = Some(limit);
        self
    }

    /// Starts at most `limit.allowed()` of `queue`'s jobs per `limit.period()`
    /// across every runtime that sets the same limit on the queue: a token
    /// bucket in the database (see [`RateLimit`]), so the queue runs at that
    /// rate on average, and at most `allowed` at once after a quiet spell.
    /// Each attempt takes a token, retries included. Every runtime serving the
    /// queue must set it: a runtime without it claims as if there were none.
    ///
    /// The queue's claims take turns on one advisory lock, as under
    /// [`global_limit`](Self::global_limit), with which it combines; each
    /// claims at most the whole tokens left, and jobs are not claimed ahead of
    /// idle handlers. A claimer that found the bucket empty sleeps until its
    /// next token is due, and is not woken by enqueues meanwhile. Fails
    /// `start()` with [`Error::RateLimit`] for a queue the runtime does not
    /// serve, or a limit that cannot work ([`RateLimit::invalid`]).
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
    /// use lq_runtime::RateLimit;
    ///
    /// let runtime = lq_runtime::Runtime::builder(pool)
    ///     .queue("partner_api", 10)
    ///     .rate_limit("partner_api", RateLimit::per_minute(600)) // 10 a second
    ///     .start()
    ///     .await?;
    /// # runtime.shutdown().await?; Ok(()) }
    /// ```
    pub fn rate_limit(mut self, queue: impl Into<String>, limit: RateLimit) -> Self {
        self.limits.entry(queue.into()).or_default().rate = Some(limit);
        self
    }

    /// Shares `value` with every job through `ctx.state::<T>()` (one value per
    /// type; a second of the same type replaces the first).
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
    /// /// What handlers need beyond their payload.
    /// struct Mailer { from: String }
    ///
    /// let runtime = lq_runtime::Runtime::builder(pool)
    ///     .state(Mailer { from: "shop@example.com".into() })
    ///     .queue("emails", 8)
    ///     .start()
    ///     .await?;
    /// # runtime.shutdown().await?; Ok(()) }
    /// ```
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// Sets every setting of [`RuntimeConfig`] at once. The builder's own setters
    /// ([`shutdown_grace`](Self::shutdown_grace), [`poll_interval`](Self::poll_interval),
    /// [`owner`](Self::owner)) win over it whether called before or after, so
    /// nothing set one at a time is silently undone.
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
    /// use lq_runtime::{Runtime, RuntimeConfig};
    /// use std::time::Duration;
    /// let runtime = Runtime::builder(pool)
    ///     .shutdown_grace(Duration::from_secs(5)) // kept
    ///     .config(RuntimeConfig { max_claim_batch: 100, ..RuntimeConfig::default() })
    ///     .queue("default", 10)
    ///     .start()
    ///     .await?;
    /// # runtime.shutdown().await?; Ok(()) }
    /// ```
    pub fn config(mut self, config: RuntimeConfig) -> Self {
        self.config = config;
        self
    }

    /// How long `shutdown()` waits for running jobs (default 30 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.set.shutdown_grace = Some(grace);
        self
    }

    /// Poll interval when no NOTIFY arrives (default 1 s).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.set.poll_interval = Some(every);
        self
    }

    /// The name written into the rows this runtime leases (default
    /// `host:pid:random`); 1-200 bytes.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.set.owner = Some(owner.into());
        self
    }

    /// The most connections the runtime this builder starts opens of its own,
    /// besides the application pool it was given (whose connections it borrows
    /// one at a time, at start): its pool ([`RuntimeConfig::pool_size`]), the
    /// claimers', the completer's, the heartbeat's and the cluster beat's. Size
    /// the server's `max_connections` for every process that runs a runtime:
    /// `start()` fails with [`Error::NotEnoughConnections`] when the server
    /// could never give it this many, and `lq doctor` warns when few are free.
    ///
    /// ```
    /// # async fn f(pool: sqlx::PgPool) {
    /// let builder = lq_runtime::Runtime::builder(pool).queue("default", 10);
    /// // One queue with the default pool: 5 + 1 claimer + 1 for an overlapping claim + 3.
    /// assert_eq!(builder.connections(), 10);
    /// # }
    /// ```
    pub fn connections(&self) -> u32 {
        let (size, claim_conns) = self.pool_sizes();
        preflight::connections_needed(size, claim_conns)
    }

    /// The runtime pool's size and the claimers' connections (one per queue, at
    /// most 16).
    fn pool_sizes(&self) -> (u32, u32) {
        let queues = u32::try_from(self.queues.len()).unwrap_or(u32::MAX);
        let claim_conns = queues.min(preflight::MAX_CLAIM_CONNECTIONS);
        let size = self.config.pool_size.unwrap_or(claim_conns + 4).max(2);
        (size, claim_conns)
    }

    /// The settings `start()` will use.
    fn settings(&mut self) -> RuntimeConfig {
        std::mem::take(&mut self.set).apply(self.config.clone())
    }

    /// Runs every job that is ready in the builder's queues, then stops: for
    /// tests of code that enqueues, like Oban's `drain_queue`. It starts a real
    /// runtime (the same claims, retries and outcomes as in production), waits
    /// until none of its queues has a job ready or running, and shuts down.
    /// Retries and snoozes due later stay queued. Returns the runtime's counters.
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_runtime::Error> {
    /// let done = lq_runtime::Runtime::builder(pool).queue("emails", 4).drain().await?;
    /// assert_eq!(done.dead, 0);
    /// # Ok(()) }
    /// ```
    pub async fn drain(self) -> Result<crate::StatsSnapshot, Error> {
        let pool = self.pool.clone();
        let queues: Vec<String> = self.queues.iter().map(|(q, _)| q.clone()).collect();
        let mut settings = self;
        settings.config.poll_interval = settings.config.poll_interval.min(DRAIN_POLL);
        settings.set.poll_interval = settings.set.poll_interval.map(|p| p.min(DRAIN_POLL));
        let runtime = settings.start().await?;
        let timeout = runtime.db_timeout();
        loop {
            let busy = db::timed("queue_busy", timeout, async {
                let mut conn = pool.acquire().await.map_err(db::err("queue_busy"))?;
                db::queues::queues_busy(&mut conn, &queues).await
            })
            .await;
            match busy {
                Ok(false) => break,
                Ok(true) => tokio::time::sleep(DRAIN_POLL).await,
                Err(e) => {
                    let _ = runtime.shutdown().await;
                    return Err(e.into());
                }
            }
        }
        // The queues look idle as soon as the last outcome commits, a moment
        // before it is counted: read the counters after shutdown.
        runtime.shutdown_with_stats().await
    }

    /// Checks the setup and starts claiming.
    ///
    /// Fails when two linked types declare one kind (naming both), when no type
    /// implements `Perform`, when a queue name is malformed or has no slots, when a
    /// setting cannot work, when the schema is not migrated, when the role lacks a
    /// privilege the runtime uses (naming each), or when the server could never
    /// give the runtime its connections. Warns about jobs no runtime would run.
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
    /// match lq_runtime::Runtime::builder(pool).queue("default", 10).start().await {
    ///     Ok(runtime) => runtime.shutdown_on_signal().await,
    ///     Err(e @ lq_runtime::Error::MissingPrivileges { .. }) => {
    ///         eprintln!("grant the runtime's role what it lacks: {e}");
    ///         Err(e)
    ///     }
    ///     Err(e) => Err(e),
    /// }
    /// # }
    /// ```
    pub async fn start(mut self) -> Result<Runtime, Error> {
        self.config = self.settings();
        let registry = Registry::collect()?;
        if self.queues.is_empty() {
            return Err(Error::NoQueues);
        }
        for (queue, slots) in &self.queues {
            validate_name("queue", queue)?;
            if *slots == 0 {
                return Err(Error::ZeroConcurrency {
                    queue: queue.clone(),
                });
            }
        }
        let runnable: Vec<_> = registry
            .iter()
            .filter(|d| (d.handler)().is_some())
            .collect();
        if runnable.is_empty() {
            return Err(Error::NoHandlers);
        }
        preflight::validate(&self.config, &self.queues)?;
        check_limits(&self.limits, &self.queues)?;
        let served: Vec<String> = self.queues.iter().map(|(q, _)| q.clone()).collect();
        let cron_jobs = scheduler::cron_jobs(&served, &runnable)?;
        // The checks share one of the application's connections: sqlx pings each
        // connection it takes back, so a fresh acquire per check opened a new
        // connection for each (about 3 ms apiece of `start()`).
        let timeout = self.config.db_timeout;
        let mut app_conn = db::timed("runtime_preflight", timeout, async {
            (self.pool.acquire().await).map_err(db::err("runtime_preflight"))
        })
        .await?;
        check_schema(&mut app_conn, timeout).await?;
        let rate_limited = self.limits.values().any(|l| l.rate.is_some());
        preflight::check_privileges(&mut app_conn, timeout, rate_limited).await?;
        preflight::warn_unrunnable(&registry, &served);
        preflight::warn_short_leases(&registry, &served, self.config.db_timeout);

        let (completions, completed_rx) = mpsc::channel(self.config.max_complete_batch.max(1) * 4);
        let wakers: HashMap<String, Arc<QueueWake>> = self
            .queues
            .iter()
            .map(|(q, _)| (q.clone(), Arc::default()))
            .collect();
        let queues = self.queues.len() as u32;
        let (size, claim_conns) = self.pool_sizes();
        let needed = preflight::connections_needed(size, claim_conns);
        preflight::check_connections(&mut app_conn, timeout, needed).await?;
        drop(app_conn);
        // Every statement on the runtime's own connections resolves functions,
        // operators and types in pg_catalog only (guarantee 10), and the server
        // cancels it before the client's db_timeout gives up on it.
        let options = self
            .pool
            .connect_options()
            .as_ref()
            .clone()
            .options([("search_path", db::SEARCH_PATH)])
            .options([db::statement_timeout_within(self.config.db_timeout)]);
        let stale = Arc::new(StaleConns::default());
        let pool = runtime_pool(size, timeout, options.clone(), &stale);
        let hot = options.options(db::HOT_PATH_SETTINGS);
        let overlap = preflight::overlap_connections(claim_conns);
        let hot_pool = runtime_pool(claim_conns + overlap, timeout, hot.clone(), &stale);
        let completer_pool = runtime_pool(
            1,
            timeout,
            hot.options([crate::completer::lock_timeout(self.config.db_timeout)]),
            &stale,
        );
        // One connection with the runtime's own settings now, so a setting the
        // server refuses fails start() rather than every later statement.
        db::timed("runtime_connection", timeout, async {
            completer_pool
                .acquire()
                .await
                .map(drop)
                .map_err(db::err("runtime_connection"))
        })
        .await?;
        let (kinds, lease_secs) = crate::attempt::claimable(&runnable);
        let runnable_kinds: Vec<&'static str> = runnable.iter().map(|d| d.kind).collect();
        let tallies = crate::tally::Tallies::new(
            self.queues.iter().map(|(q, _)| q.as_str()),
            &runnable_kinds,
        );
        let shared = Arc::new(Shared {
            pool,
            hot_pool,
            keep_claim_conns: queues <= preflight::MAX_CLAIM_CONNECTIONS,
            keep_overlap_conns: queues <= overlap,
            completer_pool,
            connections: needed,
            config: self.config,
            kinds,
            lease_secs,
            tallies,
            rollup_written: Default::default(),
            #[cfg(feature = "metrics")]
            metrics_published: Default::default(),
            registry,
            state: self.state,
            limits: self.limits,
            stats: Arc::new(Stats::default()),
            inflight: Default::default(),
            wakers,
            stopping: CancellationToken::new(),
            hard_stop: CancellationToken::new(),
            executors: TaskTracker::new(),
            leadership: Default::default(),
            completions,
            claim_rooms: std::sync::atomic::AtomicBool::new(true),
            stale_conns: stale,
            orphan_leases: Default::default(),
        });
        Ok(Runtime::launch(
            shared,
            self.queues,
            completed_rx,
            cron_jobs,
        ))
    }
}

/// A pool of the runtime's own: no ping per acquire (it would double every round
/// trip), acquiring bounded by the db timeout, and connections a failover left
/// read-only closed rather than reused (see [`StaleConns`]).
fn runtime_pool(
    size: u32,
    timeout: Duration,
    options: PgConnectOptions,
    stale: &Arc<StaleConns>,
) -> PgPool {
    let stale = stale.clone();
    PgPoolOptions::new()
        .max_connections(size)
        .test_before_acquire(false)
        .acquire_timeout(timeout)
        .before_acquire(move |_, meta| {
            let fresh = !stale.is_stale(meta.age);
            Box::pin(async move { Ok(fresh) })
        })
        .connect_lazy_with(options)
}

/// Fails unless the schema is at the version this build knows, or newer and
/// still serving this build (a rolling deploy's old processes keep starting
/// while the migration only added what they never read). A role refused the
/// version table gets the privileges it lacks named instead of a raw error.
async fn check_schema(conn: &mut PgConnection, timeout: Duration) -> Result<(), Error> {
    let found = match db::timed("schema_version", timeout, db::migration::version(conn)).await {
        Ok(found) => found,
        Err(e) if lq_core::lacks_grant(&e) => {
            preflight::check_privileges(conn, timeout, false).await?;
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    if found < lq_core::SCHEMA_VERSION {
        return Err(lq_core::Error::NotMigrated {
            found,
            needed: lq_core::SCHEMA_VERSION,
        }
        .into());
    }
    db::timed(
        "schema_serves_this_build",
        timeout,
        lq_core::ensure_newer_schema_serves_this_build(conn, found),
    )
    .await?;
    if found > lq_core::SCHEMA_VERSION {
        tracing::warn!(
            schema = found,
            this_build = lq_core::SCHEMA_VERSION,
            "the lq schema is newer than this build and still serves it; upgrade this build when convenient"
        );
    }
    Ok(())
}

/// How often [`RuntimeBuilder::drain`] looks, and its runtime polls, for work.
const DRAIN_POLL: Duration = Duration::from_millis(10);

/// Fails for a limit the runtime cannot apply: on a queue it does not serve, a
/// global limit of 0, a rate limit that cannot work.
fn check_limits(
    limits: &HashMap<String, QueueLimits>,
    queues: &[(String, usize)],
) -> Result<(), Error> {
    let mut named: Vec<_> = limits.iter().collect();
    named.sort_by(|a, b| a.0.cmp(b.0)); // the same error for the same builder
    for (queue, limits) in named {
        let served = queues.iter().any(|(q, _)| q == queue);
        const UNSERVED: &str = "this runtime does not serve the queue: add it with .queue()";
        if let Some(limit) = limits.global {
            let reason = if !served {
                UNSERVED
            } else if limit == 0 {
                "a limit of 0 would run none of its jobs: give at least 1, or pause the queue"
            } else {
                ""
            };
            if !reason.is_empty() {
                return Err(Error::GlobalLimit {
                    queue: queue.clone(),
                    reason,
                });
            }
        }
        if let Some(rate) = limits.rate {
            let reason = if served {
                rate.invalid()
            } else {
                Some(UNSERVED)
            };
            if let Some(reason) = reason {
                return Err(Error::RateLimit {
                    queue: queue.clone(),
                    limit: rate,
                    reason,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> RuntimeBuilder {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://localhost/unused")
            .expect("a lazy pool");
        RuntimeBuilder::new(pool)
    }

    /// The settings reach the connection string of every hot-path connection;
    /// JIT among them (see `db::HOT_PATH_SETTINGS`: 10M queued jobs made every claim
    /// compile).
    #[test]
    fn hot_path_connections_force_one_plan_without_jit() {
        let opts = sqlx::postgres::PgConnectOptions::new().options(db::HOT_PATH_SETTINGS);
        let line = opts.get_options().expect("options are set");
        for want in [
            "plan_cache_mode=force_generic_plan",
            "jit=off",
            "enable_seqscan=off",
        ] {
            assert!(line.contains(want), "{want} missing from {line}");
        }
    }

    #[tokio::test]
    async fn named_settings_survive_a_later_config() {
        let grace = Duration::from_secs(3);
        let mut b = builder()
            .shutdown_grace(grace)
            .owner("worker-a")
            .config(RuntimeConfig {
                max_claim_batch: 7,
                ..RuntimeConfig::default()
            })
            .poll_interval(Duration::from_millis(250));
        let c = b.settings();
        assert_eq!(c.shutdown_grace, grace);
        assert_eq!(c.owner, "worker-a");
        assert_eq!(c.poll_interval, Duration::from_millis(250));
        assert_eq!(c.max_claim_batch, 7);
    }

    #[tokio::test]
    async fn connections_count_each_pool_of_the_runtime() {
        let one = builder().queue("a", 10);
        // Pool 1 + 4, one claimer, one overlapping claim, completer, heartbeat, cluster beat.
        assert_eq!(one.connections(), 5 + 1 + 1 + 3);
        let many = (0..40).fold(builder(), |b, i| b.queue(format!("q{i}"), 1));
        // Claimers share 16 connections past 16 queues; two overlap connections at most.
        assert_eq!(many.connections(), 20 + 16 + 2 + 3);
        let small = builder()
            .queue("a", 10)
            .queue("b", 10)
            .config(RuntimeConfig {
                pool_size: Some(2),
                ..RuntimeConfig::default()
            });
        assert_eq!(small.connections(), 2 + 2 + 2 + 3);
    }

    #[tokio::test]
    async fn config_alone_is_taken_whole() {
        let config = RuntimeConfig {
            shutdown_grace: Duration::from_secs(9),
            ..RuntimeConfig::default()
        };
        let c = builder().config(config.clone()).settings();
        assert_eq!(c.shutdown_grace, Duration::from_secs(9));
        assert_eq!(c.owner, config.owner);
    }
}
