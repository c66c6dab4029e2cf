//! Claim-ahead: how many jobs beyond its idle handlers a queue's next claim takes.
//!
//! A claim statement has a fixed cost besides its per-row cost, so when a queue's
//! jobs finish faster than one claim can feed them, claims of "the idle handlers"
//! keep the handlers waiting on the claimer. Then, and only then, the claimer takes
//! some jobs ahead: they wait in this process for a handler (their leases held and
//! heartbeated), and the next claims are larger. The extra doubles while the
//! handlers keep going idle and drops to nothing as soon as they do not, so a queue
//! of slow jobs never holds jobs another worker could run.

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

    /// After a full claim whose jobs have all started: `idle` handlers are free.
    /// Half or more idle means the claimer, not the handlers, is the limit: grow.
    /// Otherwise the handlers are busy and jobs taken ahead would only wait: none.
    pub fn after_full_claim(&mut self, idle: usize) {
        self.extra = if idle * 2 >= self.concurrency {
            (self.extra * 2)
                .max(self.concurrency / 4)
                .max(1)
                .min(self.most)
        } else {
            0
        };
    }

    /// After a claim that found fewer jobs than it asked for: the queue ran dry,
    /// and the next jobs come one wake-up at a time.
    pub fn after_partial_claim(&mut self) {
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
            ahead.after_full_claim(100);
            seen.push(ahead.extra());
        }
        assert_eq!(seen, [25, 50, 100, 200, 200]);
    }

    #[test]
    fn busy_handlers_take_the_extra_away_at_once() {
        let mut ahead = ClaimAhead::new(100, 200);
        ahead.after_full_claim(100);
        ahead.after_full_claim(100);
        ahead.after_full_claim(49);
        assert_eq!(ahead.extra(), 0);
    }

    #[test]
    fn a_claim_that_finds_the_queue_dry_takes_the_extra_away() {
        let mut ahead = ClaimAhead::new(8, 16);
        ahead.after_full_claim(8);
        assert_eq!(ahead.extra(), 2);
        ahead.after_partial_claim();
        assert_eq!(ahead.extra(), 0);
    }

    #[test]
    fn a_single_handler_queue_can_still_take_one_ahead() {
        let mut ahead = ClaimAhead::new(1, 2);
        ahead.after_full_claim(1);
        assert_eq!(ahead.extra(), 1);
        ahead.after_full_claim(1);
        assert_eq!(ahead.extra(), 2);
        ahead.after_full_claim(0);
        assert_eq!(ahead.extra(), 0);
    }

    #[test]
    fn a_bound_of_zero_turns_claim_ahead_off() {
        let mut ahead = ClaimAhead::new(100, 0);
        ahead.after_full_claim(100);
        assert_eq!(ahead.extra(), 0);
    }
}
