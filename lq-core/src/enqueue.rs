//! Transactional enqueue: `job.enqueue(&mut tx)` and friends.

use std::time::Duration;

use chrono::{DateTime, Utc};

use tracing::Instrument;

use sqlx::PgConnection;

use crate::{
    db::{self, enqueue::NewJob},
    enqueuer::OwnedJob,
    hold, notify,
    target::Route,
    validate_name, EnqueueTarget, Error, Job, MAX_PAYLOAD_BYTES,
};

/// Bound on each enqueue statement.
const ENQUEUE_TIMEOUT: Duration = Duration::from_secs(30);

/// How often enqueue retries when the live job holding its unique key finished
/// between the insert and the lookup.
const UNIQUE_RACE_RETRIES: usize = 8;

/// The result of an enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// Id of the new job, or of the live job that already held the unique key.
    pub id: i64,
    /// True when `id` is an existing live job with the same unique key.
    pub existing: bool,
}

/// The result of a bulk enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkEnqueued {
    /// Ids of the jobs inserted, ascending.
    pub ids: Vec<i64>,
    /// How many were skipped because a live job held their unique key.
    pub skipped: usize,
}

/// Per-call overrides of a job type's settings.
///
/// ```
/// use lq_core::EnqueueOptions;
/// use std::time::Duration;
/// let opts = EnqueueOptions::new().queue("urgent").priority(5).delay(Duration::from_secs(30));
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Default)]
pub struct EnqueueOptions {
    queue: Option<String>,
    priority: Option<i16>,
    run_at: Option<DateTime<Utc>>,
    delay: Option<Duration>,
    max_attempts: Option<u32>,
    notify: Option<bool>,
    meta: serde_json::Map<String, serde_json::Value>,
    /// Set when a `meta` value did not serialise; the enqueue then fails.
    meta_unserialisable: Option<String>,
}

impl EnqueueOptions {
    /// No overrides.
    pub fn new() -> Self {
        Self::default()
    }

    /// Enqueue on `queue` instead of the type's queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Use `priority` (larger runs first) instead of the type's.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Run no earlier than `at` (wins over [`EnqueueOptions::delay`]). A time
    /// before the year 1 is taken as the start of the year 1 (due now either
    /// way): PostgreSQL stores nothing before 4713 BC.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at.max(earliest_run_at()));
        self
    }

    /// Run no earlier than `delay` after the database's `now()`; at most a
    /// hundred years ("never" in practice, as a snooze or backoff is bounded):
    /// `Duration::MAX` would pass PostgreSQL's last timestamp.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay.min(MOST_DELAY));
        self
    }

    /// Allow `n` attempts instead of the type's `max_attempts`; 0 is taken as 1,
    /// since the first run is an attempt.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Adds `key: value` to the job's metadata (a JSON object stored beside the
    /// payload, shown by `control` and the `lq` CLI, filterable with
    /// [`crate::JobFilter::meta_contains`], readable in the handler through
    /// [`crate::JobContext::meta`]): tenant, request id, tags. The key `lq` is
    /// litequeue's own (the cron tick): the enqueue refuses it with
    /// [`Error::InvalidMeta`]. `traceparent`/`tracestate` carry trace context:
    /// under the `otel` feature, with a span current, the span's context
    /// replaces a value set here for them.
    ///
    /// ```
    /// use lq_core::EnqueueOptions;
    /// let opts = EnqueueOptions::new().meta("tenant", "acme").meta("tags", ["vip"]);
    /// # let _ = opts;
    /// ```
    ///
    /// A value that does not serialise to JSON makes the enqueue fail with
    /// [`Error::InvalidMeta`], writing nothing.
    pub fn meta(mut self, key: impl Into<String>, value: impl serde::Serialize) -> Self {
        let key = key.into();
        match serde_json::to_value(value) {
            Ok(value) => {
                self.meta.insert(key, value);
            }
            Err(_) => self.meta_unserialisable = Some(key),
        }
        self
    }

    /// Send (default) or skip the wake-up NOTIFY; without it, workers find the job
    /// at their next poll.
    pub fn notify(mut self, notify: bool) -> Self {
        self.notify = Some(notify);
        self
    }

    /// The options for one enqueue; `meta` is the metadata's JSON text, if any.
    fn resolve<'a, J: Job>(&'a self, meta: Option<&'a str>) -> Result<NewJob<'a>, Error> {
        let queue = self.queue.as_deref().unwrap_or(J::OPTIONS.queue);
        validate_name("queue", queue)?;
        validate_name("kind", J::KIND)?;
        let max_attempts = self
            .max_attempts
            .unwrap_or(J::OPTIONS.max_attempts)
            .clamp(1, i32::MAX as u32);
        Ok(NewJob {
            kind: J::KIND,
            queue,
            priority: self.priority.unwrap_or(J::OPTIONS.priority),
            run_at: self.run_at,
            delay_secs: self.delay.map_or(0.0, |d| d.as_secs_f64()),
            max_attempts: max_attempts as i32,
            notify: self.notify.unwrap_or(true),
            meta,
        })
    }
}

