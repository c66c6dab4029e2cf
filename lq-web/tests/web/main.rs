//! The dashboard (lq-web) over HTTP, driven in process with `oneshot` against a
//! real PostgreSQL; each test has its own database.

mod access;
mod actions;
mod bulk_replay;
mod filters;
mod grants;
mod jobs;
mod origin;
mod pages;
mod shown_state;
mod standalone;
mod support;
