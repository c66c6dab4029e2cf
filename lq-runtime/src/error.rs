//! The runtime's error type.

/// What can stop a runtime from starting or shutting down cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error from the core: database, schema, duplicate kinds, names.
    #[error(transparent)]
    Core(#[from] lq_core::Error),
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
    /// A background task panicked.
    #[error("runtime task {task} failed: {message}")]
    TaskFailed {
        /// The task.
        task: &'static str,
        /// Its panic message.
        message: String,
    },
}
