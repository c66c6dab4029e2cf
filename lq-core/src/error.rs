//! The error type of the producer side: enqueue, migrate, job control.

use std::time::Duration;

/// Everything that can go wrong outside a job's own `perform`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A statement failed; `op` names it (for example `job_insert`).
    #[error("database error in {op}")]
    Database {
        /// The statement that failed.
        op: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A statement did not answer in time; the connection is dropped. A write
    /// may still have committed (its answer was what did not arrive): an
    /// enqueue called again may enqueue the job twice, unless the job has a
    /// unique key.
    #[error("database call {op} timed out after {after:?}")]
    Timeout {
        /// The statement that timed out.
        op: &'static str,
        /// The limit it hit.
        after: Duration,
    },
    /// The serialised payload is bigger than [`crate::MAX_PAYLOAD_BYTES`]; nothing was written.
    #[error("payload of job kind {kind:?}{} is {size} bytes, over the {limit}-byte limit: store the data in a table and enqueue its id", at(.position))]
    PayloadTooLarge {
        /// Job kind.
        kind: &'static str,
        /// Position of the job in an `enqueue_many` batch; `None` for one job.
        position: Option<usize>,
        /// Serialised size in bytes.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The payload holds a NUL character (`\u0000` in a string), which PostgreSQL's
    /// `jsonb` cannot store; nothing was written.
    #[error("payload of job kind {kind:?}{} holds a NUL character (\\u0000), which PostgreSQL cannot store: remove it or encode the field (base64, hex)", at(.position))]
    PayloadHasNul {
        /// Job kind.
        kind: &'static str,
        /// Position of the job in an `enqueue_many` batch; `None` for one job.
        position: Option<usize>,
    },
    /// The payload holds a NaN or an infinite number, which JSON cannot hold
    /// (serde_json would write `null`, and the job would run on other data or
    /// fail to decode); nothing was written.
    #[error("payload of job kind {kind:?}{} holds a NaN or infinite number, which JSON cannot hold: it would be stored as null; check the value, or send it as a string", at(.position))]
    NonFiniteNumber {
        /// Job kind.
        kind: &'static str,
        /// Position of the job in an `enqueue_many` batch; `None` for one job.
        position: Option<usize>,
    },
    /// The metadata given with `EnqueueOptions::meta` cannot be stored; nothing
    /// was written.
    #[error("metadata of job kind {kind:?} {reason}")]
    InvalidMeta {
        /// Job kind.
        kind: &'static str,
        /// What is wrong, and the fix.
        reason: &'static str,
    },
    /// A rendered unique key cannot be stored; nothing was written.
    #[error("unique key of job kind {kind:?}{} ({len} bytes) {reason}", at(.position))]
    InvalidUniqueKey {
        /// Job kind.
        kind: &'static str,
        /// Position of the job in an `enqueue_many` batch; `None` for one job.
        position: Option<usize>,
        /// The key's length in bytes.
        len: usize,
        /// What is wrong, and the fix.
        reason: &'static str,
    },
    /// The payload could not be serialised to JSON.
    #[error("payload of job kind {kind:?} does not serialise to JSON")]
    Serialize {
        /// Job kind.
        kind: &'static str,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// A queue or kind name breaks the naming rule (1–128 of `A-Z a-z 0-9 _ - . :`).
    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        /// `"queue"` or `"kind"`.
        what: &'static str,
        /// The offending name.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// Two linked types declare the same kind; the runtime refuses to start.
    #[error("job kind {kind:?} is declared by two types, {first} and {second}: give one of them #[job(kind = \"...\")]")]
    DuplicateKind {
        /// The contested kind.
        kind: &'static str,
        /// One type.
        first: &'static str,
        /// The other type.
        second: &'static str,
    },
    /// The `lq` schema is missing or older than this library.
    #[error("the lq schema is at version {found}, this library needs {needed}: run `lq migrate`, or call migrate(&pool) (lq_core or lq_runtime) first")]
    NotMigrated {
        /// Version found in the database (0 when absent).
        found: i32,
        /// Version this library needs.
        needed: i32,
    },
    /// The `lq` schema is older than this library, and the role calling
    /// `migrate()` does not own it (a worker starting before the release's
    /// migration ran): its owner must migrate it.
    #[error("the lq schema is at version {found}, this library needs {needed}, and only its owner {owner:?} can migrate it: run `lq migrate` (or lq_runtime::migrate) as that role")]
    SchemaBehind {
        /// Version found in the database.
        found: i32,
        /// Version this library needs.
        needed: i32,
        /// The role that owns the schema.
        owner: String,
    },
    /// Schema `lq` is owned by a role the migrating role is not a member of, so
    /// `migrate()` will not change it (that role could replace its tables).
    #[error("schema lq is owned by role {owner:?}, which this role is not a member of: migrate as that role, or drop the schema if you did not create it")]
    SchemaNotOwned {
        /// The owning role.
        owner: String,
    },
    /// `lq.schema_migrations` is not the plain table the migrations make (a view,
    /// a table with row security, or one owned by another role than the
    /// schema), so litequeue will not read it: reading it could run another
    /// role's code.
    #[error("lq.schema_migrations is not the table litequeue's migrations make ({what}), so it was not read: drop schema lq if you did not create it")]
    SchemaTampered {
        /// What is wrong with it.
        what: String,
    },
    /// The database holds a newer schema than this library knows, and one of
    /// the migrations above this library's version no longer serves it (each
    /// records the oldest version it works with).
    #[error(
        "the lq schema is at version {found}, newer than this library's {known}: upgrade litequeue"
    )]
    SchemaTooNew {
        /// Version in the database.
        found: i32,
        /// Newest version this library knows.
        known: i32,
    },
    /// An [`crate::Enqueuer`] lost the statement carrying this job along with
    /// others (its connection failed or timed out before answering): the job may
    /// or may not have been written, as with any statement whose answer was lost.
    /// A job the server refused gets the server's error instead.
    #[error("enqueuer statement {op} failed: {reason}")]
    EnqueuerFailed {
        /// The statement that failed.
        op: &'static str,
        /// What went wrong, as text (one error shared by the statement's jobs).
        reason: String,
    },
    /// The live job holding a unique key kept finishing between insert and lookup.
    #[error("unique key {key:?} kept changing hands during enqueue; retry the enqueue")]
    UniqueKeyContended {
        /// The key.
        key: String,
    },
    /// A cron expression or time zone that does not parse.
    #[error("invalid cron schedule {expr:?}: {reason}")]
    InvalidCron {
        /// The expression.
        expr: String,
        /// What is wrong.
        reason: String,
    },
    /// A control call's filter, limit or retention that the database could not
    /// take: an age beyond the calendar, a NUL in a JSON filter, a negative limit.
    #[error("invalid job filter: {reason}")]
    InvalidFilter {
        /// What is wrong, naming the field.
        reason: String,
    },
    /// No job has this id.
    #[error("job {id} does not exist")]
    NotFound {
        /// Job id.
        id: i64,
    },
    /// A control call found the job in a state that does not allow it.
    #[error("job {id} is {state}, so it cannot be {action}")]
    WrongState {
        /// Job id.
        id: i64,
        /// Its current state.
        state: crate::JobState,
        /// What was asked (`"cancelled"`, `"retried"`, `"deleted"`, `"run now"`).
        action: &'static str,
    },
    /// A delete by id found two jobs with that id, a live one and one in the
    /// history (ids restarted by `TRUNCATE … RESTART IDENTITY`), and no state to
    /// tell them apart, so it deleted neither.
    #[error("job id {id} names two jobs, a {live} one and a {finished} one (ids restarted after a TRUNCATE ... RESTART IDENTITY), so neither was deleted: filter by state to say which")]
    AmbiguousId {
        /// The id both jobs have.
        id: i64,
        /// The live job's state.
        live: crate::JobState,
        /// The finished job's state.
        finished: crate::JobState,
    },
    /// A bulk action left a job alone that changed state after its filter chose
    /// it and is no longer in the filter's states (a queued job that started
    /// running before `cancel --state queued` reached it).
    #[error("job {id} became {state} after the filter chose it, so it was not {action}")]
    LeftFilter {
        /// Job id.
        id: i64,
        /// Its state now, outside the filter's states.
        state: crate::JobState,
        /// What was asked (`"cancelled"`, `"retried"`, `"deleted"`, `"run now"`).
        action: &'static str,
    },
    /// A bulk action ([`crate::control::cancel_matching`] and its siblings) failed
    /// partway. It works in batches of short transactions, so the batches before
    /// the failure were committed and stay done: `report.done` lists every job
    /// changed (with those of a batch that committed before a lookup about its
    /// refusals failed), and `source` says what stopped it. The jobs not yet
    /// reached are unchanged, except that a batch whose commit went unanswered
    /// (a lost connection, a timeout) may have committed unseen. Running the
    /// same action again takes up the rest.
    #[error("bulk action stopped partway: {} jobs were already {action} and stay so; the jobs not yet reached are unchanged", report.done.len())]
    BulkStopped {
        /// What the action does to a job (`"retried"`, `"cancelled"`, `"deleted"`,
        /// `"run now"`).
        action: &'static str,
        /// What the committed batches did, as a finished action reports it.
        report: Box<crate::control::BulkReport>,
        /// The error that stopped it.
        #[source]
        source: Box<Error>,
    },
    /// [`crate::control::prune`] failed after some of its batches committed:
    /// those `pruned` finished jobs are deleted for good, the rest are untouched
    /// (a batch whose commit went unanswered may have committed unseen), and
    /// `source` says what stopped it. Pruning again takes up the rest.
    #[error("prune stopped partway: {pruned} finished jobs were already deleted; the rest are unchanged")]
    PruneStopped {
        /// Finished jobs the committed batches deleted.
        pruned: u64,
        /// The error that stopped it.
        #[source]
        source: Box<Error>,
    },
    /// Retrying a job would create a second live job with its unique key.
    #[error("job {id} cannot be retried: live job {holder} holds its unique key {key:?}")]
    UniqueKeyHeld {
        /// The job asked to be retried.
        id: i64,
        /// The live job holding the key.
        holder: i64,
        /// The key.
        key: String,
    },
    /// Running a recurring job now: no schedule of this kind is recorded.
    #[error("no recurring job of kind {kind:?} is scheduled: `lq cron list` shows the kinds a runtime has scheduled")]
    UnknownSchedule {
        /// The kind asked for.
        kind: String,
    },
    /// Running a recurring job now: its schedule is recorded, but not the job
    /// it fires (declared only by runtimes built before schema version 12, or
    /// by none since its row was written by hand).
    #[error("the schedule of kind {kind:?} does not record its job yet: start a runtime of this version that declares it, then run it again")]
    ScheduleUndeclared {
        /// The kind asked for.
        kind: String,
    },
    /// Running a recurring job now enqueued nothing: a live job of its kind
    /// holds the schedule's unique key, as a tick would have found.
    #[error(
        "no job of kind {kind:?} was enqueued: live job {holder} holds its unique key {key:?}"
    )]
    ScheduleKeyHeld {
        /// The kind asked for.
        kind: String,
        /// The live job holding the key (0 if it ended meanwhile).
        holder: i64,
        /// The key.
        key: String,
    },
    /// A testing helper waited for a job to reach a state, and it did not in time.
    #[error("job {id} did not become {wanted} within {after:?}; it is {last}")]
    WaitTimedOut {
        /// Job id.
        id: i64,
        /// The state waited for.
        wanted: crate::JobState,
        /// The state it was last seen in.
        last: crate::JobState,
        /// How long the helper waited.
        after: Duration,
    },
    /// A stored payload does not decode into the job's type (the type changed
    /// since the job was enqueued, or the row was written by hand).
    #[error("payload of job {id} (kind {kind:?}) does not decode into its type")]
    Decode {
        /// Job id.
        id: i64,
        /// Job kind.
        kind: &'static str,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
}

/// " (job N of the batch)" for an error about one job of an `enqueue_many` batch.
fn at(position: &Option<usize>) -> String {
    position.map_or_else(String::new, |i| format!(" (job {i} of the batch)"))
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
