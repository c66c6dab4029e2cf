//! Runs one claimed job: decode, perform (with timeout, panic capture and
//! cancellation), then record the outcome with fenced writes.

use std::{
    panic::AssertUnwindSafe,
    sync::{atomic::AtomicU64, Arc},
    time::Duration,
};

use futures_util::FutureExt;
use lq_core::{chain, db, db::claim::ClaimedJob, Failure, JobState};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn, Instrument};
use uuid::Uuid;

use crate::{
    attempt::{self, panic_message, requeue_delay, Outcome, Write},
    completer::Completion,
    inflight::Held,
    quarantine::{quarantine, Quarantine},
    shared::retry_delay,
    shared::Shared,
    slots::Slot,
    stats::Stats,
    tally::{Recorded, Tally},
};

/// Spawns the task that runs `job` while holding one of its queue's slots.
///
/// A panic anywhere on the job's path (not only in its handler, which is caught
/// closer) ends here: the slot was freed as the panic unwound, and the job is
/// ended `dead` with the panic's message, so no lease outlives its task.
pub(crate) fn spawn(shared: Arc<Shared>, queue: Arc<str>, job: ClaimedJob, slot: Slot) {
    let span = crate::telemetry::job_span(&job, &queue);
    let tracker = shared.executors.clone();
    let (id, token) = (job.id, job.lease_token);
    let attempt = job.attempts;
    let kind = job.kind.clone();
    tracker.spawn(
        async move {
            let ran = AssertUnwindSafe(run(shared.clone(), queue.clone(), job, slot))
                .catch_unwind()
                .await;
            if let Err(panic) = ran {
                let msg = panic_message(panic.as_ref());
                let job = Attempt {
                    id,
                    token,
                    kind: &kind,
                    queue: &queue,
                    attempt,
                };
                let outcome = Outcome::PanickedOutside(msg);
                // The outcome's writer reports a lost lease, not the heartbeat.
                shared.inflight.set_writing(id, token, true);
                Box::pin(record(&shared, job, outcome, None)).await;
                shared.inflight.remove(id, token);
            }
        }
        .instrument(span),
    );
}

/// What the outcome writer needs to know about an attempt.
#[derive(Clone, Copy)]
struct Attempt<'a> {
    id: i64,
    token: Uuid,
    kind: &'a str,
    queue: &'a str,
    attempt: i32,
}

