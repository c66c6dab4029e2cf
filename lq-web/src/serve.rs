//! The standalone server (`lq serve`): the same router behind a token or basic
//! auth, implemented as an [`Authorize`] like any application's, with a login
//! form for the token.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    extract::{ConnectInfo, Request, State},
    http::{header, request::Parts, HeaderValue, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    Extension, Router,
};
use base64::Engine;
use lq_core::sqlx::PgPool;
use maud::html;

use crate::{
    access::{Access, Authorize, Denied},
    context::Ctx,
    error::Error,
    guard::FormBody,
    secret, Shared, WebConfig,
};

/// The cookie the login form sets: the token itself, `HttpOnly; SameSite=Strict`
/// (and `Secure` over https).
const TOKEN_COOKIE: &str = "lq_token";

/// How long the login cookie lasts.
const LOGIN_DAYS: u64 = 7;

/// How the standalone server runs. Built with [`ServeOptions::new`] and the
/// chained setters; the defaults are loopback-only and read-only.
///
/// ```no_run
/// use lq_web::ServeOptions;
/// let options = ServeOptions::new("0.0.0.0:8080".parse().unwrap())
///     .allow_actions(true)
///     .token(std::env::var("LQ_WEB_TOKEN").ok());
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Where to listen (default `127.0.0.1:8080`).
    pub bind: SocketAddr,
    /// Whether actions are allowed (default `false`: read-only).
    pub allow_actions: bool,
    /// A token, sent as `Authorization: Bearer <token>` or entered once in the
    /// login form (which sets a cookie).
    pub token: Option<String>,
    /// A user name and password, for `Authorization: Basic`.
    pub basic: Option<(String, String)>,
    /// How often pages refresh themselves (default 5 s).
    pub refresh: Duration,
    /// The addresses browsers use when a proxy in front rewrites `Host`
    /// ([`WebConfig::public_origin`]).
    pub public_origins: Vec<String>,
    /// The bound on each database call a request makes (default 30 s;
    /// [`WebConfig::timeout`]).
    pub timeout: Duration,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("bind", &self.bind)
            .field("allow_actions", &self.allow_actions)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("basic", &self.basic.as_ref().map(|(u, _)| (u, "…")))
            .field("refresh", &self.refresh)
            .field("public_origins", &self.public_origins)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self::new(SocketAddr::from(([127, 0, 0, 1], 8080)))
    }
}

impl ServeOptions {
    /// Listen on `bind`, read-only, with no authentication (allowed on a
    /// loopback address only, and then answering only requests addressed to a
    /// loopback name: see [`standalone`]).
    ///
    /// ```
    /// let options = lq_web::ServeOptions::new("127.0.0.1:9000".parse().unwrap());
    /// assert!(!options.allow_actions);
    /// ```
    pub fn new(bind: SocketAddr) -> Self {
        Self {
            bind,
            allow_actions: false,
            token: None,
            basic: None,
            refresh: Duration::from_secs(5),
            public_origins: Vec::new(),
            timeout: lq_core::control::DEFAULT_TIMEOUT,
        }
    }

    /// The bound on each database call a request makes ([`WebConfig::timeout`]).
    ///
    /// ```
    /// let options = lq_web::ServeOptions::default().timeout(std::time::Duration::from_secs(120));
    /// assert_eq!(options.timeout.as_secs(), 120);
    /// ```
    pub fn timeout(mut self, bound: Duration) -> Self {
        self.timeout = bound;
        self
    }

    /// Allow actions (retry, cancel, delete, run now, pause, resume, run a cron tick).
    ///
    /// ```
    /// let options = lq_web::ServeOptions::default().allow_actions(true);
    /// assert!(options.allow_actions);
    /// ```
    pub fn allow_actions(mut self, on: bool) -> Self {
        self.allow_actions = on;
        self
    }

