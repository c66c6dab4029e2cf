//! Errors: [`Error`] for starting the standalone server, and the internal
//! [`PageError`] every handler turns a failure into (a rendered page with a
//! status, never a blank 500).

use std::net::SocketAddr;

use axum::http::StatusCode;
use lq_core::sqlx;
use maud::Markup;

/// Why [`crate::serve`] could not start or stopped.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) {
/// let options = lq_web::ServeOptions::new("0.0.0.0:8080".parse().unwrap());
/// if let Err(e) = lq_web::serve(pool, options).await {
///     eprintln!("lq-web: {e}"); // refusing to serve on 0.0.0.0:8080 without authentication: ...
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Binding beyond loopback without a token or basic auth would show every
    /// job to the network.
    #[error("refusing to serve on {bind} without authentication: bind 127.0.0.1, or set a token (LQ_WEB_TOKEN, or the variable lq serve --token-env names) or basic auth (LQ_WEB_BASIC or --basic user:password)")]
    Unprotected {
        /// The address asked for.
        bind: SocketAddr,
    },
    /// A public origin means a proxy forwards other hosts' requests to a
    /// loopback address: without a token or basic auth, anyone who reaches the
    /// proxy would read every job (and act, with actions allowed).
    #[error("refusing to serve behind the public origin {origin} without authentication: set a token (LQ_WEB_TOKEN, or the variable lq serve --token-env names) or basic auth (LQ_WEB_BASIC or --basic user:password)")]
    ProxiedUnprotected {
        /// The first public origin given.
        origin: String,
    },
    /// A token or password that is empty would let anyone in.
    #[error("the {what} is empty: give a non-empty secret")]
    EmptySecret {
        /// `"token"` or `"basic auth password"`.
        what: &'static str,
    },
    /// The address could not be bound.
    #[error("cannot listen on {bind}")]
    Bind {
        /// The address asked for.
        bind: SocketAddr,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("the dashboard server failed")]
    Serve(#[source] std::io::Error),
}

/// A failure shown as a page: the status and what to tell the operator.
#[derive(Debug)]
pub(crate) struct PageError {
    pub status: StatusCode,
    pub message: String,
    /// Shown under the message: what was done before the failure (a bulk
    /// action that stopped partway).
    pub detail: Option<Markup>,
}

impl PageError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            detail: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
}

impl From<lq_core::Error> for PageError {
    fn from(e: lq_core::Error) -> Self {
        use lq_core::Error as E;
        // A bulk action or prune stopped partway answers as what stopped it
        // would; its message still says what was done first.
        let cause = match &e {
            E::BulkStopped { source, .. } | E::PruneStopped { source, .. } => source.as_ref(),
            other => other,
        };
        let timed_out = gave_up_on(cause);
        let status = match cause {
            _ if timed_out => StatusCode::SERVICE_UNAVAILABLE,
            E::NotFound { .. } | E::UnknownSchedule { .. } => StatusCode::NOT_FOUND,
            E::WrongState { .. }
            | E::LeftFilter { .. }
            | E::UniqueKeyHeld { .. }
            | E::ScheduleKeyHeld { .. }
            | E::ScheduleUndeclared { .. }
            | E::AmbiguousId { .. } => StatusCode::CONFLICT,
            E::InvalidName { .. } | E::InvalidFilter { .. } => StatusCode::BAD_REQUEST,
            E::Database { source, .. }
                if unreachable(source) || lq_core::names_missing_object(source) =>
            {
                StatusCode::SERVICE_UNAVAILABLE
            }
            E::Database { source, .. } if lq_core::lacks_grant(source) || read_only(source) => {
                StatusCode::FORBIDDEN
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut message = lq_core::chain(&e);
        if timed_out {
            message = format!(
                "the database did not answer in time (a long query, or a row another session holds locked); try again: {message}"
            );
        } else if matches!(cause, E::Database { source, .. } if lq_core::names_missing_object(source))
        {
            message = format!(
                "this database has no lq schema, or one older than this dashboard needs \
                 (version {}): run `lq migrate`, or check the dashboard's database URL: {message}",
                lq_core::SCHEMA_VERSION
            );
        } else if status == StatusCode::SERVICE_UNAVAILABLE {
            message = format!("the database is unavailable: {message}");
        } else if matches!(cause, E::Database { source, .. } if read_only(source)) {
            message = format!(
                "the database is read-only here (a standby, or default_transaction_read_only): {message}"
            );
        } else if status == StatusCode::FORBIDDEN {
            message = format!(
                "the dashboard's database role may not do this: {message} \
                 (docs/roles.md lists the operator's grants)"
            );
        }
        Self {
            status,
            message,
            detail: None,
        }
    }
}

/// True for PostgreSQL's `read_only_sql_transaction` (25006): a standby, or a
/// session with `default_transaction_read_only` on.
fn read_only(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("25006"))
}

/// True when `e` is a time limit, the client's or the server's: its statement
/// timeout (or a cancel) or its lock timeout. The page may work when tried again.
fn gave_up_on(e: &lq_core::Error) -> bool {
    match e {
        lq_core::Error::Timeout { .. } => true,
        lq_core::Error::Database {
            source: sqlx::Error::Database(d),
            ..
        } => matches!(d.code().as_deref(), Some("57014" | "55P03")),
        _ => false,
    }
}

/// True for a driver error that means "no answer from the database" rather
/// than "the database refused".
fn unreachable(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed
    )
}
