//! A hot-path connection that a claimer or the completer keeps between statements.
//!
//! sqlx pings a connection each time it goes back to the pool (a round trip per
//! release), and when every connection of the small hot-path pool is taken, the next
//! acquire waits for that ping. A task that keeps its connection skips both on every
//! claim and completion batch. After a call that fails or runs out of time the
//! connection is closed, never reused: a statement cut off mid-way leaves it in an
//! unknown state. The next call takes a fresh one from the pool.

use lq_core::{db, Error};
use sqlx::{pool::PoolConnection, PgConnection, PgPool, Postgres};

/// One task's hot-path connection, taken from the pool on first use.
pub(crate) struct HotConn {
    pool: PgPool,
    conn: Option<PoolConnection<Postgres>>,
    /// Keep the connection between calls; when false (more claimers than the
    /// pool has connections) it goes back to the pool after each call.
    keep: bool,
}

impl HotConn {
    /// No connection is taken until the first call.
    pub fn new(pool: PgPool, keep: bool) -> Self {
        Self {
            pool,
            conn: None,
            keep,
        }
    }

    /// Whether this task keeps its connection between calls (it has one of its
    /// own rather than sharing the pool's with other tasks).
    pub fn keeps(&self) -> bool {
        self.keep
    }

    /// Ends a successful call: the connection is kept, or handed back to a pool
    /// that more tasks share than it has connections.
    pub fn done(&mut self) {
        if !self.keep {
            self.conn = None;
        }
    }

    /// The kept connection, taken from the pool first if there is none (bounded by
    /// the pool's acquire timeout, the db timeout). Bound the statement apart with
    /// [`db::timed`], so a wait here never shortens the statement's time and the
    /// server's own bound fires first; call [`HotConn::discard`] when it fails.
    pub async fn get(&mut self, op: &'static str) -> Result<&mut PgConnection, Error> {
        if self.conn.is_none() {
            self.conn = Some(self.pool.acquire().await.map_err(db::err(op))?);
        }
        Ok(self.conn.as_mut().expect("taken above"))
    }

    /// Whether a call may start without waiting for another task's connection:
    /// this task keeps one (the first call opens it), or the pool has one idle
    /// (taken now) or room to open one.
    pub fn ready_now(&mut self) -> bool {
        if self.keep || self.conn.is_some() {
            return true;
        }
        self.conn = self.pool.try_acquire();
        self.conn.is_some() || self.pool.size() < self.pool.options().get_max_connections()
    }

    /// Drops the kept connection after a failed or timed-out call. It is detached
    /// from the pool first, so its place is free at once: sqlx's graceful close
    /// would hold the place until it finished, which on a dead connection can take
    /// up to its 5 s close timeout, and the next call would wait for it.
    pub fn discard(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
        }
    }
}
