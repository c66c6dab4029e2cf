//! One claimer per queue: takes batches of ready jobs while the queue has free slots,
//! and some jobs ahead of its handlers when they would otherwise wait for it
//! (`claim_ahead`), with a second claim in flight beside the first.

use std::{sync::Arc, time::Instant};

use futures_util::{stream::FuturesUnordered, StreamExt};
use lq_core::{Error, QueueLimits};
use tokio::sync::Semaphore;
use tracing::{debug, warn, Instrument};

use crate::{
    claim_ahead::ClaimAhead,
    claim_turns::{self, Claim},
    executor,
    hot_conn::HotConn,
    shared::retry_delay,
    shared::Shared,
    slots::{Reservation, Slots},
    stats::Stats,
    wake::QueueWake,
};

/// One claim's outcome, with what it borrowed: its connection and its leases.
struct Returned {
    conn: Conn,
    reserved: Reservation,
    limit: usize,
    /// Handlers idle when the statement returned: many means the claims, not the
    /// handlers, are the limit.
    idle_at_return: usize,
    /// The queue's finished-handler count when the claim was sent.
    finished_at_send: usize,
    began: Instant,
    span: tracing::Span,
    result: Result<Claim, Error>,
    /// The queue's pauses heard of when the claim was sent.
    pauses_heard: u64,
}

/// Which of the claimer's two connections a claim runs on.
struct Conn {
    hot: HotConn,
    is_second: bool,
}

