//! `lq prune`: delete finished jobs past their retention now.

use std::time::Duration;

use clap::Args;
use serde_json::json;
use sqlx::PgPool;

use crate::{filter_args::parse_duration, output::Out, Failure, Outcome};

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Keep succeeded and cancelled jobs this long.
    #[arg(long, value_parser = parse_duration, default_value = "24h")]
    keep_finished: Duration,
    /// Keep dead jobs this long.
    #[arg(long, value_parser = parse_duration, default_value = "7d")]
    keep_dead: Duration,
}

pub(crate) async fn run(pool: &PgPool, out: &Out, args: PruneArgs) -> Result<Outcome, Failure> {
    let n = lq_runtime::control::prune(pool, args.keep_finished, args.keep_dead).await?;
    out.emit(json!({"pruned": n}), || {
        let mut t = crate::output::table(&["pruned"]);
        t.add_row(vec![n.to_string()]);
        t
    });
    Ok(Outcome::Clean)
}
