//! Access enforced on the server: every POST route × every access level × the
//! CSRF token missing, wrong or right — only full access with the right token
//! changes anything — plus the Origin and Sec-Fetch-Site checks and what pages
//! show at each level.

use axum::{
    body::Body,
    http::{header, StatusCode},
    Router,
};
use lq_runtime::control;
use lq_tests::TestDb;
use lq_web::WebConfig;

use crate::support::{
    self, form_post, get, mails, request, send, snapshot, Csrf, CSRF_CASES, HOST, TOKEN,
};

/// The jobs and queues every route acts on.
struct Fixture {
    dead: i64,
    queued: [i64; 3],
    /// Queued on queue `later`, due tomorrow.
    scheduled: i64,
}

async fn fixture() -> (TestDb, Fixture) {
    let db = TestDb::new().await;
    let ids = mails(&db, 5).await;
    db.finish(ids[0], "dead", 1.0).await;
    sqlx::query(
        "update lq.jobs set queue = 'later', run_at = now() + interval '1 day' where id = $1",
    )
    .bind(ids[4])
    .execute(&db.pool)
    .await
    .unwrap();
    control::pause_queue(&db.pool, "other", "test")
        .await
        .unwrap();
    support::declare_schedule(&db, "mail.digest", "mail").await;
    let f = Fixture {
        dead: ids[0],
        queued: [ids[1], ids[2], ids[3]],
        scheduled: ids[4],
    };
    (db, f)
}

/// A POST route: a name, the path and fields of a valid request, and whether
/// it changes anything when allowed.
type PostRoute = (&'static str, String, Vec<(&'static str, String)>, bool);

/// Every POST route.
fn routes(f: &Fixture) -> Vec<PostRoute> {
    let id = |i: i64| i.to_string();
    vec![
        ("retry one", format!("/jobs/{}/retry", f.dead), vec![], true),
        (
            "cancel one",
            format!("/jobs/{}/cancel", f.queued[0]),
            vec![],
            true,
        ),
        (
            "delete one",
            format!("/jobs/{}/delete", f.queued[1]),
            vec![("confirm", "yes".into())],
            true,
        ),
        (
            "bulk selection",
            "/jobs/bulk".into(),
            vec![("action", "cancel".into()), ("ids", id(f.queued[2]))],
            true,
        ),
        (
            "bulk by filter, ask",
            "/jobs/bulk".into(),
            vec![
                ("action", "delete".into()),
                ("all_matching", "1".into()),
                ("queue", "mail".into()),
            ],
            false,
        ),
        (
            "bulk by filter, confirmed",
            "/jobs/bulk".into(),
            vec![
                ("action", "delete".into()),
                ("all_matching", "1".into()),
                ("queue", "mail".into()),
                ("confirm", "4".into()),
                ("upto", id(f.queued[2])),
            ],
            true,
        ),
        (
            "run now one",
            format!("/jobs/{}/run-now", f.scheduled),
            vec![],
            true,
        ),
        ("pause", "/queues/mail/pause".into(), vec![], true),
        ("resume", "/queues/other/resume".into(), vec![], true),
        ("run cron now", "/cron/mail.digest/run".into(), vec![], true),
    ]
}

/// The access levels: a name, the router, the header the authorizer reads,
/// and what a refused POST says.
fn levels(db: &TestDb) -> Vec<(&'static str, Router, &'static str, &'static str)> {
    let by_header = || {
        lq_web::router(
            db.pool.clone(),
            WebConfig::new().actions(true).authorize(support::ByHeader),
        )
    };
    vec![
        ("none", by_header(), "none", "you do not have access"),
        (
            "read-only (authorizer)",
            by_header(),
            "read",
            "your access is read-only",
        ),
        (
            "read-only (actions disabled)",
            lq_web::router(db.pool.clone(), WebConfig::new()),
            "full",
            "this dashboard is read-only",
        ),
        ("full", by_header(), "full", "missing or wrong CSRF token"),
    ]
}

#[tokio::test]
async fn only_full_access_with_the_right_csrf_token_changes_anything() {
    let probe = fixture().await;
    let count = routes(&probe.1).len();
    drop(probe);
    for i in 0..count {
        let (db, f) = fixture().await;
        let (name, path, fields, mutates) = routes(&f).remove(i);
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let before = snapshot(&db).await;
        for (level, app, header, refusal) in levels(&db) {
            for csrf in CSRF_CASES {
                if level == "full" && csrf == Csrf::Right {
                    continue;
                }
                let mut req = form_post(&path, &fields, csrf);
                req.headers_mut()
                    .insert("x-test-access", header.parse().unwrap());
                let r = send(&app, req).await;
                assert_eq!(
                    r.status,
                    StatusCode::FORBIDDEN,
                    "{name} with access {level} and CSRF {csrf:?}: {}",
                    r.body
                );
                r.has(refusal);
                assert_eq!(
                    snapshot(&db).await,
                    before,
                    "{name} with access {level} and CSRF {csrf:?} changed the database"
                );
            }
        }
        // Full access, right token: allowed.
        let app = lq_web::router(db.pool.clone(), WebConfig::new().actions(true));
        let r = send(&app, form_post(&path, &fields, Csrf::Right)).await;
        assert!(
            r.status == StatusCode::SEE_OTHER || r.status == StatusCode::OK,
            "{name}: {} {}",
            r.status,
            r.body
        );
        let after = snapshot(&db).await;
        assert_eq!(after != before, mutates, "{name}: {before:?} -> {after:?}");
    }
}

