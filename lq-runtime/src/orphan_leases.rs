//! Leases this runtime may hold on jobs it will not run. A claim whose
//! connection broke (or whose bound ran out) as it committed leased jobs the
//! runtime never received; a hand-back that got no answer may not have
//! committed. No handler runs those jobs and no heartbeat renews their leases,
//! so they would wait the lease out, and the rescuer would then count an attempt
//! that never ran (a job with one attempt left would end `dead`). The runtime
//! minted their lease tokens, so this duty hands back any job still holding
//! one, its attempt unspent, trying until the lease would have expired anyway.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use lq_core::{chain, db, Error};
use tokio::{sync::Notify, time::Instant};
use tracing::{debug, warn};
use uuid::Uuid;

use crate::{shared::Shared, stats::Stats, tally::Recorded};

/// How often the hand-back is tried while such leases may be held. A claim
/// that did commit is usually found at the first try; the later tries are for
/// a commit that lands after the runtime stopped waiting for it, or a server
/// that was out of reach.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// The lease tokens waiting for their jobs to be handed back.
#[derive(Default)]
pub(crate) struct OrphanLeases {
    pending: Mutex<Vec<Pending>>,
    added: Notify,
}

/// The tokens of one claim or hand-back that got no answer.
struct Pending {
    queue: String,
    tokens: Vec<Uuid>,
    /// When any lease they took, counted from a commit at the latest moment, has
    /// expired: the rescuer's from then on.
    until: Instant,
}

/// Whether a statement that failed with `e` may still have committed: the
/// server sent no error (the connection broke, the runtime's bound ran out), or
/// sent one that ends the session (class 08, or 57P: the server shutting down).
pub(crate) fn may_have_committed(e: &Error) -> bool {
    db::sqlstate(e).is_none_or(|s| s.starts_with("08") || s.starts_with("57P"))
}

/// Records that `tokens`, sent on `queue` by a statement that got no answer,
/// may lease jobs this runtime will not run: until the longest lease, from a
/// commit as late as the statement's bound allows, has run out.
pub(crate) fn record(shared: &Shared, queue: &str, tokens: Vec<Uuid>) {
    let longest = shared.lease_secs.iter().copied().fold(0.0, f64::max);
    let window = Duration::from_secs_f64(longest) + 2 * shared.config.db_timeout;
    shared.orphan_leases.add(queue, tokens, window);
}

impl OrphanLeases {
    /// Keeps `tokens` for `window` from now, and wakes the duty.
    fn add(&self, queue: &str, tokens: Vec<Uuid>, window: Duration) {
        if tokens.is_empty() {
            return;
        }
        self.pending.lock().expect("not poisoned").push(Pending {
            queue: queue.to_owned(),
            tokens,
            until: Instant::now() + window,
        });
        self.added.notify_one();
    }

    /// The tokens to try now; those past their window are dropped.
    fn due(&self) -> Vec<(String, Vec<Uuid>)> {
        let now = Instant::now();
        let mut pending = self.pending.lock().expect("not poisoned");
        pending.retain(|p| p.until > now);
        pending
            .iter()
            .map(|p| (p.queue.clone(), p.tokens.clone()))
            .collect()
    }

    /// Forgets `tokens`: the jobs they leased are back.
    fn settled(&self, tokens: &[Uuid]) {
        let mut pending = self.pending.lock().expect("not poisoned");
        pending.retain(|p| p.tokens != tokens);
    }

    fn any(&self) -> bool {
        !self.pending.lock().expect("not poisoned").is_empty()
    }
}

/// Hands back the jobs of orphan leases until the runtime stops, with one last
/// try then.
pub(crate) async fn run(shared: Arc<Shared>) {
    loop {
        tokio::select! {
            _ = shared.orphan_leases.added.notified() => {}
            _ = shared.stopping.cancelled() => {
                hand_back(&shared).await;
                return;
            }
        }
        while hand_back(&shared).await {
            if shared.pause(RETRY_EVERY).await {
                hand_back(&shared).await;
                return;
            }
        }
    }
}

/// One try for every set of tokens still in its window; true while any is left.
async fn hand_back(shared: &Shared) -> bool {
    for (queue, tokens) in &shared.orphan_leases.due() {
        let released = shared
            .with_conn("job_release_unanswered", |mut conn| async move {
                let jobs = db::finish::job_release_unanswered(&mut conn, tokens).await?;
                if !jobs.is_empty() {
                    // Only a wake-up: the jobs are back whether or not it is sent.
                    let wake =
                        db::enqueue::queues_notify(&mut *conn, std::slice::from_ref(queue)).await;
                    if let Err(e) = wake {
                        debug!(queue, error = %chain(&e), "no wake-up for jobs handed back");
                    }
                }
                Ok(jobs)
            })
            .await;
        match released {
            Ok(jobs) if jobs.is_empty() => {}
            Ok(jobs) => {
                warn!(
                    queue,
                    jobs = jobs.len(),
                    "jobs leased by a statement that got no answer are back in the queue, their attempt unspent"
                );
                Stats::add(&shared.stats.released, jobs.len() as u64);
                for (_, kind) in &jobs {
                    if let Some(t) = shared.tallies.get(queue, kind) {
                        t.finished(Recorded::Released);
                    }
                }
                shared.orphan_leases.settled(tokens);
            }
            Err(e) => {
                debug!(queue, error = %chain(&e), "could not hand back jobs leased by a statement that got no answer; trying again");
            }
        }
    }
    shared.orphan_leases.any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_kept_for_their_window_until_their_jobs_are_back() {
        let orphans = OrphanLeases::default();
        let (a, b) = (vec![Uuid::new_v4(), Uuid::new_v4()], vec![Uuid::new_v4()]);
        orphans.add("q", a.clone(), Duration::from_secs(60));
        orphans.add("r", b.clone(), Duration::from_secs(60));
        orphans.add("q", Vec::new(), Duration::from_secs(60)); // nothing to find
        assert_eq!(
            orphans.due(),
            vec![("q".to_owned(), a.clone()), ("r".to_owned(), b.clone())]
        );
        orphans.settled(&a);
        assert_eq!(orphans.due(), vec![("r".to_owned(), b)]);
        assert!(orphans.any());
    }

    #[test]
    fn tokens_past_their_window_are_the_rescuers() {
        let orphans = OrphanLeases::default();
        orphans.add("q", vec![Uuid::new_v4()], Duration::ZERO);
        assert!(orphans.due().is_empty());
        assert!(!orphans.any());
    }

    #[test]
    fn an_answer_that_never_came_may_hide_a_commit() {
        let timed_out = Error::Timeout {
            op: "job_claim",
            after: Duration::from_secs(10),
        };
        assert!(may_have_committed(&timed_out));
        let broken = Error::Database {
            op: "job_claim",
            source: sqlx::Error::Io(std::io::Error::other("connection reset")),
        };
        assert!(may_have_committed(&broken));
    }
}
