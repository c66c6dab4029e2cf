//! Driving the dashboard's router: requests in process, responses read whole,
//! and the database state a test compares before and after.

use axum::{
    body::Body,
    http::{header, HeaderMap, Request, StatusCode},
    Router,
};
use http_body_util::BodyExt;
use lq_runtime::{EnqueueOptions, Job};
use lq_tests::TestDb;
use lq_web::{Access, Authorize, WebConfig};
use tower::ServiceExt;

use crate::jobs::{Mail, Report};

/// The host every request names (and a same-origin `Origin` matches).
pub const HOST: &str = "lq.test";

/// A valid CSRF token (64 hex digits) that tests put in the cookie.
pub const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// Another valid-looking token: the "wrong" one.
pub const OTHER: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/// A response, its body read as text.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Resp {
    /// The `Location` header of a redirect.
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Every `Set-Cookie` value.
    pub fn cookies(&self) -> Vec<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }

    /// Asserts the status, showing the body when it differs.
    #[track_caller]
    pub fn expect(&self, status: StatusCode) -> &Self {
        assert_eq!(self.status, status, "body: {}", self.body);
        self
    }

    /// Asserts the body contains `text`.
    #[track_caller]
    pub fn has(&self, text: &str) -> &Self {
        assert!(
            self.body.contains(text),
            "expected {text:?} in the body:\n{}",
            self.body
        );
        self
    }

    /// Asserts the body does not contain `text`.
    #[track_caller]
    pub fn lacks(&self, text: &str) -> &Self {
        assert!(
            !self.body.contains(text),
            "did not expect {text:?} in the body:\n{}",
            self.body
        );
        self
    }
}

/// Sends `req` through `app`.
pub async fn send(app: &Router, req: Request<Body>) -> Resp {
    let res = app.clone().oneshot(req).await.expect("infallible");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// `GET path`.
pub async fn get(app: &Router, path: &str) -> Resp {
    send(app, request("GET", path).body(Body::empty()).unwrap()).await
}

/// A request builder with the test host.
pub fn request(method: &str, path: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, HOST)
}

/// How a POST carries its CSRF token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Csrf {
    /// The cookie, and no `csrf` field.
    Missing,
    /// The cookie, and a `csrf` field with another token.
    Wrong,
    /// The cookie, and the same token in the form.
    Right,
}

pub const CSRF_CASES: [Csrf; 3] = [Csrf::Missing, Csrf::Wrong, Csrf::Right];

/// A same-origin form POST of `fields` with the CSRF token as `csrf` says.
pub fn form_post(path: &str, fields: &[(&str, &str)], csrf: Csrf) -> Request<Body> {
    let mut body = form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        body.append_pair(k, v);
    }
    match csrf {
        Csrf::Missing => {}
        Csrf::Wrong => {
            body.append_pair("csrf", OTHER);
        }
        Csrf::Right => {
            body.append_pair("csrf", TOKEN);
        }
    }
    request("POST", path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, format!("lq_csrf={TOKEN}"))
        .header(header::ORIGIN, format!("http://{HOST}"))
        .header("sec-fetch-site", "same-origin")
        .body(Body::from(body.finish()))
        .unwrap()
}

/// `POST path` with `fields` and the right CSRF token.
pub async fn post(app: &Router, path: &str, fields: &[(&str, &str)]) -> Resp {
    send(app, form_post(path, fields, Csrf::Right)).await
}

/// Grants what the request's `x-test-access` header says: `none`, `read` or
/// `full` (an application's own authorisation, as the trait sees it).
pub struct ByHeader;

impl Authorize for ByHeader {
    fn access(&self, parts: &axum::http::request::Parts) -> Access {
        match parts
            .headers
            .get("x-test-access")
            .and_then(|v| v.to_str().ok())
        {
            Some("full") => Access::Full,
            Some("read") => Access::ReadOnly,
            _ => Access::None,
        }
    }

    fn identity(&self, parts: &axum::http::request::Parts) -> Option<String> {
        let user = parts.headers.get("x-test-user")?.to_str().ok()?;
        Some(user.to_owned())
    }
}

