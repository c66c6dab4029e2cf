//! `#[derive(Job)]` for litequeue.
//!
//! Use it through `lq_runtime::Job` or `lq_core::Job`; this crate is an implementation
//! detail of those two. The derive implements `Job` for a serde struct (the type must
//! derive `Serialize` and `Deserialize`, and `Default` for a cron job) and registers
//! it with `inventory`, so the runtime finds it without any manual registration.
//!
//! Every setting goes in `#[job(...)]`; all are optional and several `#[job]`
//! attributes merge. Every mistake is a compile error at the offending token that
//! says how to fix it.
//!
//! ```
//! use lq_core::Job; // or lq_runtime::Job: the same derive
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
//! The attributes, with their defaults and the details of each (templates,
//! backoff forms, cron), are documented on the derive itself: `lq_runtime::Job`
//! (derive macro), where users of `lq_runtime` find them.

mod ast;
mod attr;
mod backoff;
mod cron;
mod diag;
mod duration;
mod expand;
mod fallback;
mod krate;
mod lit;
mod template;
mod valid;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Implements `Job` for a serde struct and registers it with the runtime.
///
/// Every setting goes in `#[job(...)]`; all are optional and several `#[job]`
/// attributes merge. Every mistake is a compile error at the offending token
/// that says how to fix it. The type must derive `Serialize` and
/// `Deserialize` (and `Default` for a cron job).
///
/// ```
/// use lq_core::{Job, JobContext, JobError, Perform}; // or from lq_runtime
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(kind = "billing.charge", queue = "billing", max_attempts = 5,
///       backoff = fixed("30s"), unique_key = "charge:{invoice_id}")]
/// struct Charge { invoice_id: i64 }
///
/// impl Perform for Charge {
///     async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
///         Ok(())
///     }
/// }
///
/// assert_eq!(Charge::KIND, "billing.charge");
/// assert_eq!(Charge { invoice_id: 7 }.unique_key().as_deref(), Some("charge:7"));
/// ```
///
/// # Attributes
///
/// | key | value | default |
/// | --- | --- | --- |
/// | `kind` | string | the type's name, verbatim (`"SendWelcomeEmail"`) |
/// | `queue` | string | `"default"` |
/// | `priority` | integer, `i16` | `0` |
/// | `max_attempts` | integer, 1 to 2,147,483,647 | `20` |
/// | `backoff` | see below | `Backoff::DEFAULT`: `exponential(base = "1s", max = "1h", jitter = 0.1)` |
/// | `unique_key` | template string | none: every enqueue creates a job |
/// | `timeout` | duration string, at least `"1ms"` | none: an attempt may run forever |
/// | `lease` | duration string, `"1s"` to `"24h"` | `DEFAULT_LEASE` (60 s) |
/// | `cron` | cron expression | none: not recurring |
/// | `cron_tz` | IANA time zone | `"UTC"` |
/// | `cron_catch_up` | `"once"` or `"skip"` | `"once"` |
/// | `crate` | path string | `lq_runtime`, else `lq_core`, as found in `Cargo.toml` |
///
/// ## `kind = "..."`
///
/// The name stored in each job row and used to find the type when a worker claims
/// the row. Defaults to the type's name verbatim. Set it explicitly to rename or move
/// the type later without orphaning jobs already stored under the old name. Kinds
/// follow the naming rule: 1–128 characters of `A-Z a-z 0-9 _ - . :`, not only
/// dots. A type whose name breaks the rule (a non-ASCII one) needs an explicit
/// `kind`.
///
/// ## `queue = "..."`
///
/// The queue jobs are enqueued on; a runtime works the queues it is configured with.
/// Default `"default"`. Same naming rule as `kind`.
///
/// ## `priority = N`
///
/// An `i16` (`-32768..=32767`); within a queue, larger runs first. Default `0`.
///
/// ## `max_attempts = N`
///
/// How many times a job may be claimed before it is dead; at least 1, at most
/// 2,147,483,647 (a PostgreSQL `integer`). Attempts are
/// counted at claim, so a job that crashes its worker also uses one. Default `20`.
///
/// ## `backoff = ...`
///
/// The delay before a failed attempt is retried. Durations are strings such as
/// `"500ms"`, `"30s"`, `"5m"` or `"1h 30m"`.
///
/// - `exponential(base = "1s", max = "1h", jitter = 0.1)`: `base * 2^(attempt-1)`,
///   capped at `max`, spread by ±`jitter` (a fraction in `0.0..=1.0`). Every argument
///   is optional, with the defaults shown; a bare `exponential` means all defaults.
/// - `fixed("30s")`: the same delay after every failure.
/// - `linear(step = "10s", max = "10m")`: `step * attempt`, capped at `max`; `step`
///   is required, `max` defaults to `"1h"`.
/// - `path::to::function`: any `fn(u32) -> std::time::Duration`, called with the
///   attempt number (1 for the first failure); `Self::function` names an
///   associated function of the job type.
///
/// `base` and `step` must be above zero (for retries at once, `fixed("0s")`),
/// and every duration at most 100 years.
///
/// Default: `Backoff::DEFAULT`, which is `exponential(base = "1s", max = "1h", jitter = 0.1)`.
///
/// ## `unique_key = "..."`
///
/// At most one live (queued or running) job per key: a duplicate enqueue returns
/// the existing job's id. The template names fields in braces, `"order:{order_id}"`,
/// or positions in a tuple struct, `"{0}"`; `{{` and `}}` are literal braces. Each
/// field is formatted with `Display`. A template without placeholders is a
/// constant key: at most one live job of the type. Default: no key.
///
/// Distinct field values always render distinct keys. Placeholders need text
/// between them (`"{tenant}:{account}"`, not `"{tenant}{account}"`), and that text
/// must not start with `\`. With two or more placeholders, each value is escaped: a
/// backslash is put before every `\` in it and before every character that starts
/// the text between two placeholders, so `"k:{a}:{b}"` renders `a = "1:2", b = "3"`
/// as `k:1\:2:3` and `a = "1", b = "2:3"` as `k:1:2\:3`. Values without those
/// characters render as written (`k:42:7`), and with a single placeholder nothing
/// is escaped, so keys of numbers and typical ids look as they always did.
///
/// ## `timeout = "30s"`
///
/// The longest one attempt may run; when it expires the attempt fails and is retried
/// by `backoff`. Default: no limit.
///
/// ## `lease = "60s"`
///
/// How long a claim holds the job before another worker may rescue it; heartbeats
/// renew it while the job runs. From `"1s"` to `"24h"`. Default `DEFAULT_LEASE` (60 s).
///
/// ## `cron = "..."`, `cron_tz = "..."`, `cron_catch_up = "..."`
///
/// Makes the type recurring: once per tick, cluster-wide, the runtime enqueues
/// `T::default()`, so the type must implement `Default`. The expression has 5 fields
/// (`minute hour day-of-month month day-of-week`, like `"*/5 * * * *"`), 6 with
/// leading seconds (`"0 */5 * * * *"`), or is a nickname such as `"@daily"`; it is
/// checked at compile time, including that it ever fires (`"0 0 31 2 *"`, February 31,
/// is an error; the leap day `"0 0 29 2 *"` is fine). `cron_tz` is the IANA zone the expression is read in
/// (default `"UTC"`). `cron_catch_up` says what happens to ticks missed while no
/// runtime ran: `"once"` runs one job for the whole missed window (default), `"skip"`
/// drops them. `cron_tz` and `cron_catch_up` require `cron`. Default: not recurring.
///
/// ## `crate = "path"`
///
/// The path to the litequeue crate in the generated code, for code that reaches it
/// through a re-export (`crate = "my_app::lq"`). By default the derive looks up this
/// package's `Cargo.toml`: `lq-runtime` if listed in `[dependencies]` (under any
/// renamed key), else `lq-core`; a crate only in `[dev-dependencies]`, optional
/// or for one target is taken only when neither is a plain dependency. Either
/// crate alone is enough.
///
/// # Inputs the derive rejects
///
/// Enums, unions and generic types: a kind names one concrete struct. Wrap an enum
/// in a struct (`struct Job { action: Action }`). Lifetime parameters too: a job
/// is decoded from stored JSON, so it owns its fields (`String`, not `&'a str`).
#[proc_macro_derive(Job, attributes(job))]
pub fn derive_job(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match derive(&input) {
        Ok(tokens) => tokens,
        Err(error) => fallback::emit(&input, error),
    }
    .into()
}

/// input -> ast -> attr -> valid -> expand; errors of the first two stages combine.
fn derive(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let mut errors = diag::Errors::default();
    let ast = errors.ok(ast::Input::from_derive(input));
    let entries = errors.ok(attr::Entries::from_attrs(&input.attrs));
    let (Some(ast), Some(entries)) = (ast, entries) else {
        return errors.finish(proc_macro2::TokenStream::new());
    };
    let spec = valid::validate(&ast, entries)?;
    let krate = krate::resolve(spec.krate.as_ref())?;
    Ok(expand::expand(&spec, &krate))
}
