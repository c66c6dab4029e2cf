//! # lq-runtime
//!
//! Background jobs for Rust applications that already run PostgreSQL. A job is a
//! row; workers claim rows with one `FOR UPDATE SKIP LOCKED` statement, decode each
//! payload into its `#[derive(Job)]` type, call its [`Perform::perform`], and record
//! the outcome under the claim's lease token. This crate re-exports the public API
//! of `lq-core`, so an application needs this one dependency; [`Result`] and
//! [`Error`] cover both (a core error converts with `?`).
//!
//! ```toml
//! [dependencies]
//! lq-runtime = { path = "../litequeue/lq-runtime" }  # not on crates.io yet
//! sqlx = { version = "0.8", default-features = false, features = ["runtime-tokio", "postgres"] }
//! tokio = { version = "1", features = ["macros", "rt-multi-thread", "signal"] }
//! serde = { version = "1", features = ["derive"] }
//! ```
//!
//! sqlx must be 0.8: its `PgPool` and `Transaction` appear in this API.
//!
//! Features, all off by default: `metrics` (counters, histograms and the
//! leader's queue gauges through the [`metrics`](https://docs.rs/metrics)
//! facade), `otel` (the enqueuing span's trace context carried to each
//! attempt's `lq.job` span, through `tracing-opentelemetry`), `testing` (the
//! `testing` module, for tests of code that enqueues and performs).
//!
//! ## Quick start
//!
//! ```no_run
//! use lq_runtime::{Job, JobContext, JobError, Perform, Runtime};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Job)]
//! #[job(queue = "emails", max_attempts = 5, unique_key = "welcome:{user_id}")]
//! struct SendWelcomeEmail { user_id: i64 }
//!
//! impl Perform for SendWelcomeEmail {
//!     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
//!         println!("welcome, user {} (attempt {})", self.user_id, ctx.attempt());
//!         Ok(())
//!     }
//! }
//!
//! /// Recurring: one job per tick across every runtime serving its queue.
//! #[derive(Serialize, Deserialize, Default, Job)]
//! #[job(queue = "emails", cron = "0 3 * * *", cron_tz = "Europe/Paris")]
//! struct NightlyDigest;
//!
//! impl Perform for NightlyDigest {
//!     async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
//!         Ok(())
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> lq_runtime::Result<()> {
//!     let pool = sqlx::PgPool::connect("postgres://localhost/app").await?;
//!     lq_runtime::migrate(&pool).await?;
//!
//!     // The job exists iff this transaction commits.
//!     let mut tx = pool.begin().await?;
//!     SendWelcomeEmail { user_id: 7 }.enqueue(&mut tx).await?;
//!     tx.commit().await?;
//!
//!     let runtime = Runtime::builder(pool).queue("emails", 8).start().await?;
//!     runtime.shutdown_on_signal().await // SIGTERM or Ctrl-C: a graceful stop
//! }
//! ```
//!
//! ## `#[job(...)]` attributes
//!
//! Every key is optional; every mistake is a compile error at the offending token.
//!
//! | key | value | default |
//! | --- | --- | --- |
//! | `kind` | string stored in each row; set it so the type can be renamed | the type's name |
//! | `queue` | string | `"default"` |
//! | `priority` | `i16`; larger runs first | `0` |
//! | `max_attempts` | integer 1–2,147,483,647, counted at claim | `20` |
//! | `backoff` | `exponential(base = "1s", max = "1h", jitter = 0.1)` \| `fixed("30s")` \| `linear(step = "10s", max = "10m")` \| `path::to::fn` (`fn(u32) -> Duration`) | `exponential(..)` as shown |
//! | `unique_key` | template over fields, `"order:{order_id}"`: one live job per kind and key | none |
//! | `timeout` | duration per attempt, at least 1 ms | none |
//! | `lease` | duration from 1 s to 1 day; heartbeats renew it | `60s` |
//! | `cron` | 5 fields, 6 with leading seconds, or `"@daily"`-style; the type must be `Default` | none |
//! | `cron_tz` | IANA zone | `"UTC"` |
//! | `cron_catch_up` | `"once"` \| `"skip"` | `"once"` |
//! | `crate` | string: path to litequeue in generated code (`"my_app::lq"`) | `lq_runtime`, else `lq_core` |
//!
//! The derive's documentation ([`Job`](derive@Job)) details templates, backoff
//! forms and cron. What the attributes produce:
//!
//! ```
//! use lq_runtime::Job;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Job)]
//! #[job(queue = "emails", priority = 10, max_attempts = 5,
//!       backoff = exponential(base = "2s", max = "1h", jitter = 0.1),
//!       unique_key = "welcome:{user_id}", timeout = "30s")]
//! struct SendWelcomeEmail { user_id: i64 }
//!
//! #[derive(Serialize, Deserialize, Default, Job)]
//! #[job(cron = "0 3 * * *", cron_tz = "Europe/Paris", cron_catch_up = "skip")]
//! struct NightlyReport;
//!
//! let job = SendWelcomeEmail { user_id: 42 };
//! assert_eq!(SendWelcomeEmail::KIND, "SendWelcomeEmail");
//! assert_eq!(SendWelcomeEmail::OPTIONS.queue, "emails");
//! assert_eq!(job.unique_key().as_deref(), Some("welcome:42"));
//! assert_eq!(NightlyReport::OPTIONS.cron.unwrap().tz, "Europe/Paris");
//! ```
//!
//! ## Guarantees, in short
//!
//! A job is visible iff its transaction committed; it runs at least once until it
//! succeeds, is cancelled or is dead; every write after the claim is fenced by the
//! claim's lease token; attempts are counted at claim; bad input ends in a
//! documented state with its reason stored, never stuck. The repository's README
//! lists each guarantee and each bad input with its end state.

extern crate self as lq_runtime;

mod attempt;
mod batch_size;
mod builder;
mod cancel_hints;
mod claim_ahead;
mod claim_turns;
mod cluster;
mod completer;
mod config;
mod decode_error;
mod error;
mod executor;
#[cfg(feature = "metrics")]
mod gauges;
mod heartbeat;
mod hot_conn;
mod inflight;
mod listener;
mod orphan_leases;
mod poller;
mod preflight;
mod producer;
mod pruner;
#[cfg(feature = "metrics")]
mod publisher;
mod quarantine;
mod rescuer;
mod rollup;
mod runtime;
mod scheduler;
mod shared;
mod slots;
mod stale_conns;
mod stats;
mod tally;
mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
mod unknown_kinds;
mod vacuumer;
mod wake;

pub use builder::RuntimeBuilder;
pub use config::RuntimeConfig;
pub use error::{Error, Result};
/// What `#[derive(Job)]` expands to; not for direct use.
#[doc(hidden)]
pub use lq_core::__private;
pub use lq_core::Error as CoreError;
pub use lq_core::{
    chain, chrono, control, cron, database_now, lacks_grant, migrate, names_missing_object,
    pending_migrations, schema_version, sqlstate_in, sqlx, storable_error, validate_name, AppState,
    AttemptError, Backoff, BoxError, BulkEnqueued, CatchUp, CronSpec, CronTick, EnqueueOptions,
    EnqueueTarget, Enqueued, Enqueuer, Failure, Job, JobContext, JobDescriptor, JobError,
    JobFilter, JobOptions, JobState, PendingMigration, Perform, PerformFn, QueueLimits, RateLimit,
    Readiness, Registry, DEFAULT_ENQUEUER_CONNECTIONS, DEFAULT_LEASE, MAX_ERRORS_KEPT,
    MAX_ERROR_BYTES, MAX_META_BYTES, MAX_NAME_LEN, MAX_PAYLOAD_BYTES, MAX_RATE_PERIOD,
    MAX_UNIQUE_KEY_BYTES, SCHEMA_VERSION,
};
pub use preflight::MAX_CONCURRENCY;
pub use runtime::Runtime;
pub use stats::StatsSnapshot;
