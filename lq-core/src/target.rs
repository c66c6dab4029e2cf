//! [`EnqueueTarget`]: what `enqueue` accepts — a transaction, a pool or a connection.

use sqlx::{Acquire, PgConnection, PgPool, Postgres, Transaction};

/// Something to enqueue on: `&mut Transaction<Postgres>` (the job exists iff the
/// transaction commits), `&PgPool` (committed when the call returns) or
/// `&mut PgConnection`.
///
/// Implemented for exactly these three; it tells the enqueue how to send its
/// wake-up NOTIFY (inside the transaction, or coalesced after an autocommit).
pub trait EnqueueTarget<'c>: Acquire<'c, Database = Postgres> + Send + 'c {
    /// The pool, when the enqueue commits on return (autocommit on a pool).
    #[doc(hidden)]
    fn autocommit_pool(&self) -> Option<PgPool> {
        None
    }
}

impl<'c> EnqueueTarget<'c> for &'c PgPool {
    fn autocommit_pool(&self) -> Option<PgPool> {
        Some((*self).clone())
    }
}

impl<'c, 't> EnqueueTarget<'c> for &'c mut Transaction<'t, Postgres> {}

impl<'c> EnqueueTarget<'c> for &'c mut PgConnection {}
