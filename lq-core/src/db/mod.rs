//! Every SQL statement litequeue runs, as typed functions named noun-verb.
//!
//! The rest of the code never writes SQL. Each function takes a connection (or an
//! executor) and maps driver errors to [`Error::Database`] naming the statement.
//! Callers bound each call with [`timed`].

use std::{future::Future, time::Duration};

use crate::Error;

/// The opening CTE of every batch write fenced by lease tokens: it finds the rows
/// by primary key (`id = any($1)`), keeps those whose current token is one of
/// `$2` (exact fencing, since every claim mints a fresh random token), and locks
/// them in id order, so two batches of one worker (heartbeat, completions,
/// hand-back) can never deadlock.
macro_rules! held_rows {
    () => {
        "with held as materialized (
             select j.id from lq.jobs j
             where j.id = any($1::bigint[]) and j.lease_token = any($2::uuid[])
             order by j.id
             for update of j
         )"
    };
}

pub mod claim;
pub mod control;
pub mod cron;
pub mod enqueue;
pub mod finish;
pub mod lease;
pub mod maintenance;
pub mod migration;

/// Name of the NOTIFY channel whose payload is a queue name with new work.
pub const JOBS_CHANNEL: &str = "lq_jobs";
/// Name of the NOTIFY channel whose payload is the id of a job being cancelled.
pub const CANCEL_CHANNEL: &str = "lq_cancel";

/// Maps a driver error to [`Error::Database`] for statement `op`.
pub fn err(op: &'static str) -> impl Fn(sqlx::Error) -> Error {
    move |source| Error::Database { op, source }
}

/// Runs `fut`, failing with [`Error::Timeout`] after `after`.
pub async fn timed<T>(
    op: &'static str,
    after: Duration,
    fut: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(after, fut).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout { op, after }),
    }
}
