//! Statements of the migration runner.

use sqlx::PgConnection;

use super::err;
use crate::Error;

/// Arbitrary constant key of the advisory lock that serialises migrations.
const MIGRATION_LOCK_KEY: i64 = 0x6c71_6d69_6772; // "lqmigr"

/// The version table as the first migration finds it (version 10 adds
/// `serves_from`).
const VERSION_TABLE: &str = "\
create table if not exists lq.schema_migrations (
    version    integer primary key,
    name       text not null,
    applied_at timestamptz not null default now()
);";

/// The statement recording a migration: `$3` is its `serves_from`, recorded
/// from version 10 on.
fn record_statement(with_serves_from: bool) -> &'static str {
    if with_serves_from {
        "insert into lq.schema_migrations (version, name, serves_from) values ($1, $2, $3)"
    } else {
        "insert into lq.schema_migrations (version, name) values ($1, $2)"
    }
}

/// The statements [`lock`], [`apply`] and the migrations run, as one script
/// to apply by hand (`psql -v ON_ERROR_STOP=1`): one transaction that takes
/// the migration lock, creates the schema and its version table if
/// `bootstrap`, then runs each of `migrations` (`(version, name, sql,
/// serves_from)`) and records it.
pub fn script<'a>(
    bootstrap: bool,
    migrations: impl IntoIterator<Item = (i32, &'a str, &'a str, Option<i32>)>,
) -> String {
    let mut out = format!(
        "-- litequeue's schema migrations, as `lq migrate` runs them: one transaction.\n\
         begin;\n\
         set local search_path = {};\n\
         -- Waits for a migration running elsewhere, as `lq migrate` does.\n\
         select pg_catalog.pg_advisory_xact_lock({MIGRATION_LOCK_KEY});\n\
         -- A table another transaction holds stops the script within 2 s, as it\n\
         -- does `lq migrate` (which tries again), rather than queueing every\n\
         -- claim and enqueue behind its wait: run it again then.\n\
         set local lock_timeout = '2s';\n",
        super::SEARCH_PATH.replace(',', ", ")
    );
    if bootstrap {
        out.push_str(
            "-- The schema, unless it exists (`create schema if not exists` would need\n\
             -- CREATE on the database even then), and its version table.\n\
             do $lq$ begin\n\
             \x20   if not exists (select from pg_catalog.pg_namespace where nspname = 'lq') then\n\
             \x20       create schema lq;\n\
             \x20   end if;\n\
             end $lq$;\n",
        );
        out.push_str(VERSION_TABLE);
        out.push('\n');
    }
    for (version, name, sql, serves_from) in migrations {
        let quoted = name.replace('\'', "''");
        let record = record_statement(serves_from.is_some())
            .replace("$1", &version.to_string())
            .replace("$2", &format!("'{quoted}'"))
            .replace("$3", &serves_from.unwrap_or_default().to_string());
        out.push_str(&format!(
            "\n-- migration {version} ({name})\n{}\n{record};\n",
            sql.trim_end()
        ));
    }
    out.push_str("\ncommit;\n");
    out
}

/// The role owning schema `lq`, when it exists and the current role neither is
/// nor is a member of it (so may not trust it: that role can replace any object
/// in it). `None` when the schema is missing or ours.
pub async fn schema_foreign_owner(conn: &mut PgConnection) -> Result<Option<String>, Error> {
    sqlx::query_scalar(
        "select pg_catalog.pg_get_userbyid(n.nspowner)::text from pg_catalog.pg_namespace n
         where n.nspname operator(pg_catalog.=) 'lq'
           and not pg_catalog.pg_has_role(n.nspowner, 'MEMBER')",
    )
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("migration_schema_owner"))
}

