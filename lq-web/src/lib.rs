//! `lq-web`: litequeue's web dashboard. Server-rendered HTML (no npm, no CDN,
//! works without JavaScript), one stylesheet and one small script compiled in.
//!
//! Every page and action is a thin layer over [`lq_core::control`], the same
//! calls the `lq` command line makes, so both behave the same.
//!
//! # Embedding
//!
//! [`router`] returns an [`axum::Router`] to nest under any path, behind the
//! application's own authentication:
//!
//! ```no_run
//! use axum::Router;
//! use lq_web::WebConfig;
//!
//! # async fn f(pool: sqlx::PgPool) {
//! let admin = lq_web::router(pool.clone(), WebConfig::new().actions(true));
//! let app: Router = Router::new().nest("/admin/jobs", admin); // + the app's auth layer
//! # let _ = app;
//! # }
//! ```
//!
//! Links, forms and cookies follow the path the router is nested at;
//! [`WebConfig::base_path`] sets it when a proxy strips a prefix.
//!
//! # Standalone
//!
//! `lq serve` (or [`serve`]) runs the dashboard on its own: loopback only and
//! read-only by default. `--allow-actions` allows actions; binding any other
//! address requires a token (`Authorization: Bearer`, or entered once in the
//! `/login` form, which sets an `HttpOnly; SameSite=Strict` cookie, `Secure`
//! over https) or basic auth, or the server refuses to start
//! ([`Error::Unprotected`]).
//!
//! ```no_run
//! # async fn f(pool: sqlx::PgPool) -> Result<(), lq_web::Error> {
//! let options = lq_web::ServeOptions::new("0.0.0.0:8080".parse().unwrap())
//!     .allow_actions(true)
//!     .token(std::env::var("LQ_WEB_TOKEN").ok());
//! lq_web::serve(pool, options).await?; // until Ctrl-C
//! # Ok(()) }
//! ```
//!
//! # Pages
//!
//! - `/`: per queue, available, scheduled, running and dead jobs, the oldest
//!   wait, the pause, and the last hour's throughput and p99 wait as
//!   sparklines from the per-minute rollup; the runtimes, the leader marked.
//! - `/jobs`: jobs by state (tabs with counts, each exact up to 10,000 and
//!   `10,000+` past it), filtered by queue, kind, id,
//!   age and payload or metadata containment (JSON, `@>`; no payload filter
//!   while a redaction hook is set, as it would confirm hidden values), 50 a page, newest
//!   first, with keyset paging. Select jobs to retry, cancel, delete or run now, or
//!   act on *all* jobs the filter matches: the server counts them and asks for
//!   a confirmation naming the number. An action on selected jobs, or from a
//!   job's page, acts only on jobs still in the state the page showed: one
//!   that moved meanwhile (a dead job retried, a queued one started) is left
//!   alone and listed as having left it. A bulk action answers with a
//!   redirect to its outcome (`GET /jobs/bulk`, the counts and each refusal
//!   in its query string), so reloading that page runs nothing again.
//! - `/jobs/{id}`: one job, its payload hidden until asked for, every failed
//!   attempt's error with its time and worker, retry, cancel, delete and run now.
//! - `/queues` (pause, resume), `/cron` (expression, zone, last tick, next
//!   fire, run a tick now), `/runtimes`.
//! - `/doctor`: `lq doctor`'s checks, each with its finding and what to do; read
//!   once when opened, not refreshed (a check counts the queued jobs no
//!   runtime serves).
//! - `/health` (`ok`; `?db=1` also asks the database), `/api/stats` (JSON).
//!
//! Pages refresh themselves every few seconds ([`WebConfig::refresh`]) while
//! visible, not while jobs are selected or a field has focus, and have a pause
//! button. The counts (of the pages and `/api/stats`) are kept for one refresh
//! period, however many tabs are open; an action taken on the dashboard drops
//! them, so its result shows at once, and a change made elsewhere shows within
//! a period.
//!
//! # Access
//!
//! Each request gets an [`Access`]: [`Access::None`] (refused), read-only, or
//! full. It is the lower of what the [`Authorize`] implementation grants (the
//! default grants everyone full access: put the application's own auth in
//! front, or implement [`Authorize`]) and what [`WebConfig::actions`] allows
//! (read-only by default).
//!
//! Every action is a POST, checked on the server before anything changes,
//! whatever the page showed: full access, an `Origin` (when sent) naming the
//! request's host (its `Host`, or HTTP/2's `:authority`) or a configured
//! [`WebConfig::public_origin`] (behind a proxy that rewrites `Host`: see
//! [`WebConfig::base_path`]) and a `Sec-Fetch-Site` (when sent) of `same-origin`, and a
//! CSRF token in the form matching the `lq_csrf` cookie (double submit; the
//! cookie is `HttpOnly; SameSite=Strict`, and `Secure` when the browser came
//! over https, so a plain-http page on the same host cannot replace it). Each action and each refused POST is
//! logged at info level to the `tracing` target `lq_web::audit`, with the user
//! (from [`Authorize::identity`]), the jobs or queue, and the outcome.
//!
//! `/assets/*` and `/health` answer whatever the access (they show no jobs).
//!
//! # Security headers
//!
//! Every response carries `Content-Security-Policy: default-src 'self';
//! frame-ancestors 'none'` (no inline script or style anywhere),
//! `X-Content-Type-Options: nosniff`, `Referrer-Policy: same-origin` and
//! `X-Frame-Options: DENY`; pages carry `Cache-Control: no-store`. Payloads,
//! errors and every other value from the database are HTML-escaped.
//!
//! # Errors
//!
//! Every failure is a page with its message and status: 400 for a bad filter
//! value, 404 for an unknown job, 403 for a refused action, 409 for an action
//! the job's state does not allow, 503 when the database does not answer.

