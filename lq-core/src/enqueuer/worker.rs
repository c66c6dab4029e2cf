//! One connection of an [`super::Enqueuer`]: takes every call waiting when it is
//! free, sends the ones without a unique key in one statement, the rest alone.

use std::{
    collections::BTreeSet,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use sqlx::{postgres::PgConnectOptions, Connection, PgConnection, PgPool};
use tokio::sync::{mpsc, Mutex};

use super::{Call, Done, Work};
use crate::{db, enqueue::insert_one, notify, Enqueued, Error};

/// `application_name` of the connections, unless the pool's options set one.
pub(super) const APP_NAME: &str = "lq-enqueuer";

/// A connection unused this long is closed (the next call opens one again).
const IDLE: Duration = Duration::from_secs(30);

/// Bound on each statement, connecting included; the connection is dropped after.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Most jobs in one shared statement: the bulk insert's own batch size.
const MAX_SHARED_ROWS: usize = 1_000;

/// Most payload bytes in one shared statement, so a burst of large payloads is
/// split over several statements rather than sent as one huge one.
const MAX_SHARED_BYTES: usize = 4 << 20;

pub(super) struct Worker {
    waiting: Arc<Mutex<mpsc::Receiver<Call>>>,
    opts: PgConnectOptions,
    pool: PgPool,
    alive: Arc<AtomicUsize>,
    conn: Option<PgConnection>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Worker {
    pub(super) fn new(
        waiting: Arc<Mutex<mpsc::Receiver<Call>>>,
        opts: PgConnectOptions,
        pool: PgPool,
        alive: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            waiting,
            opts,
            pool,
            alive,
            conn: None,
        }
    }

    /// Serves calls until every handle to the enqueuer is gone.
    pub(super) async fn run(mut self) {
        loop {
            match tokio::time::timeout(IDLE, self.next_calls()).await {
                Ok(Some(calls)) => {
                    self.serve(calls).await;
                    // The callers just answered were woken on this thread: let
                    // them run first, so that their next calls, if they make any
                    // at once, are queued by the time this worker looks again.
                    tokio::task::yield_now().await;
                }
                Ok(None) => break,
                Err(_) => self.close().await,
            }
        }
        self.close().await;
    }

    /// The first call to arrive, with every call queued behind it (up to the
    /// shared statement's bounds); `None` once the enqueuer is dropped.
    async fn next_calls(&self) -> Option<Vec<Call>> {
        let mut waiting = self.waiting.lock().await;
        let first = waiting.recv().await?;
        let mut bytes = first.payload_bytes();
        let mut calls = vec![first];
        while calls.len() < MAX_SHARED_ROWS && bytes < MAX_SHARED_BYTES {
            let Ok(call) = waiting.try_recv() else { break };
            bytes += call.payload_bytes();
            calls.push(call);
        }
        Some(calls)
    }

    async fn serve(&mut self, calls: Vec<Call>) {
        let (mut shared, alone): (Vec<Call>, Vec<Call>) = calls
            .into_iter()
            // A caller that gave up (timed out, dropped its future) before its
            // job was sent does not get it written behind its back.
            .filter(|call| !call.reply.is_closed())
            .partition(|call| matches!(call.work, Work::One { key: None, .. }));
        match shared.len() {
            0 => {}
            1 => self.serve_alone(shared.pop().expect("one call")).await,
            _ => self.serve_shared(shared).await,
        }
        for call in alone {
            self.serve_alone(call).await;
        }
    }

    /// Jobs without a unique key, several in one statement.
    async fn serve_shared(&mut self, calls: Vec<Call>) {
        let jobs: Vec<_> = calls.iter().map(|call| call.work.one()).collect();
        let rows: Vec<_> = jobs.iter().map(|(job, _)| job.new_job()).collect();
        let payloads: Vec<&str> = jobs.iter().map(|(_, payload)| *payload).collect();
        let woken: BTreeSet<&str> = jobs
            .iter()
            .filter(|(job, _)| job.wake)
            .map(|(job, _)| job.queue.as_str())
            .collect();
        let woken: Vec<String> = woken.into_iter().map(str::to_owned).collect();
        let inserted = db::timed("job_insert_rows", STATEMENT_TIMEOUT, async {
            let conn = self.conn().await?;
            db::enqueue::job_insert_rows(conn, &rows, &payloads).await
        })
        .await;
        match inserted {
            Ok(ids) if ids.len() == calls.len() => {
                for queue in &woken {
                    notify::poke(&self.pool, queue);
                }
                for (call, id) in calls.into_iter().zip(ids) {
                    let _ = call.reply.send(Ok(Done::One(Enqueued {
                        id,
                        existing: false,
                    })));
                }
            }
            Ok(ids) => {
                let reason = format!(
                    "one statement returned {} ids for {} jobs",
                    ids.len(),
                    calls.len()
                );
                fail_all(calls, "job_insert_rows", reason);
            }
            // The server refused the statement, so none of it was written: each
            // job on its own tells its caller whether it was the one refused.
            Err(e) if refused_by_server(&e) => {
                tracing::debug!(error = %crate::chain(&e), jobs = calls.len(), "shared enqueue refused; one job at a time");
                for call in calls {
                    self.serve_alone(call).await;
                }
            }
            Err(e) => {
                self.conn = None;
                let reason = crate::chain(&e).to_string();
                fail_all(calls, "job_insert_rows", reason);
            }
        }
    }

    /// One job (its own statement, with the unique-key lookup) or one batch.
    async fn serve_alone(&mut self, call: Call) {
        let done = db::timed("job_insert", STATEMENT_TIMEOUT, async {
            let conn = self.conn().await?;
            match &call.work {
                Work::One { job, payload, key } => {
                    insert_one(conn, &job.new_job(), payload, key.as_deref())
                        .await
                        .map(Done::One)
                }
                Work::Many {
                    job,
                    payloads,
                    keys,
                } => db::enqueue::job_insert_many(conn, &job.new_job(), payloads, keys)
                    .await
                    .map(Done::Many),
            }
        })
        .await;
        match &done {
            Ok(outcome) => {
                let job = match &call.work {
                    Work::One { job, .. } | Work::Many { job, .. } => job,
                };
                let inserted = match outcome {
                    Done::One(e) => !e.existing,
                    Done::Many(ids) => !ids.is_empty(),
                };
                if job.wake && inserted {
                    notify::poke(&self.pool, &job.queue);
                }
            }
            Err(e) if refused_by_server(e) => {}
            Err(_) => self.conn = None,
        }
        let _ = call.reply.send(done);
    }

    /// The connection, opened if there is none.
    async fn conn(&mut self) -> Result<&mut PgConnection, Error> {
        if self.conn.is_none() {
            let conn = PgConnection::connect_with(&self.opts)
                .await
                .map_err(db::err("enqueuer_connect"))?;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    async fn close(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _ = tokio::time::timeout(STATEMENT_TIMEOUT, conn.close()).await;
        }
    }
}

impl Call {
    fn payload_bytes(&self) -> usize {
        match &self.work {
            Work::One { payload, .. } => payload.len(),
            Work::Many { payloads, .. } => payloads.iter().map(String::len).sum(),
        }
    }
}

impl Work {
    /// The job and payload of a single-job call.
    fn one(&self) -> (&super::OwnedJob, &str) {
        match self {
            Work::One { job, payload, .. } => (job, payload),
            Work::Many { .. } => unreachable!("only single jobs share a statement"),
        }
    }
}

/// Whether the server answered with an error, leaving the connection usable and
/// nothing of the statement written (as opposed to a lost or timed-out answer).
/// A connection failure reported by the server (SQLSTATE class 08, or 57P: the
/// server shutting down or the backend terminated) is neither.
fn refused_by_server(e: &Error) -> bool {
    matches!(e, Error::UniqueKeyContended { .. })
        || db::sqlstate(e).is_some_and(|code| !code.starts_with("08") && !code.starts_with("57P"))
}

/// Fails every call of a shared statement whose outcome is unknown.
fn fail_all(calls: Vec<Call>, op: &'static str, reason: String) {
    for call in calls {
        let _ = call.reply.send(Err(Error::EnqueuerFailed {
            op,
            reason: reason.clone(),
        }));
    }
}
