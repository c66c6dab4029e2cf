//! [`Verb`]: the bulk actions of `lq jobs`, each with its name, its past
//! tense and the library call that does it.

use lq_runtime::{
    control::{self, BulkReport},
    CoreError, JobFilter,
};
use sqlx::PgPool;

/// A bulk action on jobs: `retry`, `cancel`, `delete` or `run-now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Retry,
    Cancel,
    Delete,
    RunNow,
}

impl Verb {
    /// The subcommand's name, as reports and prompts print it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Verb::Retry => "retry",
            Verb::Cancel => "cancel",
            Verb::Delete => "delete",
            Verb::RunNow => "run-now",
        }
    }

    /// What was done, as the library's [`CoreError::BulkStopped`] names it.
    pub(crate) fn done(self) -> &'static str {
        match self {
            Verb::Retry => "retried",
            Verb::Cancel => "cancelled",
            Verb::Delete => "deleted",
            Verb::RunNow => "run now",
        }
    }

    /// Acts on at most `limit` of the jobs `filter` matches.
    pub(crate) async fn apply(
        self,
        pool: &PgPool,
        filter: &JobFilter,
        limit: Option<u64>,
    ) -> Result<BulkReport, CoreError> {
        match self {
            Verb::Retry => control::retry_matching(pool, filter, limit).await,
            Verb::Cancel => control::cancel_matching(pool, filter, limit).await,
            Verb::Delete => control::delete_matching(pool, filter, limit).await,
            Verb::RunNow => control::run_now_matching(pool, filter, limit).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_verb_has_its_own_name_and_past_tense() {
        let all = [Verb::Retry, Verb::Cancel, Verb::Delete, Verb::RunNow];
        let names: std::collections::HashSet<_> = all.iter().map(|v| v.name()).collect();
        let done: std::collections::HashSet<_> = all.iter().map(|v| v.done()).collect();
        assert_eq!((names.len(), done.len()), (4, 4));
    }
}
