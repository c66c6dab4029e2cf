//! The Origin check where the request's host is not in a `Host` header: over
//! HTTP/2 (only `:authority`), and behind a proxy that rewrites `Host`, where
//! the configured public origin is what browsers send.

use axum::{
    body::Body,
    http::{header, Request, StatusCode},
    Router,
};
use lq_web::{ServeOptions, WebConfig};

use crate::support::{mails, send, state, TOKEN};

/// A form POST cancelling job `id`, with the CSRF token, `origin`, and the
/// host as `host` (a `Host` header) or, without one, in the URI's authority
/// (as hyper hands over an HTTP/2 request).
fn cancel(id: i64, origin: &str, host: Option<&str>, authority: &str) -> Request<Body> {
    let mut req = Request::builder()
        .method("POST")
        .uri(format!("http://{authority}/jobs/{id}/cancel"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, format!("lq_csrf={TOKEN}"))
        .header(header::ORIGIN, origin)
        .header("sec-fetch-site", "same-origin");
    if let Some(host) = host {
        req = req.header(header::HOST, host);
    }
    req.body(Body::from(format!("csrf={TOKEN}"))).unwrap()
}

async fn status(app: &Router, req: Request<Body>) -> StatusCode {
    send(app, req).await.status
}

#[tokio::test]
async fn over_http2_the_authority_stands_for_the_host() {
    let db = lq_tests::TestDb::new().await;
    let app = lq_web::router(db.pool.clone(), WebConfig::new().actions(true));
    let ids = mails(&db, 2).await;
    let evil = cancel(ids[0], "https://evil.test", None, "ops.example.com");
    assert_eq!(status(&app, evil).await, StatusCode::FORBIDDEN);
    assert_eq!(state(&db, ids[0]).await.as_deref(), Some("queued"));
    let h2 = cancel(ids[0], "https://ops.example.com", None, "ops.example.com");
    assert_eq!(status(&app, h2).await, StatusCode::SEE_OTHER);
    assert_eq!(state(&db, ids[0]).await.as_deref(), Some("cancelled"));
    // A Host header, when sent, is what the request names.
    let both = cancel(
        ids[1],
        "https://ops.example.com",
        Some("other.test"),
        "ops.example.com",
    );
    assert_eq!(status(&app, both).await, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn behind_a_proxy_that_rewrites_host_the_public_origin_is_accepted() {
    let db = lq_tests::TestDb::new().await;
    let ids = mails(&db, 3).await;
    let upstream = "127.0.0.1:8080"; // nginx's default: Host $proxy_host
    let public = "https://ops.example.com";
    let via_proxy = |id: i64, origin: &str| cancel(id, origin, Some(upstream), upstream);

    let plain = lq_web::router(db.pool.clone(), WebConfig::new().actions(true));
    let refused = send(&plain, via_proxy(ids[0], public)).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(refused.body.contains("public_origin"), "{}", refused.body);

    let config = WebConfig::new()
        .actions(true)
        .public_origin("HTTPS://ops.example.com:443/");
    let app = lq_web::router(db.pool.clone(), config);
    assert_eq!(
        status(&app, via_proxy(ids[0], "https://evil.test")).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status(&app, via_proxy(ids[0], "http://ops.example.com")).await,
        StatusCode::FORBIDDEN,
        "another scheme is another origin"
    );
    assert_eq!(state(&db, ids[0]).await.as_deref(), Some("queued"));
    assert_eq!(
        status(&app, via_proxy(ids[0], public)).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(state(&db, ids[0]).await.as_deref(), Some("cancelled"));

    // The standalone server takes the same setting, and with it a secret:
    // behind a proxy every request comes from loopback, so the loopback-only
    // guard would let anyone who reaches the proxy in.
    let options = ServeOptions::new("127.0.0.1:0".parse().unwrap())
        .allow_actions(true)
        .public_origin(public);
    assert!(matches!(
        lq_web::standalone(db.pool.clone(), &options),
        Err(lq_web::Error::ProxiedUnprotected { .. })
    ));
    let options = options.token(Some("s3cret".into()));
    let standalone = lq_web::standalone(db.pool.clone(), &options).unwrap();
    let mut anonymous = via_proxy(ids[1], public);
    assert_eq!(
        send(&standalone, anonymous).await.status,
        StatusCode::UNAUTHORIZED
    );
    anonymous = via_proxy(ids[1], public);
    anonymous
        .headers_mut()
        .insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
    assert_eq!(status(&standalone, anonymous).await, StatusCode::SEE_OTHER);
    assert_eq!(state(&db, ids[1]).await.as_deref(), Some("cancelled"));
}
