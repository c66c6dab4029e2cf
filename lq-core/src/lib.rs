//! # lq-core
//!
//! The producer side of litequeue: the [`Job`]
//! trait and its derive, options and [`Backoff`], the [`JobError`] a handler returns,
//! the link-time [`Registry`], transactional enqueue and job control.
//!
//! Applications usually depend on `lq-runtime`, which re-exports everything here;
//! a service that only enqueues can depend on `lq-core` alone.
//!
//! ```no_run
//! use lq_core::Job;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Job)]
//! #[job(queue = "emails", unique_key = "welcome:{user_id}")]
//! struct SendWelcomeEmail { user_id: i64 }
//!
//! # async fn run(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! let mut tx = pool.begin().await?;
//! // ... business writes on &mut *tx ...
//! let job = SendWelcomeEmail { user_id: 42 }.enqueue(&mut tx).await?;
//! tx.commit().await?; // the job exists iff this commits
//! println!("job {} (existing: {})", job.id, job.existing);
//! # Ok(()) }
//! ```

extern crate self as lq_core;

mod app_state;
mod attempt_error;
mod backoff;
mod clock;
mod context;
pub mod control;
pub mod cron;
#[doc(hidden)]
pub mod db;
mod enqueue;
mod enqueuer;
mod error;
mod error_text;
mod finite_floats;
mod hold;
mod job;
mod job_error;
mod job_filter;
mod migrate;
mod names;
mod notify;
mod perform;
mod queue_limits;
mod rate_limit;
mod registry;
mod sqlstate;
mod state;
mod target;
mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;

#[doc(hidden)]
pub mod __private;

pub use app_state::AppState;
pub use attempt_error::AttemptError;
pub use backoff::Backoff;
/// chrono, the version whose times this API takes and returns (`run_at`, the
/// times in `control::JobRow`): name them without a dependency of your own.
pub use chrono;
pub use clock::database_now;
#[doc(hidden)]
pub use context::ContextParts;
pub use context::JobContext;
pub use cron::CronTick;
pub use enqueue::{BulkEnqueued, EnqueueOptions, Enqueued, MAX_META_BYTES, MAX_UNIQUE_KEY_BYTES};
pub use enqueuer::{Enqueuer, DEFAULT_ENQUEUER_CONNECTIONS};
pub use error::{Error, Result};
pub use error_text::{storable_error, MAX_ERRORS_KEPT, MAX_ERROR_BYTES};
pub use job::{CatchUp, CronSpec, Job, JobOptions, DEFAULT_LEASE, MAX_PAYLOAD_BYTES};
pub use job_error::{chain, BoxError, Failure, JobError};
pub use job_filter::{JobFilter, Readiness};
pub use lq_macros::Job;
#[doc(hidden)]
pub use migrate::{declared_serves_from, ensure_newer_schema_serves_this_build};
pub use migrate::{migrate, pending_migrations, schema_version, PendingMigration, SCHEMA_VERSION};
pub use names::{validate_name, MAX_NAME_LEN};
pub use perform::Perform;
pub use queue_limits::QueueLimits;
pub use rate_limit::{RateLimit, MAX_RATE_PERIOD};
pub use registry::{JobDescriptor, PerformFn, Registry};
pub use sqlstate::{lacks_grant, names_missing_object, sqlstate_in};
/// sqlx, the version whose `PgPool` and `Transaction` this API takes.
pub use sqlx;
pub use state::JobState;
pub use target::EnqueueTarget;