/// Longest [`EnqueueOptions::delay`]: a hundred years.
const MOST_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Earliest [`EnqueueOptions::run_at`] kept as given: the start of the year 1.
fn earliest_run_at() -> DateTime<Utc> {
    DateTime::from_timestamp(-62_135_596_800, 0).expect("0001-01-01T00:00:00Z is in range")
}

/// Longest unique key, in bytes. The key and the kind share one entry of a btree
/// index, which PostgreSQL caps at about 2,700 bytes; a longer key would fail the
/// insert with a raw index error.
pub const MAX_UNIQUE_KEY_BYTES: usize = 2048;

/// Refuses a unique key the index cannot hold, naming the job (`position` in a batch).
fn check_key<J: Job>(key: Option<&str>, position: Option<usize>) -> Result<(), Error> {
    let Some(key) = key else { return Ok(()) };
    let reason = if key.contains('\0') {
        "holds a NUL character, which PostgreSQL cannot store: leave it out of the template's fields"
    } else if key.len() > MAX_UNIQUE_KEY_BYTES {
        "is over the 2048-byte limit: put a hash of long values in the template instead"
    } else if key.is_empty() {
        "is empty: a template must render at least one character"
    } else {
        return Ok(());
    };
    Err(Error::InvalidUniqueKey {
        kind: J::KIND,
        position,
        len: key.len(),
        reason,
    })
}

/// True when JSON text holds the escape `\u0000` (a NUL in a string), which
/// `jsonb` refuses. An escaped backslash before `u0000` is text, not a NUL.
fn has_nul_escape(json: &str) -> bool {
    let bytes = json.as_bytes();
    let mut i = 0;
    while let Some(at) = json[i..].find("\\u0000") {
        let start = i + at;
        let backslashes = bytes[..start]
            .iter()
            .rev()
            .take_while(|b| **b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return true;
        }
        i = start + 1;
    }
    false
}

/// Serialises a payload, refusing one over [`MAX_PAYLOAD_BYTES`], holding a NUL,
/// or holding a NaN or infinite number.
fn payload_of<J: Job>(job: &J, position: Option<usize>) -> Result<String, Error> {
    let text = serde_json::to_string(job).map_err(|source| Error::Serialize {
        kind: J::KIND,
        source,
    })?;
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(Error::PayloadTooLarge {
            kind: J::KIND,
            position,
            size: text.len(),
            limit: MAX_PAYLOAD_BYTES,
        });
    }
    if has_nul_escape(&text) {
        return Err(Error::PayloadHasNul {
            kind: J::KIND,
            position,
        });
    }
    // serde_json writes a NaN or an infinity as `null`; only a payload with a
    // `null` in it can hold one.
    if text.contains("null") && crate::finite_floats::holds_non_finite(job) {
        return Err(Error::NonFiniteNumber {
            kind: J::KIND,
            position,
        });
    }
    Ok(text)
}

/// Largest metadata, in bytes of JSON: it rides along with every claim.
pub const MAX_META_BYTES: usize = 64 * 1024;

