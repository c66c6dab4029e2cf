//! The server's clock.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::err;
use crate::Error;

/// The server's `now()`.
pub async fn clock_now(conn: &mut PgConnection) -> Result<DateTime<Utc>, Error> {
    sqlx::query_scalar("select pg_catalog.now()")
        .fetch_one(conn)
        .await
        .map_err(err("clock_now"))
}
