//! [`JobFilter`]: which jobs a control call looks at.

use std::time::Duration;

use crate::{Error, JobState};

/// Whether a queued job's time has come. litequeue keeps one state, `queued`,
/// for what Oban and River split into `available` and `scheduled` (and
/// `retryable`): the job's `run_at` tells them apart, so a job becomes
/// available without a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Readiness {
    /// Queued and due (`run_at` has come): waiting only for a free worker.
    Available,
    /// Queued and not yet due (`run_at` ahead): scheduled, snoozed, or
    /// waiting out a retry's backoff.
    Scheduled,
}

impl Readiness {
    /// `available` or `scheduled`, as the CLI and the dashboard name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Readiness::Available => "available",
            Readiness::Scheduled => "scheduled",
        }
    }
}

impl std::fmt::Display for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The oldest age a filter takes: PostgreSQL's timestamps end about 4,700
/// years before now, so a longer age would fail in the database instead.
pub(crate) const MAX_FILTER_AGE: Duration = Duration::from_secs(1_000 * 366 * 86_400);

/// Which jobs a control call lists, counts or acts on. Every condition set must
/// hold; an empty filter matches every job, live and finished.
///
/// Listing is newest first with keyset paging: pass the last id of one page to
/// [`JobFilter::before_id`] to get the next.
///
/// ```no_run
/// use lq_core::{control, JobFilter, JobState};
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let mut filter = JobFilter::new()
///     .state(JobState::Dead)
///     .queue("emails")
///     .kind("SendWelcomeEmail")
///     .payload_contains(serde_json::json!({"user_id": 42}));
/// loop {
///     let page = control::list(&pool, &filter, 100).await?;
///     let Some(last) = page.last() else { break };
///     filter = filter.before_id(last.id);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct JobFilter {
    /// Any of these states (empty: any state).
    pub states: Vec<JobState>,
    /// Any of these queues (empty: any queue).
    pub queues: Vec<String>,
    /// Any of these kinds (empty: any kind).
    pub kinds: Vec<String>,
    /// Any of these ids (empty: any id): a selection of jobs, for a bulk action
    /// on exactly the jobs an operator picked.
    pub ids: Vec<i64>,
    /// Ids at least this.
    pub min_id: Option<i64>,
    /// Ids at most this.
    pub max_id: Option<i64>,
    /// Ids below this: the keyset cursor of the next page.
    pub before_id: Option<i64>,
    /// Enqueued at least this long ago (database time).
    pub older_than: Option<Duration>,
    /// Enqueued at most this long ago (database time).
    pub newer_than: Option<Duration>,
    /// Finished at most this long ago (database time); only finished jobs match.
    pub finished_within: Option<Duration>,
    /// Payload contains this JSON (PostgreSQL's `@>`).
    pub payload_contains: Option<serde_json::Value>,
    /// Metadata contains this JSON (PostgreSQL's `@>`).
    pub meta_contains: Option<serde_json::Value>,
    /// Queued jobs whose time has come, or has not (database time); set, it
    /// matches queued jobs only.
    pub readiness: Option<Readiness>,
}

impl JobFilter {
    /// A filter matching every job.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also matches jobs in `state` (states accumulate).
    pub fn state(mut self, state: JobState) -> Self {
        self.states.push(state);
        self
    }

