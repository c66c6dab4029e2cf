//! One module per `lq` command.

pub(crate) mod bulk_verb;
pub(crate) mod cron;
pub(crate) mod doctor;
pub(crate) mod jobs;
pub(crate) mod migrate;
pub(crate) mod prune;
pub(crate) mod queues;
pub(crate) mod runtimes;
pub(crate) mod serve;
pub(crate) mod status;
