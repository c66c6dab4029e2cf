//! The guard every request passes: it decides the access, refuses what is not
//! allowed, checks every POST (access, Origin, CSRF) before any handler runs,
//! hands the CSRF cookie out, and sets the security headers on every response.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::{NestedPath, Request, State},
    http::{header, request::Parts, HeaderValue, Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use lq_core::control::with_timeout;

use crate::{
    access::{Access, Denied},
    context::Ctx,
    error::PageError,
    params::Pairs,
    secret, Shared, WebConfig,
};

/// The CSRF cookie: a random token, echoed by every form as the `csrf` field.
pub(crate) const CSRF_COOKIE: &str = "lq_csrf";

/// Largest form body read (a bulk selection of a thousand ids fits easily).
const MAX_FORM_BYTES: usize = 256 * 1024;

/// The form body of a POST that passed the checks, for its handler.
#[derive(Debug, Clone)]
pub(crate) struct FormBody(pub Pairs);

/// Runs around every route of the dashboard.
pub(crate) async fn guard(State(sh): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let base = match &sh.config.base_path {
        Some(b) => b.clone(),
        None => parts
            .extensions
            .get::<NestedPath>()
            .map(|n| n.as_str().trim_end_matches('/').to_owned())
            .unwrap_or_default(),
    };
    let (csrf, fresh) = match secret::cookie(&parts.headers, CSRF_COOKIE) {
        Some(t) if secret::is_token(t) => (t.to_owned(), false),
        _ => (secret::new_token(), true),
    };
    let https = over_https(&parts, &sh.config);
    let granted = sh.config.authorize.access(&parts);
    let ctx = Ctx {
        base,
        path: path.clone(),
        csrf,
        access: granted.min(sh.config.cap()),
        user: sh.config.authorize.identity(&parts),
        partial: parts.headers.contains_key("lq-partial"),
        // A page answering a POST (a confirmation, a bulk report) is not
        // fetched again: its address does not GET the same page.
        refresh: if parts.method == Method::GET {
            sh.config.refresh
        } else {
            None
        },
    };
    let open = path.starts_with("/assets/")
        || path == "/health"
        || (sh.login.is_some() && path == "/login");
    let response = if granted == Access::None && !open {
        if parts.method != Method::GET && parts.method != Method::HEAD {
            let why = "no access (credentials missing or wrong)";
            let action = format!("{} {path}", parts.method);
            crate::actions::log_refusal(ctx.user.as_deref(), ctx.access, &action, &path, why);
        }
        denied(&ctx, sh.config.authorize.denied(&parts))
    } else if parts.method == Method::GET || parts.method == Method::HEAD {
        parts.extensions.insert(ctx.clone());
        let bound = sh.config.timeout;
        with_timeout(bound, next.run(Request::from_parts(parts, body))).await
    } else {
        match checked_form(&sh, &ctx, &parts, body, path == "/login").await {
            Ok(form) => {
                parts.extensions.insert(ctx.clone());
                parts.extensions.insert(FormBody(form));
                let bound = sh.config.timeout;
                with_timeout(bound, next.run(Request::from_parts(parts, Body::empty()))).await
            }
            Err(e) => {
                let action = format!("{} {path}", parts.method);
                crate::actions::log_refusal(
                    ctx.user.as_deref(),
                    ctx.access,
                    &action,
                    &path,
                    &e.message,
                );
                ctx.error(e)
            }
        }
    };
    finish(response, &ctx, fresh, https)
}

/// The answer to a request granted no access.
fn denied(ctx: &Ctx, how: Denied) -> Response {
    let base = Ctx {
        access: Access::None,
        refresh: None,
        ..ctx.clone()
    };
    match how {
        Denied::Forbidden => base.error(PageError::forbidden(
            "you do not have access to this dashboard",
        )),
        Denied::Login => {
            let body = maud::html! {
                h1 { "Sign in" }
                p.error-message role="alert" { "this dashboard needs a token" }
                p { a href=(base.url("/login")) { "Sign in with the token" } }
            };
            base.page_with(StatusCode::UNAUTHORIZED, "Sign in", body)
        }
        Denied::Basic => {
            let mut r = base.error(PageError::new(
                StatusCode::UNAUTHORIZED,
                "this dashboard needs a user name and password",
            ));
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"lq\", charset=\"UTF-8\""),
            );
            r
        }
    }
}

