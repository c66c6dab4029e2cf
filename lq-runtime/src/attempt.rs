//! One attempt of a job, independent of how it was claimed: decoding and running
//! the handler to an [`Outcome`], the delay before a retry, and the fenced
//! [`Write`] that records a failure. The runtime's executor and the testing
//! helpers' in-task runner share it, so a test sees the production rules.

use std::{panic::AssertUnwindSafe, time::Duration};

use futures_util::FutureExt;
use lq_core::{
    chain, db, db::claim::ClaimedJob, AppState, ContextParts, Error, Failure, JobContext,
    JobDescriptor, JobState,
};
use tokio_util::sync::CancellationToken;
use tracing::error;
use uuid::Uuid;

/// How one attempt ended, before it is written down.
pub(crate) enum Outcome {
    Succeeded,
    Failed(Failure),
    Panicked(String),
    /// A panic on the job's path outside its handler: decoding it, computing its
    /// backoff, or in the runtime itself. The job ends `dead`.
    PanickedOutside(String),
    TimedOut(Duration),
    Undecodable(String),
    /// The runtime stopped the handler at the end of the shutdown grace period.
    Stopped,
}

/// The kinds this binary can run (a `Perform` is linked in), and each one's
/// lease in seconds, in the same order: what a claim asks for.
pub(crate) fn claimable(runnable: &[&'static JobDescriptor]) -> (Vec<String>, Vec<f64>) {
    runnable
        .iter()
        .map(|d| (d.kind.to_owned(), d.options.lease.as_secs_f64()))
        .unzip()
}

/// The context a handler sees for the attempt `job` stands for.
pub(crate) fn context(
    desc: &'static JobDescriptor,
    queue: String,
    job: &ClaimedJob,
    cancel: CancellationToken,
    state: AppState,
) -> JobContext {
    JobContext::new(
        ContextParts {
            id: job.id,
            kind: desc.kind,
            queue,
            attempt: job.attempts.max(0) as u32,
            max_attempts: job.max_attempts.max(1) as u32,
            run_at: job.run_at,
            created_at: job.created_at,
            meta: job.meta.clone(),
            lease_token: job.lease_token,
        },
        cancel,
        state,
    )
}

/// Decodes the payload and runs the handler to an [`Outcome`].
pub(crate) async fn perform(
    hard_stop: &CancellationToken,
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
    // A user's `Deserialize` may panic: that is bad input, not a crash.
    let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| handler(&job.payload, ctx)));
    let fut = match decoded {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => {
            // Without the values serde quotes: the reason is shown to every
            // reader, whatever the dashboard redacts.
            return Outcome::Undecodable(format!(
                "payload does not deserialise into {}: {}",
                desc.type_name,
                crate::decode_error::without_values(&e.to_string())
            ));
        }
        Err(panic) => {
            return Outcome::Undecodable(format!(
                "decoding the payload into {} panicked: {}",
                desc.type_name,
                panic_message(panic.as_ref())
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
        _ = hard_stop.cancelled() => {
            cancel.cancel();
            Outcome::Stopped
        }
    }
}

/// The fenced write that records one outcome.
pub(crate) enum Write {
    /// Queued again after `retry_secs`, or `dead` when that is `None` or the
    /// attempts are spent; `text` is stored as the attempt's error.
    Fail {
        text: String,
        retry_secs: Option<f64>,
    },
    Snooze(f64),
    Cancel(String),
}

impl Write {
    pub(crate) fn of(outcome: &Outcome, retry_in: Option<Duration>) -> Self {
        let retry = Some(retry_in.unwrap_or_default().as_secs_f64());
        let fail = |text: String, retry_secs| Write::Fail { text, retry_secs };
        match outcome {
            Outcome::Failed(Failure::Retry(e)) => fail(chain(e.as_ref()), retry),
            Outcome::Panicked(msg) => fail(format!("panicked: {msg}"), retry),
            Outcome::TimedOut(t) => fail(format!("timed out after {t:?}"), retry),
            Outcome::Failed(Failure::Permanent(e)) => {
                fail(format!("permanent: {}", chain(e.as_ref())), None)
            }
            Outcome::Undecodable(msg) => fail(msg.clone(), None),
            Outcome::PanickedOutside(msg) => fail(
                format!("panicked outside its handler (decoding, backoff or runtime): {msg}"),
                None,
            ),
            Outcome::Failed(Failure::Snooze(d)) => Write::Snooze(bounded(*d).as_secs_f64()),
            Outcome::Failed(Failure::Cancel(reason)) => {
                Write::Cancel(format!("cancelled: {reason}"))
            }
            Outcome::Failed(_) => fail("unrecognised failure".to_owned(), Some(1.0)),
            Outcome::Succeeded | Outcome::Stopped => fail("no failure".to_owned(), retry),
        }
    }

    /// The same write with a short fixed reason in place of the error text that
    /// `refused` says the database would not store; `None` when it has no text to
    /// replace, or already is the fixed one.
    pub(crate) fn with_fixed_reason(&self, refused: &Error) -> Option<Self> {
        let code = db::sqlstate(refused).unwrap_or_else(|| "?".to_owned());
        let fixed = format!("error text not stored: the database refused it (SQLSTATE {code})");
        match self {
            Write::Fail { text, retry_secs } if *text != fixed => Some(Write::Fail {
                text: fixed,
                retry_secs: *retry_secs,
            }),
            Write::Cancel(text) if *text != fixed => Some(Write::Cancel(fixed)),
            _ => None,
        }
    }

    pub(crate) async fn run(
        &self,
        conn: &mut sqlx::PgConnection,
        id: i64,
        token: Uuid,
    ) -> Result<Option<JobState>, Error> {
        match self {
            Write::Fail { text, retry_secs } => {
                db::finish::job_fail(conn, id, token, text, *retry_secs).await
            }
            Write::Snooze(secs) => db::finish::job_snooze(conn, id, token, *secs).await,
            Write::Cancel(reason) => {
                let ok = db::finish::job_cancel_own(conn, id, token, reason).await?;
                Ok(ok.then_some(JobState::Cancelled))
            }
        }
    }

    /// The stored error text, as stored.
    pub(crate) fn text(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            Write::Fail { text, .. } | Write::Cancel(text) => Some(lq_core::storable_error(text)),
            Write::Snooze(_) => None,
        }
    }
}

/// How soon a failed attempt's job is due again (its backoff, or its snooze).
/// A backoff that panics (a user's `fn`) is replaced by the default one.
pub(crate) fn requeue_delay(
    desc: &JobDescriptor,
    job: &ClaimedJob,
    outcome: &Outcome,
) -> Option<Duration> {
    match outcome {
        Outcome::Failed(Failure::Snooze(d)) => Some(bounded(*d)),
        Outcome::Failed(Failure::Retry(_)) | Outcome::Panicked(_) | Outcome::TimedOut(_) => {
            let attempt = job.attempts.max(1) as u32;
            let delay = std::panic::catch_unwind(|| desc.options.backoff.delay(attempt));
            Some(bounded(delay.unwrap_or_else(|panic| {
                error!(
                    id = job.id,
                    kind = desc.kind,
                    panic = panic_message(panic.as_ref()),
                    "the job's backoff panicked; using the default backoff"
                );
                lq_core::Backoff::default().delay(attempt)
            })))
        }
        _ => None,
    }
}

/// Longest a job is put off by a snooze or a retry's backoff: a hundred years,
/// "never" in practice. A longer delay (`Duration::MAX` meaning "forever") would
/// take the row past PostgreSQL's last timestamp, and the write would be
/// refused, ending the job `dead` with attempts left.
const MOST_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `d`, at most [`MOST_DELAY`].
fn bounded(d: Duration) -> Duration {
    d.min(MOST_DELAY)
}

/// The text of a caught panic's payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