/// One job's attempt, from its slot to its outcome. Every job's task holds this
/// future, and tokio copies a task's future as it spawns it, so the rare paths
/// (a failure's outcome write, a job handed back) are boxed: written inline,
/// their database calls made it 3,776 bytes instead of about 900, and the copies
/// were an eighth of the runtime's CPU in a drain of no-op jobs (the test below
/// holds the size).
async fn run(shared: Arc<Shared>, queue: Arc<str>, job: ClaimedJob, mut slot: Slot) {
    let Some(desc) = shared.registry.get(&job.kind) else {
        // Claims filter on known kinds, so this only happens if the registry changed.
        slot.started();
        warn!(
            kind = job.kind,
            "claimed a job of an unknown kind; handing it back"
        );
        Box::pin(release(
            &shared,
            &queue,
            job.id,
            job.lease_token,
            &shared.stats.released,
            None,
            Wake::Queue,
        ))
        .await;
        return;
    };
    let tally = shared.tallies.get(&queue, desc.kind);
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
            writing: false,
        },
    );
    // Once shutdown has begun, a job whose handler has not started goes back at
    // once, even with a handler free (a claim in flight returned late, or its task
    // first ran after the stop).
    let waited = if shared.stopping.is_cancelled() {
        Waited::Stopping
    } else if slot.waits_for_handler() {
        let held = (job.id, job.lease_token);
        Box::pin(wait_for_handler(
            &shared, &queue, &mut slot, &cancel, held, tally,
        ))
        .await
    } else {
        Waited::Handler
    };
    // A handler freed just as shutdown began may win the wait's race with the
    // stop: the job has still not started, so it goes back all the same.
    let waited = match waited {
        Waited::Handler if shared.stopping.is_cancelled() => Waited::Stopping,
        other => other,
    };
    slot.started();
    if waited == Waited::HandedBack {
        shared.inflight.remove(job.id, job.lease_token);
        return;
    }
    let stopping = waited == Waited::Stopping;
    if stopping || cancel.is_cancelled() {
        // Never started: shutdown hands it back to the queue, its attempt unspent;
        // a cancel requested while it waited ends it `cancelled` without running
        // its handler (the same fenced write decides which, from the row).
        let (counter, recorded) = if stopping {
            (&shared.stats.released, Recorded::Released)
        } else {
            (&shared.stats.cancelled, Recorded::Cancelled)
        };
        let tallied = tally.map(|t| (t, recorded));
        let (id, token) = (job.id, job.lease_token);
        let wake = Wake::Queue;
        Box::pin(release(&shared, &queue, id, token, counter, tallied, wake)).await;
        shared.inflight.remove(job.id, job.lease_token);
        return;
    }
    let ctx = attempt::context(
        desc,
        queue.to_string(),
        &job,
        cancel.clone(),
        shared.state.clone(),
    );
    let wait = (job.started_at - job.run_at)
        .num_microseconds()
        .unwrap_or(0) as f64
        / 1e6;
    if let Some(t) = tally {
        t.started(wait);
    }
    let began = std::time::Instant::now();
    let outcome = attempt::perform(&shared.hard_stop, desc, &job, ctx, &cancel).await;
    if let Some(t) = tally {
        t.returned(began.elapsed().as_secs_f64());
    }
    shared.inflight.set_writing(job.id, job.lease_token, true);
    match outcome {
        Outcome::Succeeded => {
            tracing::Span::current().record("lq.outcome", Recorded::Succeeded.label());
            // Another handler may start; the completer holds the lease (and its
            // share of the queue's lease limit) until its batch is written.
            slot.handler_done();
            let done = Completion {
                id: job.id,
                token: job.lease_token,
                attempt: job.attempts,
                kind: desc.kind,
                queue: queue.clone(),
                slot,
            };
            if shared.completions.send(done).await.is_err() {
                // The completer is gone (runtime torn down): the lease will expire and
                // the job will run again; at-least-once holds.
                shared.inflight.remove(job.id, job.lease_token);
            }
        }
        other => {
            // As for a success: another handler may start while the outcome is
            // written, and the lease (with its share of the queue's lease limit)
            // stays held until the write lands or is given up. A handler held
            // through the write idled a round trip for every failure.
            slot.handler_done();
            let requeued_in = requeue_delay(desc, &job, &other);
            let attempt = Attempt {
                id: job.id,
                token: job.lease_token,
                kind: desc.kind,
                queue: &queue,
                attempt: job.attempts,
            };
            Box::pin(record(&shared, attempt, other, requeued_in)).await;
            if let Some(delay) = requeued_in {
                shared.wake_after(&queue, delay);
            }
            shared.inflight.remove(job.id, job.lease_token);
            drop(slot);
        }
    }
}

/// How a job claimed ahead stopped waiting for a handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waited {
    /// It has one, or a cancel ended the wait (the caller checks which).
    Handler,
    /// Shutdown began: the caller hands it back.
    Stopping,
    /// It waited `claim_ahead_wait`, or its queue was paused, and is back in
    /// the queue, unspent.
    HandedBack,
}

/// Waits for a handler for a job claimed ahead. Claim-ahead saves short jobs a
/// claim's round trip; a job that waits `claim_ahead_wait` finds its handlers
/// busy with longer work, so it goes back to the queue, its attempt unspent:
/// any runtime with a free handler can take it (they are woken), and it no
/// longer risks an attempt should this process die. The queue's claim-ahead
/// stops until a claim grows it again. A job waiting when its queue is paused
/// (`lq_pause`), or given a handler after, goes back the same way: a pause
/// stops the jobs claimed ahead from starting. If that write fails, the job
/// keeps its lease (the heartbeat renews it) and waits on, to try again a wait
/// later.
async fn wait_for_handler(
    shared: &Shared,
    queue: &str,
    slot: &mut Slot,
    cancel: &CancellationToken,
    (id, token): (i64, Uuid),
    tally: Option<&Tally>,
) -> Waited {
    let wake = &shared.wakers[queue];
    // Cleared after a hand-back on pause the database refused: the job then
    // waits and runs as if no pause had been heard of, rather than retrying.
    let mut heed_pause = true;
    loop {
        let paused = tokio::select! {
            _ = slot.wait_for_handler() => {
                if !(heed_pause && wake.is_paused()) {
                    return Waited::Handler;
                }
                true
            }
            _ = shared.stopping.cancelled() => return Waited::Stopping,
            _ = cancel.cancelled() => return Waited::Handler,
            _ = wake.paused(), if heed_pause => true,
            _ = tokio::time::sleep(shared.config.claim_ahead_wait) => false,
        };
        slot.handed_back();
        if paused {
            debug!(id, "the queue was paused; handing a job claimed ahead back");
        } else {
            let waited = shared.config.claim_ahead_wait;
            debug!(
                id,
                ?waited,
                "no handler for a job claimed ahead; handing it back"
            );
        }
        let counter = &shared.stats.released;
        let tallied = tally.map(|t| (t, Recorded::Released));
        // No runtime claims from a paused queue: a wake-up there would be a
        // commit per job for nothing (its resume wakes every runtime).
        let wake = if paused { Wake::Paused } else { Wake::Queue };
        match release(shared, queue, id, token, counter, tallied, wake).await {
            Released::Yes => return Waited::HandedBack,
            // Nothing was written: the job keeps its lease, and waits on.
            Released::Refused => heed_pause = false,
            // It may be back in the queue, and another worker may run it: not
            // here, so it runs twice only if its lease expires first.
            Released::Unknown => {
                warn!(
                    id,
                    "whether the job was handed back is unknown; it is not run here, and returns when its lease expires if it was not"
                );
                return Waited::HandedBack;
            }
        }
    }
}

