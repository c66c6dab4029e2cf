//! The suite's own tables, in the scenario's database next to `lq.jobs`.

use lq_runtime::StatsSnapshot;
use sqlx::PgPool;

/// Creates the `fault` schema: performances and worker counters.
pub const CREATE: &str = "
create schema if not exists fault;
create table fault.performed (
    lease_token  uuid primary key,
    job_id       bigint not null,
    kind         text not null,
    attempt      int not null,
    worker       text not null,
    started_at   timestamptz not null default now(),
    finished_at  timestamptz,
    cancelled_at timestamptz
);
create index on fault.performed (job_id);
create table fault.worker_stats (
    owner      text primary key,
    claimed    bigint not null,
    succeeded  bigint not null,
    retried    bigint not null,
    dead       bigint not null,
    released   bigint not null,
    lease_lost bigint not null,
    at         timestamptz not null default now()
);
";

/// Stores a worker's counters (one row per owner, replaced on every call).
pub async fn publish_stats(
    pool: &PgPool,
    owner: &str,
    s: &StatsSnapshot,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into fault.worker_stats (owner, claimed, succeeded, retried, dead, released, lease_lost)
         values ($1, $2, $3, $4, $5, $6, $7)
         on conflict (owner) do update set claimed = excluded.claimed, succeeded = excluded.succeeded,
             retried = excluded.retried, dead = excluded.dead, released = excluded.released,
             lease_lost = excluded.lease_lost, at = now()",
    )
    .bind(owner)
    .bind(s.claimed as i64)
    .bind(s.succeeded as i64)
    .bind(s.retried as i64)
    .bind(s.dead as i64)
    .bind(s.released as i64)
    .bind(s.lease_lost as i64)
    .execute(pool)
    .await
    .map(|_| ())
}

/// One line of counters, for logs.
pub fn stats_line(owner: &str, s: &StatsSnapshot) -> String {
    format!(
        "{owner}: claimed={} succeeded={} retried={} dead={} released={} lease_lost={}",
        s.claimed, s.succeeded, s.retried, s.dead, s.released, s.lease_lost
    )
}
