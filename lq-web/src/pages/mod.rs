//! The pages, one file each.

pub(crate) mod cron;
pub(crate) mod doctor;
pub(crate) mod job;
pub(crate) mod jobs;
pub(crate) mod overview;
pub(crate) mod queues;
pub(crate) mod runtimes;