/// What a hand-back ([`release`]) came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Released {
    /// Written (or the lease was already lost): the job is not this runtime's.
    Yes,
    /// The server refused the write: nothing changed, the lease is held.
    Refused,
    /// No answer (a timeout, a broken connection): it may or may not be written.
    Unknown,
}

/// Tries of one outcome write before it is left to the lease's expiry (about 16 s
/// of backoff in all).
pub(crate) const OUTCOME_TRIES: u32 = 8;

/// Whether a write of an outcome, or the lookup of whether one landed, stops
/// after `failures` failed tries: after [`OUTCOME_TRIES`], or after three once
/// shutdown's grace is over.
pub(crate) fn outcome_tries_spent(shared: &Shared, failures: u32) -> bool {
    failures >= OUTCOME_TRIES || (shared.hard_stop.is_cancelled() && failures >= 3)
}

/// Writes a non-success outcome so that it lands, or the job is at least freed.
///
/// Failures of the connection or server are retried, boundedly. When the database
/// refuses the write itself (see [`db::is_data_rejection`]), it is written again
/// with a short fixed reason instead of the error text, and if that is refused
/// too the job is quarantined (`dead`, the reason as its only error). After
/// [`OUTCOME_TRIES`] the job is left to its lease's expiry: the caller stops
/// renewing it and frees its slot, and the rescuer returns it to the queue.
///
/// `retry_in` is the backoff for outcomes that retry (computed once by the caller,
/// jitter included); `None` there means the attempts are spent and the job is dead.
async fn record(shared: &Shared, job: Attempt<'_>, outcome: Outcome, retry_in: Option<Duration>) {
    let Attempt { id, token, .. } = job;
    if let Outcome::Stopped = outcome {
        let tally = shared
            .tallies
            .get(job.queue, job.kind)
            .map(|t| (t, Recorded::Released));
        let released = &shared.stats.released;
        release(shared, job.queue, id, token, released, tally, Wake::Queue).await;
        return;
    }
    let mut write = Write::of(&outcome, retry_in);
    let mut failures = 0u32;
    // Whether a try went unanswered but may have landed: a later try then
    // finds the lease gone, and asks whether that write was this one.
    let mut unheard = false;
    loop {
        let w = &write;
        let result = shared
            .with_conn("job_finish", |mut conn| async move {
                w.run(&mut conn, id, token).await
            })
            .await;
        let e = match result {
            Ok(Some(state)) => {
                count(shared, job, &outcome, state);
                log_outcome(job, &outcome, &write, state, retry_in);
                return;
            }
            Ok(None) => {
                if unheard {
                    let text = write.text();
                    if let Some(state) =
                        outcome_landed(shared, id, job.attempt, text.as_deref()).await
                    {
                        debug!(id, "the outcome was written; its answer had been lost");
                        count(shared, job, &outcome, state);
                        log_outcome(job, &outcome, &write, state, retry_in);
                        return;
                    }
                }
                Stats::add(&shared.stats.lease_lost, 1);
                tally(shared, job, Recorded::LeaseLost);
                warn!(
                    id,
                    "lease lost before the outcome was written; another worker owns the job"
                );
                return;
            }
            Err(e) => e,
        };
        failures += 1;
        if db::is_data_rejection(&e) {
            if let Some(fixed) = write.with_fixed_reason(&e) {
                warn!(id, error = %chain(&e), "the outcome's error text was refused; writing a short fixed reason instead");
                write = fixed;
                continue;
            }
            let reason = format!(
                "quarantined: its outcome was refused by the database ({}); earlier errors dropped",
                chain(&e)
            );
            match quarantine(shared, id, token, job.attempt, &reason).await {
                Quarantine::Ended => {
                    error!(id, error = %chain(&e), "job quarantined as dead: its outcome was refused");
                    tally(shared, job, Recorded::Dead);
                }
                Quarantine::NotHeld => {
                    Stats::add(&shared.stats.lease_lost, 1);
                    tally(shared, job, Recorded::LeaseLost);
                }
                Quarantine::NotWritten(q) => {
                    error!(id, error = %chain(&q), "could not quarantine the job; it returns to the queue when its lease expires");
                }
            }
            return;
        }
        unheard |= !refused(&e);
        warn!(id, error = %chain(&e), "could not record the outcome; retrying");
        if outcome_tries_spent(shared, failures) {
            error!(id, failures, error = %chain(&e), "gave up recording the outcome; the job returns to the queue when its lease expires");
            return;
        }
        tokio::time::sleep(retry_delay(failures)).await;
    }
}

