//! Query strings and form bodies: read as name/value pairs (names may repeat,
//! as `ids=1&ids=2` does), and the job filter read from them with a typed
//! error for each bad value.

use std::time::Duration;

use lq_core::{JobFilter, JobState, Readiness};

/// Name/value pairs of a query string or an urlencoded form body.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pairs(Vec<(String, String)>);

impl Pairs {
    pub fn parse(text: &[u8]) -> Self {
        Self(form_urlencoded::parse(text).into_owned().collect())
    }

    pub fn from_query(uri: &axum::http::Uri) -> Self {
        Self::parse(uri.query().unwrap_or("").as_bytes())
    }

    /// The first non-blank value of `name`, trimmed.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .find(|v| !v.is_empty())
    }

    /// Every non-blank value of `name`, trimmed.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }
}

/// A value the dashboard cannot use, and what it should look like.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum ParamError {
    #[error("{field} must be a job id (a whole number), not {value:?}")]
    NotAnId { field: &'static str, value: String },
    #[error("{field} must be a whole number, not {value:?}")]
    NotANumber { field: &'static str, value: String },
    #[error("{field} must be a duration like 90s, 15m, 2h or 7d, not {value:?}")]
    BadDuration { field: &'static str, value: String },
    #[error("{field} must be JSON, such as {{\"user_id\": 42}}: {reason}")]
    BadJson { field: &'static str, reason: String },
    #[error("unknown state {0:?}: use queued (or available, scheduled), running, succeeded, dead or cancelled")]
    BadState(String),
    #[error("payload filters are off while payloads are redacted (WebConfig::redact): one would confirm a hidden value a guess at a time")]
    PayloadRedacted,
}

pub(crate) fn parse_id(field: &'static str, value: &str) -> Result<i64, ParamError> {
    value.trim().parse().map_err(|_| ParamError::NotAnId {
        field,
        value: value.to_owned(),
    })
}

/// A selected job as the jobs page posts it: `id`, or `id:state`, the state
/// its row showed (so a job that left it since is not acted on).
pub(crate) fn parse_selected(value: &str) -> Result<(i64, Option<JobState>), ParamError> {
    match value.split_once(':') {
        Some((id, state)) => Ok((parse_id("ids", id)?, Some(parse_state(state.trim())?))),
        None => Ok((parse_id("ids", value)?, None)),
    }
}

pub(crate) fn parse_count(field: &'static str, value: &str) -> Result<u64, ParamError> {
    value.trim().parse().map_err(|_| ParamError::NotANumber {
        field,
        value: value.to_owned(),
    })
}

pub(crate) fn parse_state(value: &str) -> Result<JobState, ParamError> {
    STATES
        .into_iter()
        .find(|s| s.as_str() == value)
        .ok_or_else(|| ParamError::BadState(value.to_owned()))
}

/// A state tab as a query names it: a state, or `available` or `scheduled`
/// (queued jobs due, or not yet due).
pub(crate) fn parse_tab(value: &str) -> Result<(JobState, Option<Readiness>), ParamError> {
    match READINESS.into_iter().find(|r| r.as_str() == value) {
        Some(r) => Ok((JobState::Queued, Some(r))),
        None => Ok((parse_state(value)?, None)),
    }
}

/// The queued tab's parts, in the order of its sub-tabs.
pub(crate) const READINESS: [Readiness; 2] = [Readiness::Available, Readiness::Scheduled];

/// Every state, in the order of the jobs page's tabs.
pub(crate) const STATES: [JobState; 5] = JobState::ALL;

/// The filter of the jobs page, as given (text kept for links and forms) and
/// as understood.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Filter {
    pub state: Option<JobState>,
    /// Set with `state=available` or `state=scheduled`: queued jobs due, or
    /// not yet due (`state` is then queued).
    pub readiness: Option<Readiness>,
    pub queue: Option<String>,
    pub kind: Option<String>,
    pub id: Option<i64>,
    pub older_than: Option<(String, Duration)>,
    pub newer_than: Option<(String, Duration)>,
    pub payload: Option<(String, serde_json::Value)>,
    pub meta: Option<(String, serde_json::Value)>,
}

/// The filter's field names, as in the query string and the forms.
pub(crate) const FIELDS: [&str; 8] = [
    "state",
    "queue",
    "kind",
    "id",
    "older_than",
    "newer_than",
    "payload",
    "meta",
];

impl Filter {
    /// The filter in `p`. With `redacted` (a redaction hook is set) a payload
    /// filter is refused: matching on hidden fields would reveal them.
    pub fn parse(p: &Pairs, redacted: bool) -> Result<Self, ParamError> {
        if redacted && p.get("payload").is_some() {
            return Err(ParamError::PayloadRedacted);
        }
        let duration = |field: &'static str| -> Result<_, ParamError> {
            p.get(field)
                .map(|v| {
                    humantime::parse_duration(v)
                        .map(|d| (v.to_owned(), d))
                        .map_err(|_| ParamError::BadDuration {
                            field,
                            value: v.to_owned(),
                        })
                })
                .transpose()
        };
        let json = |field: &'static str| -> Result<_, ParamError> {
            p.get(field)
                .map(|v| {
                    serde_json::from_str(v)
                        .map(|j| (v.to_owned(), j))
                        .map_err(|e| ParamError::BadJson {
                            field,
                            reason: e.to_string(),
                        })
                })
                .transpose()
        };
        let (state, readiness) = match p.get("state").map(parse_tab).transpose()? {
            Some((state, readiness)) => (Some(state), readiness),
            None => (None, None),
        };
        Ok(Self {
            state,
            readiness,
            queue: p.get("queue").map(str::to_owned),
            kind: p.get("kind").map(str::to_owned),
            id: p.get("id").map(|v| parse_id("id", v)).transpose()?,
            older_than: duration("older_than")?,
            newer_than: duration("newer_than")?,
            payload: json("payload")?,
            meta: json("meta")?,
        })
    }

    /// The filter as `lq_core` takes it.
    pub fn to_job_filter(&self) -> JobFilter {
        let mut f = JobFilter::new();
        if let Some(s) = self.state {
            f = f.state(s);
        }
        f.readiness = self.readiness;
        if let Some(q) = &self.queue {
            f = f.queue(q.clone());
        }
        if let Some(k) = &self.kind {
            f = f.kind(k.clone());
        }
        if let Some(id) = self.id {
            f = f.id(id);
        }
        if let Some((_, d)) = self.older_than {
            f = f.older_than(d);
        }
        if let Some((_, d)) = self.newer_than {
            f = f.newer_than(d);
        }
        if let Some((_, j)) = &self.payload {
            f = f.payload_contains(j.clone());
        }
        if let Some((_, j)) = &self.meta {
            f = f.meta_contains(j.clone());
        }
        f
    }

    /// The filter's fields as given, in [`FIELDS`] order, set ones only.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let values = [
            (self.readiness.map(Readiness::as_str))
                .or(self.state.map(JobState::as_str))
                .map(str::to_owned),
            self.queue.clone(),
            self.kind.clone(),
            self.id.map(|i| i.to_string()),
            self.older_than.as_ref().map(|(t, _)| t.clone()),
            self.newer_than.as_ref().map(|(t, _)| t.clone()),
            self.payload.as_ref().map(|(t, _)| t.clone()),
            self.meta.as_ref().map(|(t, _)| t.clone()),
        ];
        FIELDS
            .into_iter()
            .zip(values)
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect()
    }

    /// The filter as a query string (no leading `?`), plus `extra` pairs.
    pub fn query(&self, extra: &[(&str, &str)]) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in self.fields() {
            q.append_pair(k, &v);
        }
        for (k, v) in extra {
            q.append_pair(k, v);
        }
        q.finish()
    }

    /// The same filter in another state tab (`None`: every state).
    pub fn with_state(&self, state: Option<JobState>) -> Self {
        Self {
            state,
            readiness: None,
            ..self.clone()
        }
    }

    /// The same filter on queued jobs due (`Available`), not yet due
    /// (`Scheduled`), or either (`None`).
    pub fn with_readiness(&self, readiness: Option<Readiness>) -> Self {
        Self {
            state: Some(JobState::Queued),
            readiness,
            ..self.clone()
        }
    }

    /// The filter in words, for confirmations and reports.
    pub fn describe(&self) -> String {
        let fields = self.fields();
        if fields.is_empty() {
            return "every job".to_owned();
        }
        fields
            .iter()
            .map(|(k, v)| format!("{} {v}", k.replace('_', " ")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(q: &str) -> Result<Filter, ParamError> {
        Filter::parse(&Pairs::parse(q.as_bytes()), false)
    }

    #[test]
    fn a_payload_filter_is_refused_while_payloads_are_redacted() {
        let q = Pairs::parse(b"payload=%7B%22card%22%3A%224111%22%7D&meta=%7B%7D");
        assert_eq!(Filter::parse(&q, true), Err(ParamError::PayloadRedacted));
        assert!(Filter::parse(&Pairs::parse(b"meta=%7B%7D"), true).is_ok());
        assert!(Filter::parse(&q, false).is_ok());
    }

    #[test]
    fn a_query_becomes_a_filter_and_back() {
        let f = filter("state=dead&kind=k&queue=&older_than=5m&payload=%7B%22a%22%3A1%7D").unwrap();
        assert_eq!(f.state, Some(JobState::Dead));
        assert_eq!(f.queue, None);
        assert_eq!(f.older_than.as_ref().unwrap().1, Duration::from_secs(300));
        let jf = f.to_job_filter();
        assert_eq!(jf.kinds, ["k"]);
        assert_eq!(jf.payload_contains, Some(serde_json::json!({"a": 1})));
        assert_eq!(filter(&f.query(&[])).unwrap(), f);
        assert_eq!(
            f.describe(),
            "state dead, kind k, older than 5m, payload {\"a\":1}"
        );
    }

    #[test]
    fn available_and_scheduled_are_queued_jobs_due_or_not_yet_due() {
        let f = filter("state=scheduled&queue=mail").unwrap();
        assert_eq!(
            (f.state, f.readiness),
            (Some(JobState::Queued), Some(Readiness::Scheduled))
        );
        assert_eq!(
            f.to_job_filter(),
            JobFilter::new()
                .state(JobState::Queued)
                .queue("mail")
                .scheduled()
        );
        assert_eq!(filter(&f.query(&[])).unwrap(), f);
        assert_eq!(f.describe(), "state scheduled, queue mail");
        assert_eq!(f.with_state(Some(JobState::Dead)).readiness, None);
        let due = f.with_readiness(Some(Readiness::Available));
        assert_eq!(
            due.to_job_filter(),
            JobFilter::new()
                .state(JobState::Queued)
                .queue("mail")
                .available()
        );
    }

    #[test]
    fn bad_values_say_what_they_should_be() {
        assert_eq!(
            filter("id=abc").unwrap_err().to_string(),
            "id must be a job id (a whole number), not \"abc\""
        );
        assert!(filter("older_than=5x")
            .unwrap_err()
            .to_string()
            .contains("like 90s"));
        assert!(filter("payload={")
            .unwrap_err()
            .to_string()
            .contains("JSON"));
        assert!(filter("state=deadd")
            .unwrap_err()
            .to_string()
            .contains("queued"));
    }
}
