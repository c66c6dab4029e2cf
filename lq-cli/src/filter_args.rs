//! The job filter as command-line flags, shared by every `jobs` command.

use std::time::Duration;

use clap::Args;
use lq_runtime::{JobFilter, JobState};

/// Which jobs: every flag given must match. Durations read like `90s`, `15m`, `2h`, `7d`.
#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// Jobs in this state (repeatable): queued, running, succeeded, dead, cancelled.
    #[arg(long = "state", value_parser = parse_state)]
    pub states: Vec<JobState>,
    /// Jobs on this queue (repeatable).
    #[arg(long = "queue")]
    pub queues: Vec<String>,
    /// Jobs of this kind (repeatable).
    #[arg(long = "kind")]
    pub kinds: Vec<String>,
    /// Ids at least this.
    #[arg(long)]
    pub min_id: Option<i64>,
    /// Ids at most this.
    #[arg(long)]
    pub max_id: Option<i64>,
    /// Enqueued at least this long ago.
    #[arg(long, value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// Enqueued at most this long ago.
    #[arg(long, value_parser = parse_duration)]
    pub newer_than: Option<Duration>,
    /// Payload contains this JSON, e.g. '{"user_id": 42}'.
    #[arg(long, value_parser = parse_json)]
    pub payload: Option<serde_json::Value>,
    /// Metadata contains this JSON.
    #[arg(long, value_parser = parse_json)]
    pub meta: Option<serde_json::Value>,
}

impl FilterArgs {
    /// True when no flag narrows the match.
    pub fn is_empty(&self) -> bool {
        self.to_filter() == JobFilter::new()
    }

    pub fn to_filter(&self) -> JobFilter {
        let mut f = JobFilter::new();
        f.states = self.states.clone();
        f.queues = self.queues.clone();
        f.kinds = self.kinds.clone();
        f.min_id = self.min_id;
        f.max_id = self.max_id;
        f.older_than = self.older_than;
        f.newer_than = self.newer_than;
        f.payload_contains = self.payload.clone();
        f.meta_contains = self.meta.clone();
        f
    }
}

pub(crate) fn parse_state(s: &str) -> Result<JobState, String> {
    Ok(match s {
        "queued" => JobState::Queued,
        "running" => JobState::Running,
        "succeeded" => JobState::Succeeded,
        "dead" => JobState::Dead,
        "cancelled" => JobState::Cancelled,
        other => {
            return Err(format!(
                "unknown state {other:?}: use queued, running, succeeded, dead or cancelled"
            ))
        }
    })
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 90s, 15m, 2h, 7d: {e}"))
}

fn parse_json(s: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_a_filter() {
        let args = FilterArgs {
            states: vec![JobState::Dead],
            kinds: vec!["k".into()],
            older_than: Some(Duration::from_secs(60)),
            ..FilterArgs::default()
        };
        let f = args.to_filter();
        assert_eq!(
            (f.states, f.kinds),
            (vec![JobState::Dead], vec!["k".to_owned()])
        );
        assert!(!args.is_empty());
        assert!(FilterArgs::default().is_empty());
    }

    #[test]
    fn bad_values_are_explained() {
        assert!(parse_state("deadd")
            .unwrap_err()
            .contains("queued, running"));
        assert!(parse_duration("soon").unwrap_err().contains("like 90s"));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
    }
}
