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
///     .actions(true)                        // retry, cancel, delete, pause, resume
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
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            actions: false,
            authorize: Arc::new(Everyone),
            refresh: Some(Duration::from_secs(5)),
            base_path: None,
            redact: None,
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

    /// Whether actions (retry, cancel, delete, pause, resume) are allowed at
    /// all (default `false`: read-only for everyone, whatever
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

    /// The most any request may get under this configuration.
    pub(crate) fn cap(&self) -> Access {
        if self.actions {
            Access::Full
        } else {
            Access::ReadOnly
        }
    }
}
