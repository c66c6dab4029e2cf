//! # lq-fault
//!
//! litequeue's fault suite. `lq-fault` (the orchestrator) creates a fresh database
//! per scenario on a PostgreSQL cluster of its own, enqueues jobs, runs real
//! `lq-fault-worker` processes and injects faults — `kill -9`, `SIGSTOP`/`SIGCONT`,
//! `pg_ctl stop -m immediate`, `pg_terminate_backend`, poison jobs, `SIGTERM`,
//! answers lost after their commit (a proxy, [`proxy`]) —
//! each triggered by database state, never by a sleep. Every job is then classified
//! as lost, duplicated or unexpected, and every duplicate is checked against a lease
//! that had expired.
//!
//! Handlers leave a trace in `fault.performed` (one row per attempt, keyed by lease
//! token: a start, then a finish or a cancellation), in the same database.
//!
//! `scripts/fault-suite` builds this crate and runs:
//!
//! ```text
//! LQ_FORCE_PRIVATE=1 scripts/with-postgres target/release/lq-fault --seed 42
//! ```

pub mod classify;
pub mod cluster;
pub mod jobs;
pub mod probe;
pub mod proxy;
pub mod report;
pub mod scenarios;
pub mod schema;
pub mod worker;
pub mod workers;

/// `application_name` of every worker connection: the terminate storm aims at it.
pub const WORKER_APP: &str = "lq-fault-worker";
/// `application_name` of the orchestrator's own connections.
pub const ORCHESTRATOR_APP: &str = "lq-fault-orchestrator";
/// `application_name` of the producer connections of the restart scenario.
pub const PRODUCER_APP: &str = "lq-fault-producer";
