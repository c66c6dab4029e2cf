//! Statements of the migration runner.

use sqlx::PgConnection;

use super::err;
use crate::Error;

/// Arbitrary constant key of the advisory lock that serialises migrations.
const MIGRATION_LOCK_KEY: i64 = 0x6c71_6d69_6772; // "lqmigr"

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
/// [`waited_too_long_for_a_lock`]): a migration waiting for a table lock queues
/// every later statement on that table behind it, so it gives way rather than
/// stall the queue while an application's transaction stays open.
pub async fn lock(conn: &mut PgConnection, lock_wait: std::time::Duration) -> Result<(), Error> {
    sqlx::query("select pg_catalog.set_config('lock_timeout', $1, true)")
        .bind(lock_wait.as_millis().max(1).to_string())
        .execute(&mut *conn)
        .await
        .map_err(err("migration_lock"))?;
    sqlx::query("select pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut *conn)
        .await
        .map_err(err("migration_lock"))?;
    // A plain string with no arguments goes as a simple query (several statements);
    // `sqlx::raw_sql` would do the same, but its future is not provably `Send`.
    sqlx::Executor::execute(
        &mut *conn,
        "create schema if not exists lq;
         create table if not exists lq.schema_migrations (
             version    integer primary key,
             name       text not null,
             applied_at timestamptz not null default now()
         );",
    )
    .await
    .map_err(err("migration_bootstrap"))?;
    Ok(())
}

/// Whether `e` is a statement of a migration that gave up waiting for a lock
/// (SQLSTATE 55P03, `lock_not_available`): worth another try later.
pub fn waited_too_long_for_a_lock(e: &Error) -> bool {
    super::sqlstate(e).as_deref() == Some(super::LOCK_NOT_AVAILABLE)
}

/// Highest applied version, inside the locked transaction.
pub async fn current(conn: &mut PgConnection) -> Result<i32, Error> {
    sqlx::query_scalar("select coalesce(pg_catalog.max(version), 0) from lq.schema_migrations")
        .fetch_one(&mut *conn)
        .await
        .map_err(err("migration_current"))
}

/// Applies one migration and records it.
pub async fn apply(
    conn: &mut PgConnection,
    version: i32,
    name: &str,
    sql: &str,
) -> Result<(), Error> {
    sqlx::Executor::execute(&mut *conn, sql)
        .await
        .map_err(err("migration_apply"))?;
    sqlx::query("insert into lq.schema_migrations (version, name) values ($1, $2)")
        .bind(version)
        .bind(name)
        .execute(&mut *conn)
        .await
        .map_err(err("migration_record"))?;
    Ok(())
}

/// Applied version without taking the lock; 0 when the schema does not exist.
pub async fn version(conn: &mut PgConnection) -> Result<i32, Error> {
    let exists: bool = sqlx::query_scalar(
        "select exists (select from pg_catalog.pg_class c
                 join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
                 where n.nspname operator(pg_catalog.=) 'lq'
                   and c.relname operator(pg_catalog.=) 'schema_migrations')",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(err("migration_version"))?;
    if !exists {
        return Ok(0);
    }
    current(conn).await
}
