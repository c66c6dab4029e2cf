//! `lq migrate [--dry-run]`.

use clap::Args;
use serde_json::json;
use sqlx::PgPool;

use crate::{output::Out, Failure, Outcome};

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Print the SQL that would run, as one script to review or apply by hand
    /// (`psql -v ON_ERROR_STOP=1`), and change nothing.
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
        let found = lq_runtime::schema_version(pool).await?;
        // All `migrate` would run: the schema and version table, each
        // migration and its record, in one transaction.
        let script = lq_runtime::PendingMigration::script(&pending);
        if out.is_json() {
            outln!(
                "{:#}",
                json!({
                    "pending": list,
                    "script": (!script.is_empty()).then_some(&script),
                    "version": found,
                    "this_build": lq_runtime::SCHEMA_VERSION,
                })
            );
        } else if pending.is_empty() {
            if found > lq_runtime::SCHEMA_VERSION {
                outln!(
                    "-- the schema is at version {found}, newer than this build's {}, and still serves it: nothing to apply",
                    lq_runtime::SCHEMA_VERSION
                );
            } else {
                outln!("-- the schema is current (version {found})");
            }
        } else {
            out!("{script}");
        }
        return Ok(Outcome::Clean);
    }
    lq_runtime::migrate(pool).await?;
    let applied: Vec<_> = pending.iter().map(|m| m.version).collect();
    let version = lq_runtime::schema_version(pool).await?;
    let this_build = lq_runtime::SCHEMA_VERSION;
    out.emit(
        &json!({"applied": applied, "version": version, "this_build": this_build}),
        || {
            let mut t = crate::output::table(&["applied", "schema version", "this build's"]);
            t.add_row(vec![
                format!("{applied:?}"),
                version.to_string(),
                this_build.to_string(),
            ]);
            t
        },
    );
    if version > this_build {
        eprintln!(
            "lq: the schema is newer than this build and still serves it; upgrade this build when convenient"
        );
    }
    Ok(Outcome::Clean)
}
