//! Runs one claimed job: decode, perform (with timeout, panic capture and
//! cancellation), then record the outcome with fenced writes.

use std::{
    panic::AssertUnwindSafe,
    sync::{atomic::AtomicU64, Arc},
    time::Duration,
};

use futures_util::FutureExt;
use lq_core::{
    chain, db, db::claim::ClaimedJob, Error, Failure, JobContext, JobDescriptor, JobState,
};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};
use uuid::Uuid;

use crate::{
    completer::Completion, inflight::Held, shared::retry_delay, shared::Shared, slots::Slot,
    stats::Stats,
};

/// How one attempt ended, before it is written down.
enum Outcome {
    Succeeded,
    Failed(Failure),
    Panicked(String),
    TimedOut(Duration),
    Undecodable(String),
    /// The runtime stopped the handler at the end of the shutdown grace period.
    Stopped,
}

/// Spawns the task that runs `job` while holding one of its queue's slots.
pub(crate) fn spawn(shared: Arc<Shared>, queue: String, job: ClaimedJob, slot: Slot) {
    let span = tracing::info_span!("job", id = job.id, kind = %job.kind, attempt = job.attempts);
    let tracker = shared.executors.clone();
    tracker.spawn(run(shared, queue, job, slot).instrument(span));
}

async fn run(shared: Arc<Shared>, queue: String, job: ClaimedJob, mut slot: Slot) {
    let Some(desc) = shared.registry.get(&job.kind) else {
        // Claims filter on known kinds, so this only happens if the registry changed.
        slot.started();
        warn!(
            kind = job.kind,
            "claimed a job of an unknown kind; handing it back"
        );
        release(&shared, job.id, job.lease_token, &shared.stats.released).await;
        return;
    };
    let cancel = CancellationToken::new();
    let lease_secs = desc.options.lease.as_secs_f64();
    // Held from here, so the heartbeat renews the lease of a job claimed ahead
    // while it waits for a handler.
    shared.inflight.insert(
        job.id,
        Held {
            token: job.lease_token,
            lease_secs,
            cancel: cancel.clone(),
            handler_returned: false,
        },
    );
    let stopping = slot.waits_for_handler()
        && tokio::select! {
            _ = slot.wait_for_handler() => false,
            _ = shared.stopping.cancelled() => true,
            _ = cancel.cancelled() => false,
        };
    slot.started();
    if stopping || cancel.is_cancelled() {
        // Never started: shutdown hands it back to the queue, its attempt unspent;
        // a cancel requested while it waited ends it `cancelled` without running
        // its handler (the same fenced write decides which, from the row).
        let counter = if stopping {
            &shared.stats.released
        } else {
            &shared.stats.cancelled
        };
        release(&shared, job.id, job.lease_token, counter).await;
        shared.inflight.remove(job.id);
        return;
    }
    let ctx = JobContext::new(
        job.id,
        desc.kind,
        queue.clone(),
        job.attempts.max(0) as u32,
        job.max_attempts.max(1) as u32,
        job.lease_token,
        cancel.clone(),
        shared.state.clone(),
    );
    let outcome = perform(&shared, desc, &job, ctx, &cancel).await;
    shared.inflight.handler_returned(job.id);
    match outcome {
        Outcome::Succeeded => {
            // Another handler may start; the completer holds the lease (and its
            // share of the queue's lease limit) until its batch is written.
            slot.handler_done();
            let done = Completion {
                id: job.id,
                token: job.lease_token,
                slot,
            };
            if shared.completions.send(done).await.is_err() {
                // The completer is gone (runtime torn down): the lease will expire and
                // the job will run again; at-least-once holds.
                shared.inflight.remove(job.id);
            }
        }
        other => {
            let requeued_in = requeue_delay(desc, &job, &other);
            record(&shared, &job, other, requeued_in).await;
            if let Some(delay) = requeued_in {
                shared.wake_after(&queue, delay);
            }
            shared.inflight.remove(job.id);
            drop(slot);
        }
    }
}

/// Decodes the payload and runs the handler to an [`Outcome`].
async fn perform(
    shared: &Shared,
    desc: &'static JobDescriptor,
    job: &ClaimedJob,
    ctx: JobContext,
    cancel: &CancellationToken,
) -> Outcome {
    let Some(handler) = (desc.handler)() else {
        return Outcome::Undecodable(format!(
            "kind {} has no Perform implementation in this binary",
            desc.kind
        ));
    };
    let fut = match handler(&job.payload, ctx) {
        Ok(f) => f,
        Err(e) => {
            return Outcome::Undecodable(format!(
                "payload does not deserialise into {}: {e}",
                desc.type_name
            ))
        }
    };
    let guarded = AssertUnwindSafe(fut).catch_unwind();
    let timeout = desc.options.timeout;
    let attempt = async {
        match timeout {
            Some(t) => tokio::time::timeout(t, guarded).await.ok(),
            None => Some(guarded.await),
        }
    };
    tokio::select! {
        r = attempt => match r {
            None => {
                cancel.cancel();
                Outcome::TimedOut(timeout.unwrap_or_default())
            }
            Some(Ok(Ok(()))) => Outcome::Succeeded,
            Some(Ok(Err(e))) => Outcome::Failed(e.into_failure()),
            Some(Err(panic)) => Outcome::Panicked(panic_message(panic.as_ref())),
        },
        _ = shared.hard_stop.cancelled() => {
            cancel.cancel();
            Outcome::Stopped
        }
    }
}