    /// Require this token (`None`: no token).
    ///
    /// ```
    /// let options = lq_web::ServeOptions::default().token(Some("s3cret".to_owned()));
    /// # let _ = options;
    /// ```
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// Require basic auth with this user name and password (`None`: none).
    ///
    /// ```
    /// let options = lq_web::ServeOptions::default()
    ///     .basic(Some(("ops".to_owned(), "s3cret".to_owned())));
    /// # let _ = options;
    /// ```
    pub fn basic(mut self, user_and_password: Option<(String, String)>) -> Self {
        self.basic = user_and_password;
        self
    }

    /// Refresh pages this often (`Duration::ZERO`: never).
    ///
    /// ```
    /// let options = lq_web::ServeOptions::default().refresh(std::time::Duration::ZERO);
    /// # let _ = options;
    /// ```
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    /// Also accept actions posted from `origin`, the address browsers use
    /// behind a proxy that rewrites `Host` ([`WebConfig::public_origin`]).
    ///
    /// ```
    /// let options = lq_web::ServeOptions::default().public_origin("https://ops.example.com");
    /// assert_eq!(options.public_origins, ["https://ops.example.com"]);
    /// ```
    pub fn public_origin(mut self, origin: impl Into<String>) -> Self {
        self.public_origins.push(origin.into());
        self
    }

    /// Checks the options without binding anything: refuses a non-loopback
    /// address or a public origin (a proxy in front) without a token or basic
    /// auth, and an empty secret.
    ///
    /// ```
    /// use lq_web::{Error, ServeOptions};
    /// let open = ServeOptions::new("0.0.0.0:8080".parse().unwrap());
    /// assert!(matches!(open.check(), Err(Error::Unprotected { .. })));
    /// assert!(open.token(Some("s3cret".into())).check().is_ok());
    /// ```
    pub fn check(&self) -> Result<(), Error> {
        if self.token.as_deref() == Some("") {
            return Err(Error::EmptySecret { what: "token" });
        }
        if matches!(&self.basic, Some((_, p)) if p.is_empty()) {
            return Err(Error::EmptySecret {
                what: "basic auth password",
            });
        }
        let open = self.token.is_none() && self.basic.is_none();
        if !self.bind.ip().is_loopback() && open {
            return Err(Error::Unprotected { bind: self.bind });
        }
        // Behind a proxy every request comes from loopback: the loopback-only
        // guard protects nothing there.
        if let (Some(origin), true) = (self.public_origins.first(), open) {
            return Err(Error::ProxiedUnprotected {
                origin: origin.clone(),
            });
        }
        Ok(())
    }
}

/// The standalone dashboard as a router, after [`ServeOptions::check`]: what
/// [`serve`] listens with, for serving it some other way (or testing it).
///
/// Without a token or basic auth it answers only requests whose `Host` names
/// a loopback host (`localhost`, `*.localhost`, `127.x.x.x`, `[::1]`), and any
/// other with 421: a web page whose name its owner re-points to 127.0.0.1 (DNS
/// rebinding) would otherwise be same-origin with the dashboard, read every
/// page and, with actions allowed, pass the CSRF checks.
///
/// ```no_run
/// # fn f(pool: sqlx::PgPool) -> Result<(), lq_web::Error> {
/// let options = lq_web::ServeOptions::default().token(Some("s3cret".into()));
/// let app: axum::Router = lq_web::standalone(pool, &options)?;
/// # Ok(()) }
/// ```
pub fn standalone(pool: PgPool, options: &ServeOptions) -> Result<Router, Error> {
    options.check()?;
    let config = WebConfig::new()
        .actions(options.allow_actions)
        .refresh(options.refresh)
        .timeout(options.timeout)
        .authorize(Standalone {
            token: options.token.clone(),
            basic: options.basic.clone(),
        });
    let config = (options.public_origins.iter()).fold(config, WebConfig::public_origin);
    let app = crate::build(pool, config, options.token.clone());
    Ok(if options.token.is_none() && options.basic.is_none() {
        app.layer(middleware::from_fn(loopback_host_only))
    } else {
        app
    })
}

