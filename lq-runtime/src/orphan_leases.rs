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

use crate::{shared::Shared, stats::Stats};

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
/// may lease jobs this runtime will not run.
pub(crate) fn record(shared: &Shared, queue: &str, tokens: Vec<Uuid>) {
    if tokens.is_empty() {
        return;
    }
    let longest = shared.lease_secs.iter().copied().fold(0.0, f64::max);
    let window = Duration::from_secs_f64(longest) + 2 * shared.config.db_timeout;
    let orphans = &shared.orphan_leases;
    orphans.pending.lock().expect("not poisoned").push(Pending {
        queue: queue.to_owned(),
        tokens,
        until: Instant::now() + window,
    });
    orphans.added.notify_one();
}

impl OrphanLeases {
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
                let ids = db::finish::job_release_unanswered(&mut conn, tokens).await?;
                if !ids.is_empty() {
                    // Only a wake-up: the jobs are back whether or not it is sent.
                    let wake =
                        db::enqueue::queues_notify(&mut *conn, std::slice::from_ref(queue)).await;
                    if let Err(e) = wake {
                        debug!(queue, error = %chain(&e), "no wake-up for jobs handed back");
                    }
                }
                Ok(ids)
            })
            .await;
        match released {
            Ok(ids) if ids.is_empty() => {}
            Ok(ids) => {
                warn!(
                    queue,
                    jobs = ids.len(),
                    "jobs leased by a statement that got no answer are back in the queue, their attempt unspent"
                );
                Stats::add(&shared.stats.released, ids.len() as u64);
                shared.orphan_leases.settled(tokens);
            }
            Err(e) => {
                debug!(queue, error = %chain(&e), "could not hand back jobs leased by a statement that got no answer; trying again");
            }
        }
    }
    shared.orphan_leases.any()
}