/// Reads a POST's form and checks, on the server, everything that decides
/// whether it may change anything: full access (not for the login form), a
/// same-origin request, and the CSRF token of the form matching the cookie.
async fn checked_form(
    sh: &Shared,
    ctx: &Ctx,
    parts: &Parts,
    body: Body,
    login: bool,
) -> Result<Pairs, PageError> {
    if !login && ctx.access != Access::Full {
        return Err(PageError::forbidden(if sh.config.actions {
            "your access is read-only: actions are refused"
        } else {
            "this dashboard is read-only: actions are disabled"
        }));
    }
    same_origin(parts, &sh.config.public_origins)?;
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| PageError::new(StatusCode::PAYLOAD_TOO_LARGE, "the form is too large"))?;
    let form = Pairs::parse(&bytes);
    let cookie = secret::cookie(&parts.headers, CSRF_COOKIE);
    match (cookie, form.get("csrf")) {
        (Some(c), Some(f)) if secret::is_token(c) && secret::same(c.as_bytes(), f.as_bytes()) => {
            Ok(form)
        }
        _ => Err(PageError::forbidden(
            "missing or wrong CSRF token: reload the page and try again",
        )),
    }
}

/// Refuses a request another site's page sent: a `Sec-Fetch-Site` other
/// than `same-origin` or `none`, or an `Origin` that names neither the host
/// the request was addressed to (its `Host`, or over HTTP/2, which has no
/// `Host`, its `:authority`) nor one of the configured public origins
/// ([`crate::WebConfig::public_origin`]).
pub(crate) fn same_origin(parts: &Parts, public: &[String]) -> Result<(), PageError> {
    let headers = &parts.headers;
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.as_bytes(), b"same-origin" | b"none") {
            return Err(PageError::forbidden(
                "cross-site request refused (Sec-Fetch-Site)",
            ));
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().ok().map(|o| o.trim_end_matches('/'));
    if origin.is_some_and(|o| public.contains(&crate::config::normalize_origin(o))) {
        return Ok(());
    }
    let origin_host = origin
        .and_then(|o| o.split_once("://"))
        .map(|(_, host)| host);
    let host = match headers.get(header::HOST) {
        Some(h) => h.to_str().ok(),
        None => parts.uri.authority().map(|a| a.as_str()),
    };
    match (origin_host, host) {
        (Some(o), Some(h)) if o.eq_ignore_ascii_case(h) => Ok(()),
        _ => Err(PageError::forbidden(
            "cross-origin request refused: its Origin is not this dashboard's host \
             (behind a proxy that rewrites Host, set WebConfig::public_origin or \
             lq serve --public-origin)",
        )),
    }
}

/// Sets the headers every response carries, and the CSRF cookie when the
/// request had none: `Secure` when the browser came over https, so a page
/// served over plain http on the same host cannot overwrite it.
fn finish(mut response: Response, ctx: &Ctx, fresh_csrf: bool, https: bool) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if fresh_csrf {
        let mut cookie = secret::set_cookie(CSRF_COOKIE, &ctx.csrf, &ctx.base, None);
        if https {
            cookie.push_str("; Secure");
        }
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            h.append(header::SET_COOKIE, v);
        }
    }
    response
}

/// A 405 page: a GET of an action's address (a bookmarked form target), or a
/// POST to a page.
pub(crate) async fn method_not_allowed(ctx: Ctx) -> Response {
    ctx.error(PageError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} is not something to open here: actions are buttons on the pages",
            ctx.path
        ),
    ))
}

/// A 404 page for a path the dashboard does not have.
pub(crate) async fn not_found(ctx: Ctx) -> Response {
    ctx.error(PageError::not_found(format!(
        "there is no page {}",
        ctx.path
    )))
    .into_response()
}

/// Whether the browser reached the dashboard over https: the request's
/// scheme (HTTP/2), its `Origin` (which browsers send with a form's POST), a
/// proxy's `X-Forwarded-Proto`, or an https [`WebConfig::public_origin`].
pub(crate) fn over_https(parts: &Parts, config: &WebConfig) -> bool {
    let header = |name: header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase())
    };
    let forwarded = header(header::HeaderName::from_static("x-forwarded-proto"));
    parts.uri.scheme_str() == Some("https")
        || header(header::ORIGIN).is_some_and(|o| o.starts_with("https://"))
        || forwarded.is_some_and(|p| p.split(',').next().map(str::trim) == Some("https"))
        || config.https_public()
}
