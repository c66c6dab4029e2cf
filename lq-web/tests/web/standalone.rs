//! The standalone server's authentication (bearer token, login cookie, basic
//! auth) and its refusal to start unprotected beyond loopback.

use axum::{
    body::Body,
    http::{header, StatusCode},
};
use base64::Engine;
use lq_web::{Error, ServeOptions};

use crate::support::{self, form_post, get, mails, request, send, snapshot, Csrf};

fn options() -> ServeOptions {
    ServeOptions::new("127.0.0.1:0".parse().unwrap())
}

#[test]
fn serving_beyond_loopback_needs_a_token_or_basic_auth() {
    for bind in ["0.0.0.0:8080", "[::]:8080", "192.168.1.5:80"] {
        let open = ServeOptions::new(bind.parse().unwrap());
        let err = open.check().unwrap_err();
        assert!(matches!(err, Error::Unprotected { .. }), "{bind}: {err}");
        assert!(err.to_string().contains("without authentication"), "{err}");
        assert!(open.clone().token(Some("t0ken".into())).check().is_ok());
        assert!(open
            .basic(Some(("ops".into(), "pw".into())))
            .check()
            .is_ok());
    }
    for bind in ["127.0.0.1:8080", "[::1]:8080"] {
        assert!(
            ServeOptions::new(bind.parse().unwrap()).check().is_ok(),
            "{bind}"
        );
    }
    assert!(matches!(
        options().token(Some(String::new())).check(),
        Err(Error::EmptySecret { what: "token" })
    ));
    assert!(matches!(
        options().basic(Some(("ops".into(), String::new()))).check(),
        Err(Error::EmptySecret { .. })
    ));
}

#[tokio::test]
async fn the_router_is_refused_too_when_unprotected() {
    let db = lq_tests::TestDb::new().await;
    let open = ServeOptions::new("0.0.0.0:8080".parse().unwrap());
    assert!(matches!(
        lq_web::standalone(db.pool.clone(), &open),
        Err(Error::Unprotected { .. })
    ));
}

