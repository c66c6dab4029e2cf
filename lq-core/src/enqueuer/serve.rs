//! The statements an [`super::Enqueuer`] sends on a line: one call alone, or the
//! queued calls without a unique key together in one statement.

use std::{collections::BTreeSet, time::Duration};

use super::{lines::Line, Call, Done, Work};
use crate::{db, enqueue::insert_one, notify, Enqueued, Error};

/// `application_name` of the connections, unless the pool's options set one.
pub(super) const APP_NAME: &str = "lq-enqueuer";

/// Bound on each statement, connecting included; the connection is dropped after.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves calls taken off the queue: the ones without a unique key in one
/// statement, the rest alone, each answered on its reply channel.
pub(super) async fn calls(line: &mut Line, calls: Vec<Call>) {
    let (mut shared, alone): (Vec<Call>, Vec<Call>) = calls
        .into_iter()
        // A caller that gave up (timed out, dropped its future) before its
        // job was sent does not get it written behind its back.
        .filter(|call| !call.reply.is_closed())
        .partition(|call| matches!(call.work, Work::One { key: None, .. }));
    match shared.len() {
        0 => {}
        1 => answer_alone(line, shared.pop().expect("one call")).await,
        _ => shared_statement(line, shared).await,
    }
    for call in alone {
        answer_alone(line, call).await;
    }
}

/// Jobs without a unique key, several in one statement.
async fn shared_statement(line: &mut Line, calls: Vec<Call>) {
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
        let conn = line.conn().await?;
        db::enqueue::job_insert_rows(conn, &rows, &payloads).await
    })
    .await;
    match inserted {
        Ok(ids) if ids.len() == calls.len() => {
            line.settled();
            for queue in &woken {
                notify::poke(line.pool(), queue);
            }
            for (call, id) in calls.into_iter().zip(ids) {
                let _ = call.reply.send(Ok(Done::One(Enqueued {
                    id,
                    existing: false,
                })));
            }
        }
        Ok(ids) => {
            line.settled();
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
            line.settled();
            tracing::debug!(error = %crate::chain(&e), jobs = calls.len(), "shared enqueue refused; one job at a time");
            for call in calls {
                answer_alone(line, call).await;
            }
        }
        Err(e) => {
            line.discard();
            let reason = crate::chain(&e).to_string();
            fail_all(calls, "job_insert_rows", reason);
        }
    }
}

/// [`alone`], answered on the call's reply channel.
async fn answer_alone(line: &mut Line, call: Call) {
    let done = alone(line, &call.work).await;
    let _ = call.reply.send(done);
}

/// One job (its own statement, with the unique-key lookup) or one batch, then
/// the wake-up NOTIFY if it wrote a due job.
pub(super) async fn alone(line: &mut Line, work: &Work) -> Result<Done, Error> {
    let done = db::timed("job_insert", STATEMENT_TIMEOUT, async {
        let conn = line.conn().await?;
        match work {
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
            line.settled();
            let job = match work {
                Work::One { job, .. } | Work::Many { job, .. } => job,
            };
            let inserted = match outcome {
                Done::One(e) => !e.existing,
                Done::Many(ids) => !ids.is_empty(),
            };
            if job.wake && inserted {
                notify::poke(line.pool(), &job.queue);
            }
        }
        Err(e) if refused_by_server(e) => line.settled(),
        Err(_) => line.discard(),
    }
    done
}

impl Call {
    pub(super) fn payload_bytes(&self) -> usize {
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
