//! One claim within the queue's claim slots (`RuntimeConfig::claim_slots`): the
//! claims of a queue take turns across every runtime, so they do not lock each
//! other's rows (see `lq_core::db::claim::job_claim_gated`).

use std::sync::atomic::Ordering;

use lq_core::{
    db,
    db::claim::{ClaimSpec, ClaimedJob, GatedClaim, Limited, Turn},
    Error, QueueLimits,
};
use tracing::warn;

use crate::{hot_conn::HotConn, shared::Shared, stats::Stats};

/// What one claim did.
#[derive(Debug)]
pub(crate) enum Claim {
    /// These jobs (fewer than asked, none included, when the queue ran dry).
    Jobs(Vec<ClaimedJob>),
    /// A second claim found every slot taken and claimed nothing; the queue is
    /// not known to be dry.
    Throttled,
    /// These jobs, and a limit across runtimes stopped the claim, so ready
    /// jobs may be left: the queue's global limit is reached (`at_limit`: claim
    /// again once a running job of the queue finishes), or its rate limit's
    /// bucket is empty (claim again after `next_token`).
    Limited {
        jobs: Vec<ClaimedJob>,
        at_limit: bool,
        next_token: Option<std::time::Duration>,
    },
}

/// Claims up to `limit` jobs of `queue` on `hot`. With `claim_slots` set, the
/// claim tries a free slot; when the slots are all taken a first claim waits
/// its turn on the server and claims then, trying again when the wait outlasts
/// its bound. A `second` claim (one sent while another of its queue is in
/// flight) never waits: it takes a free slot or claims nothing
/// ([`Claim::Throttled`]), and the first claim's turn serves both. A session
/// waiting for a slot holds a snapshot, which keeps PostgreSQL from marking
/// the index entries of jobs claimed and finished since as dead, so every
/// claim walks past more of them; sixteen runtime processes sending two claims
/// each kept about 24 such waiters (`bench/FINDINGS.md`, stop 59), so a first
/// claim waits in a claim room first, which holds none, and only the room's
/// holder waits for the slot with a snapshot (stop 61). On a
/// borrowed connection (more queues than the runtime keeps connections for)
/// waiting would also hold a connection other queues' claims need, so a first
/// claim there claims without the bound. At shutdown a claim that would wait
/// claims nothing.
///
/// A claim that gets no answer from the server (its connection broke, or its
/// bound ran out) may still have committed: its lease tokens go to
/// [`crate::orphan_leases`], which hands back any jobs they leased.
pub(crate) async fn claim(
    shared: &Shared,
    hot: &mut HotConn,
    (queue, limits): (&str, QueueLimits),
    limit: usize,
    second: bool,
) -> Result<Claim, Error> {
    let tokens = db::claim::mint_lease_tokens(limit)?;
    let spec = ClaimSpec {
        queue,
        kinds: &shared.kinds,
        lease_secs: &shared.lease_secs,
        limit: i64::try_from(limit).unwrap_or(i64::MAX),
        owner: &shared.config.owner,
        tokens: &tokens,
    };
    let mut sent = false;
    let r = if limits.is_none() {
        claim_with(shared, hot, spec, second, &mut sent).await
    } else {
        claim_limited(shared, hot, spec, limits, &mut sent).await
    };
    if let Err(e) = &r {
        if sent && crate::orphan_leases::may_have_committed(e) {
            crate::orphan_leases::record(shared, queue, tokens);
        }
    }
    r
}

