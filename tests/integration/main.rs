//! Integration tests against a real PostgreSQL; each test has its own database.

mod abandoned_statement;
mod bulk;
mod claim_ahead;
mod cluster;
mod context;
mod control;
mod cron;
mod enqueue;
mod enqueuer;
mod hostile;
mod jobs;
mod locked_row;
mod meta;
mod migrate;
mod operator_role;
mod outcomes;
mod polling;
mod queues;
mod reclaim;
mod roles;
mod runtime;
mod shutdown;
mod stall;
mod testing;
mod testing_runner;
mod visible;
