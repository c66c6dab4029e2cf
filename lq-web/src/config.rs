//! [`WebConfig`]: what the dashboard allows and how it looks, built up with
//! chained calls.

use std::{fmt, sync::Arc, time::Duration};

use crate::access::{Access, Authorize, Everyone};

/// A payload redaction hook: called with the job's kind and its decoded payload
/// before the job page shows it.
///
/// ```
/// let hook: lq_web::Redact = |_kind, payload| *payload = serde_json::json!("(hidden)");
/// let config = lq_web::WebConfig::new().redact(hook);
/// # let _ = config;
/// ```
pub type Redact = fn(&str, &mut serde_json::Value);

/// How the dashboard behaves. The defaults are the safe ones: read-only, every
/// request granted what the configuration allows, pages refreshing every 5 s.
///
/// ```no_run
/// use std::time::Duration;
/// use lq_web::WebConfig;
///
/// fn hide_card(kind: &str, payload: &mut serde_json::Value) {
///     if kind == "charge_card" {
///         payload["card"] = "…".into();
///     }
/// }
///
/// let config = WebConfig::new()
///     .actions(true)                        // retry, cancel, delete, run now, pause, resume, cron run
///     .refresh(Duration::from_secs(10))
///     .redact(hide_card);
/// ```
#[derive(Clone)]
pub struct WebConfig {
    pub(crate) actions: bool,
    pub(crate) authorize: Arc<dyn Authorize>,
    pub(crate) refresh: Option<Duration>,
    pub(crate) base_path: Option<String>,
    pub(crate) redact: Option<Redact>,
    /// Origins (`scheme://host[:port]`, lowercase, no default port) the Origin
    /// check accepts besides the request's own host.
    pub(crate) public_origins: Vec<String>,
    /// The bound on each control call a request makes.
    pub(crate) timeout: Duration,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            actions: false,
            authorize: Arc::new(Everyone),
            refresh: Some(Duration::from_secs(5)),
            base_path: None,
            redact: None,
            public_origins: Vec::new(),
            timeout: lq_core::control::DEFAULT_TIMEOUT,
        }
    }
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("actions", &self.actions)
            .field("refresh", &self.refresh)
            .field("base_path", &self.base_path)
            .field("redact", &self.redact.is_some())
            .field("public_origins", &self.public_origins)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl WebConfig {
    /// The defaults: read-only, refresh every 5 s, links from where the router
    /// is mounted.
    ///
    /// ```
    /// let config = lq_web::WebConfig::new();
    /// # let _ = config;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether actions (retry, cancel, delete, run now, pause, resume, run a cron
    /// tick) are allowed at all (default `false`: read-only for everyone, whatever
    /// [`WebConfig::authorize`] grants).
    ///
    /// ```
    /// let config = lq_web::WebConfig::new().actions(true);
    /// # let _ = config;
    /// ```
    pub fn actions(mut self, on: bool) -> Self {
        self.actions = on;
        self
    }

    /// The application's authorisation, asked on every request (default:
    /// everyone gets what [`WebConfig::actions`] allows). See [`Authorize`].
    ///
    /// ```
    /// use lq_web::{Access, Authorize, WebConfig};
    /// struct LookOnly;
    /// impl Authorize for LookOnly {
    ///     fn access(&self, _: &axum::http::request::Parts) -> Access {
    ///         Access::ReadOnly
    ///     }
    /// }
    /// let config = WebConfig::new().actions(true).authorize(LookOnly);
    /// # let _ = config;
    /// ```
    pub fn authorize(mut self, authorize: impl Authorize) -> Self {
        self.authorize = Arc::new(authorize);
        self
    }

    /// The bound on each database call a page or an action makes (default
    /// 30 s; see [`lq_core::control::with_timeout`]): widen it for counts over
    /// a long history, or for bulk actions on a slow server.
    ///
    /// ```
    /// let config = lq_web::WebConfig::new().timeout(std::time::Duration::from_secs(120));
    /// # let _ = config;
    /// ```
    pub fn timeout(mut self, bound: std::time::Duration) -> Self {
        self.timeout = bound;
        self
    }

    /// How often pages refresh themselves while visible (default 5 s);
    /// `Duration::ZERO` turns refreshing off.
    ///
    /// ```
    /// let config = lq_web::WebConfig::new().refresh(std::time::Duration::from_secs(15));
    /// # let _ = config;
    /// ```
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = (!every.is_zero()).then_some(every);
        self
    }

    /// The path in front of the dashboard as the browser sees it, for links,
    /// form actions and cookies. By default it is the path the router is nested
    /// at (axum's `NestedPath`), or nothing at the root; set it when a proxy
    /// strips a prefix before the application sees the request.
    ///
    /// ```
    /// // Behind a proxy that maps https://ops.example.com/queue/ to the app's root.
    /// let config = lq_web::WebConfig::new().base_path("/queue");
    /// # let _ = config;
    /// ```
    ///
    /// # Behind a reverse proxy
    ///
    /// Every action is a POST whose `Origin` (sent by browsers) must name the
    /// host the request was addressed to: its `Host` header, or over HTTP/2
    /// its `:authority`. A proxy that rewrites `Host` to its upstream's name
    /// (nginx's default, `proxy_set_header Host $proxy_host`) makes every
    /// action look cross-origin, and each is refused with 403. Either pass the
    /// browser's host on:
    ///
    /// ```text
    /// location /queue/ {
    ///     proxy_pass http://127.0.0.1:8080/;
    ///     proxy_set_header Host $host;
    ///     proxy_set_header X-Forwarded-Proto $scheme;
    /// }
    /// ```
    ///
    /// or name the address browsers use with [`WebConfig::public_origin`]. The
    /// standalone server behind a proxy requires a token or basic auth
    /// ([`crate::Error::ProxiedUnprotected`]): every request comes from
    /// loopback there, so the loopback-only guard protects nothing.
    /// The standalone server's login cookie is `Secure` when the request came
    /// over https: its `Origin`, `X-Forwarded-Proto: https`, or an https
    /// public origin says so.
    pub fn base_path(mut self, path: impl Into<String>) -> Self {
        let path = path.into();
        self.base_path = Some(path.trim_end_matches('/').to_owned());
        self
    }

    /// A hook that edits each payload (decoded) before the job page shows it,
    /// for fields no operator should read. A payload too deep to decode is not
    /// shown at all while a hook is set, and the job list offers no payload
    /// filter (a containment query would confirm a hidden value a guess at a
    /// time). Unique keys, templates over payload fields, are hidden too, on the
    /// job page and in the refusals that name one. Metadata is shown as stored:
    /// keep secrets out of it.
    ///
    /// ```
    /// fn no_tokens(_kind: &str, payload: &mut serde_json::Value) {
    ///     if let Some(obj) = payload.as_object_mut() {
    ///         obj.remove("api_token");
    ///     }
    /// }
    /// let config = lq_web::WebConfig::new().redact(no_tokens);
    /// # let _ = config;
    /// ```
    pub fn redact(mut self, hook: Redact) -> Self {
        self.redact = Some(hook);
        self
    }

    /// An origin (`https://ops.example.com`, or with a port) whose pages may
    /// post actions, besides the host each request names: the address
    /// browsers use when a proxy in front rewrites `Host` (see
    /// [`WebConfig::base_path`] for the proxy setup). Origins accumulate; a
    /// path, a trailing slash, a default port and letter case are ignored. An
    /// `https` origin also marks the standalone server's login cookie `Secure`
    /// (then sign in through that address, not over plain http).
    ///
    /// ```
    /// let config = lq_web::WebConfig::new()
    ///     .actions(true)
    ///     .public_origin("https://ops.example.com");
    /// # let _ = config;
    /// ```
    pub fn public_origin(mut self, origin: impl AsRef<str>) -> Self {
        self.public_origins.push(normalize_origin(origin.as_ref()));
        self
    }

    /// Whether a public origin is served over https.
    pub(crate) fn https_public(&self) -> bool {
        (self.public_origins.iter()).any(|o| o.starts_with("https://"))
    }

    /// The most any request may get under this configuration.
    pub(crate) fn cap(&self) -> Access {
        if self.actions {
            Access::Full
        } else {
            Access::ReadOnly
        }
    }
}

/// `origin` as browsers send it in `Origin`: `scheme://host[:port]`,
/// lowercase, without a path or the scheme's default port.
pub(crate) fn normalize_origin(origin: &str) -> String {
    let origin = origin.trim().to_ascii_lowercase();
    let (scheme, rest) = origin.split_once("://").unwrap_or(("", origin.as_str()));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = match scheme {
        "https" => authority.strip_suffix(":443").unwrap_or(authority),
        "http" => authority.strip_suffix(":80").unwrap_or(authority),
        _ => authority,
    };
    format!("{scheme}://{authority}")
}

#[cfg(test)]
mod tests {
    use super::normalize_origin;

    #[test]
    fn origins_are_compared_as_browsers_send_them() {
        for (given, origin) in [
            ("https://ops.example.com", "https://ops.example.com"),
            ("HTTPS://Ops.Example.com:443/", "https://ops.example.com"),
            (
                "https://ops.example.com/queue/jobs",
                "https://ops.example.com",
            ),
            ("http://ops.example.com:80", "http://ops.example.com"),
            ("http://ops.example.com:8443", "http://ops.example.com:8443"),
        ] {
            assert_eq!(normalize_origin(given), origin, "{given}");
        }
    }
}
