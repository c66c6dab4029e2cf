//! Who may see and do what: [`Access`] levels and the [`Authorize`] trait an
//! embedding application implements with its own notion of users.

use axum::http::request::Parts;

/// What a request may do, lowest first: the effective level of a request is the
/// lower of what [`Authorize::access`] grants and what the configuration allows
/// ([`Access::Full`] with [`crate::WebConfig::actions`] on, else
/// [`Access::ReadOnly`]).
///
/// ```
/// use lq_web::Access;
/// assert!(Access::None < Access::ReadOnly && Access::ReadOnly < Access::Full);
/// assert_eq!(Access::Full.min(Access::ReadOnly), Access::ReadOnly);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Access {
    /// Nothing: every page answers 403 (or 401, see [`Authorize::denied`]).
    None,
    /// Every page, no action: each POST is refused with 403.
    ReadOnly,
    /// Pages and actions (retry, cancel, delete, run now, pause, resume, run a cron tick).
    Full,
}

impl Access {
    /// A word for the page header and the audit log.
    ///
    /// ```
    /// assert_eq!(lq_web::Access::ReadOnly.as_str(), "read-only");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Access::None => "none",
            Access::ReadOnly => "read-only",
            Access::Full => "full",
        }
    }
}

/// How a request that was granted [`Access::None`] is answered.
///
/// ```
/// use lq_web::Denied;
/// let answer = Denied::Forbidden;
/// assert!(matches!(answer, Denied::Forbidden));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Denied {
    /// 403 Forbidden, with a page saying so: the user is known and not allowed.
    Forbidden,
    /// 401 Unauthorized, with a link to the dashboard's token login form (the
    /// standalone server with a token).
    Login,
    /// 401 Unauthorized with `WWW-Authenticate: Basic`, so the browser asks for
    /// a user name and password (the standalone server with basic auth).
    Basic,
}

/// An application's authorisation, asked on every request before anything is
/// read or done. The dashboard enforces the answer on the server: a POST from a
/// request granted less than [`Access::Full`] changes nothing, whatever the page
/// showed.
///
/// Without one, [`crate::WebConfig`] grants [`Access::Full`] to everyone, so
/// [`crate::WebConfig::actions`] alone decides between read-only and full: an
/// embedding application must either put its own authentication in front of the
/// router or implement this trait.
///
/// ```no_run
/// use axum::http::request::Parts;
/// use lq_web::{Access, Authorize, WebConfig};
///
/// /// Operators (a header set by the application's own auth layer) may act;
/// /// other signed-in staff may look.
/// struct Staff;
///
/// impl Authorize for Staff {
///     fn access(&self, parts: &Parts) -> Access {
///         match parts.headers.get("x-staff-role").and_then(|v| v.to_str().ok()) {
///             Some("operator") => Access::Full,
///             Some(_) => Access::ReadOnly,
///             None => Access::None,
///         }
///     }
///     fn identity(&self, parts: &Parts) -> Option<String> {
///         let user = parts.headers.get("x-staff-user")?.to_str().ok()?;
///         Some(user.to_owned())
///     }
/// }
///
/// # fn f(pool: sqlx::PgPool) {
/// let app = lq_web::router(pool, WebConfig::new().actions(true).authorize(Staff));
/// # }
/// ```
pub trait Authorize: Send + Sync + 'static {
    /// The access `parts` (method, URI, headers and the extensions the
    /// application's own layers added) is granted.
    fn access(&self, parts: &Parts) -> Access;

    /// Who is asking, for the audit log of every action (default: nobody
    /// known).
    fn identity(&self, parts: &Parts) -> Option<String> {
        let _ = parts;
        None
    }

    /// How a request granted [`Access::None`] is answered (default:
    /// [`Denied::Forbidden`]).
    fn denied(&self, parts: &Parts) -> Denied {
        let _ = parts;
        Denied::Forbidden
    }
}

/// The default authorizer: everyone gets [`Access::Full`], so the
/// configuration's `actions` switch alone decides.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Everyone;

impl Authorize for Everyone {
    fn access(&self, _: &Parts) -> Access {
        Access::Full
    }
}