#[tokio::test]
async fn a_bearer_token_or_the_login_cookie_lets_in_and_nothing_else_does() {
    let db = lq_tests::TestDb::new().await;
    let id = mails(&db, 1).await[0];
    let app = lq_web::standalone(
        db.pool.clone(),
        &options().token(Some("s3cret;x".into())).allow_actions(true),
    )
    .unwrap();
    let with_auth = |value: &str| {
        request("GET", "/jobs")
            .header(header::AUTHORIZATION, value)
            .body(Body::empty())
            .unwrap()
    };

    get(&app, "/jobs")
        .await
        .expect(StatusCode::UNAUTHORIZED)
        .has(r#"<a href="/login">"#)
        .lacks("user0@x");
    send(&app, with_auth("Bearer s3cret;x"))
        .await
        .expect(StatusCode::OK)
        .has(&format!("/jobs/{id}"));
    send(&app, with_auth("Bearer s3cret"))
        .await
        .expect(StatusCode::UNAUTHORIZED);
    send(&app, with_auth("Bearer s3cret;xx"))
        .await
        .expect(StatusCode::UNAUTHORIZED);

    // The login form, then its cookie.
    let form = get(&app, "/login").await;
    form.expect(StatusCode::OK).has(r#"name="token""#);
    let wrong = send(
        &app,
        form_post("/login", &[("token", "guess")], Csrf::Right),
    )
    .await;
    wrong.expect(StatusCode::UNAUTHORIZED).has("wrong token");
    assert!(!wrong.cookies().iter().any(|c| c.starts_with("lq_token")));
    send(
        &app,
        form_post("/login", &[("token", "s3cret;x")], Csrf::Missing),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    let ok = send(
        &app,
        form_post("/login", &[("token", "s3cret;x")], Csrf::Right),
    )
    .await;
    ok.expect(StatusCode::SEE_OTHER);
    assert_eq!(ok.location(), "/");
    let cookie = ok
        .cookies()
        .into_iter()
        .find(|c| c.starts_with("lq_token="))
        .expect("a login cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let value = &cookie[..cookie.find(';').unwrap()];
    send(
        &app,
        request("GET", "/jobs")
            .header(header::COOKIE, value)
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .expect(StatusCode::OK)
    .has(r#"<span class="user">token</span>"#);
    send(
        &app,
        request("GET", "/jobs")
            .header(header::COOKIE, "lq_token=s3cret")
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .expect(StatusCode::UNAUTHORIZED);

    // An action needs the token as well as the CSRF token.
    let before = snapshot(&db).await;
    let path = format!("/jobs/{id}/cancel");
    send(&app, form_post(&path, &[], Csrf::Right))
        .await
        .expect(StatusCode::UNAUTHORIZED);
    assert_eq!(snapshot(&db).await, before);
    let mut req = form_post(&path, &[], Csrf::Right);
    req.headers_mut()
        .insert(header::AUTHORIZATION, "Bearer s3cret;x".parse().unwrap());
    send(&app, req).await.expect(StatusCode::SEE_OTHER);
    assert_eq!(support::state(&db, id).await.as_deref(), Some("cancelled"));
}

#[tokio::test]
async fn basic_auth_lets_in_the_right_user_and_asks_everyone_else() {
    let db = lq_tests::TestDb::new().await;
    let id = mails(&db, 1).await[0];
    let app = lq_web::standalone(
        db.pool.clone(),
        &options().basic(Some(("ops".into(), "pa:ss".into()))),
    )
    .unwrap();
    let basic = |user_pass: &str| {
        let encoded = base64::engine::general_purpose::STANDARD.encode(user_pass);
        request("GET", "/")
            .header(header::AUTHORIZATION, format!("Basic {encoded}"))
            .body(Body::empty())
            .unwrap()
    };
    let asked = get(&app, "/").await;
    asked.expect(StatusCode::UNAUTHORIZED);
    assert!(asked.headers[header::WWW_AUTHENTICATE]
        .to_str()
        .unwrap()
        .starts_with("Basic realm="));
    send(&app, basic("ops:pa:ss"))
        .await
        .expect(StatusCode::OK)
        .has(r#"<span class="user">ops</span>"#);
    send(&app, basic("ops:pa:s"))
        .await
        .expect(StatusCode::UNAUTHORIZED);
    send(&app, basic("root:pa:ss"))
        .await
        .expect(StatusCode::UNAUTHORIZED);
    get(&app, "/login").await.expect(StatusCode::UNAUTHORIZED);

    // Read-only unless actions are allowed.
    let before = snapshot(&db).await;
    let mut req = form_post(&format!("/jobs/{id}/cancel"), &[], Csrf::Right);
    let encoded = base64::engine::general_purpose::STANDARD.encode("ops:pa:ss");
    req.headers_mut().insert(
        header::AUTHORIZATION,
        format!("Basic {encoded}").parse().unwrap(),
    );
    send(&app, req)
        .await
        .expect(StatusCode::FORBIDDEN)
        .has("this dashboard is read-only");
    assert_eq!(snapshot(&db).await, before);
}

/// A GET of `path` addressed to `host`.
fn get_at(host: &str, path: &str) -> axum::http::Request<Body> {
    axum::http::Request::builder()
        .uri(path)
        .header(header::HOST, host)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn on_loopback_without_secrets_everyone_may_look() {
    let db = lq_tests::TestDb::new().await;
    let id = mails(&db, 1).await[0];
    let app = lq_web::standalone(db.pool.clone(), &options()).unwrap();
    for host in [
        "127.0.0.1:8080",
        "localhost:8080",
        "LocalHost",
        "dash.localhost:8080",
        "127.3.2.1",
        "[::1]:8080",
    ] {
        send(&app, get_at(host, "/jobs"))
            .await
            .expect(StatusCode::OK)
            .has("web.mail")
            .has(&format!("/jobs/{id}"));
    }
    // No Host and no authority: not a browser's request (curl over HTTP/1.0,
    // a test), so nothing a web page could rebind.
    let bare = axum::http::Request::builder()
        .uri("/jobs")
        .body(Body::empty())
        .unwrap();
    send(&app, bare).await.expect(StatusCode::OK);
    send(&app, get_at("localhost", "/login"))
        .await
        .expect(StatusCode::NOT_FOUND);
}

/// DNS rebinding: a hostile page whose name now resolves to 127.0.0.1 is
/// same-origin with the dashboard, so without a secret only the Host it names
/// tells it apart.
#[tokio::test]
async fn without_secrets_a_request_addressed_to_another_host_is_refused() {
    let db = lq_tests::TestDb::new().await;
    let id = mails(&db, 1).await[0];
    let app = lq_web::standalone(db.pool.clone(), &options().allow_actions(true)).unwrap();
    for host in [
        "evil.test:8080",
        "evil.test",
        "localhost.evil.test",
        "127.0.0.1.evil.test:8080",
        "[::2]:8080",
    ] {
        for path in ["/jobs", &format!("/jobs/{id}"), "/api/stats", "/"] {
            let r = send(&app, get_at(host, path)).await;
            r.expect(StatusCode::MISDIRECTED_REQUEST)
                .has("localhost")
                .has("token")
                .lacks("user0@x")
                .lacks("web.mail");
        }
    }

    // An action it posts, CSRF cookie and field and all, changes nothing.
    let before = snapshot(&db).await;
    let mut req = form_post(&format!("/jobs/{id}/cancel"), &[], Csrf::Right);
    let headers = req.headers_mut();
    headers.insert(header::HOST, "evil.test:8080".parse().unwrap());
    headers.insert(header::ORIGIN, "http://evil.test:8080".parse().unwrap());
    send(&app, req)
        .await
        .expect(StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(snapshot(&db).await, before);
    assert_eq!(support::state(&db, id).await.as_deref(), Some("queued"));
}

#[tokio::test]
async fn the_login_cookie_is_secure_over_https_and_each_login_logs_the_client() {
    lq_tests::init_tracing();
    let db = lq_tests::TestDb::new().await;
    let token = format!("t0ken-{}", fastrand::u64(..));
    let login = |extra: &[(&str, &str)], peer: &str| {
        let mut req = form_post("/login", &[("token", token.as_str())], Csrf::Right);
        for (k, v) in extra {
            let name = header::HeaderName::from_bytes(k.as_bytes()).unwrap();
            match *v {
                "-" => req.headers_mut().remove(name),
                v => req.headers_mut().insert(name, v.parse().unwrap()),
            };
        }
        let peer: std::net::SocketAddr = peer.parse().unwrap();
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        req
    };
    let cookie_of = |r: &support::Resp| {
        r.expect(StatusCode::SEE_OTHER);
        r.cookies()
            .into_iter()
            .find(|c| c.starts_with("lq_token="))
            .expect("a login cookie")
    };
    let app = lq_web::standalone(db.pool.clone(), &options().token(Some(token.clone()))).unwrap();

    // Plain http: no Secure, or the browser would drop the cookie.
    let plain = send(&app, login(&[], "192.0.2.1:4000")).await;
    assert!(!cookie_of(&plain).contains("Secure"), "{plain:?}");
    for https in [
        &[("origin", "https://lq.test")][..],
        // Without an Origin, a TLS-terminating proxy's word.
        &[("origin", "-"), ("x-forwarded-proto", "https")][..],
    ] {
        let r = send(&app, login(https, "192.0.2.1:4000")).await;
        assert!(cookie_of(&r).ends_with("; Secure"), "{https:?}");
    }
    let public = options()
        .token(Some(token.clone()))
        .public_origin("https://ops.example.com");
    let behind = lq_web::standalone(db.pool.clone(), &public).unwrap();
    let r = send(&behind, login(&[], "192.0.2.1:4000")).await;
    assert!(cookie_of(&r).ends_with("; Secure"));

    // Each try names the client (and what a proxy says it forwarded for).
    let mut wrong = form_post("/login", &[("token", "guess")], Csrf::Right);
    wrong
        .extensions_mut()
        .insert(axum::extract::ConnectInfo::<std::net::SocketAddr>(
            "198.51.100.7:5555".parse().unwrap(),
        ));
    wrong
        .headers_mut()
        .insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
    send(&app, wrong).await.expect(StatusCode::UNAUTHORIZED);
    let lines = lq_tests::logs::logged(|e| {
        e.target == "lq_web::audit" && e.field("client") == Some("198.51.100.7:5555")
    });
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0].field("action"), Some("login"));
    assert_eq!(lines[0].field("forwarded_for"), Some("203.0.113.9"));
    assert_eq!(lines[0].field("outcome"), Some("refused: wrong token"));
}
