//! `lq migrate [--dry-run]`.

use clap::Args;
use serde_json::json;
use sqlx::PgPool;

use crate::{output::Out, Failure, Outcome};

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Print the SQL that would run, and change nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) async fn run(pool: &PgPool, out: &Out, args: MigrateArgs) -> Result<Outcome, Failure> {
    let pending = lq_runtime::pending_migrations(pool).await?;
    if args.dry_run {
        let list: Vec<_> = pending
            .iter()
            .map(|m| json!({"version": m.version, "name": m.name, "sql": m.sql}))
            .collect();
        if out.is_json() {
            println!("{:#}", json!({"pending": list}));
        } else if pending.is_empty() {
            println!(
                "-- the schema is current (version {})",
                lq_runtime::SCHEMA_VERSION
            );
        } else {
            for m in &pending {
                println!("-- migration {} ({})\n{}", m.version, m.name, m.sql);
            }
        }
        return Ok(Outcome::Clean);
    }
    lq_runtime::migrate(pool).await?;
    let applied: Vec<_> = pending.iter().map(|m| m.version).collect();
    out.emit(
        json!({"applied": applied, "version": lq_runtime::SCHEMA_VERSION}),
        || {
            let mut t = crate::output::table(&["applied", "schema version"]);
            t.add_row(vec![
                format!("{applied:?}"),
                lq_runtime::SCHEMA_VERSION.to_string(),
            ]);
            t
        },
    );
    Ok(Outcome::Clean)
}