/// Writes a non-success outcome, retrying database errors until the write lands,
/// the lease is lost, or the runtime gives up at shutdown.
///
/// `retry_in` is the backoff for outcomes that retry (computed once by the caller,
/// jitter included); `None` there means the attempts are spent and the job is dead.
async fn record(shared: &Shared, job: &ClaimedJob, outcome: Outcome, retry_in: Option<Duration>) {
    let (id, token) = (job.id, job.lease_token);
    let retry_secs = Some(retry_in.unwrap_or_default().as_secs_f64());
    if let Outcome::Stopped = outcome {
        release(shared, id, token, &shared.stats.released).await;
        return;
    }
    let mut failures = 0u32;
    let outcome = &outcome;
    loop {
        let result = shared
            .with_conn("job_finish", |mut conn| async move {
                match outcome {
                    Outcome::Failed(Failure::Retry(e)) => {
                        db::finish::job_fail(&mut conn, id, token, &chain(e.as_ref()), retry_secs)
                            .await
                    }
                    Outcome::Panicked(msg) => {
                        db::finish::job_fail(
                            &mut conn,
                            id,
                            token,
                            &format!("panicked: {msg}"),
                            retry_secs,
                        )
                        .await
                    }
                    Outcome::TimedOut(t) => {
                        db::finish::job_fail(
                            &mut conn,
                            id,
                            token,
                            &format!("timed out after {t:?}"),
                            retry_secs,
                        )
                        .await
                    }
                    Outcome::Failed(Failure::Permanent(e)) => {
                        db::finish::job_fail(
                            &mut conn,
                            id,
                            token,
                            &format!("permanent: {}", chain(e.as_ref())),
                            None,
                        )
                        .await
                    }
                    Outcome::Undecodable(msg) => {
                        db::finish::job_fail(&mut conn, id, token, msg, None).await
                    }
                    Outcome::Failed(Failure::Snooze(d)) => {
                        db::finish::job_snooze(&mut conn, id, token, d.as_secs_f64()).await
                    }
                    Outcome::Failed(Failure::Cancel(reason)) => {
                        let ok = db::finish::job_cancel_own(
                            &mut conn,
                            id,
                            token,
                            &format!("cancelled: {reason}"),
                        )
                        .await?;
                        Ok(ok.then_some(JobState::Cancelled))
                    }
                    Outcome::Failed(_) => {
                        db::finish::job_fail(
                            &mut conn,
                            id,
                            token,
                            "unrecognised failure",
                            Some(1.0),
                        )
                        .await
                    }
                    Outcome::Succeeded | Outcome::Stopped => Ok(None),
                }
            })
            .await;
        match result {
            Ok(Some(state)) => {
                count(shared, outcome, state);
                debug!(%state, "attempt recorded");
                return;
            }
            Ok(None) => {
                Stats::add(&shared.stats.lease_lost, 1);
                warn!(
                    id,
                    "lease lost before the outcome was written; another worker owns the job"
                );
                return;
            }
            Err(e) => {
                failures += 1;
                warn!(id, error = %chain(&e), "could not record the outcome; retrying");
                if give_up(shared, failures, &e).await {
                    return;
                }
            }
        }
    }
}

/// How soon a failed attempt's job is due again (its backoff, or its snooze).
fn requeue_delay(desc: &JobDescriptor, job: &ClaimedJob, outcome: &Outcome) -> Option<Duration> {
    match outcome {
        Outcome::Failed(Failure::Snooze(d)) => Some(*d),
        Outcome::Failed(Failure::Retry(_)) | Outcome::Panicked(_) | Outcome::TimedOut(_) => {
            Some(desc.options.backoff.delay(job.attempts.max(1) as u32))
        }
        _ => None,
    }
}

fn count(shared: &Shared, outcome: &Outcome, state: JobState) {
    let s = &shared.stats;
    let counter = match (outcome, state) {
        (_, JobState::Dead) => &s.dead,
        (_, JobState::Cancelled) => &s.cancelled,
        (Outcome::Failed(Failure::Snooze(_)), _) => &s.snoozed,
        _ => &s.retried,
    };
    Stats::add(counter, 1);
}

/// Hands a job back to the queue without spending its attempt (shutdown), or ends
/// it `cancelled` when its cancellation was requested; adds one to `counter` when
/// the lease was still held.
async fn release(shared: &Shared, id: i64, token: Uuid, counter: &AtomicU64) {
    let r = shared
        .with_conn("job_release_many", |mut conn| async move {
            db::finish::job_release_many(&mut conn, &[id], &[token]).await
        })
        .await;
    match r {
        Ok(ids) if !ids.is_empty() => Stats::add(counter, 1),
        Ok(_) => Stats::add(&shared.stats.lease_lost, 1),
        Err(e) => {
            warn!(id, error = %chain(&e), "could not hand the job back; it returns when its lease expires")
        }
    }
}

/// Waits before the next write attempt; true when it is time to stop trying
/// (after shutdown, a failing database is left to the lease expiry).
async fn give_up(shared: &Shared, failures: u32, _e: &Error) -> bool {
    if shared.hard_stop.is_cancelled() && failures >= 3 {
        return true;
    }
    tokio::time::sleep(retry_delay(failures)).await;
    false
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