/// A dashboard with actions on, over a fresh database.
pub async fn full() -> (TestDb, Router) {
    let db = TestDb::new().await;
    let app = lq_web::router(db.pool.clone(), WebConfig::new().actions(true));
    (db, app)
}

/// Enqueues `n` mails (`to` = `user{i}@x`, `n` = i) and returns their ids,
/// oldest first.
pub async fn mails(db: &TestDb, n: u64) -> Vec<i64> {
    let jobs = (0..n).map(|i| Mail {
        to: format!("user{i}@x"),
        n: i,
    });
    Mail::enqueue_many(&db.pool, jobs, EnqueueOptions::new())
        .await
        .unwrap()
        .ids
}

/// Enqueues one report for `tenant`, with metadata `{"tenant": tenant}`.
pub async fn report(db: &TestDb, tenant: &str) -> i64 {
    Report {
        tenant: tenant.to_owned(),
    }
    .enqueue_with(&db.pool, EnqueueOptions::new().meta("tenant", tenant))
    .await
    .unwrap()
    .id
}

/// Makes queued job `id` running, held by worker `owner`.
pub async fn make_running(db: &TestDb, id: i64, owner: &str) {
    let n = sqlx::query(
        "update lq.jobs set state = 'running', lease_token = gen_random_uuid(),
             lease_owner = $2, lease_expires_at = now() + interval '1 hour',
             attempts = 1, started_at = now()
         where id = $1",
    )
    .bind(id)
    .bind(owner)
    .execute(&db.pool)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(n, 1);
}

/// A job as [`snapshot`] sees it: id, state, whether a cancel was requested,
/// and whether it is due.
pub type JobSeen = (i64, String, bool, bool);

/// Everything an action could change: each job's id and state (whether a
/// cancel was requested, whether it is due), and each queue's pause.
pub async fn snapshot(db: &TestDb) -> (Vec<JobSeen>, Vec<(String, bool)>) {
    let jobs = sqlx::query_as(
        "select id, state::text, cancel_requested_at is not null, run_at <= now()
         from lq.all_jobs order by id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let queues = sqlx::query_as("select name, paused_at is not null from lq.queues order by name")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    (jobs, queues)
}

/// The state of job `id`, or `None` once deleted.
pub async fn state(db: &TestDb, id: i64) -> Option<String> {
    sqlx::query_scalar("select state::text from lq.all_jobs where id = $1")
        .bind(id)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
}

/// `r`, or the page its 303 redirect leads to (what a browser shows after a
/// POST).
pub async fn follow(app: &Router, r: Resp) -> Resp {
    if r.status == StatusCode::SEE_OTHER {
        get(app, r.location()).await
    } else {
        r
    }
}

/// The value of hidden field `name` in the form whose opening tag contains
/// `form`, as the page rendered it.
#[track_caller]
pub fn hidden_in(body: &str, form: &str, name: &str) -> Option<String> {
    let start = body.find(form).expect("the form");
    let end = start + body[start..].find("</form>").expect("the form's end");
    let needle = format!(r#"<input type="hidden" name="{name}" value=""#);
    let at = body[start..end].find(&needle)? + start + needle.len();
    Some(body[at..at + body[at..].find('"')?].to_owned())
}

/// A bulk action's POST: asserts it redirects (303, Post/Redirect/Get) to its
/// outcome page, and returns that page.
pub async fn acted(app: &Router, path: &str, fields: &[(&str, &str)]) -> Resp {
    let r = post(app, path, fields).await;
    r.expect(StatusCode::SEE_OTHER);
    assert!(r.location().starts_with("/jobs/bulk?"), "{}", r.location());
    get(app, r.location()).await
}

/// Records a schedule for `kind` on `queue` as a runtime that has the type
/// declares it (with the job it fires), so it can be run now.
pub async fn declare_schedule(db: &TestDb, kind: &str, queue: &str) {
    sqlx::query(
        "insert into lq.cron_schedules (kind, last_tick, expr, tz, catch_up, queue, declared_by,
             payload, priority, max_attempts)
         values ($1, now(), '0 3 * * *', 'UTC', 'once', $2, 'rt-1', '{}', 0, 3)",
    )
    .bind(kind)
    .bind(queue)
    .execute(&db.pool)
    .await
    .unwrap();
}