/// The metadata's JSON text: the caller's keys, then the trace context of the
/// current span (under the `otel` feature); `None` when there is nothing.
fn meta_of<J: Job>(opts: &EnqueueOptions) -> Result<Option<String>, Error> {
    if opts.meta_unserialisable.is_some() {
        return Err(Error::InvalidMeta {
            kind: J::KIND,
            reason: "has a value that does not serialise to JSON",
        });
    }
    if opts.meta.contains_key(crate::cron::META_KEY) {
        // The handler would read it as a cron tick (`JobContext::cron`).
        return Err(Error::InvalidMeta {
            kind: J::KIND,
            reason: "uses the key \"lq\", which litequeue keeps for its own (the cron tick): choose another key",
        });
    }
    let mut meta = opts.meta.clone();
    crate::telemetry::inject_trace_context(&mut meta);
    if meta.is_empty() {
        return Ok(None);
    }
    let text = serde_json::Value::Object(meta).to_string();
    let invalid = |reason| Error::InvalidMeta {
        kind: J::KIND,
        reason,
    };
    if text.len() > MAX_META_BYTES {
        return Err(invalid(
            "is over the 64 KiB limit: keep identifiers and tags there, not data",
        ));
    }
    if has_nul_escape(&text) {
        return Err(invalid(
            "holds a NUL character (\\u0000), which PostgreSQL cannot store",
        ));
    }
    Ok(Some(text))
}

/// Inserts `job`; see [`Job::enqueue_with`].
pub(crate) async fn enqueue<'c, J: Job, A>(
    job: &J,
    conn: A,
    opts: &EnqueueOptions,
) -> Result<Enqueued, Error>
where
    A: EnqueueTarget<'c>,
{
    let span =
        crate::telemetry::enqueue_span(J::KIND, opts.queue.as_deref().unwrap_or(J::OPTIONS.queue));
    let meta = span.in_scope(|| meta_of::<J>(opts))?;
    let mut new = opts.resolve::<J>(meta.as_deref())?;
    let mut payload = payload_of(job, None)?;
    let mut key = job.unique_key();
    check_key::<J>(key.as_deref(), None)?;
    let queue = new.queue;
    let done = db::timed("job_insert", ENQUEUE_TIMEOUT, async {
        match conn.route() {
            Route::Conn(conn) => insert_one(conn, &new, &payload, key.as_deref()).await,
            Route::Pool(pool) => {
                let wake = Wake::plan(pool, &mut new);
                let mut conn = hold::acquire(pool).await.map_err(db::err("job_insert"))?;
                let done = insert_one(&mut conn, &new, &payload, key.as_deref()).await?;
                hold::keep(pool, conn);
                if !done.existing {
                    wake.after_commit(new.queue);
                }
                Ok(done)
            }
            Route::Enqueuer(enqueuer) => {
                let row = OwnedJob::of(J::KIND, &new);
                enqueuer
                    .insert(row, std::mem::take(&mut payload), key.take())
                    .await
            }
        }
    })
    .instrument(span.clone())
    .await;
    if let Ok(e) = &done {
        crate::telemetry::enqueued(&span, J::KIND, queue, e.id, e.existing, 1);
    }
    done
}

/// Inserts one job on `conn`, or finds the live job holding its unique key.
pub(crate) async fn insert_one(
    conn: &mut PgConnection,
    new: &NewJob<'_>,
    payload: &str,
    key: Option<&str>,
) -> Result<Enqueued, Error> {
    for _ in 0..UNIQUE_RACE_RETRIES {
        if let Some(id) = db::enqueue::job_insert(conn, new, payload, key).await? {
            return Ok(Enqueued {
                id,
                existing: false,
            });
        }
        // The key is held by a live job (the insert waited for its writer to commit).
        let key = key.unwrap_or_default();
        if let Some(id) = db::enqueue::job_find_live_by_key(conn, new.kind, key).await? {
            return Ok(Enqueued { id, existing: true });
        }
        // It finished in between: try again.
    }
    Err(Error::UniqueKeyContended {
        key: key.unwrap_or_default().to_owned(),
    })
}