/// The state an outcome write of attempt `attempt` of job `id` left the job in,
/// when an earlier try of it landed though its answer was lost (see
/// [`db::finish::job_outcome_landed`]; `text` is the error entry the write
/// adds, `None` for a snooze); `None` when it did not, so the lease was lost.
/// The lookup is tried as often as the write ([`outcome_tries_spent`]): the
/// connection that lost one answer may lose the next few (a fault scenario that
/// drops an answer every 20–60 ms lost three lookups in a row); if it never
/// answers, the lease counts as lost.
pub(crate) async fn outcome_landed(
    shared: &Shared,
    id: i64,
    attempt: i32,
    text: Option<&str>,
) -> Option<JobState> {
    let owner = &shared.config.owner;
    let mut failures = 0;
    loop {
        let found = shared
            .with_conn("job_outcome_landed", |mut conn| async move {
                db::finish::job_outcome_landed(&mut conn, id, attempt, owner, text).await
            })
            .await;
        match found {
            Ok(state) => return state,
            Err(e) => {
                failures += 1;
                debug!(id, error = %chain(&e), failures, "could not tell a lost lease from an unheard outcome");
                if outcome_tries_spent(shared, failures) {
                    return None;
                }
                tokio::time::sleep(retry_delay(failures)).await;
            }
        }
    }
}

/// Logs a recorded outcome where an operator looks: a failed attempt at warn, a
/// dead job at error, each with its kind, id, attempt and (capped) error.
fn log_outcome(
    job: Attempt<'_>,
    outcome: &Outcome,
    write: &Write,
    state: JobState,
    retry_in: Option<Duration>,
) {
    let Attempt {
        id, kind, attempt, ..
    } = job;
    let error = write.text().unwrap_or_default();
    match (state, outcome) {
        (JobState::Dead, _) => error!(id, kind, attempt, %error, "job is dead"),
        (JobState::Cancelled, _) => info!(id, kind, attempt, %error, "job cancelled"),
        (_, Outcome::Failed(Failure::Snooze(d))) => {
            debug!(id, kind, attempt, snooze = ?d, "job snoozed")
        }
        _ => {
            warn!(id, kind, attempt, %error, retry_in = ?retry_in.unwrap_or_default(), "attempt failed; job queued for retry")
        }
    }
}

fn count(shared: &Shared, job: Attempt<'_>, outcome: &Outcome, state: JobState) {
    let s = &shared.stats;
    let (counter, recorded) = match (outcome, state) {
        (_, JobState::Dead) => (&s.dead, Recorded::Dead),
        (_, JobState::Cancelled) => (&s.cancelled, Recorded::Cancelled),
        (Outcome::Failed(Failure::Snooze(_)), _) => (&s.snoozed, Recorded::Snoozed),
        (Outcome::TimedOut(_), _) => (&s.retried, Recorded::TimedOut),
        (Outcome::Panicked(_), _) => (&s.retried, Recorded::Panicked),
        _ => (&s.retried, Recorded::Retried),
    };
    Stats::add(counter, 1);
    tally(shared, job, recorded);
    tracing::Span::current().record("lq.outcome", recorded.label());
}