#[tokio::test]
async fn a_post_without_the_cookie_or_with_a_malformed_token_is_refused() {
    let (db, f) = fixture().await;
    let app = lq_web::router(db.pool.clone(), WebConfig::new().actions(true));
    let before = snapshot(&db).await;
    let path = format!("/jobs/{}/cancel", f.queued[0]);
    let body = format!("csrf={TOKEN}");
    // The form's token, and no cookie.
    let r = send(
        &app,
        request("POST", &path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(body.clone()))
            .unwrap(),
    )
    .await;
    r.expect(StatusCode::FORBIDDEN)
        .has("missing or wrong CSRF token");
    // Cookie and form agree, on a value that is no token.
    let r = send(
        &app,
        request("POST", &path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::COOKIE, "lq_csrf=x")
            .body(Body::from("csrf=x"))
            .unwrap(),
    )
    .await;
    r.expect(StatusCode::FORBIDDEN);
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn cross_origin_posts_are_refused_even_with_the_right_token() {
    let (db, f) = fixture().await;
    let app = lq_web::router(db.pool.clone(), WebConfig::new().actions(true));
    let path = format!("/jobs/{}/cancel", f.queued[0]);
    let before = snapshot(&db).await;
    for (name, value) in [
        ("origin", "http://evil.test"),
        ("origin", "http://lq.test:8443"),
        ("origin", "null"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
    ] {
        let mut req = form_post(&path, &[], Csrf::Right);
        req.headers_mut().insert(name, value.parse().unwrap());
        let r = send(&app, req).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{name}: {value}");
        r.has("cross");
    }
    assert_eq!(snapshot(&db).await, before);

    // Same origin over https (scheme-agnostic), and a client that sends no
    // Origin at all (curl): allowed.
    let mut req = form_post(&path, &[], Csrf::Right);
    req.headers_mut()
        .insert("origin", format!("https://{HOST}").parse().unwrap());
    send(&app, req).await.expect(StatusCode::SEE_OTHER);
    let mut req = form_post(&format!("/jobs/{}/cancel", f.queued[1]), &[], Csrf::Right);
    req.headers_mut().remove("origin");
    req.headers_mut().remove("sec-fetch-site");
    send(&app, req).await.expect(StatusCode::SEE_OTHER);
    assert_eq!(
        support::state(&db, f.queued[1]).await.as_deref(),
        Some("cancelled")
    );
}

#[tokio::test]
async fn pages_follow_the_access_level() {
    let (db, f) = fixture().await;
    let by_header = lq_web::router(
        db.pool.clone(),
        WebConfig::new().actions(true).authorize(support::ByHeader),
    );
    let as_level = |path: &str, level: &str| {
        request("GET", path)
            .header("x-test-access", level)
            .body(Body::empty())
            .unwrap()
    };
    let job = format!("/jobs/{}", f.dead);
    for path in [
        "/",
        "/jobs",
        job.as_str(),
        "/queues",
        "/cron",
        "/runtimes",
        "/api/stats",
    ] {
        send(&by_header, as_level(path, "none"))
            .await
            .expect(StatusCode::FORBIDDEN)
            .has("you do not have access")
            .lacks("user0@x");
    }
    // Assets and health answer whatever the access.
    send(&by_header, as_level("/health", "none"))
        .await
        .expect(StatusCode::OK);
    send(&by_header, as_level("/assets/lq.css", "none"))
        .await
        .expect(StatusCode::OK);

    for app_and_level in [
        (&by_header, "read"),
        (&lq_web::router(db.pool.clone(), WebConfig::new()), "full"),
    ] {
        let (app, level) = app_and_level;
        send(app, as_level(&job, level))
            .await
            .expect(StatusCode::OK)
            .has(r#"<span class="badge readonly""#)
            .lacks(r#"/retry""#)
            .lacks(r#"method="post""#);
        send(app, as_level("/jobs", level))
            .await
            .lacks(r#"name="ids""#)
            .lacks("matching jobs:");
        send(app, as_level("/queues", level))
            .await
            .lacks("/pause\"")
            .lacks("/resume\"");
    }
    send(&by_header, as_level(&job, "full"))
        .await
        .lacks("badge readonly")
        .has(&format!(r#"action="/jobs/{}/retry""#, f.dead));
    get(
        &lq_web::router(db.pool.clone(), WebConfig::new().actions(true)),
        "/queues",
    )
    .await
    .has(r#"action="/queues/other/resume""#);
}
