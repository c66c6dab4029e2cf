//! The runtime's error type.

/// What can stop a runtime from starting or shutting down cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error from the core: database, schema, duplicate kinds, names.
    #[error(transparent)]
    Core(#[from] lq_core::Error),
    /// A database call the application made itself (connecting, a transaction),
    /// so `fn main() -> lq_runtime::Result<()>` can `?` through sqlx too.
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
    /// The builder was given a queue with no slots.
    #[error("queue {queue:?} has concurrency 0: give it at least 1 slot")]
    ZeroConcurrency {
        /// The queue.
        queue: String,
    },
    /// The builder was given no queue.
    #[error("the runtime serves no queue: add .queue(\"default\", 10) to the builder")]
    NoQueues,
    /// No linked job type implements `Perform`, so there is nothing to run.
    #[error("no job type implements Perform in this binary; if your jobs live in another crate, add `use that_crate as _;`")]
    NoHandlers,
    /// A global limit the runtime cannot apply: on a queue it does not serve,
    /// or of zero.
    #[error("global limit on queue {queue:?}: {reason}")]
    GlobalLimit {
        /// The queue named.
        queue: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A rate limit the runtime cannot apply: on a queue it does not serve, or
    /// one that cannot work ([`lq_core::RateLimit::invalid`]).
    #[error("rate limit of {limit} on queue {queue:?}: {reason}")]
    RateLimit {
        /// The queue named.
        queue: String,
        /// The limit given.
        limit: lq_core::RateLimit,
        /// What is wrong.
        reason: &'static str,
    },
    /// A setting that cannot work (the limits are listed on [`crate::RuntimeConfig`]).
    #[error("runtime setting {setting}: {reason}")]
    InvalidSetting {
        /// The setting.
        setting: &'static str,
        /// What it must be.
        reason: &'static str,
    },
    /// A queue's concurrency is beyond what the runtime supports.
    #[error("queue {queue:?} has concurrency {concurrency}, over the limit of {max}")]
    ConcurrencyTooHigh {
        /// The queue.
        queue: String,
        /// The concurrency asked for.
        concurrency: usize,
        /// The most allowed.
        max: usize,
    },
    /// The runtime's role lacks privileges it needs; `docs/roles.md` has the
    /// GRANT recipe.
    #[error("role {role:?} lacks privileges the runtime needs: {}; grant them as docs/roles.md shows (\"Worker\")", .missing.join(", "))]
    MissingPrivileges {
        /// The role the runtime connects as.
        role: String,
        /// Each missing privilege, as `"UPDATE on lq.jobs"`.
        missing: Vec<String>,
    },
    /// The server can never give the runtime the connections it opens.
    #[error("the runtime opens {needed} connections but the server allows this role at most {limit}: raise max_connections, serve fewer queues, or set RuntimeConfig::pool_size lower")]
    NotEnoughConnections {
        /// Connections the runtime would open.
        needed: u32,
        /// The most the server would ever give it.
        limit: u32,
    },
    /// A background task panicked.
    #[error("runtime task {task} failed: {message}")]
    TaskFailed {
        /// The task.
        task: &'static str,
        /// Its panic message.
        message: String,
    },
}

/// `Result` with this crate's [`Error`], which every litequeue error converts
/// into with `?` (enqueue and control calls return [`lq_core::Error`]):
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
/// lq_runtime::migrate(&pool).await?; // lq_core::Error
/// let rt = lq_runtime::Runtime::builder(pool).queue("default", 4).start().await?; // Error
/// rt.shutdown().await?;
/// # Ok(()) }
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
