//! The job filter as command-line flags, shared by every `jobs` command.

use std::time::Duration;

use clap::Args;
use lq_runtime::{JobFilter, JobState, Readiness};

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
    /// Queued jobs that are due, waiting for a free worker.
    #[arg(long, conflicts_with = "scheduled")]
    pub available: bool,
    /// Queued jobs not yet due: scheduled, snoozed, or backing off after a failure.
    #[arg(long)]
    pub scheduled: bool,
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
        f.readiness = match (self.available, self.scheduled) {
            (true, _) => Some(Readiness::Available),
            (_, true) => Some(Readiness::Scheduled),
            _ => None,
        };
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
        // Oban's and River's names for a queued job before or after its time.
        "available" | "scheduled" | "retryable" => {
            let flag = if s == "available" {
                "available"
            } else {
                "scheduled"
            };
            return Err(format!(
                "{s:?} is not a state here: litequeue keeps such jobs queued; use --{flag}"
            ));
        }
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

/// A `--timeout`: a duration above zero and at most
/// [`lq_runtime::control::MAX_TIMEOUT`], which the server can take.
pub(crate) fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    let max = lq_runtime::control::MAX_TIMEOUT;
    if d.is_zero() {
        Err("a timeout of zero would fail every call: give one like 30s or 10m".to_owned())
    } else if d > max {
        Err(format!(
            "{s:?} is longer than the {} s the server can bound a statement by",
            max.as_secs()
        ))
    } else {
        Ok(d)
    }
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
        let waiting = FilterArgs {
            scheduled: true,
            ..FilterArgs::default()
        };
        assert_eq!(waiting.to_filter(), JobFilter::new().scheduled());
        assert!(!waiting.is_empty());
    }

    #[test]
    fn bad_values_are_explained() {
        assert!(parse_state("deadd")
            .unwrap_err()
            .contains("queued, running"));
        assert!(parse_duration("soon").unwrap_err().contains("like 90s"));
        assert!(parse_state("retryable")
            .unwrap_err()
            .ends_with("use --scheduled"));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
    }

    #[test]
    fn a_timeout_is_above_zero_and_within_the_servers_reach() {
        assert_eq!(parse_timeout("10m").unwrap(), Duration::from_secs(600));
        assert!(parse_timeout("0s").unwrap_err().contains("zero"));
        assert!(parse_timeout("100d").unwrap_err().contains("2000000 s"));
        assert!(parse_timeout("soon").unwrap_err().contains("like 90s"));
    }
}
