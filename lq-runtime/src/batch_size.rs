//! A maintenance batch that halves after its statement fails and grows back
//! after it succeeds. The server cancels a statement that outlasts nine tenths of
//! `db_timeout`, and a cancelled batch commits nothing: without shrinking, a batch
//! too slow for the bound (a large backlog of expired leases or of old history on
//! a slow server) would fail the same way at every pass and never make progress.

/// The smallest batch tried.
const MIN: i64 = 10;

/// The size of the next batch, between [`MIN`] and the maximum it started at.
#[derive(Debug)]
pub(crate) struct AdaptiveBatch {
    size: i64,
    max: i64,
}

impl AdaptiveBatch {
    /// Starts at `max`.
    pub(crate) fn new(max: i64) -> Self {
        Self { size: max, max }
    }

    /// Rows for the next statement.
    pub(crate) fn size(&self) -> i64 {
        self.size
    }

    /// The statement failed: half as many rows next time.
    pub(crate) fn failed(&mut self) {
        self.size = (self.size / 2).max(MIN.min(self.max));
    }

    /// The statement succeeded: twice as many next time, up to the maximum.
    pub(crate) fn succeeded(&mut self) {
        self.size = (self.size * 2).min(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_on_failure_down_to_the_minimum_and_grows_back_to_the_maximum() {
        let mut b = AdaptiveBatch::new(5000);
        b.failed();
        assert_eq!(b.size(), 2500);
        for _ in 0..20 {
            b.failed();
        }
        assert_eq!(b.size(), MIN);
        b.succeeded();
        assert_eq!(b.size(), 20);
        for _ in 0..20 {
            b.succeeded();
        }
        assert_eq!(b.size(), 5000);
    }
}
