//! [`Ctx`]: what every handler knows about the request it answers (where the
//! dashboard is mounted, the access granted, the CSRF token), and how it turns
//! markup or a failure into a response.

use std::time::Duration;

use axum::{
    extract::FromRequestParts,
    http::{request::Parts, StatusCode},
    response::{IntoResponse, Response},
};
use maud::{html, Markup};

use crate::{access::Access, error::PageError, layout};

/// The request's context, put in its extensions by the guard.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    /// The path in front of the dashboard, without a trailing slash.
    pub base: String,
    /// The request's path inside the dashboard (`/jobs`).
    pub path: String,
    /// The CSRF token forms must carry (the value of the `lq_csrf` cookie).
    pub csrf: String,
    /// The effective access.
    pub access: Access,
    /// Who is asking, if the authorizer knows.
    pub user: Option<String>,
    /// Only `<main>`'s content is wanted (a refresh from `lq.js`).
    pub partial: bool,
    /// How often pages refresh themselves.
    pub refresh: Option<Duration>,
}

impl Ctx {
    /// `path` (starting with `/`) inside the dashboard, as the browser sees it.
    pub fn url(&self, path: &str) -> String {
        if path == "/" && !self.base.is_empty() {
            self.base.clone()
        } else {
            format!("{}{path}", self.base)
        }
    }

    /// True when actions are allowed for this request.
    pub fn can_act(&self) -> bool {
        self.access == Access::Full
    }

    /// The hidden field every form that posts carries.
    pub fn csrf_field(&self) -> Markup {
        html! { input type="hidden" name="csrf" value=(self.csrf); }
    }

    /// The page `title` with `body` in `<main>`, status 200.
    pub fn page(&self, title: &str, body: Markup) -> Response {
        self.page_with(StatusCode::OK, title, body)
    }

    /// The page `title` with `body` in `<main>`, or only `body` for a refresh.
    pub fn page_with(&self, status: StatusCode, title: &str, body: Markup) -> Response {
        let markup = if self.partial {
            body
        } else {
            layout::shell(self, title, body)
        };
        (status, markup).into_response()
    }

    /// The page for `result`: its markup, or the failure's message and status.
    pub fn render(&self, title: &str, result: Result<Markup, PageError>) -> Response {
        match result {
            Ok(body) => self.page(title, body),
            Err(e) => self.error(e),
        }
    }

    /// A failure as a page with its status.
    pub fn error(&self, e: PageError) -> Response {
        let title = e.status.canonical_reason().unwrap_or("Error");
        let body = html! {
            h1 { (title) }
            p.error-message role="alert" { (e.message) }
            @if let Some(detail) = &e.detail {
                (detail)
            }
            p { a href=(self.url("/")) { "Back to the overview" } }
        };
        self.page_with(e.status, title, body)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Ctx {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Ctx>().cloned().ok_or((
            StatusCode::INTERNAL_SERVER_ERROR,
            "lq-web: request context missing (the guard layer did not run)",
        ))
    }
}