    /// Also matches jobs in `queue` (queues accumulate).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queues.push(queue.into());
        self
    }

    /// Also matches jobs of `kind` (kinds accumulate).
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kinds.push(kind.into());
        self
    }

    /// Also matches job `id` (ids accumulate): a bulk action on a selection
    /// acts on exactly these jobs, each refusal reported as for any filter.
    ///
    /// ```no_run
    /// use lq_core::{control, JobFilter};
    /// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
    /// let picked = [17, 42, 99].into_iter().fold(JobFilter::new(), JobFilter::id);
    /// let report = control::retry_matching(&pool, &picked, None).await?;
    /// for (id, why) in &report.refused {
    ///     println!("{id}: {why}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn id(mut self, id: i64) -> Self {
        self.ids.push(id);
        self
    }

    /// Only ids in `min..=max`.
    pub fn id_range(mut self, min: i64, max: i64) -> Self {
        self.min_id = Some(min);
        self.max_id = Some(max);
        self
    }

    /// Only ids below `id` (the next page after a page ending at `id`).
    pub fn before_id(mut self, id: i64) -> Self {
        self.before_id = Some(id);
        self
    }

    /// Only jobs enqueued at least `age` ago.
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Only jobs enqueued at most `age` ago.
    pub fn newer_than(mut self, age: Duration) -> Self {
        self.newer_than = Some(age);
        self
    }

    /// Only jobs that finished at most `age` ago. No index orders the history
    /// by finish time (each would cost every finished job an entry), so a
    /// listing reads the history newest id first until it has its rows, and a
    /// count reads all of it: for the last hour's outcomes per queue, read the
    /// per-minute rollup ([`crate::control::stats`]).
    pub fn finished_within(mut self, age: Duration) -> Self {
        self.finished_within = Some(age);
        self
    }

    /// Only jobs whose payload contains `json` (`{"user_id": 42}` matches any
    /// payload with that field and value).
    pub fn payload_contains(mut self, json: serde_json::Value) -> Self {
        self.payload_contains = Some(json);
        self
    }

    /// Only jobs whose metadata contains `json`.
    pub fn meta_contains(mut self, json: serde_json::Value) -> Self {
        self.meta_contains = Some(json);
        self
    }

    /// Only queued jobs that are due, waiting for a free worker (Oban's and
    /// River's `available`).
    pub fn available(mut self) -> Self {
        self.readiness = Some(Readiness::Available);
        self
    }

    /// Only queued jobs not yet due: scheduled for later, snoozed, or waiting
    /// out a retry's backoff (Oban's and River's `scheduled` and `retryable`).
    ///
    /// ```no_run
    /// use lq_core::{control, JobFilter};
    /// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
    /// // After an outage: every job of the kind still backing off, due now.
    /// let waiting = JobFilter::new().kind("charge_card").scheduled();
    /// let report = control::run_now_matching(&pool, &waiting, None).await?;
    /// println!("{} jobs made due", report.done.len());
    /// # Ok(()) }
    /// ```
    pub fn scheduled(mut self) -> Self {
        self.readiness = Some(Readiness::Scheduled);
        self
    }

    /// The states a job must be in to match, as the bulk actions check them
    /// again under the row lock (empty: any state). A readiness condition
    /// holds for queued jobs only, so a job claimed after the filter chose it
    /// is left alone.
    pub(crate) fn states_required(&self) -> Vec<JobState> {
        match self.readiness {
            Some(_) => vec![JobState::Queued],
            None => self.states.clone(),
        }
    }

    /// Checks what the database would refuse, so a bad filter from an operator
    /// (a CLI flag, a dashboard query) is a typed [`Error::InvalidFilter`]
    /// naming the field, not a database error. Every control call that takes a
    /// filter checks it first.
    ///
    /// ```
    /// use lq_core::JobFilter;
    /// let f = JobFilter::new().payload_contains(serde_json::json!({"name": "a\u{0}b"}));
    /// assert!(f.validate().is_err());
    /// assert!(JobFilter::new().queue("mail\u{0}").validate().is_err());
    /// assert!(JobFilter::new().older_than(std::time::Duration::from_secs(60)).validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        let ages = [
            ("older_than", self.older_than),
            ("newer_than", self.newer_than),
            ("finished_within", self.finished_within),
        ];
        for (field, age) in ages {
            if let Some(age) = age {
                check_age(field, age)?;
            }
        }
        // PostgreSQL's text cannot hold a NUL either: a queue or kind with one
        // would fail as an encoding error in the database, not as no match.
        let names = [("queue", &self.queues), ("kind", &self.kinds)];
        for (field, values) in names {
            if values.iter().any(|v| v.contains('\0')) {
                return Err(Error::InvalidFilter {
                    reason: format!(
                        "the {field} filter holds a NUL character (\\u0000), which no {field} name can hold"
                    ),
                });
            }
        }
        let json = [
            ("payload", &self.payload_contains),
            ("metadata", &self.meta_contains),
        ];
        for (field, value) in json {
            if value.as_ref().is_some_and(has_nul) {
                return Err(Error::InvalidFilter {
                    reason: format!(
                        "the {field} filter holds a NUL character (\\u0000), which no stored job can hold"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Which tables can hold a match: a filter on live states only never reads
    /// the history, one on final states only never reads the queue table.
    pub(crate) fn source(&self) -> &'static str {
        let live = self.states.iter().any(|s| s.is_live()) || self.readiness.is_some();
        let finished = self.states.iter().any(|s| !s.is_live()) || self.finished_within.is_some();
        match (live, finished) {
            (true, false) => "lq.jobs",
            (false, true) => "lq.finished_jobs",
            _ => "lq.all_jobs",
        }
    }
}

/// `age` (of a filter, or a retention) if the database can subtract it from now.
pub(crate) fn check_age(field: &str, age: Duration) -> Result<(), Error> {
    if age > MAX_FILTER_AGE {
        return Err(Error::InvalidFilter {
            reason: format!("{field} is over 1,000 years"),
        });
    }
    Ok(())
}

/// Whether a NUL is in any string of `value`, keys included: PostgreSQL's
/// `jsonb` cannot hold one, so it refuses such a filter outright.
fn has_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(has_nul),
        serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_anywhere_in_a_json_filter_and_an_age_past_the_calendar_are_refused() {
        use serde_json::json;
        let bad = [
            JobFilter::new().payload_contains(json!({"a": ["x", "y\u{0}"]})),
            JobFilter::new().meta_contains(json!({"k\u{0}": 1})),
            JobFilter::new().older_than(MAX_FILTER_AGE + Duration::from_secs(1)),
            JobFilter::new().finished_within(Duration::MAX),
        ];
        for f in bad {
            assert!(
                matches!(f.validate(), Err(Error::InvalidFilter { .. })),
                "{f:?}"
            );
        }
        let fine = JobFilter::new()
            .payload_contains(json!({"a": "\\u0000 as text"}))
            .newer_than(MAX_FILTER_AGE);
        fine.validate().unwrap();
    }

    #[test]
    fn a_nul_in_a_queue_or_kind_is_refused_naming_the_field() {
        for (f, field) in [
            (JobFilter::new().queue("\u{0}"), "queue"),
            (JobFilter::new().queue("mail").queue("a\u{0}b"), "queue"),
            (JobFilter::new().kind("x\u{0}"), "kind"),
        ] {
            match f.validate() {
                Err(Error::InvalidFilter { reason }) => {
                    assert!(
                        reason.starts_with(&format!("the {field} filter holds a NUL")),
                        "{reason}"
                    );
                }
                other => panic!("{f:?}: {other:?}"),
            }
        }
        JobFilter::new()
            .queue("mail")
            .kind("send_email")
            .validate()
            .unwrap();
    }

    #[test]
    fn states_choose_the_tables_read() {
        assert_eq!(JobFilter::new().source(), "lq.all_jobs");
        let live = JobFilter::new()
            .state(JobState::Queued)
            .state(JobState::Running);
        assert_eq!(live.source(), "lq.jobs");
        assert_eq!(
            JobFilter::new().state(JobState::Dead).source(),
            "lq.finished_jobs"
        );
        let both = JobFilter::new()
            .state(JobState::Dead)
            .state(JobState::Queued);
        assert_eq!(both.source(), "lq.all_jobs");
    }

    #[test]
    fn conditions_accumulate() {
        let f = JobFilter::new()
            .queue("a")
            .queue("b")
            .kind("k")
            .id_range(1, 9)
            .id(3)
            .id(5);
        assert_eq!(f.queues, ["a", "b"]);
        assert_eq!(f.ids, [3, 5]);
        assert_eq!(f.kinds, ["k"]);
        assert_eq!((f.min_id, f.max_id), (Some(1), Some(9)));
    }
}
