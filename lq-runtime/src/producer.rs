//! One claimer per queue: takes batches of ready jobs while the queue has free slots,
//! and, while its handlers outpace it, some jobs ahead of them (`claim_ahead`).

use std::sync::Arc;

use lq_core::db;
use tracing::{debug, warn, Instrument};

use crate::{
    claim_ahead::ClaimAhead, executor, hot_conn::HotConn, shared::retry_delay, shared::Shared,
    slots::Slots, stats::Stats, wake::QueueWake,
};

/// Claims jobs for `queue` until the runtime stops. `slots` bounds how many of its
/// jobs run and are leased at once; each claim asks for at most the idle handlers
/// plus the claim-ahead allowance, and never more than the free leases.
pub(crate) async fn run(shared: Arc<Shared>, queue: String, slots: Slots, wake: Arc<QueueWake>) {
    let mut conn = HotConn::new(shared.hot_pool.clone(), shared.keep_claim_conns);
    let mut ahead = ClaimAhead::new(slots.concurrency(), slots.most_ahead());
    let mut failures = 0u32;
    let queue_name: Arc<str> = Arc::from(queue.as_str());
    let metrics = crate::telemetry::ClaimMetrics::new(&queue);
    loop {
        if shared.stopping.is_cancelled() {
            return;
        }
        let free = slots.free();
        if free == 0 {
            // Wait for a slot, then look again.
            tokio::select! {
                _ = slots.wait_free() => {}
                _ = shared.stopping.cancelled() => return,
            }
            continue;
        }
        let limit = slots
            .claimable(ahead.extra())
            .min(shared.config.max_claim_batch);
        let began = std::time::Instant::now();
        let span = crate::telemetry::claim_span(&queue, limit);
        let claimed = db::timed("job_claim", shared.config.db_timeout, async {
            db::claim::job_claim(
                conn.get("job_claim").await?,
                &queue,
                &shared.kinds,
                &shared.lease_secs,
                limit as i64,
                &shared.config.owner,
            )
            .await
        })
        .instrument(span.clone())
        .await;
        let jobs = match claimed {
            Ok(jobs) => {
                conn.done();
                failures = 0;
                jobs
            }
            Err(e) => {
                conn.discard();
                failures += 1;
                warn!(queue, error = %lq_core::chain(&e), "claim failed; retrying");
                if shared.pause(retry_delay(failures)).await {
                    return;
                }
                continue;
            }
        };
        let got = jobs.len();
        span.record("lq.claimed", got);
        metrics.claimed(got, began.elapsed().as_secs_f64());
        Stats::add(&shared.stats.claims, 1);
        if got > 0 {
            let ms = began.elapsed().as_secs_f64() * 1e3;
            debug!(queue, got, limit, ahead = ahead.extra(), ms, "claimed");
            Stats::add(&shared.stats.claimed, got as u64);
        }
        for job in jobs {
            // Only this task takes leases, so the `limit` it claimed are still free.
            let Some(slot) = slots.take() else { return };
            if slot.waits_for_handler() {
                Stats::add(&shared.stats.claimed_ahead, 1);
            }
            executor::spawn(shared.clone(), queue_name.clone(), job, slot);
        }
        if got == limit {
            // A full batch: there may be more ready right now. Let the jobs just
            // spawned start first, so short ones free their slots for this claim.
            tokio::select! {
                _ = slots.all_started() => {}
                _ = shared.stopping.cancelled() => return,
            }
            ahead.after_full_claim(slots.idle_handlers());
            continue;
        }
        ahead.after_partial_claim();
        // The queue has no more work now: wait for a NOTIFY, the idle poller
        // (`poller`) or a retry coming due to say it has.
        tokio::select! {
            _ = wake.wait() => {}
            _ = shared.stopping.cancelled() => return,
        }
    }
}
