//! [`AttemptError`]: one entry of a job's error history.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One failed attempt, as stored in the job's `errors` column (newest last, at
/// most [`crate::MAX_ERRORS_KEPT`] kept).
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let job = lq_core::control::get(&pool, 42).await?;
/// for e in &job.errors {
///     println!("attempt {} at {} on {:?}: {}", e.attempt, e.at, e.worker, e.error);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttemptError {
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// When the failure was recorded (database time).
    pub at: DateTime<Utc>,
    /// The runtime that ran the attempt (its owner name); `None` for a job that
    /// failed while queued, or for entries written before schema version 5.
    #[serde(default)]
    pub worker: Option<String>,
    /// The error's text, its source chain included (see [`crate::chain`]),
    /// capped at [`crate::MAX_ERROR_BYTES`].
    pub error: String,
}

impl AttemptError {
    /// Reads a stored history. An entry that is not in the stored shape (written
    /// by hand) is kept rather than dropped: its JSON text becomes `error`, its
    /// `attempt` its position and its `at` the Unix epoch.
    pub fn list_from_json(errors: &serde_json::Value) -> Vec<Self> {
        let Some(entries) = errors.as_array() else {
            return vec![Self::unreadable(1, errors)];
        };
        entries
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                serde_json::from_value(entry.clone())
                    .unwrap_or_else(|_| Self::unreadable(i + 1, entry))
            })
            .collect()
    }

    fn unreadable(position: usize, entry: &serde_json::Value) -> Self {
        Self {
            attempt: u32::try_from(position).unwrap_or(u32::MAX),
            at: DateTime::UNIX_EPOCH,
            worker: None,
            error: entry.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn stored_entries_read_back_with_or_without_a_worker() {
        let errors = json!([
            {"attempt": 1, "at": "2026-01-01T00:00:00Z", "error": "timeout"},
            {"attempt": 2, "at": "2026-01-01T00:00:05.5+00:00", "worker": "w1", "error": "refused"},
        ]);
        let list = AttemptError::list_from_json(&errors);
        assert_eq!(list.len(), 2);
        assert_eq!((list[0].attempt, list[0].worker.as_deref()), (1, None));
        assert_eq!(list[0].error, "timeout");
        assert_eq!(
            (list[1].attempt, list[1].worker.as_deref()),
            (2, Some("w1"))
        );
        assert_eq!(list[1].at.timestamp_millis(), 1_767_225_605_500);
    }

    #[test]
    fn hand_written_entries_are_kept_as_text() {
        let list = AttemptError::list_from_json(&json!([{"attempt": 1}, "oops"]));
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].error, r#"{"attempt":1}"#);
        assert_eq!((list[1].attempt, list[1].error.as_str()), (2, r#""oops""#));
        assert_eq!(list[1].at, DateTime::UNIX_EPOCH);
        let not_a_list = AttemptError::list_from_json(&json!({"x": 1}));
        assert_eq!(not_a_list[0].error, r#"{"x":1}"#);
    }
}