/// Inserts many jobs of one type in one statement; see [`Job::enqueue_many`].
pub(crate) async fn enqueue_many<'c, J: Job, A>(
    jobs: impl IntoIterator<Item = J>,
    conn: A,
    opts: &EnqueueOptions,
) -> Result<BulkEnqueued, Error>
where
    A: EnqueueTarget<'c>,
{
    let span =
        crate::telemetry::enqueue_span(J::KIND, opts.queue.as_deref().unwrap_or(J::OPTIONS.queue));
    let meta = span.in_scope(|| meta_of::<J>(opts))?;
    let mut new = opts.resolve::<J>(meta.as_deref())?;
    let mut payloads = Vec::new();
    let mut keys = Vec::new();
    for (position, job) in jobs.into_iter().enumerate() {
        payloads.push(payload_of(&job, Some(position))?);
        let key = job.unique_key();
        check_key::<J>(key.as_deref(), Some(position))?;
        keys.push(key);
    }
    if payloads.is_empty() {
        return Ok(BulkEnqueued {
            ids: Vec::new(),
            skipped: 0,
        });
    }
    let total = payloads.len();
    let ids = db::timed("job_insert_many", ENQUEUE_TIMEOUT, async {
        match conn.route() {
            Route::Conn(conn) => db::enqueue::job_insert_many(conn, &new, &payloads, &keys).await,
            Route::Pool(pool) => {
                let wake = Wake::plan(pool, &mut new);
                let mut conn = hold::acquire(pool)
                    .await
                    .map_err(db::err("job_insert_many"))?;
                let ids = db::enqueue::job_insert_many(&mut conn, &new, &payloads, &keys).await?;
                hold::keep(pool, conn);
                if !ids.is_empty() {
                    wake.after_commit(new.queue);
                }
                Ok(ids)
            }
            Route::Enqueuer(enqueuer) => {
                let row = OwnedJob::of(J::KIND, &new);
                enqueuer
                    .insert_many(
                        row,
                        std::mem::take(&mut payloads),
                        std::mem::take(&mut keys),
                    )
                    .await
            }
        }
    })
    .instrument(span.clone())
    .await?;
    if let Some(first) = ids.first() {
        crate::telemetry::enqueued(&span, J::KIND, new.queue, *first, false, ids.len() as u64);
    }
    Ok(BulkEnqueued {
        skipped: total - ids.len(),
        ids,
    })
}

/// Whether an enqueue wants the workers woken: the job is due now and NOTIFY is on.
/// A delayed one is found by polling.
pub(crate) fn wants_wake(new: &NewJob<'_>) -> bool {
    new.notify && new.run_at.is_none() && new.delay_secs <= 0.0
}

/// How an enqueue on a pool wakes workers: where the statement commits by itself,
/// a coalesced NOTIFY after it returns (see `notify`) rather than one inside it.
struct Wake {
    pool: Option<sqlx::PgPool>,
}

impl Wake {
    fn plan(pool: &sqlx::PgPool, new: &mut NewJob<'_>) -> Self {
        let wanted = wants_wake(new);
        new.notify = false;
        Self {
            pool: wanted.then(|| pool.clone()),
        }
    }

    fn after_commit(&self, queue: &str) {
        if let Some(pool) = &self.pool {
            notify::poke(pool, queue);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::has_nul_escape;

    #[test]
    fn a_nul_escape_is_found_but_an_escaped_backslash_before_u0000_is_text() {
        assert!(has_nul_escape(r#"{"a":"x\u0000"}"#));
        assert!(!has_nul_escape(r#"{"a":"x\\u0000"}"#)); // the text \u0000
        assert!(has_nul_escape(r#"{"a":"x\\\u0000"}"#)); // a backslash, then NUL
        assert!(!has_nul_escape(r#"{"a":"plain"}"#));
    }

    #[test]
    fn serde_json_writes_a_nul_as_the_escape() {
        let text = serde_json::to_string("a\0b").unwrap();
        assert!(has_nul_escape(&text), "{text}");
    }
}
