//! Items the derive's expansion refers to. Not a public API.

use std::marker::PhantomData;

use futures_util::FutureExt;

pub use inventory;
pub use serde_json;

#[path = "unique_key_escape.rs"]
mod unique_key_escape;
pub use unique_key_escape::push_key_value;

use crate::{registry::PerformFn, Job, JobContext, Perform};

/// Decodes the payload into `T` and starts its `perform`.
pub fn perform_erased<T: Perform>(
    payload: &str,
    ctx: JobContext,
) -> Result<futures_util::future::BoxFuture<'static, Result<(), crate::JobError>>, serde_json::Error>
{
    let job: T = serde_json::from_str(payload)?;
    Ok(async move { job.perform(&ctx).await }.boxed())
}

/// Picks `Some(perform)` when `T: Perform` and `None` otherwise (autoref specialisation),
/// so a producer-only crate can derive `Job` without writing `perform`.
pub struct Probe<T>(PhantomData<T>);

impl<T> Probe<T> {
    /// A probe for `T`.
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T> Default for Probe<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Chosen when the type implements [`Perform`].
pub trait ViaPerform {
    /// The handler.
    fn handler(&self) -> Option<PerformFn>;
}

impl<T: Perform> ViaPerform for Probe<T> {
    fn handler(&self) -> Option<PerformFn> {
        Some(perform_erased::<T>)
    }
}

/// Chosen when the type does not implement [`Perform`].
pub trait NoPerform {
    /// No handler.
    fn handler(&self) -> Option<PerformFn>;
}

impl<T> NoPerform for &Probe<T> {
    fn handler(&self) -> Option<PerformFn> {
        None
    }
}

/// The payload of one cron tick: the type's `Default`, serialised.
pub fn default_payload<T: Job + Default>() -> serde_json::Value {
    serde_json::to_value(T::default()).unwrap_or(serde_json::Value::Null)
}

/// The unique key of a cron job's tick (`T::default()`'s), if the type has one.
pub fn default_unique_key<T: Job + Default>() -> Option<String> {
    T::default().unique_key()
}

/// A readable compile error when a cron job cannot be built without arguments.
#[diagnostic::on_unimplemented(
    message = "a cron job must be buildable without arguments, and `{Self}` does not implement `Default`",
    label = "add `#[derive(Default)]` (or impl Default) so each tick can build the job",
    note = "every tick enqueues `{Self}::default()`"
)]
pub trait CronDefault {}

impl<T: Default> CronDefault for T {}

/// Asserts `T: CronDefault` in the derive's expansion.
pub const fn assert_cron_default<T: CronDefault + ?Sized>() {}
