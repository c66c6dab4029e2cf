//! Applies the SQL files in `migrations/`, embedded at compile time.

use std::time::Duration;

use sqlx::{Connection, PgPool};
use tokio::time::Instant;

use crate::{db, Error};

/// The schema version this library needs (the number of embedded migrations).
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// One embedded migration: version n is `MIGRATIONS[n - 1]`.
struct Migration {
    /// File name, without `.sql`.
    name: &'static str,
    /// The statements, run in one transaction with the version's record.
    sql: &'static str,
    /// The oldest schema version whose code still works against this one (see
    /// [`db::migration::oldest_build_served`]). Its own version unless it only
    /// adds what older statements never meet (a non-unique index, a table only
    /// newer code uses; a unique index or a check changes which of their writes
    /// succeed); a wrong value lets an old build run against a schema it
    /// cannot use, so when in doubt, its own version. Recorded from version 10
    /// on; for 1 to 9 version 10's SQL writes the same values (a test compares
    /// them), which no build consults: builds before 10 never read them.
    serves_from: i32,
}

/// The embedded migrations, in order.
const MIGRATIONS: &[Migration] = &[
    migration("0001_jobs", include_str!("../migrations/0001_jobs.sql"), 1),
    migration("0002_cron", include_str!("../migrations/0002_cron.sql"), 2),
    migration(
        "0003_finished_jobs",
        include_str!("../migrations/0003_finished_jobs.sql"),
        3,
    ),
    migration(
        "0004_unique_per_kind",
        include_str!("../migrations/0004_unique_per_kind.sql"),
        4,
    ),
    migration(
        "0005_operations",
        include_str!("../migrations/0005_operations.sql"),
        5,
    ),
    migration(
        "0006_stats",
        include_str!("../migrations/0006_stats.sql"),
        6,
    ),
    migration(
        "0007_claim_room",
        include_str!("../migrations/0007_claim_room.sql"),
        7,
    ),
    migration(
        "0008_live_state",
        include_str!("../migrations/0008_live_state.sql"),
        8,
    ),
    // An index only: version 8's statements work unchanged.
    migration(
        "0009_dead_jobs_index",
        include_str!("../migrations/0009_dead_jobs_index.sql"),
        8,
    ),
    // A column on the version table only. Version 9's builds refuse it anyway:
    // they do not read the column.
    migration(
        "0010_schema_serves_from",
        include_str!("../migrations/0010_schema_serves_from.sql"),
        9,
    ),
    // An index only: version 10's statements work unchanged.
    migration(
        "0011_cancelled_jobs_index",
        include_str!("../migrations/0011_cancelled_jobs_index.sql"),
        10,
    ),
    // Columns on the cron schedules only, read and written by name: version
    // 11's statements work unchanged.
    migration(
        "0012_cron_run_now",
        include_str!("../migrations/0012_cron_run_now.sql"),
        11,
    ),
    // A table only newer statements read (rate limits): version 12's work
    // unchanged, and with them version 11's.
    migration(
        "0013_rate_limits",
        include_str!("../migrations/0013_rate_limits.sql"),
        11,
    ),
    // Views only newer claims lock (claim rooms): version 13's statements work
    // unchanged, and with them version 11's.
    migration(
        "0014_claim_rooms",
        include_str!("../migrations/0014_claim_rooms.sql"),
        11,
    ),
    // A table only newer prunes use, an index dropped, and a primary key with
    // more columns carried: version 14's statements work unchanged (their prune
    // reads the history instead of the index), and with them version 11's.
    migration(
        "0015_history_pruned_by_id",
        include_str!("../migrations/0015_history_pruned_by_id.sql"),
        11,
    ),
    // A column on the runtimes' rows that older statements do not name:
    // version 15's statements work unchanged, and with them version 11's.
    migration(
        "0016_runtime_connections",
        include_str!("../migrations/0016_runtime_connections.sql"),
        11,
    ),
];

/// A [`Migration`], written short for the table above.
const fn migration(name: &'static str, sql: &'static str, serves_from: i32) -> Migration {
    Migration {
        name,
        sql,
        serves_from,
    }
}

/// The first version whose row in `lq.schema_migrations` records `serves_from`
/// (the migration that added the column).
const SERVES_FROM_RECORDED_SINCE: i32 = 10;

/// Each embedded migration's version and `serves_from`, as this build declares
/// them: for tests that compare them with what a database recorded.
#[doc(hidden)]
pub fn declared_serves_from() -> Vec<(i32, i32)> {
    MIGRATIONS
        .iter()
        .enumerate()
        .map(|(index, m)| (index as i32 + 1, m.serves_from))
        .collect()
}

