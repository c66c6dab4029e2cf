//! # lq-runtime
//!
//! litequeue's worker side: a tokio runtime that claims jobs from PostgreSQL with
//! `FOR UPDATE SKIP LOCKED`, decodes each payload into its `#[derive(Job)]` type,
//! calls its [`Perform::perform`], and records the outcome under a lease token.
//! It re-exports all of `lq-core`, so an application needs this one dependency.
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
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::PgPool::connect("postgres://localhost/app").await?;
//! lq_runtime::migrate(&pool).await?;
//!
//! let mut tx = pool.begin().await?;
//! SendWelcomeEmail { user_id: 7 }.enqueue(&mut tx).await?;
//! tx.commit().await?;
//!
//! let runtime = Runtime::builder(pool).queue("emails", 8).start().await?;
//! runtime.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! Guarantees, in short: a job is visible iff its transaction committed; it runs at
//! least once until it succeeds, is cancelled or is dead; every write after the
//! claim is fenced by the claim's lease token; attempts are counted at claim.

extern crate self as lq_runtime;

mod builder;
mod claim_ahead;
mod completer;
mod config;
mod error;
mod executor;
mod heartbeat;
mod hot_conn;
mod inflight;
mod listener;
mod preflight;
mod producer;
mod pruner;
mod rescuer;
mod runtime;
mod scheduler;
mod shared;
mod slots;
mod stats;
mod unknown_kinds;
mod vacuumer;

pub use builder::RuntimeBuilder;
pub use config::RuntimeConfig;
pub use error::Error;
pub use lq_core::Error as CoreError;
pub use lq_core::*;
pub use preflight::MAX_CONCURRENCY;
pub use runtime::Runtime;
pub use stats::StatsSnapshot;