/// Claims jobs for `queue` until the runtime stops. `slots` bounds how many of its
/// jobs run and are leased at once; each claim asks for at most the idle handlers
/// plus the claim-ahead allowance, less the jobs that already wait for a handler
/// or are being claimed, and never more than the free leases.
///
/// While jobs are claimed ahead (see [`ClaimAhead`]) a second claim of at least
/// half `max_claim_batch` goes out while the first is in flight, on a connection
/// of its own: one claim statement at a time kept one server core busy and left
/// the rest of a small server idle. Claims in flight
/// always run to their end, also at shutdown, so none leaves jobs leased by nobody;
/// and one held up on the server (a lock, a stall) is cancelled there before the
/// client's `db_timeout` gives up on it (`db::statement_timeout_within`), so it never
/// commits behind an abandoned connection. With `claim_slots` set, a claim that
/// finds the queue's slots taken by claims elsewhere waits its turn on the server
/// and claims then (`db::claim::job_claim_in_turn`); at shutdown it claims nothing.
///
/// A queue with `limits` across runtimes (a global limit, a rate limit) claims
/// nothing ahead and sends no second claim; a claim the limits stopped waits
/// for room: a lease of the queue coming free here (or the usual wake-up) under
/// a global limit, the next token's time under a rate limit.
pub(crate) async fn run(
    shared: Arc<Shared>,
    queue: String,
    limits: QueueLimits,
    slots: Slots,
    wake: Arc<QueueWake>,
) {
    let mut main = Some(Conn {
        hot: HotConn::new(shared.hot_pool.clone(), shared.keep_claim_conns),
        is_second: false,
    });
    let mut second = Some(Conn {
        hot: HotConn::new(shared.hot_pool.clone(), shared.keep_overlap_conns),
        is_second: true,
    });
    let mut in_flight = FuturesUnordered::new();
    let mut ahead = ClaimAhead::new(slots.concurrency(), slots.most_ahead());
    let mut failures = 0u32;
    let mut dry = false;
    // The queue's global limit stopped the last claim (and `dry` is set): a
    // job of the queue finishing here makes room as well as a wake-up, seen
    // as more free leases than this.
    let mut at_limit = false;
    let mut lease_floor = 0;
    // The queue's rate limit stopped the last claim (and `dry` is set): no
    // claim before this, whatever wakes the queue meanwhile.
    let mut next_token_at: Option<tokio::time::Instant> = None;
    // A second claim found every claim slot taken (see `claim_turns`).
    let mut second_throttled = false;
    let queue_name: Arc<str> = Arc::from(queue.as_str());
    let metrics = crate::telemetry::ClaimMetrics::new(&queue);
    let max_batch = shared.config.max_claim_batch;
    let mut handed_back = slots.handed_back();
    // After a failed claim no claim goes out before this; a claim still in
    // flight is taken in meanwhile, so its jobs start, heartbeated, at once.
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        if slots.handed_back() != handed_back {
            handed_back = slots.handed_back();
            ahead.after_hand_back();
        }
        let stopping = shared.stopping.is_cancelled();
        let overlapping = !in_flight.is_empty();
        let backing_off = retry_at.filter(|t| tokio::time::Instant::now() < *t);
        if !stopping && !dry && backing_off.is_none() {
            let limit = slots.claimable(ahead.extra()).min(max_batch);
            let conn =
                if limit == 0 || (overlapping && limit < worth_overlapping(&ahead, max_batch)) {
                    None
                } else if main.is_some() {
                    main.take()
                } else if second_throttled {
                    None
                } else {
                    second.take_if(|c| c.hot.ready_now())
                };
            if let Some(conn) = conn {
                if overlapping {
                    Stats::add(&shared.stats.overlapping_claims, 1);
                }
                let reserved = slots.reserve(limit).expect("claimable counts free leases");
                let pauses_heard = wake.pauses_heard();
                in_flight.push(claim(
                    &shared,
                    (&queue, limits),
                    (conn, reserved),
                    limit,
                    &slots,
                    pauses_heard,
                ));
                continue;
            }
        }
        if in_flight.is_empty() {
            if stopping {
                return;
            }
            if let Some(t) = backing_off {
                tokio::select! {
                    _ = tokio::time::sleep_until(t) => {}
                    _ = shared.stopping.cancelled() => return,
                }
                continue;
            }
            tokio::select! {
                // The queue has no more work now: wait for a NOTIFY, the idle poller
                // (`poller`) or a retry coming due to say it has.
                _ = wake.wait(), if dry && next_token_at.is_none() => (dry, at_limit) = (false, false),
                // At the global limit: a job of the queue finished here.
                _ = slots.lease_freed(lease_floor), if at_limit && next_token_at.is_none() => (dry, at_limit) = (false, false),
                // The rate limit's next token is due.
                _ = sleep_until_some(next_token_at) => (dry, at_limit, next_token_at) = (false, false, None),
                // No room: wait for a handler or a lease, then look again.
                _ = slots.wait_free(), if !dry => {}
                _ = shared.stopping.cancelled() => return,
            }
            continue;
        }
        // Jobs claimed ahead starting may make room for a second claim meanwhile.
        let may_open =
            !stopping && !dry && backing_off.is_none() && in_flight.len() < 2 && ahead.extra() > 0;
        let returned = tokio::select! {
            r = in_flight.next() => r.expect("a claim in flight"),
            _ = slots.all_started(), if may_open && slots.has_unstarted() => continue,
        };
        let Returned {
            mut conn,
            mut reserved,
            limit,
            pauses_heard,
            idle_at_return,
            finished_at_send,
            began,
            span,
            result,
        } = returned;
        let finished_meanwhile = slots.finished().wrapping_sub(finished_at_send);
        let mut limited: Option<(bool, Option<std::time::Duration>)> = None;
        let jobs = match result {
            Ok(Claim::Jobs(jobs)) => {
                conn.hot.done();
                failures = 0;
                jobs
            }
            Ok(Claim::Limited {
                jobs,
                at_limit,
                next_token,
            }) => {
                conn.hot.done();
                failures = 0;
                limited = Some((at_limit, next_token));
                // The leases free once the claim's unused ones are back, read
                // before any of its jobs can finish.
                lease_floor = slots.free_leases() + limit.saturating_sub(jobs.len());
                jobs
            }
            Ok(Claim::Throttled) => {
                // Every slot was taken elsewhere: no second claim until this
                // queue's first claim returns, which waits its turn for both.
                conn.hot.done();
                drop(reserved);
                second_throttled = true;
                give_back(&mut main, &mut second, conn);
                continue;
            }
            Err(e) => {
                conn.hot.discard();
                give_back(&mut main, &mut second, conn);
                drop(reserved);
                failures += 1;
                warn!(queue, error = %lq_core::chain(&e), "claim failed; retrying");
                // Another claim still in flight is taken in during the delay: its
                // rows are already leased, and not heartbeated until their jobs
                // are spawned, so waiting the delay out first could let short
                // leases expire under a healthy worker.
                retry_at = Some(tokio::time::Instant::now() + retry_delay(failures));
                continue;
            }
        };
        if !conn.is_second {
            second_throttled = false;
        }
        give_back(&mut main, &mut second, conn);
        let got = jobs.len();
        span.record("lq.claimed", got);
        metrics.claimed(got, began.elapsed().as_secs_f64());
        Stats::add(&shared.stats.claims, 1);
        if got > 0 {
            let ms = began.elapsed().as_secs_f64() * 1e3;
            debug!(queue, got, limit, ahead = ahead.extra(), ms, "claimed");
            Stats::add(&shared.stats.claimed, got as u64);
        }
        if got > 0 {
            // The claim checked the pause: jobs claimed ahead may start again.
            wake.mark_claimable(pauses_heard);
        }
        for job in jobs {
            let slot = slots
                .take_reserved(&mut reserved)
                .expect("a claim returns at most the jobs it reserved leases for");
            if slot.waits_for_handler() {
                Stats::add(&shared.stats.claimed_ahead, 1);
            }
            executor::spawn(shared.clone(), queue_name.clone(), job, slot);
        }
        drop(reserved); // the leases of rows the claim did not find
        if let Some((full, next_token)) = limited {
            // Ready jobs may be left, beyond a limit: wait for room.
            (dry, at_limit) = (true, full);
            next_token_at = next_token.map(|d| tokio::time::Instant::now() + d);
        } else if got == limit {
            // A full batch: there may be more ready right now. Let the jobs just
            // spawned begin first, so short ones hand their handlers back.
            ahead.after_full_claim(idle_at_return, finished_meanwhile);
            tokio::task::yield_now().await;
        } else {
            ahead.after_partial_claim();
            dry = true;
        }
    }
}

