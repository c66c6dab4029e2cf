//! Roles and trust: least-privilege roles, privilege and connection checks at
//! start, search_path hijacks, spoofed cancel notifications, schemas squatted by
//! another role, and two applications sharing one database.
//!
//! Roles are cluster-wide: each test makes its own with a random suffix and drops
//! them (best effort) after its database is gone. Every job type here has a queue
//! of its own, served only by the runtimes of the test that uses it.

use std::{
    collections::{BTreeSet, HashSet},
    str::FromStr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use lq_runtime::{
    control, CoreError, EnqueueOptions, Error, Job, JobContext, JobError, JobState, Perform,
    Runtime, RuntimeConfig,
};
use lq_tests::{admin_url, TestDb};
use serde::{Deserialize, Serialize};
use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    Connection, PgConnection, PgPool,
};

use crate::jobs::quick;

mod forged_cancel;
mod least_privilege;
mod non_owner_worker;
mod schema_owner;
mod search_path;
mod shared_database;
mod start_checks;

const LIMIT: Duration = Duration::from_secs(30);

/// The grants of a role that only enqueues (`{role}` is replaced by its name);
/// docs/roles.md shows the same statements.
const PRODUCER_GRANTS: &str = "
    grant usage on schema lq to {role};
    grant insert (kind, queue, priority, payload, run_at, max_attempts, unique_key)
        on lq.jobs to {role};
    grant select (id, kind, unique_key, run_at) on lq.jobs to {role};";

/// Each privilege of [`PRODUCER_GRANTS`] on `lq.jobs`, one at a time, to show that
/// an enqueue needs every one of them.
const PRODUCER_PRIVILEGES: &[&str] = &[
    "insert (kind)",
    "insert (queue)",
    "insert (priority)",
    "insert (payload)",
    "insert (run_at)",
    "insert (max_attempts)",
    "insert (unique_key)",
    "select (id)",
    "select (kind)",
    "select (unique_key)",
    "select (run_at)",
];

/// The grants of a role that runs a runtime; docs/roles.md shows the same.
pub(crate) const WORKER_GRANTS: &str = "
    grant usage on schema lq to {role};
    grant select, insert, update, delete on lq.jobs, lq.finished_jobs to {role};
    grant select, insert, update on lq.cron_schedules to {role};
    grant select, insert, delete on lq.cron_ticks to {role};
    grant select on lq.schema_migrations, lq.queues to {role};
    grant select, insert, update on lq.rate_limits to {role};
    grant select, insert, update, delete on lq.runtimes, lq.leader, lq.stats_minute to {role};
    grant select, insert, delete on lq.id_marks to {role};
    grant usage on sequence lq.jobs_id_seq to {role};";

/// Roles made for one test, dropped when the value drops. Declare it before the
/// test's [`TestDb`], so the database (and what the roles own in it) goes first.
#[derive(Default)]
pub(crate) struct Roles(Vec<String>);

impl Roles {
    /// Creates a login role `{prefix}_{random}` with `options` (such as
    /// `connection limit 3`) and returns its name.
    pub(crate) async fn create(&mut self, prefix: &str, options: &str) -> String {
        let name = format!("{prefix}_{:08x}", fastrand::u32(..));
        let mut admin = PgConnection::connect(&admin_url()).await.unwrap();
        sqlx::raw_sql(&format!("create role {name} login {options}"))
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.ok();
        self.0.push(name.clone());
        name
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let drops = self
            .0
            .drain(..)
            .map(|name| format!("drop role if exists {name}"))
            .collect();
        lq_tests::run_as_admin_from_drop(drops);
    }
}

/// Connect options for `db` as `role` (trust authentication: no password).
fn options_as(db: &TestDb, role: &str) -> PgConnectOptions {
    PgConnectOptions::from_str(&db.url).unwrap().username(role)
}

/// A pool on `db` whose connections log in as `role`.
pub(crate) async fn pool_as(db: &TestDb, role: &str, max: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(max)
        .connect_with(options_as(db, role))
        .await
        .unwrap()
}

/// Runs `grants` (with `{role}` replaced by `role`) on `pool`.
pub(crate) async fn grant(pool: &PgPool, grants: &str, role: &str) {
    sqlx::raw_sql(&grants.replace("{role}", role))
        .execute(pool)
        .await
        .unwrap();
}

/// The test database's name.
async fn db_name(db: &TestDb) -> String {
    sqlx::query_scalar("select current_database()::text")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Drops schema `lq`, leaving the database as if litequeue never migrated it.
async fn unmigrate(db: &TestDb) {
    sqlx::raw_sql("drop schema lq cascade")
        .execute(&db.pool)
        .await
        .unwrap();
}

/// Waits until job `id` is in `state`.
async fn wait_state(db: &TestDb, id: i64, state: &str) {
    db.wait_for(
        &format!("job {id} to be {state}"),
        &format!("select exists (select 1 from lq.all_jobs where id = {id} and state = '{state}')"),
        LIMIT,
    )
    .await;
}

/// A job's state, read by the admin.
async fn state_of(db: &TestDb, id: i64) -> String {
    sqlx::query_scalar("select state::text from lq.all_jobs where id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}