/// Creates or upgrades the `lq` schema. Idempotent, and safe when several processes
/// call it at once: they serialise on an advisory lock and each migration runs in the
/// same transaction as its version bump.
///
/// When the schema is already current it only reads, so any role the runtime runs
/// as may call it at start-up (no CREATE privilege needed). It refuses to change a
/// schema `lq` owned by a role the caller is not a member of (that role could
/// replace the tables under it): [`Error::SchemaBehind`] when that schema is
/// litequeue's at an older version (its owner must migrate it), and
/// [`Error::SchemaNotOwned`] when it holds no litequeue schema at all.
///
/// A migration that changes `lq.jobs` needs it to itself for a moment. While it
/// waits for that, every claim, enqueue and heartbeat queues behind it, so it
/// waits at most 2 s at a time: it then rolls back, lets them through, and tries
/// again, for up to two minutes in all. An application transaction left open on
/// `lq.jobs` for longer fails the migration with the lock error, and the queue
/// kept working meanwhile.
///
/// Against a schema newer than this build it changes nothing: `Ok` while that
/// schema still serves this build (each migration records the oldest build it
/// works with, so a rolling deploy's old processes keep starting), else
/// [`Error::SchemaTooNew`].
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// lq_core::migrate(&pool).await?;
/// # Ok(()) }
/// ```
pub async fn migrate(pool: &PgPool) -> Result<(), Error> {
    let deadline = Instant::now() + MIGRATE_TIMEOUT;
    let mut pause = Duration::from_millis(200);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = match db::timed("migrate", left, apply_all(pool, left)).await {
            Err(e) if db::migration::gave_way_to_a_lock(&e) => e,
            done => return done,
        };
        // Another try only if it would still have room for a whole lock wait
        // and the statements after it; else the lock error is the answer.
        let left = deadline.saturating_duration_since(Instant::now());
        if left < pause + LOCK_WAIT * 3 {
            return Err(e);
        }
        tracing::warn!(
            error = %crate::chain(&e),
            "litequeue migration gave way to a lock held elsewhere; trying again"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// Bound on a whole migration run, waiting for a concurrent migrator included.
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a migration's statement waits for a lock before the migration rolls
/// back and tries again. While it waits, every statement on the same table queues
/// behind it (claims, enqueues, heartbeats): an application transaction left open
/// would otherwise stall the queue for as long as it stays open.
const LOCK_WAIT: Duration = Duration::from_secs(2);

async fn apply_all(pool: &PgPool, bound: Duration) -> Result<(), Error> {
    let mut conn = pool.acquire().await.map_err(db::err("migrate"))?;
    // Read in a short transaction of its own, not in the migrating one, which
    // would keep its read lock on the version table while it waits for the
    // migration lock below: version 10 alters that table, so the migrator
    // holding the lock would then wait for every waiting one, and they for it
    // (a deadlock). Its lock waits are bounded like the migration's, so while
    // another process upgrades, this one gives way and tries again.
    let mut look = conn.begin().await.map_err(db::err("migrate"))?;
    db::pin_transaction(&mut look, bound).await?;
    db::migration::bound_lock_waits(&mut look, LOCK_WAIT).await?;
    let found = db::migration::version(&mut look).await?;
    if found >= SCHEMA_VERSION {
        // Nothing to do (no lock, no CREATE), or a newer schema: it cannot go
        // back, so it needs no lock to tell whether it serves this build.
        ensure_newer_schema_serves_this_build(&mut look, found).await?;
        return look.commit().await.map_err(db::err("migrate"));
    }
    look.commit().await.map_err(db::err("migrate"))?;
    let mut tx = conn.begin().await.map_err(db::err("migrate"))?;
    db::pin_transaction(&mut tx, bound).await?;
    if let Some(owner) = db::migration::schema_foreign_owner(&mut tx).await? {
        if found > 0 {
            // litequeue's schema, only behind: its owner migrates it.
            return Err(Error::SchemaBehind {
                found,
                needed: SCHEMA_VERSION,
                owner,
            });
        }
        return Err(Error::SchemaNotOwned { owner });
    }
    db::migration::lock(&mut tx, LOCK_WAIT).await?;
    let found = db::migration::current(&mut tx).await?;
    if found >= SCHEMA_VERSION {
        return ensure_newer_schema_serves_this_build(&mut tx, found).await;
    }
    for (index, m) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = index as i32 + 1;
        tracing::info!(version, name = m.name, "applying litequeue migration");
        let serves_from = (version >= SERVES_FROM_RECORDED_SINCE).then_some(m.serves_from);
        db::migration::apply(&mut tx, version, m.name, m.sql, serves_from).await?;
    }
    tx.commit().await.map_err(db::err("migrate"))?;
    Ok(())
}

/// `Ok` when the schema, at version `found` (this build's or newer), still
/// serves this build: every migration above [`SCHEMA_VERSION`] records that it
/// works with code this old. Otherwise [`Error::SchemaTooNew`].
///
/// The runtime calls it at start, [`migrate`] and [`pending_migrations`] before
/// concluding there is nothing to do.
#[doc(hidden)]
pub async fn ensure_newer_schema_serves_this_build(
    conn: &mut sqlx::PgConnection,
    found: i32,
) -> Result<(), Error> {
    if found <= SCHEMA_VERSION {
        return Ok(());
    }
    let oldest = db::migration::oldest_build_served(conn, SCHEMA_VERSION).await?;
    if oldest > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// The schema version found in the database (0 when litequeue was never migrated).
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// let found = lq_core::schema_version(&pool).await?;
/// if found < lq_core::SCHEMA_VERSION {
///     println!("schema {found}: run `lq migrate` (this build knows {})", lq_core::SCHEMA_VERSION);
/// }
/// # Ok(()) }
/// ```
pub async fn schema_version(pool: &PgPool) -> Result<i32, Error> {
    db::timed("schema_version", Duration::from_secs(30), async {
        let mut conn = pool.acquire().await.map_err(db::err("schema_version"))?;
        db::migration::version(&mut conn).await
    })
    .await
}

/// A migration not yet applied, as [`pending_migrations`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingMigration {
    /// The version it brings the schema to.
    pub version: i32,
    /// Its file name, without `.sql`.
    pub name: &'static str,
    /// The SQL [`migrate`] would run (in one transaction, with the version bump).
    pub sql: &'static str,
}

impl PendingMigration {
    /// The SQL [`migrate`] would run to apply `pending` (from
    /// [`pending_migrations`]), as one script a DBA can review and apply by
    /// hand, e.g. `psql -v ON_ERROR_STOP=1 -f script.sql`: one transaction that
    /// takes the lock `migrate` takes, creates the schema and its version table
    /// when `pending` starts at version 1, and runs each migration with the
    /// statement recording it, so that `migrate` then finds the schema
    /// current. Empty when nothing is pending.
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
    /// let pending = lq_core::pending_migrations(&pool).await?;
    /// print!("{}", lq_core::PendingMigration::script(&pending));
    /// # Ok(()) }
    /// ```
    pub fn script(pending: &[PendingMigration]) -> String {
        let Some(first) = pending.first() else {
            return String::new();
        };
        db::migration::script(
            first.version == 1,
            pending.iter().map(|m| {
                let declared = MIGRATIONS[(m.version - 1) as usize].serves_from;
                let serves_from = (m.version >= SERVES_FROM_RECORDED_SINCE).then_some(declared);
                (m.version, m.name, m.sql, serves_from)
            }),
        )
    }
}

/// The migrations [`migrate`] would apply now, oldest first, without applying
/// anything (for a dry run, or a review by a DBA). None when the database is at
/// this build's version, or ahead of it with a schema that still serves this
/// build; fails with [`Error::SchemaTooNew`] when it is ahead and does not.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_core::Error> {
/// for m in lq_core::pending_migrations(&pool).await? {
///     println!("would apply {} ({})", m.version, m.name);
/// }
/// # Ok(()) }
/// ```
pub async fn pending_migrations(pool: &PgPool) -> Result<Vec<PendingMigration>, Error> {
    let found = db::timed("pending_migrations", Duration::from_secs(30), async {
        let mut conn = pool
            .acquire()
            .await
            .map_err(db::err("pending_migrations"))?;
        let found = db::migration::version(&mut conn).await?;
        ensure_newer_schema_serves_this_build(&mut conn, found).await?;
        Ok(found)
    })
    .await?;
    Ok(MIGRATIONS
        .iter()
        .enumerate()
        .skip(found.max(0) as usize)
        .map(|(index, m)| PendingMigration {
            version: index as i32 + 1,
            name: m.name,
            sql: m.sql,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    /// Compiles only while [`super::migrate`]'s future is `Send`, so an
    /// application can spawn it (it was not while it ran `sqlx::raw_sql`).
    #[allow(dead_code)]
    fn migrate_can_be_spawned(pool: sqlx::PgPool) {
        fn send<T: Send>(_: T) {}
        send(async move { super::migrate(&pool).await });
    }
}
