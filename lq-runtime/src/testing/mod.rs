//! Testing application code that enqueues and performs jobs, in the spirit of
//! Oban.Testing and River's `rivertest` (behind the `testing` feature).
//!
//! - **What was enqueued**: [`assert_enqueued`], [`assert_enqueued_where`],
//!   [`assert_enqueued_many`], [`refute_enqueued`], [`all_enqueued`]. They read
//!   through any connection, so they see a test's own uncommitted transaction.
//! - **A handler alone, no database**: [`perform`] runs it with a
//!   [`TestContext`] (attempt, state, a cancellation to fire) and says what the
//!   runtime would do next, as a [`Performed`].
//! - **The real path, in the calling task**: [`work`] enqueues one job and runs
//!   it; [`drain`] runs what is ready in some queues ([`Drain`]: a single pass
//!   or recursive, scheduled jobs included or not, a limit). Both claim, run and
//!   record outcomes with the runtime's own statements and rules.
//! - **Waiting on a real runtime**: [`wait_for_job`] polls the database, never
//!   sleeps for a guessed time.
//!
//! There is no "inline" mode that runs jobs at enqueue: it would run a job whose
//! transaction may still roll back.
//!
//! ## With `#[sqlx::test]`
//!
//! `#[sqlx::test]` gives each test a fresh database; apply the schema with
//! [`crate::migrate`] first (litequeue's migrations are not sqlx's, so pass
//! `migrations = false`):
//!
//! ```no_run
//! # use lq_runtime::{Job, JobContext, JobError, Perform};
//! # #[derive(serde::Serialize, serde::Deserialize, Job)]
//! # struct SendWelcomeEmail { user_id: i64 }
//! # impl Perform for SendWelcomeEmail {
//! #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
//! # }
//! #[sqlx::test(migrations = false)]
//! async fn welcome_email_is_sent(pool: sqlx::PgPool) -> lq_runtime::Result<()> {
//!     lq_runtime::migrate(&pool).await?;
//!     let row = lq_runtime::testing::work(&pool, SendWelcomeEmail { user_id: 42 }).await?;
//!     assert_eq!(row.state, lq_runtime::JobState::Succeeded);
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! `#[sqlx::test]` needs sqlx's `macros` and `migrate` features in your
//! `[dev-dependencies]`, and `DATABASE_URL` when the tests run.

mod perform;
mod runner;

pub use lq_core::testing::{
    all_enqueued, assert_enqueued, assert_enqueued_many, assert_enqueued_where, perform_job,
    refute_enqueued, wait_for_job, EnqueuedJob, TestContext,
};
pub use perform::{perform, Performed};
pub use runner::{drain, work, Drain, DrainReport};
