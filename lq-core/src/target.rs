//! [`EnqueueTarget`]: what `enqueue` accepts — a transaction, a connection, a pool
//! or an [`Enqueuer`].

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::Enqueuer;

/// Something to enqueue on:
///
/// - `&mut Transaction<Postgres>`: the job exists iff the transaction commits;
/// - `&mut PgConnection`: committed when the call returns, unless the connection
///   is inside a transaction you began;
/// - `&PgPool`: committed when the call returns; the connection is kept 20 ms
///   for the next enqueue on the pool (only while the pool has another idle
///   connection or room for one), so back-to-back enqueues skip the pool's
///   acquire and release;
/// - `&Enqueuer`: committed when the call returns, on the enqueuer's own
///   connections, with concurrent calls sharing statements.
///
/// Implemented for exactly these four; each tells the enqueue where its statement
/// runs and how to send its wake-up NOTIFY (inside the transaction, or coalesced
/// after an autocommit).
pub trait EnqueueTarget<'c>: Send + 'c {
    /// Where the statement runs.
    #[doc(hidden)]
    fn route(self) -> Route<'c>;
}

/// Where an enqueue's statement runs (see [`EnqueueTarget`]).
#[doc(hidden)]
#[derive(Debug)]
pub enum Route<'c> {
    /// On this connection, in whatever transaction it is in.
    Conn(&'c mut PgConnection),
    /// On a connection of this pool, committed at once.
    Pool(&'c PgPool),
    /// Handed to this enqueuer, committed at once.
    Enqueuer(&'c Enqueuer),
}

impl<'c> EnqueueTarget<'c> for &'c PgPool {
    fn route(self) -> Route<'c> {
        Route::Pool(self)
    }
}

impl<'c, 't> EnqueueTarget<'c> for &'c mut Transaction<'t, Postgres> {
    fn route(self) -> Route<'c> {
        Route::Conn(self)
    }
}

impl<'c> EnqueueTarget<'c> for &'c mut PgConnection {
    fn route(self) -> Route<'c> {
        Route::Conn(self)
    }
}

impl<'c> EnqueueTarget<'c> for &'c Enqueuer {
    fn route(self) -> Route<'c> {
        Route::Enqueuer(self)
    }
}
