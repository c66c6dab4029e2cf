//! Counters of what a runtime has done, for progress output and tests.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Running totals since the runtime started.
#[derive(Debug, Default)]
pub struct Stats {
    pub(crate) claims: AtomicU64,
    pub(crate) idle_polls: AtomicU64,
    pub(crate) claimed: AtomicU64,
    pub(crate) claimed_ahead: AtomicU64,
    pub(crate) overlapping_claims: AtomicU64,
    pub(crate) throttled_claims: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) dead: AtomicU64,
    pub(crate) snoozed: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) lease_lost: AtomicU64,
    pub(crate) quarantined: AtomicU64,
    pub(crate) cancel_checks: AtomicU64,
    pub(crate) cancel_hints_ignored: AtomicU64,
}

/// The runtime's job counters at one moment, from [`Runtime::stats`](crate::Runtime::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Claim statements run, including those that found nothing.
    pub claims: u64,
    /// Idle polls run: one statement a poll interval for all the queues waiting
    /// for work (see `RuntimeConfig::poll_interval`).
    pub idle_polls: u64,
    /// Jobs claimed.
    pub claimed: u64,
    /// Jobs claimed ahead of an idle handler, which waited in this process for one
    /// (see `RuntimeConfig::claim_ahead`).
    pub claimed_ahead: u64,
    /// Claims sent while another claim of the same queue was in flight (see
    /// `RuntimeConfig::claim_ahead`).
    pub overlapping_claims: u64,
    /// Claims that found all the queue's claim slots taken and waited for one,
    /// or (a second claim in flight) claimed nothing (see
    /// `RuntimeConfig::claim_slots`).
    pub throttled_claims: u64,
    /// Jobs that ended succeeded.
    pub succeeded: u64,
    /// Failed attempts queued for retry.
    pub retried: u64,
    /// Jobs that ended dead.
    pub dead: u64,
    /// Jobs snoozed.
    pub snoozed: u64,
    /// Jobs that ended cancelled.
    pub cancelled: u64,
    /// Jobs handed back to the queue unspent: at shutdown, claimed ahead and
    /// kept waiting `claim_ahead_wait` for a handler, or leased by a claim whose
    /// answer was lost.
    pub released: u64,
    /// Writes refused because the lease was lost.
    pub lease_lost: u64,
    /// Jobs ended `dead` with only the refusal as their error because the
    /// database refused to store their outcome (a failure even with a short
    /// fixed reason, a success even alone) or their rescue. A job whose
    /// quarantine was refused too is not counted: it returns when its lease
    /// expires.
    pub quarantined: u64,
    /// Statements run to confirm cancel notifications against the rows: one for
    /// all the notifications gathered meanwhile.
    pub cancel_checks: u64,
    /// Cancel notifications for jobs this runtime held that the rows did not
    /// confirm: sent by hand or forged (any role that can connect may NOTIFY),
    /// or for an attempt that ended or went back before the check.
    pub cancel_hints_ignored: u64,
}

impl Stats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            claims: self.claims.load(Relaxed),
            idle_polls: self.idle_polls.load(Relaxed),
            claimed: self.claimed.load(Relaxed),
            claimed_ahead: self.claimed_ahead.load(Relaxed),
            overlapping_claims: self.overlapping_claims.load(Relaxed),
            throttled_claims: self.throttled_claims.load(Relaxed),
            succeeded: self.succeeded.load(Relaxed),
            retried: self.retried.load(Relaxed),
            dead: self.dead.load(Relaxed),
            snoozed: self.snoozed.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            released: self.released.load(Relaxed),
            lease_lost: self.lease_lost.load(Relaxed),
            quarantined: self.quarantined.load(Relaxed),
            cancel_checks: self.cancel_checks.load(Relaxed),
            cancel_hints_ignored: self.cancel_hints_ignored.load(Relaxed),
        }
    }
}
