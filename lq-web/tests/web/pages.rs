//! Every GET route renders what the database holds; errors are pages with a
//! status; headers, cookies and nesting hold on every page.

use axum::{
    body::Body,
    http::{header, StatusCode},
    Router,
};
use lq_core::db::stats::{stats_minute_add, StatsDelta};
use lq_runtime::{control, Job};
use lq_tests::TestDb;
use lq_web::WebConfig;

use crate::{
    jobs::Mail,
    support::{self, get, mails, post, request, send},
};

/// Two runtimes (`rt-a` the leader), a cron schedule, and a minute of rollup
/// for the `mail` queue: 40 succeeded, 2 dead.
async fn cluster(db: &TestDb) {
    sqlx::raw_sql(
        "insert into lq.runtimes (id, host, pid, version, queues, kinds, expires_at, limits,
                                  connections) values
             ('rt-a', 'host-a', 101, '0.1.0', '{\"mail\": 4}', '{web.mail}', now() + interval '1 minute',
              '{\"mail\": {\"global\": 2}}', 10),
             ('rt-b', 'host-b', 202, '0.1.0', '{\"default\": 2}', '{web.report}', now() + interval '1 minute', null,
              null);
         insert into lq.leader (holder, expires_at) values ('rt-a', now() + interval '1 minute');
         insert into lq.cron_schedules (kind, last_tick, expr, tz, catch_up, queue, declared_by)
             values ('web.nightly', date_trunc('hour', now()), '0 3 * * *', 'Europe/Paris', 'once', 'default', 'rt-a');",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let mut buckets = [0; 15];
    buckets[3] = 42; // waits up to 50 ms
    stats_minute_add(
        &mut conn,
        &[StatsDelta {
            queue: "mail".into(),
            kind: Mail::KIND.into(),
            succeeded: 40,
            dead: 2,
            started: 42,
            wait_seconds: 0.84,
            wait_buckets: buckets,
            ..StatsDelta::default()
        }],
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn the_overview_shows_each_queue_its_charts_and_the_runtimes() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 3).await;
    db.finish(ids[0], "dead", 5.0).await;
    control::pause_queue(&db.pool, "mail", "alice")
        .await
        .unwrap();
    cluster(&db).await;

    let page = get(&app, "/").await;
    page.expect(StatusCode::OK)
        .has("<title>Overview · lq</title>")
        .has(r#"<tr data-queue="mail">"#)
        .has(r#"<span class="badge paused">paused</span>"#)
        // 2 available (queued and due), none scheduled, 1 dead, linked to
        // the jobs they count
        .has(r#"<a href="/jobs?queue=mail&amp;state=available">2</a>"#)
        .has(r#"<a href="/jobs?queue=mail&amp;state=scheduled">0</a>"#)
        .has(r#"<a href="/jobs?queue=mail&amp;state=dead">1</a>"#)
        // the sparklines, from the rollup
        .has(r#"aria-label="mail: 40 succeeded, 2 failed in the last hour""#)
        .has("<polyline class=\"ok\"")
        .has(r#"aria-label="mail: wait p99 50ms"#)
        // the runtimes, the leader marked
        .has(r#"<tr data-runtime="rt-a">"#)
        .has(r#"<span class="badge leader">leader</span>"#)
        .has("host-b")
        // paused: the button resumes
        .has(r#"action="/queues/mail/resume""#);
    assert_eq!(
        page.body.matches("badge leader").count(),
        1,
        "only rt-a leads"
    );
}

#[tokio::test]
async fn the_jobs_page_lists_jobs_with_state_tabs_and_their_counts() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 4).await;
    db.finish(ids[0], "dead", 5.0).await;
    db.finish(ids[1], "succeeded", 5.0).await;

    let page = get(&app, "/jobs").await;
    page.expect(StatusCode::OK)
        .has(r#"data-state="all">all <span class="n">4</span>"#)
        .has(r#"data-state="queued">queued <span class="n">2</span>"#)
        .has(r#"data-state="dead">dead <span class="n">1</span>"#)
        .has(&format!(r#"<a href="/jobs/{}">{}</a>"#, ids[3], ids[3]))
        .has(r#"<span class="badge state-dead">dead</span>"#)
        .has("All 4 matching jobs");
    let dead = get(&app, "/jobs?state=dead").await;
    dead.expect(StatusCode::OK)
        .has(&format!(r#"<a href="/jobs/{}">"#, ids[0]))
        .lacks(&format!(r#"<a href="/jobs/{}">"#, ids[3]))
        .has(r#"class="tab current" href="/jobs?state=dead""#);
}

/// A history of more jobs than the tabs count: the tab stops at the cap and says
/// so ("10,000+", so is "all"), the other tabs stay exact, and a bulk action's
/// confirmation still counts every job it would act on.
#[tokio::test]
async fn state_tabs_count_up_to_a_cap_and_a_bulk_confirmation_counts_them_all() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 10_003).await;
    let moved = sqlx::query(
        "with moved as (delete from lq.jobs where id <= $1 returning *)
         insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at,
             attempts, max_attempts, unique_key, lease_owner, cancel_requested_at, errors,
             created_at, started_at, finished_at)
         select id, kind, queue, priority, payload, 'succeeded', run_at, attempts, max_attempts,
             unique_key, lease_owner, cancel_requested_at, errors, created_at, now(), now()
         from moved",
    )
    .bind(ids[10_000])
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(moved.rows_affected(), 10_001);

    get(&app, "/jobs")
        .await
        .expect(StatusCode::OK)
        .has(r#"data-state="succeeded">succeeded <span class="n">10,000+</span>"#)
        .has(r#"data-state="queued">queued <span class="n">2</span>"#)
        .has(r#"data-state="dead">dead <span class="n">0</span>"#)
        .has(r#"data-state="all">all <span class="n">10,002+</span>"#);
    get(&app, "/jobs?state=succeeded")
        .await
        .expect(StatusCode::OK)
        .has("All 10,000+ matching jobs");
    post(
        &app,
        "/jobs/bulk",
        &[
            ("action", "retry"),
            ("all_matching", "1"),
            ("state", "succeeded"),
        ],
    )
    .await
    .has("Retry 10,001 jobs matching state succeeded?");
}

#[tokio::test]
async fn the_job_page_hides_the_payload_escapes_it_and_lists_every_error() {
    let (db, app) = support::full().await;
    let id = Mail {
        to: "<script>alert(1)</script>".into(),
        n: 7,
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id;
    sqlx::query(
        r#"update lq.jobs set attempts = 2, errors = '[
             {"attempt": 1, "at": "2024-05-01T10:00:00Z", "worker": "w-one", "error": "smtp timeout"},
             {"attempt": 2, "at": "2024-05-01T10:05:00Z", "worker": "w-two", "error": "bad <b>address</b>"}
           ]' where id = $1"#,
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    db.finish(id, "dead", 1.0).await;

    let page = get(&app, &format!("/jobs/{id}")).await;
    page.expect(StatusCode::OK)
        .has(&format!("Job {id}"))
        .has(r#"<details id="payload"><summary>Payload</summary>"#)
        .has("&lt;script&gt;alert(1)&lt;/script&gt;")
        .lacks("<script>alert")
        .has("2024-05-01 10:00:00")
        .has("w-one")
        .has("smtp timeout")
        .has("w-two")
        .has("bad &lt;b&gt;address&lt;/b&gt;")
        .has(&format!(r#"action="/jobs/{id}/retry""#))
        .has(&format!(r#"action="/jobs/{id}/delete""#))
        .lacks(&format!(r#"action="/jobs/{id}/cancel""#));
    assert!(
        !page.body.contains("<details id=\"payload\" open"),
        "the payload is closed by default"
    );
}

#[tokio::test]
async fn a_redaction_hook_edits_the_payload_shown() {
    let db = TestDb::new().await;
    fn hide(kind: &str, payload: &mut serde_json::Value) {
        if kind == Mail::KIND {
            payload["to"] = "(hidden)".into();
        }
    }
    let app = lq_web::router(db.pool.clone(), WebConfig::new().redact(hide));
    let id = mails(&db, 1).await[0];
    get(&app, &format!("/jobs/{id}"))
        .await
        .expect(StatusCode::OK)
        .has("(hidden)")
        .lacks("user0@x");
    // Nor can a payload filter confirm the hidden value one guess at a time.
    get(&app, "/jobs")
        .await
        .expect(StatusCode::OK)
        .lacks(r#"name="payload""#);
    get(&app, "/jobs?payload=%7B%22to%22%3A%22user0%40x%22%7D")
        .await
        .expect(StatusCode::BAD_REQUEST)
        .has("payload filters are off while payloads are redacted");
}

#[tokio::test]
async fn queues_cron_and_runtimes_pages_show_what_the_database_holds() {
    let (db, app) = support::full().await;
    mails(&db, 2).await;
    control::pause_queue(&db.pool, "mail", "alice: outage")
        .await
        .unwrap();
    cluster(&db).await;
    sqlx::query("insert into lq.rate_limits values ('mail', 0, 600, 60, now())")
        .execute(&db.pool)
        .await
        .unwrap();

    get(&app, "/queues")
        .await
        .expect(StatusCode::OK)
        .has(r#"<tr data-queue="mail">"#)
        .has(r#"<td class="rate">600 per 60s ("#)
        .has("alice: outage")
        .has(r#"action="/queues/mail/resume""#);
    let cron = get(&app, "/cron").await;
    cron.expect(StatusCode::OK)
        .has(r#"<tr data-kind="web.nightly">"#)
        .has("<code>0 3 * * *</code>")
        .has("Europe/Paris");
    // the next fire is a time, not a dash
    let row = &cron.body[cron.body.find("web.nightly").unwrap()..];
    assert!(row.contains(r#"<td class="next"><time datetime="#), "{row}");
    get(&app, "/runtimes")
        .await
        .expect(StatusCode::OK)
        .has(r#"<tr data-runtime="rt-b">"#)
        .has("mail×4 (at most 2 at once)")
        .has(r#"<td class="num">10</td>"#) // rt-a's connections
        .has(r#"<td class="num">–</td>"#) // rt-b's row says none
        .has("badge leader");
}

/// The doctor page shows every check of `control::doctor`, the failing ones
/// marked, and does not refresh itself (its checks walk the backlog).
#[tokio::test]
async fn the_doctor_page_shows_each_check_and_marks_the_failing_ones() {
    let (db, app) = support::full().await;
    mails(&db, 2).await;
    let checks = control::doctor(&db.pool).await.unwrap();
    // Queued jobs no live runtime serves: the unserved check fails.
    let unserved = checks.iter().find(|c| c.name == "unserved").unwrap();
    assert!(!unserved.ok, "{unserved:?}");
    let page = get(&app, "/doctor").await;
    page.expect(StatusCode::OK)
        .has(&format!(
            "{} of {} checks need an operator.",
            checks.iter().filter(|c| !c.ok).count(),
            checks.len()
        ))
        .has(r#"<a class="current" href="/doctor">Doctor</a>"#);
    for c in &checks {
        let at = page
            .body
            .find(&format!(r#"<tr data-check="{}">"#, c.name))
            .unwrap_or_else(|| panic!("no row for {}", c.name));
        let row = &page.body[at..at + page.body[at..].find("</tr>").unwrap()];
        // Server-wide counts change between the two reads: other tests open
        // and close connections, and their DROP DATABASE requests checkpoints.
        let server_wide = match c.name {
            "connections" => Some(" of max_connections "),
            "checkpoints" => Some(" checkpoints timed and "),
            _ => None,
        };
        if let Some(counts) = server_wide {
            assert!(row.contains(counts), "{row}");
            assert!(
                row.contains(">ok</span>") || row.contains(">needs you</span>"),
                "{row}"
            );
            continue;
        }
        let badge = if c.ok { "ok" } else { "needs you" };
        assert!(row.contains(&format!(">{badge}</span>")), "{row}");
        assert!(
            row.contains(&maud::html! { (c.detail) }.into_string()),
            "{row}"
        );
    }
    assert!(get(&app, "/runtimes").await.body.contains("data-refresh="));
    assert!(
        !page.body.contains("data-refresh"),
        "the doctor page refreshed itself"
    );
}

#[tokio::test]
async fn health_stats_and_assets_answer() {
    let (db, app) = support::full().await;
    mails(&db, 2).await;
    cluster(&db).await;

    let health = get(&app, "/health").await;
    health.expect(StatusCode::OK);
    assert_eq!(health.body, "ok");
    assert_eq!(get(&app, "/health?db=1").await.body, "ok");

    let stats = get(&app, "/api/stats").await;
    stats.expect(StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&stats.body).unwrap();
    let mail = v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "mail")
        .expect("the mail queue");
    assert_eq!(mail["available"], 2);
    assert_eq!(mail["paused"], false);
    assert_eq!(v["counts"][0]["state"], "queued");
    assert_eq!(v["minutes"][0]["succeeded"], 40);
    assert_eq!(v["minutes"][0]["wait_p99_secs"], 0.05);

    for (path, kind, text) in [
        ("/assets/lq.css", "text/css", ".state-dead"),
        ("/assets/lq.js", "text/javascript", "visibilitychange"),
    ] {
        let r = get(&app, path).await;
        r.expect(StatusCode::OK).has(text);
        assert!(r.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with(kind));
        assert!(r.headers[header::CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("max-age=31536000"));
    }
}

#[tokio::test]
async fn every_page_carries_the_security_headers_and_a_csrf_token_its_forms_echo() {
    let (db, app) = support::full().await;
    let id = mails(&db, 1).await[0];
    for path in [
        "/",
        "/jobs",
        &format!("/jobs/{id}"),
        "/queues",
        "/cron",
        "/runtimes",
        "/doctor",
        "/nope",
    ] {
        let r = get(&app, path).await;
        let h = |name: header::HeaderName| r.headers[name].to_str().unwrap().to_owned();
        assert_eq!(
            h(header::CONTENT_SECURITY_POLICY),
            "default-src 'self'; frame-ancestors 'none'",
            "{path}"
        );
        assert_eq!(h(header::X_CONTENT_TYPE_OPTIONS), "nosniff");
        assert_eq!(h(header::REFERRER_POLICY), "same-origin");
        assert_eq!(h(header::CACHE_CONTROL), "no-store");
        assert!(!r.body.contains(" style="), "no inline style on {path}");
        assert!(!r.body.contains(" onclick="), "no inline handler on {path}");
    }
    let page = get(&app, &format!("/jobs/{id}")).await;
    let cookie = page
        .cookies()
        .into_iter()
        .find(|c| c.starts_with("lq_csrf="))
        .expect("a CSRF cookie");
    assert!(
        cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict")
            && cookie.contains("Path=/")
    );
    // Over plain http it cannot be Secure (the browser would drop it); over
    // https it is, so a plain-http page on the same host cannot replace it.
    assert!(!cookie.contains("Secure"), "{cookie}");
    let over_https = send(
        &app,
        request("GET", "/jobs")
            .header("x-forwarded-proto", "https")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let secure = over_https
        .cookies()
        .into_iter()
        .find(|c| c.starts_with("lq_csrf="))
        .expect("a CSRF cookie over https");
    assert!(secure.ends_with("; Secure"), "{secure}");
    let token = &cookie["lq_csrf=".len()..cookie.find(';').unwrap()];
    page.has(&format!(r#"name="csrf" value="{token}""#));
    // A request that has the cookie keeps it.
    let again = send(
        &app,
        request("GET", "/jobs")
            .header(header::COOKIE, format!("lq_csrf={token}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(again.cookies().is_empty());
    again.has(&format!(r#"name="csrf" value="{token}""#));
}

#[tokio::test]
async fn a_refresh_gets_only_the_main_content() {
    let (db, app) = support::full().await;
    mails(&db, 1).await;
    let full = get(&app, "/jobs").await;
    full.has("<!DOCTYPE html>")
        .has(r#"<body data-refresh="5">"#);
    let part = send(
        &app,
        request("GET", "/jobs")
            .header("lq-partial", "1")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    part.expect(StatusCode::OK)
        .lacks("<html")
        .lacks("<nav aria-label")
        .has("<h1>Jobs</h1>");
}

#[tokio::test]
async fn unknown_jobs_and_paths_are_404_pages_bad_ids_400_and_gets_of_actions_405() {
    let (_db, app) = support::full().await;
    get(&app, "/jobs/999999")
        .await
        .expect(StatusCode::NOT_FOUND)
        .has("job 999999 does not exist")
        .has("<title>Not Found · lq</title>");
    get(&app, "/jobs/abc")
        .await
        .expect(StatusCode::BAD_REQUEST)
        .has("the job id must be a job id (a whole number), not &quot;abc&quot;");
    get(&app, "/no/such/page")
        .await
        .expect(StatusCode::NOT_FOUND)
        .has("there is no page /no/such/page");
    // An action's address opened as a page: a page saying so, not a blank 405.
    get(&app, "/jobs/1/retry")
        .await
        .expect(StatusCode::METHOD_NOT_ALLOWED)
        .has("actions are buttons on the pages");
}

#[tokio::test]
async fn an_unreachable_database_is_a_503_page() {
    // Nothing listens on port 1 (the pool retries until its acquire timeout).
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(std::time::Duration::from_millis(300))
        .connect_lazy("postgres://postgres@127.0.0.1:1/none")
        .unwrap();
    let app = lq_web::router(pool, WebConfig::new());
    for path in [
        "/",
        "/jobs",
        "/jobs/1",
        "/queues",
        "/cron",
        "/runtimes",
        "/doctor",
    ] {
        get(&app, path)
            .await
            .expect(StatusCode::SERVICE_UNAVAILABLE)
            .has("the database is unavailable");
    }
    let health = get(&app, "/health?db=1").await;
    health.expect(StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        health.body.starts_with("database unavailable"),
        "{}",
        health.body
    );
    get(&app, "/health").await.expect(StatusCode::OK);
}

/// A dashboard pointed at a database litequeue never migrated says so on every
/// page, and what to do, instead of a bare "relation does not exist".
#[tokio::test]
async fn a_database_without_the_lq_schema_is_a_503_page_that_says_migrate() {
    let db = TestDb::new().await;
    sqlx::raw_sql("drop schema lq cascade")
        .execute(&db.pool)
        .await
        .unwrap();
    let app = lq_web::router(db.pool.clone(), WebConfig::new());
    for path in ["/", "/jobs", "/jobs/1", "/queues", "/cron", "/runtimes"] {
        let page = get(&app, path).await;
        page.expect(StatusCode::SERVICE_UNAVAILABLE)
            .has("this database has no lq schema")
            .has("run `lq migrate`");
        // PostgreSQL's message is shown once, not once per layer of the error.
        assert_eq!(
            page.body.matches("does not exist").count(),
            1,
            "{path}: {}",
            page.body
        );
    }
}

#[tokio::test]
async fn nested_under_a_prefix_every_link_form_and_cookie_keeps_the_prefix() {
    let (db, _) = support::full().await;
    let ids = mails(&db, 1).await;
    db.finish(ids[0], "dead", 1.0).await;
    let app = Router::new().nest(
        "/admin/lq",
        lq_web::router(db.pool.clone(), WebConfig::new().actions(true)),
    );

    let page = get(&app, "/admin/lq/jobs").await;
    page.expect(StatusCode::OK)
        .has(&format!(r#"<a href="/admin/lq/jobs/{}">"#, ids[0]))
        .has(r#"href="/admin/lq/assets/lq.css?v="#)
        .has(r#"action="/admin/lq/jobs/bulk""#)
        .has(r#"<a class="brand" href="/admin/lq">"#)
        .lacks(r#"href="/jobs"#);
    assert!(page.cookies()[0].contains("Path=/admin/lq;"));
    get(&app, "/admin/lq")
        .await
        .expect(StatusCode::OK)
        .has("Overview");
    get(&app, "/admin/lq/assets/lq.js")
        .await
        .expect(StatusCode::OK);

    let r = post(&app, &format!("/admin/lq/jobs/{}/retry", ids[0]), &[]).await;
    r.expect(StatusCode::SEE_OTHER);
    assert_eq!(
        r.location(),
        format!("/admin/lq/jobs/{}?done=retried", ids[0])
    );
    assert_eq!(support::state(&db, ids[0]).await.as_deref(), Some("queued"));

    // Behind a proxy that strips a prefix: the configured base wins.
    let proxied = lq_web::router(db.pool.clone(), WebConfig::new().base_path("/ops/queue/"));
    get(&proxied, "/jobs")
        .await
        .has(&format!(r#"<a href="/ops/queue/jobs/{}">"#, ids[0]));
}

/// A dashboard that may act, whose refresh period (and so its counts' life)
/// is long enough that every later look in a test falls inside it.
fn app_remembering_for_ten_minutes(db: &TestDb) -> axum::Router {
    lq_web::router(
        db.pool.clone(),
        WebConfig::new()
            .actions(true)
            .refresh(std::time::Duration::from_secs(600)),
    )
}

/// The queues' live counts (every live job counted) are kept for a refresh
/// period like the job counts, however many pages read them; a pause made on
/// the dashboard shows at once, with counts read afresh.
#[tokio::test]
async fn queue_counts_are_kept_for_a_refresh_period_but_a_pause_here_shows_at_once() {
    let db = TestDb::new().await;
    let app = app_remembering_for_ten_minutes(&db);
    let mail = |body: &str| {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        let q = v["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == "mail")
            .expect("the mail queue")
            .clone();
        (
            q["available"].as_u64().unwrap(),
            q["paused"].as_bool().unwrap(),
        )
    };
    mails(&db, 3).await;
    assert_eq!(mail(&get(&app, "/api/stats").await.body), (3, false));
    mails(&db, 2).await;
    get(&app, "/").await.expect(StatusCode::OK);
    assert_eq!(mail(&get(&app, "/api/stats").await.body), (3, false));
    post(&app, "/queues/mail/pause", &[("back", "queues")]).await;
    assert_eq!(mail(&get(&app, "/api/stats").await.body), (5, true));
}

#[tokio::test]
async fn counts_are_kept_for_a_refresh_period_but_a_bulk_confirmation_counts_afresh() {
    let db = TestDb::new().await;
    let app = app_remembering_for_ten_minutes(&db);
    mails(&db, 3).await;
    get(&app, "/jobs")
        .await
        .has(r#"queued <span class="n">3</span>"#);
    mails(&db, 2).await;
    // The tabs show the count taken a moment ago; the list is read afresh.
    let again = get(&app, "/jobs").await;
    again.has(r#"queued <span class="n">3</span>"#);
    assert_eq!(again.body.matches(r#"name="ids""#).count(), 5);
    // What an action would act on is always counted now.
    post(
        &app,
        "/jobs/bulk",
        &[
            ("action", "cancel"),
            ("all_matching", "1"),
            ("state", "queued"),
        ],
    )
    .await
    .has("Cancel 5 jobs matching state queued?");
}

/// A page held up past the dashboard's bound (`WebConfig::timeout`, one second
/// here; a table locked elsewhere) is a 503 page saying the database gave up,
/// and nothing of it keeps waiting on the server.
#[tokio::test]
async fn a_page_held_up_past_the_configured_bound_is_a_503() {
    let db = TestDb::new().await;
    let bound = std::time::Duration::from_secs(1);
    let app = lq_web::router(db.pool.clone(), WebConfig::new().timeout(bound));
    let lock = db.lock_table("lq.finished_jobs").await;
    let started = std::time::Instant::now();
    let page = get(&app, "/jobs?state=dead").await;
    // Not a speed claim: under the 30 s default the page could not fail
    // before 27 s, so this tells which bound it had.
    assert!(started.elapsed() < control::DEFAULT_TIMEOUT * 9 / 10);
    page.expect(StatusCode::SERVICE_UNAVAILABLE)
        .has("statement timeout");
    let waiting = db.sessions_waiting_on_locks().await;
    assert_eq!(waiting, 0, "the page's statements still wait on the server");
    lock.rollback().await.unwrap();
    get(&app, "/jobs?state=dead").await.expect(StatusCode::OK);
}
