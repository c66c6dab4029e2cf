//! [`Enqueuer`]: autocommit enqueues on connections litequeue keeps, with
//! concurrent calls sharing one statement.
//!
//! An enqueue on a `&PgPool` costs two round trips unless another enqueue on
//! that pool ran in the last 20 ms (`hold`): its statement, then the ping sqlx
//! sends on every connection going back to the pool. An enqueuer's connections
//! never go back to a pool, so a call is one round trip, sent from
//! the caller's own task when a connection is free; and while every connection
//! has a statement in flight, the calls that arrive wait in one queue and go
//! together in the next statement (one commit for all of them), the way
//! PostgreSQL's group commit shares a disk flush. Each call still returns only
//! after its own job is committed.

use std::{fmt, sync::Arc};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::oneshot;

use crate::{db::enqueue::NewJob, Enqueued, Error};

mod lines;
mod serve;

use lines::{Lines, Route};

/// Connections an [`Enqueuer`] keeps when not told otherwise: one statement in
/// flight while the calls arriving meanwhile gather for the next. More connections
/// put fewer jobs in each statement at the same load (measured with 4 producers
/// against pgbench's 4-client insert: 1 connection 1.05, 2 0.94, 4 0.71), and one
/// would leave every call waiting behind a slow statement (a unique key's lookup
/// waiting for a lock, a large batch).
pub const DEFAULT_ENQUEUER_CONNECTIONS: usize = 2;

/// Enqueues that commit on their own (like `enqueue(&pool)`), on a few connections
/// of the enqueuer's own: one round trip per call, and calls that arrive while
/// every connection is busy share the next statement and its commit.
///
/// Build one per process and clone it freely (clones share the connections).
/// Use it where jobs are enqueued outside any transaction of yours, one call at a
/// time: request handlers, consumers of another queue, scripts. Inside your own
/// transaction keep `enqueue(&mut tx)`: the job then exists iff that commits.
///
/// - Every call's job is committed when the call returns, as on a pool; the wake-up
///   NOTIFY follows as on a pool (coalesced, on its own connection).
/// - A job the server refuses fails its own call only: a failed shared statement
///   is retried one job at a time, so each call gets its own error.
/// - If the connection breaks while a shared statement is out, every call in it
///   fails with [`Error::EnqueuerFailed`]: the jobs may or may not be written,
///   as with any statement whose answer was lost.
/// - Jobs with a unique key, and `enqueue_many` batches, run alone.
/// - A call that finds a connection free sends its statement from the caller's
///   task; dropping the call's future then drops that connection (the next call
///   opens another), as it would leave a pool's connection mid-statement.
/// - Connections are opened from the pool's connect options when first needed
///   (not through the pool: its `after_connect` hooks do not run) and closed
///   after 30 s without calls. Dropping the last clone closes them.
///
/// ```no_run
/// # use lq_core::{Enqueuer, Job};
/// # #[derive(serde::Serialize, serde::Deserialize, Job)] struct Ping;
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let enqueuer = Enqueuer::new(&pool);
/// let job = Ping.enqueue(&enqueuer).await?;
/// assert!(!job.existing);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Enqueuer {
    lines: Arc<Lines>,
}

impl fmt::Debug for Enqueuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Enqueuer")
            .field("connections", &self.lines.most())
            .field("open", &self.lines.open())
            .finish()
    }
}