/// Refuses, with 421 Misdirected Request, a request addressed to a host that
/// is not a loopback name: the dashboard without a secret trusts whoever can
/// reach it, and a browser reaches it for a rebound hostile name too, sending
/// that name as the `Host`. See [`standalone`].
async fn loopback_host_only(req: Request, next: Next) -> Response {
    let host = match req.headers().get(header::HOST) {
        // A Host that is not text names no loopback host.
        Some(h) => Some(h.to_str().unwrap_or("")),
        None => req.uri().authority().map(|a| a.as_str()),
    };
    // Neither a Host nor an authority: not a browser's request (browsers
    // always send one), so not one a web page could have rebound.
    if host.is_none_or(is_loopback_host) {
        return next.run(req).await;
    }
    let mut r = (
        StatusCode::MISDIRECTED_REQUEST,
        "this dashboard has no token, so it answers only requests addressed to \
         localhost or 127.0.0.1 (a guard against DNS rebinding): open it as \
         http://localhost:PORT/, or set a token (LQ_WEB_TOKEN, or the variable \
         lq serve --token-env names)\n",
    )
        .into_response();
    let h = r.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Whether `authority` (`host` or `host:port`) names a loopback host:
/// `localhost`, a name under `.localhost`, an address in 127.0.0.0/8, or
/// `[::1]`; case-insensitive.
fn is_loopback_host(authority: &str) -> bool {
    let authority = authority.to_ascii_lowercase();
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((v6, rest)) => match rest.strip_prefix(':') {
                Some(port) => (v6, port),
                None if rest.is_empty() => (v6, ""),
                None => return false,
            },
            None => return false,
        },
        None => authority.rsplit_once(':').unwrap_or((&authority, "")),
    };
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    if authority.starts_with('[') {
        return host
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|a| a.is_loopback());
    }
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

/// Serves the dashboard on `options.bind` until Ctrl-C (or SIGTERM), then
/// finishes the requests in flight. Refuses to start on a non-loopback address
/// without a token or basic auth.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> Result<(), lq_web::Error> {
/// let options = lq_web::ServeOptions::default().allow_actions(true);
/// lq_web::serve(pool, options).await?;
/// # Ok(()) }
/// ```
pub async fn serve(pool: PgPool, options: ServeOptions) -> Result<(), Error> {
    let app = standalone(pool, &options)?;
    let listener = tokio::net::TcpListener::bind(options.bind)
        .await
        .map_err(|source| Error::Bind {
            bind: options.bind,
            source,
        })?;
    tracing::info!(
        target: "lq_web",
        bind = %options.bind,
        actions = options.allow_actions,
        token = options.token.is_some(),
        basic = options.basic.is_some(),
        "dashboard listening"
    );
    // The peer's address, for the login audit line.
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(Error::Serve)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// The standalone server's authorisation: with no secret set, everyone (it
/// listens on loopback only, and [`loopback_host_only`] turns away requests
/// addressed to other names); otherwise the bearer token, the login cookie or
/// basic auth, each compared in constant time.
struct Standalone {
    token: Option<String>,
    basic: Option<(String, String)>,
}

impl Standalone {
    fn basic_user(&self, parts: &Parts) -> Option<String> {
        let (user, pass) = self.basic.as_ref()?;
        let given = authorization(parts, "Basic ")?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(given.trim())
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (u, p) = decoded.split_once(':')?;
        // Both compared, whatever the first gives, so timing tells nothing.
        let ok = secret::same(u.as_bytes(), user.as_bytes())
            & secret::same(p.as_bytes(), pass.as_bytes());
        ok.then(|| u.to_owned())
    }

    fn token_ok(&self, parts: &Parts) -> bool {
        let Some(token) = &self.token else {
            return false;
        };
        let bearer = authorization(parts, "Bearer ")
            .is_some_and(|given| secret::same(given.trim().as_bytes(), token.as_bytes()));
        let cookie = secret::cookie(&parts.headers, TOKEN_COOKIE)
            .is_some_and(|given| secret::same(given.as_bytes(), cookie_value(token).as_bytes()));
        bearer | cookie
    }
}

/// The token as a cookie value (percent-encoded: a token may hold `;`).
fn cookie_value(token: &str) -> String {
    form_urlencoded::byte_serialize(token.as_bytes()).collect()
}

fn authorization<'p>(parts: &'p Parts, scheme: &str) -> Option<&'p str> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (given_scheme, rest) = value.split_at_checked(scheme.len())?;
    given_scheme.eq_ignore_ascii_case(scheme).then_some(rest)
}