/// Smallest claim worth sending while another is in flight: only while jobs are
/// claimed ahead (the claimer, not the handlers, is the limit), and then half a
/// full batch, so the two claims do not split one batch's rows between them.
fn worth_overlapping(ahead: &ClaimAhead, max_batch: usize) -> usize {
    if ahead.extra() > 0 {
        (max_batch / 2).max(1)
    } else {
        usize::MAX
    }
}

/// Puts a claim's connection back where it came from.
fn give_back(main: &mut Option<Conn>, second: &mut Option<Conn>, conn: Conn) {
    if conn.is_second {
        *second = Some(conn);
    } else {
        *main = Some(conn);
    }
}

/// One claim of at most `limit` jobs on `conn`, their leases in `reserved`;
/// `pauses_heard` is the queue's count of pauses heard of as it is sent.
fn claim(
    shared: &Arc<Shared>,
    (queue, limits): (&str, QueueLimits),
    (mut conn, reserved): (Conn, Reservation),
    limit: usize,
    slots: &Slots,
    pauses_heard: u64,
) -> impl std::future::Future<Output = Returned> {
    let (shared, queue) = (shared.clone(), queue.to_owned());
    let handlers: Arc<Semaphore> = slots.handlers();
    let span = crate::telemetry::claim_span(&queue, limit);
    let finished_at_send = slots.finished();
    let began = Instant::now();
    async move {
        let result = claim_turns::claim(
            &shared,
            &mut conn.hot,
            (&queue, limits),
            limit,
            conn.is_second,
        )
        .instrument(span.clone())
        .await;
        Returned {
            conn,
            reserved,
            limit,
            idle_at_return: handlers.available_permits(),
            finished_at_send,
            began,
            span,
            result,
            pauses_heard,
        }
    }
}

/// Sleeps until `at`, or forever when there is none.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
