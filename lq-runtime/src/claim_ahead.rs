//! Claim-ahead: how many jobs beyond its idle handlers a queue's next claim takes.
//!
//! A claim statement takes time (a round trip and a commit), and handlers that
//! finish while it is out wait for it: with 2–5 ms jobs and claims of about 1 ms,
//! that kept a fifth of the handlers idle. So the claimer takes some jobs ahead,
//! which wait in this process for a handler (their leases held and heartbeated):
//!
//! - while the handlers outpace the claims (half or more of them idle when a full
//!   claim returns), the extra doubles, so a drain of short jobs gets large claims;
//! - otherwise it is twice the handlers that finished while the last claim was
//!   out (or half the last extra, if more), so a finishing handler finds a job
//!   waiting. A queue of jobs much longer than a claim sees no handler finish
//!   during one, and so holds none ahead;
//! - when a claim finds fewer jobs than it asked for, the queue ran dry: none;
//! - when a job claimed ahead waited `claim_ahead_wait` (1 s) for a handler and
//!   went back to the queue, the handlers are busy with longer work: none, so
//!   this process does not hoard jobs other runtimes could run.

/// Most jobs a queue of `concurrency` handlers may claim ahead: nine times its
/// concurrency, or none with `claim_ahead` off. Nine lets a drain of short jobs
/// have two claims of `max_claim_batch` in flight at concurrency 100 (100 idle
/// handlers and 900 ahead); one claim at a time left PostgreSQL's second core
/// partly idle (`bench/FINDINGS.md`, stops 28 and 31).
pub(crate) fn most(config: &crate::RuntimeConfig, concurrency: usize) -> usize {
    if config.claim_ahead {
        concurrency * 9
    } else {
        0
    }
}

/// The claimer's claim-ahead allowance for one queue.
#[derive(Debug)]
pub(crate) struct ClaimAhead {
    concurrency: usize,
    most: usize,
    extra: usize,
}

impl ClaimAhead {
    /// For a queue of `concurrency` handlers; the extra never passes `most`.
    pub fn new(concurrency: usize, most: usize) -> Self {
        Self {
            concurrency,
            most,
            extra: 0,
        }
    }

    /// Jobs the next claim may take beyond the idle handlers.
    pub fn extra(&self) -> usize {
        self.extra
    }

    /// After a full claim: `idle` handlers were free when it returned and
    /// `finished` handlers finished a job while it was out. Half or more idle means
    /// the claimer, not the handlers, is the limit: grow. Otherwise keep ahead what
    /// the handlers finish during two claims, so none waits for the next one, and
    /// no less than half the last extra (so it shrinks by halves).
    pub fn after_full_claim(&mut self, idle: usize, finished: usize) {
        self.extra = if idle * 2 >= self.concurrency {
            (self.extra * 2).max(self.concurrency / 4).max(1)
        } else {
            // Half the last extra at least: the count over one short claim is noisy.
            finished.saturating_mul(2).max(self.extra / 2)
        }
        .min(self.most);
    }

    /// After a claim that found fewer jobs than it asked for: the queue ran dry,
    /// and the next jobs come one wake-up at a time.
    pub fn after_partial_claim(&mut self) {
        self.extra = 0;
    }

    /// After a job claimed ahead went back to the queue, having waited too long
    /// for a handler: the handlers do not keep up, so none ahead until full
    /// claims find idle handlers again.
    pub fn after_hand_back(&mut self) {
        self.extra = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_handlers_after_full_claims_grow_the_extra_to_its_bound() {
        let mut ahead = ClaimAhead::new(100, 200);
        let mut seen = Vec::new();
        for _ in 0..5 {
            ahead.after_full_claim(100, 0);
            seen.push(ahead.extra());
        }
        assert_eq!(seen, [25, 50, 100, 200, 200]);
    }

    #[test]
    fn busy_handlers_that_finish_nothing_during_claims_halve_the_extra_away() {
        let mut ahead = ClaimAhead::new(100, 200);
        ahead.after_full_claim(100, 0);
        ahead.after_full_claim(100, 0);
        let mut seen = Vec::new();
        for _ in 0..7 {
            ahead.after_full_claim(49, 0);
            seen.push(ahead.extra());
        }
        assert_eq!(seen, [25, 12, 6, 3, 1, 0, 0]);
    }

    #[test]
    fn busy_handlers_keep_ahead_twice_what_they_finished_during_the_claim() {
        let mut ahead = ClaimAhead::new(32, 288);
        ahead.after_full_claim(3, 6);
        assert_eq!(ahead.extra(), 12);
        ahead.after_full_claim(0, 1);
        assert_eq!(
            ahead.extra(),
            6,
            "half the last extra beats twice one finish"
        );
        ahead.after_full_claim(0, 5);
        assert_eq!(ahead.extra(), 10);
        ahead.after_full_claim(0, 1_000);
        assert_eq!(ahead.extra(), 288, "never past the bound");
    }

    #[test]
    fn a_claim_that_finds_the_queue_dry_takes_the_extra_away() {
        let mut ahead = ClaimAhead::new(8, 16);
        ahead.after_full_claim(8, 0);
        assert_eq!(ahead.extra(), 2);
        ahead.after_partial_claim();
        assert_eq!(ahead.extra(), 0);
    }

    #[test]
    fn a_job_handed_back_takes_the_extra_away_until_handlers_idle_again() {
        let mut ahead = ClaimAhead::new(10, 90);
        for _ in 0..4 {
            ahead.after_full_claim(10, 0);
        }
        assert_eq!(ahead.extra(), 16);
        ahead.after_hand_back();
        assert_eq!(ahead.extra(), 0);
        ahead.after_full_claim(0, 0);
        assert_eq!(ahead.extra(), 0, "busy handlers do not grow it back");
        ahead.after_full_claim(10, 0);
        assert_eq!(ahead.extra(), 2);
    }

    #[test]
    fn a_single_handler_queue_can_still_take_one_ahead() {
        let mut ahead = ClaimAhead::new(1, 2);
        ahead.after_full_claim(1, 0);
        assert_eq!(ahead.extra(), 1);
        ahead.after_full_claim(1, 0);
        assert_eq!(ahead.extra(), 2);
        ahead.after_full_claim(0, 0);
        assert_eq!(ahead.extra(), 1);
        ahead.after_full_claim(0, 0);
        assert_eq!(ahead.extra(), 0);
    }

    #[test]
    fn a_bound_of_zero_turns_claim_ahead_off() {
        let mut ahead = ClaimAhead::new(100, 0);
        ahead.after_full_claim(100, 0);
        ahead.after_full_claim(0, 50);
        assert_eq!(ahead.extra(), 0);
    }
}
