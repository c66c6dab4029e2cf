//! The last resort for an attempt whose every write of its outcome the database
//! refused: the job ends `dead` with the refusal as its only error, so its slot
//! and lease are freed and it does not run again.

use lq_core::{chain, db, Error, JobState};
use tracing::{debug, warn};
use uuid::Uuid;

use crate::{
    executor::{outcome_landed, refused, OUTCOME_TRIES},
    shared::{retry_delay, Shared},
    stats::Stats,
};

/// What became of a quarantine.
pub(crate) enum Quarantine {
    /// The job ended `dead` by this write (its answer heard, or found to have
    /// landed after it was lost).
    Ended,
    /// The attempt no longer held the job: its lease was lost.
    NotHeld,
    /// Not written: refused too, or the database did not answer within the
    /// tries. The job returns to the queue when its lease expires.
    NotWritten(Error),
}

/// Ends attempt `attempt` of job `id`, held with `token`, `dead` with `reason`
/// as its only error, and counts it in `quarantined`. Failures of the
/// connection or server are retried as an outcome write's are (at most
/// [`OUTCOME_TRIES`] tries); when a try went unanswered and a later one finds
/// the lease gone, the history tells whether the unanswered one landed
/// ([`db::finish::job_outcome_landed`]: the reason is an entry that only this
/// write adds).
pub(crate) async fn quarantine(
    shared: &Shared,
    id: i64,
    token: Uuid,
    attempt: i32,
    reason: &str,
) -> Quarantine {
    let mut unheard = false;
    let mut failures = 0u32;
    loop {
        let written = shared
            .with_conn("job_quarantine", |mut conn| async move {
                db::finish::job_quarantine(&mut conn, id, Some(token), reason).await
            })
            .await;
        let e = match written {
            Ok(true) => break,
            Ok(false) => {
                if unheard
                    && outcome_landed(shared, id, attempt, Some(reason)).await
                        == Some(JobState::Dead)
                {
                    debug!(id, "the quarantine was written; its answer had been lost");
                    break;
                }
                return Quarantine::NotHeld;
            }
            Err(e) => e,
        };
        failures += 1;
        let stopping = shared.hard_stop.is_cancelled() && failures >= 3;
        if db::is_data_rejection(&e) || failures >= OUTCOME_TRIES || stopping {
            return Quarantine::NotWritten(e);
        }
        unheard |= !refused(&e);
        warn!(id, error = %chain(&e), "could not quarantine the job; retrying");
        tokio::time::sleep(retry_delay(failures)).await;
    }
    Stats::add(&shared.stats.quarantined, 1);
    Quarantine::Ended
}
