//! `lq prune`: delete finished jobs past their retention now.

use std::time::Duration;

use clap::Args;
use serde_json::json;
use sqlx::PgPool;

use lq_runtime::{control, CoreError};

use crate::{
    filter_args::parse_duration,
    output::{human, Out},
    prompt::confirm,
    Failure, Outcome,
};

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Keep succeeded and cancelled jobs this long (match your runtime's
    /// `keep_finished`).
    #[arg(long, value_parser = parse_duration, default_value = "24h")]
    keep_finished: Duration,
    /// Keep dead jobs this long (match your runtime's `keep_dead`).
    #[arg(long, value_parser = parse_duration, default_value = "7d")]
    keep_dead: Duration,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    yes: bool,
    /// Show how many finished jobs would go, and delete nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Counts, asks (as `lq jobs delete` does), then prunes what it counted: history
/// deleted here is gone for good, and the defaults may be shorter than the
/// runtime's retention. With `--yes` it does not count: a count reads the
/// whole history past retention, which on a long one takes longer than a call
/// may, and nobody reads it.
pub(crate) async fn run(pool: &PgPool, out: &Out, args: PruneArgs) -> Result<Outcome, Failure> {
    let (keep_finished, keep_dead) = (args.keep_finished, args.keep_dead);
    let mut matched = None;
    let pruned = if args.yes && !args.dry_run {
        control::prune(pool, keep_finished, keep_dead).await
    } else {
        let counted = control::prune_count_now(pool, keep_finished, keep_dead).await?;
        matched = Some(counted.count);
        if args.dry_run || counted.count == 0 {
            out.emit(&report(args.dry_run, matched, 0, None), || {
                let mut t = crate::output::table(&["action", "finished jobs past retention"]);
                t.add_row(vec!["prune".to_owned(), counted.count.to_string()]);
                t
            });
            return Ok(Outcome::Clean);
        }
        let question = format!(
            "delete {} finished jobs for good (succeeded and cancelled over {}, dead over {})?",
            counted.count,
            human(keep_finished),
            human(keep_dead)
        );
        if !confirm(&question)? {
            return Err("not confirmed; nothing changed".into());
        }
        // Those past retention when counted: none whose retention ran out
        // while the question was read.
        control::prune_as_of(pool, keep_finished, keep_dead, counted.at).await
    };
    // A failure after some batches committed still reports what they deleted.
    let (n, stopped) = match pruned {
        Ok(n) => (n, None),
        Err(CoreError::PruneStopped { pruned, source }) => (pruned, Some(source)),
        Err(e) => return Err(e.into()),
    };
    let why = stopped.as_ref().map(|e| lq_runtime::chain(e.as_ref()));
    out.emit(&report(false, matched, n, why), || {
        let mut t = crate::output::table(&["pruned"]);
        t.add_row(vec![n.to_string()]);
        t
    });
    match stopped {
        Some(source) => Err(Box::new(CoreError::PruneStopped { pruned: n, source })),
        None => Ok(Outcome::Clean),
    }
}

/// Every `lq prune` answer in JSON has the same keys, so a script reads them
/// whichever way it ran: `matched` is the count (`null` with `--yes`, which
/// does not count), `pruned` what was deleted (0 on a dry run), `stopped` why
/// it stopped partway (`null` when it did not).
fn report(
    dry_run: bool,
    matched: Option<u64>,
    pruned: u64,
    stopped: Option<String>,
) -> serde_json::Value {
    json!({
        "action": "prune",
        "dry_run": dry_run,
        "matched": matched,
        "pruned": pruned,
        "stopped": stopped,
    })
}