/// Counts `recorded` in the attempt's queue and kind (rollup and metrics).
fn tally(shared: &Shared, job: Attempt<'_>, recorded: Recorded) {
    if let Some(t) = shared.tallies.get(job.queue, job.kind) {
        t.finished(recorded);
    }
}

/// Whether a hand-back wakes the runtimes waiting for work in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// A NOTIFY on the queue's channel, so a free handler elsewhere takes it now.
    Queue,
    /// No wake-up: the queue is paused, so no runtime would claim the job.
    Paused,
}

/// Hands a job back to `queue` without spending its attempt (shutdown, a wait
/// too long for a handler), or ends it `cancelled` when its cancellation was
/// requested; adds one to `counter` when the lease was still held. A job back in
/// the queue wakes the runtimes waiting for work there (a NOTIFY, unless `wake`
/// says the queue is paused), so one with a free handler takes it at once
/// rather than at its next poll. On a failure the job keeps its lease until it
/// expires, if the write did not land.
async fn release(
    shared: &Shared,
    queue: &str,
    id: i64,
    token: Uuid,
    counter: &AtomicU64,
    tally: Option<(&Tally, Recorded)>,
    wake: Wake,
) -> Released {
    // Once the hand-back commits, another worker may claim the job before this
    // runtime drops its entry: the heartbeat must not read that as a lost lease.
    let was_writing = shared.inflight.set_writing(id, token, true);
    let r = shared
        .with_conn("job_release_many", |mut conn| async move {
            let ids = db::finish::job_release_many(&mut conn, &[id], &[token]).await?;
            if !ids.is_empty() && wake == Wake::Queue {
                // Only a wake-up: the job is back whether or not it is sent.
                let wake = db::enqueue::queues_notify(&mut *conn, &[queue.to_owned()]).await;
                if let Err(e) = wake {
                    debug!(id, error = %chain(&e), "no wake-up for a job handed back");
                }
            }
            Ok(ids)
        })
        .await;
    match r {
        Ok(ids) if !ids.is_empty() => {
            Stats::add(counter, 1);
            if let Some((t, recorded)) = tally {
                t.finished(recorded);
            }
        }
        Ok(_) => {
            // The heartbeat stays silent about a job being handed back: say it here.
            warn!(
                id,
                "lease lost before the job was handed back: another worker may run it"
            );
            Stats::add(&shared.stats.lease_lost, 1);
            if let Some((t, _)) = tally {
                t.finished(Recorded::LeaseLost);
            }
        }
        Err(e) => {
            warn!(id, error = %chain(&e), "could not hand the job back; unless it runs here, it returns when its lease expires");
            if refused(&e) {
                // Nothing changed: the lease is held, and the heartbeat speaks for it.
                shared.inflight.set_writing(id, token, was_writing);
                return Released::Refused;
            }
            // If it did not land, the job is handed back once the server answers.
            crate::orphan_leases::record(shared, queue, vec![token]);
            return Released::Unknown;
        }
    }
    Released::Yes
}

/// Whether `e` means the statement changed nothing: no connection was had to
/// send it on, or the server refused it (an error it sent, other than one that
/// ends the session: class 08, a lost connection; 57P, the server shutting
/// down, after which a commit's outcome is not known).
pub(crate) fn refused(e: &lq_core::Error) -> bool {
    // No connection was had from the pool: nothing was sent.
    let never_sent = matches!(
        e,
        lq_core::Error::Database {
            source: sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed,
            ..
        }
    );
    never_sent || !crate::orphan_leases::may_have_committed(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_back_that_got_no_answer_is_not_taken_as_refused() {
        let timed_out = lq_core::Error::Timeout {
            op: "job_release_many",
            after: std::time::Duration::from_secs(10),
        };
        assert!(!refused(&timed_out), "a timeout may have committed");
        let io = lq_core::Error::Database {
            op: "job_release_many",
            source: sqlx::Error::Io(std::io::Error::other("connection reset")),
        };
        assert!(!refused(&io), "a broken connection may have committed");
        let no_connection = lq_core::Error::Database {
            op: "job_release_many",
            source: sqlx::Error::PoolTimedOut,
        };
        assert!(refused(&no_connection), "nothing was sent");
    }

    /// The size of the future `f` returns, without calling it.
    fn future_size<A, B, C, D, F>(_: impl FnOnce(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn a_jobs_task_stays_small() {
        let size = future_size(run);
        assert!(
            size <= 1536,
            "the attempt's future is {size} bytes; box the rare paths that grew it"
        );
    }
}