impl Authorize for Standalone {
    fn access(&self, parts: &Parts) -> Access {
        if self.token.is_none() && self.basic.is_none() {
            return Access::Full;
        }
        if self.token_ok(parts) || self.basic_user(parts).is_some() {
            Access::Full
        } else {
            Access::None
        }
    }

    fn identity(&self, parts: &Parts) -> Option<String> {
        if let Some(user) = self.basic_user(parts) {
            return Some(user);
        }
        self.token_ok(parts).then(|| "token".to_owned())
    }

    fn denied(&self, _: &Parts) -> Denied {
        if self.token.is_some() {
            Denied::Login
        } else {
            Denied::Basic
        }
    }
}

/// `GET /login`: the token form.
pub(crate) async fn login_form(ctx: Ctx) -> Response {
    ctx.page("Sign in", login_body(&ctx, None))
}

fn login_body(ctx: &Ctx, error: Option<&str>) -> maud::Markup {
    html! {
        h1 { "Sign in" }
        @if let Some(e) = error { p.error-message role="alert" { (e) } }
        form.login method="post" action=(ctx.url("/login")) {
            (ctx.csrf_field())
            label { "Token " input type="password" name="token" autocomplete="current-password" autofocus; }
            button type="submit" { "Sign in" }
        }
    }
}

/// `POST /login`: checks the token, then sets the login cookie and goes to the
/// overview; a wrong token gets the form again with 401. Each try is
/// audit-logged with the client's address (and `X-Forwarded-For`, as sent).
/// The cookie is `Secure` when the request came over https (see
/// [`crate::guard::over_https`]).
pub(crate) async fn login(
    ctx: Ctx,
    State(sh): State<Arc<Shared>>,
    Extension(FormBody(form)): Extension<FormBody>,
    parts: Parts,
) -> Response {
    let expected = sh.login.as_deref();
    let given = form.get("token").unwrap_or("");
    let ok = expected.is_some_and(|t| secret::same(given.as_bytes(), t.as_bytes()));
    let client = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "-".to_owned(), |c| c.0.to_string());
    let forwarded_for = parts
        .headers
        .get("x-forwarded-for")
        .map_or("-", |v| v.to_str().unwrap_or("(not text)"));
    tracing::info!(
        target: "lq_web::audit",
        action = "login",
        client,
        forwarded_for,
        outcome = if ok { "done" } else { "refused: wrong token" },
        "dashboard login"
    );
    if !ok {
        return ctx.page_with(
            StatusCode::UNAUTHORIZED,
            "Sign in",
            login_body(&ctx, Some("wrong token")),
        );
    }
    let mut r = crate::actions::see_other(&ctx.url("/"));
    let mut cookie = secret::set_cookie(
        TOKEN_COOKIE,
        &cookie_value(given),
        &ctx.base,
        Some(LOGIN_DAYS * 86_400),
    );
    if crate::guard::over_https(&parts, &sh.config) {
        cookie.push_str("; Secure");
    }
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::is_loopback_host;

    #[test]
    fn loopback_names_with_or_without_a_port_and_nothing_else() {
        for yes in [
            "localhost",
            "LOCALHOST:8080",
            "dash.localhost:80",
            "127.0.0.1",
            "127.255.0.9:8080",
            "[::1]",
            "[::1]:8080",
        ] {
            assert!(is_loopback_host(yes), "{yes}");
        }
        for no in [
            "evil.test:8080",
            "localhost.evil.test",
            "127.0.0.1.evil.test",
            "evillocalhost",
            "128.0.0.1:8080",
            "0.0.0.0",
            "[::2]:8080",
            "[::1]x",
            "[::1",
            "localhost:80x",
            "user@localhost",
            "",
        ] {
            assert!(!is_loopback_host(no), "{no}");
        }
    }
}