impl Enqueuer {
    /// An enqueuer with [`DEFAULT_ENQUEUER_CONNECTIONS`] connections to `pool`'s
    /// database. Nothing connects until the first enqueue.
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) {
    /// // One per process; clones share its connections.
    /// let enqueuer = lq_core::Enqueuer::new(&pool);
    /// let for_a_handler = enqueuer.clone();
    /// # }
    /// ```
    pub fn new(pool: &PgPool) -> Self {
        Self::with_connections(pool, DEFAULT_ENQUEUER_CONNECTIONS)
    }

    /// An enqueuer with up to `connections` statements in flight at once (at
    /// least 1). More calls than that do not need more connections: they share
    /// statements.
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) {
    /// let enqueuer = lq_core::Enqueuer::with_connections(&pool, 2);
    /// # let _ = enqueuer; }
    /// ```
    pub fn with_connections(pool: &PgPool, connections: usize) -> Self {
        let opts = pool.connect_options();
        let opts = match opts.get_application_name() {
            Some(_) => opts.as_ref().clone(),
            None => opts.as_ref().clone().application_name(serve::APP_NAME),
        };
        Self {
            lines: Lines::new(connections, opts, pool.clone()),
        }
    }

    /// Inserts one job (see [`crate::Job::enqueue`]).
    pub(crate) async fn insert(
        &self,
        job: OwnedJob,
        payload: String,
        key: Option<String>,
    ) -> Result<Enqueued, Error> {
        match self.call(Work::One { job, payload, key }).await? {
            Done::One(done) => Ok(done),
            Done::Many(_) => unreachable!("one job answered with many"),
        }
    }

    /// Inserts one `enqueue_many` batch in a statement of its own.
    pub(crate) async fn insert_many(
        &self,
        job: OwnedJob,
        payloads: Vec<String>,
        keys: Vec<Option<String>>,
    ) -> Result<Vec<i64>, Error> {
        match self
            .call(Work::Many {
                job,
                payloads,
                keys,
            })
            .await?
        {
            Done::Many(ids) => Ok(ids),
            Done::One(_) => unreachable!("a batch answered with one job"),
        }
    }

    /// Runs `work` on a free line in this task, or queues it for the next line
    /// given back (see `lines`).
    async fn call(&self, work: Work) -> Result<Done, Error> {
        match self.lines.route(work).await {
            Route::Direct(mut line, work) => serve::alone(&mut line, &work).await,
            Route::Queued(answer) => answer.await.map_err(|_| Error::EnqueuerFailed {
                op: "enqueuer",
                reason: "it stopped before answering (its runtime shut down)".into(),
            })?,
        }
    }
}

/// One enqueue's settings, owned so that it can wait in the queue.
#[derive(Debug)]
pub(crate) struct OwnedJob {
    kind: &'static str,
    queue: String,
    priority: i16,
    run_at: Option<DateTime<Utc>>,
    delay_secs: f64,
    max_attempts: i32,
    meta: Option<String>,
    /// Poke the notifier for `queue` once committed.
    wake: bool,
}

impl OwnedJob {
    pub(crate) fn of(kind: &'static str, new: &NewJob<'_>) -> Self {
        Self {
            kind,
            queue: new.queue.to_owned(),
            priority: new.priority,
            run_at: new.run_at,
            delay_secs: new.delay_secs,
            max_attempts: new.max_attempts,
            meta: new.meta.map(str::to_owned),
            wake: crate::enqueue::wants_wake(new),
        }
    }

    /// The row to insert; its NOTIFY is sent after commit, not inside it.
    fn new_job(&self) -> NewJob<'_> {
        NewJob {
            kind: self.kind,
            queue: &self.queue,
            priority: self.priority,
            run_at: self.run_at,
            delay_secs: self.delay_secs,
            max_attempts: self.max_attempts,
            notify: false,
            meta: self.meta.as_deref(),
        }
    }
}

/// What a call asks for.
#[derive(Debug)]
enum Work {
    One {
        job: OwnedJob,
        payload: String,
        key: Option<String>,
    },
    Many {
        job: OwnedJob,
        payloads: Vec<String>,
        keys: Vec<Option<String>>,
    },
}

/// What a call gets back.
#[derive(Debug)]
enum Done {
    One(Enqueued),
    Many(Vec<i64>),
}

/// A call waiting in the queue for a connection.
struct Call {
    work: Work,
    reply: oneshot::Sender<Result<Done, Error>>,
}
