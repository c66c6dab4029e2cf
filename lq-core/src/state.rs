//! The life cycle of a job row.

use std::fmt;

/// Where a job is in its life cycle; stored as the `lq.job_state` enum.
///
/// `queued` and `running` are *live* (they hold a unique key); the rest are final.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::Type, serde::Serialize, serde::Deserialize,
)]
#[sqlx(type_name = "lq.job_state", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for `run_at`, then for a free worker.
    Queued,
    /// Claimed by a worker that holds its lease.
    Running,
    /// `perform` returned `Ok`.
    Succeeded,
    /// Out of attempts, failed permanently, or undecodable; the reason is in `errors`.
    Dead,
    /// Cancelled by a user or by its handler.
    Cancelled,
}

impl JobState {
    /// Every state, in the order a job may pass through them.
    pub const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Dead,
        JobState::Cancelled,
    ];

    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }

    /// True for `queued` and `running`.
    pub fn is_live(self) -> bool {
        matches!(self, JobState::Queued | JobState::Running)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}