/// [`claim`] with its spec and tokens made; sets `sent` once it has a
/// connection to claim on.
async fn claim_with(
    shared: &Shared,
    hot: &mut HotConn,
    spec: ClaimSpec<'_>,
    second: bool,
    sent: &mut bool,
) -> Result<Claim, Error> {
    let t = shared.config.db_timeout;
    let queue = spec.queue;
    let borrowed = !hot.keeps();
    let c = hot.get("job_claim").await?;
    *sent = true;
    let Some(slots) = shared.config.claim_slots else {
        return Ok(Claim::Jobs(db::timed("job_claim", t, spec.claim(c)).await?));
    };
    if borrowed && !second {
        return Ok(Claim::Jobs(db::timed("job_claim", t, spec.claim(c)).await?));
    }
    let mut counted = false;
    loop {
        let gated = db::claim::job_claim_gated(c, spec, slots);
        if let GatedClaim::Claimed(jobs) = db::timed("job_claim", t, gated).await? {
            return Ok(Claim::Jobs(jobs));
        }
        // A second claim never waits (a first claim on a borrowed connection
        // claimed without the bound above).
        if second {
            Stats::add(&shared.stats.throttled_claims, 1);
            crate::telemetry::claim_throttled(queue);
            return Ok(Claim::Throttled);
        }
        if shared.stopping.is_cancelled() {
            return Ok(Claim::Jobs(Vec::new())); // an empty claim reads as a dry queue
        }
        if !counted {
            counted = true; // once per claim, however many turns it waits
            Stats::add(&shared.stats.throttled_claims, 1);
            crate::telemetry::claim_throttled(queue);
        }
        let slot = fastrand::u32(..slots);
        let in_room = shared.claim_rooms.load(Ordering::Relaxed);
        let in_turn =
            db::claim::job_claim_in_turn(c, spec, slot, in_room, t, shared.stopping.cancelled());
        match db::timed("job_claim", t, in_turn).await? {
            Turn::Claimed(jobs) => return Ok(Claim::Jobs(jobs)),
            // The slot stayed taken past the wait's bound: try again.
            Turn::TimedOut => {}
            // Stopping while it waited: nothing claimed; the wait was cut off
            // mid-statement, so its connection goes.
            Turn::GaveUp => {
                hot.discard();
                return Ok(Claim::Jobs(Vec::new()));
            }
            // Refused the room: wait without one from now on, and say why once.
            Turn::NoRoom(e) => {
                if shared.claim_rooms.swap(false, Ordering::Relaxed) {
                    warn!(
                        error = %e,
                        "claims waiting their turn wait without a claim room, holding a \
                         snapshot while they wait: grant update on lq.claim_room_00 to \
                         lq.claim_room_15 to this role (docs/roles.md)"
                    );
                }
            }
        }
    }
}

/// A claim on a queue with a global or a rate limit (sets `sent` as
/// [`claim_with`] does): waits its turn on the queue's limit lock, or with a
/// rate limit alone on its bucket's row (whatever the claim slots), then claims
/// at most the room the limits leave ([`db::claim::job_claim_limited`]), trying
/// again when the wait for the lock outlasts its bound. At shutdown a claim
/// that would wait for the lock claims nothing.
async fn claim_limited(
    shared: &Shared,
    hot: &mut HotConn,
    spec: ClaimSpec<'_>,
    limits: QueueLimits,
    sent: &mut bool,
) -> Result<Claim, Error> {
    let t = shared.config.db_timeout;
    loop {
        if shared.stopping.is_cancelled() {
            return Ok(Claim::Jobs(Vec::new())); // an empty claim reads as a dry queue
        }
        let c = hot.get("job_claim").await?;
        *sent = true;
        let limited = db::claim::job_claim_limited(c, spec, limits, t, shared.stopping.cancelled());
        match db::timed("job_claim", t, limited).await? {
            Limited::Claimed {
                jobs,
                at_limit: false,
                next_token: None,
            } => return Ok(Claim::Jobs(jobs)),
            Limited::Claimed {
                jobs,
                at_limit,
                next_token,
            } => {
                return Ok(Claim::Limited {
                    jobs,
                    at_limit,
                    next_token,
                })
            }
            // The lock stayed taken past the wait's bound: try again.
            Limited::TimedOut => {}
            // Stopping while it waited: nothing claimed; the wait was cut off
            // mid-statement, so its connection goes.
            Limited::GaveUp => {
                hot.discard();
                return Ok(Claim::Jobs(Vec::new()));
            }
        }
    }
}
