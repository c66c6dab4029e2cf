//! One claim within the queue's claim slots (`RuntimeConfig::claim_slots`): the
//! claims of a queue take turns across every runtime, so they do not lock each
//! other's rows (see `lq_core::db::claim::job_claim_gated`).

use lq_core::{
    db,
    db::claim::{ClaimSpec, ClaimedJob, GatedClaim, Turn},
    Error,
};

use crate::{hot_conn::HotConn, shared::Shared, stats::Stats};

/// Claims up to `limit` jobs of `queue` on `hot`. With `claim_slots` set, the
/// claim tries a free slot; when the slots are all taken it waits its turn on
/// the server and claims then, trying again when the wait outlasts its bound. A
/// claimer on a shared connection (more queues than claim connections) claims
/// without the bound, since waiting would hold a connection other queues'
/// claims need. At shutdown a claim that would wait claims nothing.
pub(crate) async fn claim(
    shared: &Shared,
    hot: &mut HotConn,
    queue: &str,
    limit: usize,
) -> Result<Vec<ClaimedJob>, Error> {
    let t = shared.config.db_timeout;
    let spec = ClaimSpec {
        queue,
        kinds: &shared.kinds,
        lease_secs: &shared.lease_secs,
        limit: i64::try_from(limit).unwrap_or(i64::MAX),
        owner: &shared.config.owner,
    };
    let slots = shared.config.claim_slots.filter(|_| hot.keeps());
    let c = hot.get("job_claim").await?;
    let Some(slots) = slots else {
        return db::timed("job_claim", t, spec.claim(c)).await;
    };
    let mut counted = false;
    loop {
        let gated = db::claim::job_claim_gated(c, spec, slots);
        if let GatedClaim::Claimed(jobs) = db::timed("job_claim", t, gated).await? {
            return Ok(jobs);
        }
        if shared.stopping.is_cancelled() {
            return Ok(Vec::new()); // an empty claim reads as a dry queue
        }
        if !counted {
            counted = true; // once per claim, however many turns it waits
            Stats::add(&shared.stats.throttled_claims, 1);
            crate::telemetry::claim_throttled(queue);
        }
        let slot = fastrand::u32(..slots);
        let in_turn = db::claim::job_claim_in_turn(c, spec, slot, t, shared.stopping.cancelled());
        match db::timed("job_claim", t, in_turn).await? {
            Turn::Claimed(jobs) => return Ok(jobs),
            // The slot stayed taken past the wait's bound: try again.
            Turn::TimedOut => {}
            // Stopping while it waited: nothing claimed; the wait was cut off
            // mid-statement, so its connection goes.
            Turn::GaveUp => {
                hot.discard();
                return Ok(Vec::new());
            }
        }
    }
}