use std::sync::Arc;

use axum::{
    middleware,
    routing::{get, post},
    Router,
};
use lq_core::sqlx::PgPool;

mod access;
mod actions;
mod api;
mod bulk;
mod bulk_result;
mod charts;
mod config;
mod context;
mod counts;
mod error;
mod guard;
mod layout;
mod pages;
mod params;
mod redacted_keys;
mod secret;
mod serve;

pub use access::{Access, Authorize, Denied};
pub use config::{Redact, WebConfig};
pub use error::Error;
pub use serve::{serve, standalone, ServeOptions};

/// What every handler shares: the pool and the configuration.
pub(crate) struct Shared {
    pub pool: PgPool,
    pub config: WebConfig,
    /// The standalone server's token, when its login form is served.
    pub login: Option<String>,
    /// The pages' counts, kept for one refresh period.
    pub counts: counts::CountCache,
}

/// The dashboard as a router, to nest under any path of an application (or to
/// serve at the root). See the [crate documentation](crate) for the pages and
/// the access model.
///
/// ```no_run
/// use lq_web::WebConfig;
/// # async fn f(pool: sqlx::PgPool) {
/// let app = axum::Router::new().nest("/lq", lq_web::router(pool, WebConfig::new()));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await.unwrap();
/// axum::serve(listener, app).await.unwrap();
/// # }
/// ```
pub fn router(pool: PgPool, config: WebConfig) -> Router {
    build(pool, config, None)
}

/// The router, with the standalone login form when `login` holds its token.
pub(crate) fn build(pool: PgPool, config: WebConfig, login: Option<String>) -> Router {
    let has_login = login.is_some();
    let ttl = config.refresh.unwrap_or(std::time::Duration::from_secs(5));
    let shared = Arc::new(Shared {
        pool,
        config,
        login,
        counts: counts::CountCache::new(ttl),
    });
    let mut r = Router::new()
        .route("/", get(pages::overview::page))
        .route("/jobs", get(pages::jobs::page))
        .route("/jobs/bulk", get(bulk_result::page).post(bulk::post))
        .route("/jobs/{id}", get(pages::job::page))
        .route("/jobs/{id}/{action}", post(actions::job))
        .route("/queues", get(pages::queues::page))
        .route("/queues/{name}/{action}", post(actions::queue))
        .route("/cron", get(pages::cron::page))
        .route("/cron/{kind}/{action}", post(actions::cron))
        .route("/runtimes", get(pages::runtimes::page))
        .route("/doctor", get(pages::doctor::page))
        .route("/health", get(api::health))
        .route("/api/stats", get(api::stats))
        .route("/assets/lq.css", get(api::css))
        .route("/assets/lq.js", get(api::js));
    if has_login {
        r = r.route("/login", get(serve::login_form).post(serve::login));
    }
    r.fallback(guard::not_found)
        .method_not_allowed_fallback(guard::method_not_allowed)
        .layer(middleware::from_fn_with_state(shared.clone(), guard::guard))
        .with_state(shared)
}
