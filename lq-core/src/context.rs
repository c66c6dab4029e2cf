//! [`JobContext`]: what `perform` knows about the attempt it runs.

use std::sync::Arc;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use uuid::Uuid;

use crate::app_state::AppState;

/// The attempt being performed: ids, counters, shared state and a cancellation signal.
///
/// The signal fires when the job is cancelled by a user, when the runtime loses the
/// job's lease, when the attempt's timeout passes, and at the end of a graceful
/// shutdown's grace period. Long handlers should watch it with [`JobContext::cancelled`].
#[derive(Clone)]
pub struct JobContext {
    inner: Arc<Inner>,
}

struct Inner {
    id: i64,
    kind: &'static str,
    queue: String,
    attempt: u32,
    max_attempts: u32,
    lease_token: Uuid,
    cancel: CancellationToken,
    state: AppState,
}

impl JobContext {
    /// Builds a context; the runtime calls this once per claimed job.
    #[allow(clippy::too_many_arguments)]
    #[doc(hidden)]
    pub fn new(
        id: i64,
        kind: &'static str,
        queue: String,
        attempt: u32,
        max_attempts: u32,
        lease_token: Uuid,
        cancel: CancellationToken,
        state: AppState,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                id,
                kind,
                queue,
                attempt,
                max_attempts,
                lease_token,
                cancel,
                state,
            }),
        }
    }

    /// The job's id (its row's primary key).
    pub fn id(&self) -> i64 {
        self.inner.id
    }

    /// The job's kind.
    pub fn kind(&self) -> &'static str {
        self.inner.kind
    }

    /// The queue the job was claimed from.
    pub fn queue(&self) -> &str {
        &self.inner.queue
    }

    /// This attempt's number, from 1; counted when the job was claimed.
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// Attempts allowed before the job is dead.
    pub fn max_attempts(&self) -> u32 {
        self.inner.max_attempts
    }

    /// True on the last allowed attempt.
    pub fn is_last_attempt(&self) -> bool {
        self.inner.attempt >= self.inner.max_attempts
    }

    /// The lease token minted by this attempt's claim.
    pub fn lease_token(&self) -> Uuid {
        self.inner.lease_token
    }

    /// True once the attempt should stop (cancelled, lease lost, timed out or shutting down).
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Completes when the attempt should stop; use it in `tokio::select!`.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.inner.cancel.cancelled()
    }

    /// Shared application state registered with the runtime builder's `.state(..)`.
    ///
    /// # Panics
    ///
    /// When no value of type `T` was registered; use [`JobContext::try_state`] to check.
    pub fn state<T: Send + Sync + 'static>(&self) -> &T {
        match self.inner.state.get::<T>() {
            Some(v) => v,
            None => panic!(
                "no application state of type {} was registered: add .state(value) to the runtime builder",
                std::any::type_name::<T>()
            ),
        }
    }

    /// Shared application state of type `T`, if registered.
    pub fn try_state<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.inner.state.get::<T>()
    }
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.inner.id)
            .field("kind", &self.inner.kind)
            .field("queue", &self.inner.queue)
            .field("attempt", &self.inner.attempt)
            .field("max_attempts", &self.inner.max_attempts)
            .finish_non_exhaustive()
    }
}