/// Takes the migration lock for the rest of the transaction and makes sure the
/// schema and its version table exist. From here on, a statement that waits
/// longer than `lock_wait` for a lock fails with `lock_not_available` (see
/// [`gave_way_to_a_lock`]): a migration waiting for a table lock queues
/// every later statement on that table behind it, so it gives way rather than
/// stall the queue while an application's transaction stays open.
pub async fn lock(conn: &mut PgConnection, lock_wait: std::time::Duration) -> Result<(), Error> {
    bound_lock_waits(conn, lock_wait).await?;
    sqlx::query("select pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut *conn)
        .await
        .map_err(err("migration_lock"))?;
    // Created only when missing: `create schema if not exists` checks CREATE on
    // the database first, which the schema's owner needs no longer once it exists.
    let has_schema: bool = sqlx::query_scalar(
        "select exists (select from pg_catalog.pg_namespace
                        where nspname operator(pg_catalog.=) 'lq')",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(err("migration_bootstrap"))?;
    if !has_schema {
        sqlx::Executor::execute(&mut *conn, "create schema lq")
            .await
            .map_err(err("migration_bootstrap"))?;
    }
    // A plain string with no arguments goes as a simple query (several statements);
    // `sqlx::raw_sql` would do the same, but its future is not provably `Send`.
    sqlx::Executor::execute(&mut *conn, VERSION_TABLE)
        .await
        .map_err(err("migration_bootstrap"))?;
    Ok(())
}

/// Whether `e` is a statement of a migration that gave way to another
/// session's lock: it waited longer than it may (SQLSTATE 55P03,
/// `lock_not_available`), or the server rolled it back to break a deadlock
/// (40P01). Worth another try later: the whole migration rolled back.
pub fn gave_way_to_a_lock(e: &Error) -> bool {
    matches!(
        super::sqlstate(e).as_deref(),
        Some(super::LOCK_NOT_AVAILABLE | super::DEADLOCK_DETECTED)
    )
}

/// Bounds, for the rest of the transaction, how long a statement waits for a
/// lock: past `wait` it fails with `lock_not_available` ([`gave_way_to_a_lock`]).
pub async fn bound_lock_waits(
    conn: &mut PgConnection,
    wait: std::time::Duration,
) -> Result<(), Error> {
    sqlx::query("select pg_catalog.set_config('lock_timeout', $1, true)")
        .bind(wait.as_millis().max(1).to_string())
        .execute(&mut *conn)
        .await
        .map_err(err("migration_lock_timeout"))?;
    Ok(())
}

/// Highest applied version, inside the locked transaction.
pub async fn current(conn: &mut PgConnection) -> Result<i32, Error> {
    sqlx::query_scalar("select coalesce(pg_catalog.max(version), 0) from lq.schema_migrations")
        .fetch_one(&mut *conn)
        .await
        .map_err(err("migration_current"))
}

/// Applies one migration and records it, with the oldest version it serves
/// (`serves_from`) once the version table has that column.
pub async fn apply(
    conn: &mut PgConnection,
    version: i32,
    name: &str,
    sql: &str,
    serves_from: Option<i32>,
) -> Result<(), Error> {
    sqlx::Executor::execute(&mut *conn, sql)
        .await
        .map_err(err("migration_apply"))?;
    let mut record = sqlx::query(record_statement(serves_from.is_some()))
        .bind(version)
        .bind(name);
    if let Some(serves_from) = serves_from {
        record = record.bind(serves_from);
    }
    record
        .execute(&mut *conn)
        .await
        .map_err(err("migration_record"))?;
    Ok(())
}

/// The oldest schema version whose code works against every migration applied
/// above version `known`: a build of version `known` may run when this is
/// `known` or lower. Read only from schemas at version 10 or newer, which
/// record it per migration.
pub async fn oldest_build_served(conn: &mut PgConnection, known: i32) -> Result<i32, Error> {
    sqlx::query_scalar(
        "select coalesce(pg_catalog.max(serves_from), $1 operator(pg_catalog.+) 1)
         from lq.schema_migrations where version operator(pg_catalog.>) $1",
    )
    .bind(known)
    .fetch_one(&mut *conn)
    .await
    .map_err(err("migration_serves_from"))
}

/// Applied version without taking the lock; 0 when the schema does not exist.
///
/// The version table is read only when it is what the migrations made: a plain
/// table owned by the schema's owner, without row security. A view or a row
/// policy could run code of whoever made it as the role reading it (a schema
/// `lq` another role created first, with a version table that claims to be
/// current): [`Error::SchemaTampered`].
pub async fn version(conn: &mut PgConnection) -> Result<i32, Error> {
    let found: Option<(String, bool, bool)> = sqlx::query_as(
        "select c.relkind::text, c.relrowsecurity, c.relowner operator(pg_catalog.=) n.nspowner
         from pg_catalog.pg_class c
         join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
         where n.nspname operator(pg_catalog.=) 'lq'
           and c.relname operator(pg_catalog.=) 'schema_migrations'",
    )
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("migration_version"))?;
    let what = match found {
        None => return Ok(0),
        Some((kind, _, _)) if kind != "r" => format!("its relkind is {kind:?}, not a table"),
        Some((_, true, _)) => "it has row-level security".to_owned(),
        Some((_, _, false)) => "another role than the schema's owner owns it".to_owned(),
        Some(_) => return current(conn).await,
    };
    Err(Error::SchemaTampered { what })
}
