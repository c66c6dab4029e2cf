//! Actions with full access and a right CSRF token: single, by selection, and
//! by filter with the server's recount and confirmation; refusals shown per
//! job; pause and resume; every action in the audit log.

use axum::{http::StatusCode, Router};
use lq_runtime::{control, Job};
use lq_tests::logs::logged;
use lq_web::WebConfig;

use crate::{
    jobs::Order,
    support::{self, get, mails, make_running, post, send, snapshot, state, Csrf},
};

#[tokio::test]
async fn retry_cancel_and_delete_one_job_then_redirect_with_a_notice() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 4).await;
    db.finish(ids[0], "dead", 1.0).await;
    make_running(&db, ids[3], "w-1").await;

    let r = post(&app, &format!("/jobs/{}/retry", ids[0]), &[]).await;
    r.expect(StatusCode::SEE_OTHER);
    assert_eq!(r.location(), format!("/jobs/{}?done=retried", ids[0]));
    assert_eq!(state(&db, ids[0]).await.as_deref(), Some("queued"));
    get(&app, r.location())
        .await
        .has(&format!("Job {} queued to run again.", ids[0]));

    let r = post(&app, &format!("/jobs/{}/cancel", ids[1]), &[]).await;
    r.expect(StatusCode::SEE_OTHER);
    assert_eq!(state(&db, ids[1]).await.as_deref(), Some("cancelled"));

    // A running job: cancellation requested, it ends when its handler sees it.
    post(&app, &format!("/jobs/{}/cancel", ids[3]), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    let requested: bool =
        sqlx::query_scalar("select cancel_requested_at is not null from lq.jobs where id = $1")
            .bind(ids[3])
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(requested);

    // A delete asks on the server first, and deletes nothing until answered.
    post(&app, &format!("/jobs/{}/delete", ids[2]), &[])
        .await
        .expect(StatusCode::OK)
        .has(&format!("Delete job {} for good?", ids[2]))
        .has(r#"name="confirm" value="yes""#);
    assert_eq!(state(&db, ids[2]).await.as_deref(), Some("queued"));
    let r = post(
        &app,
        &format!("/jobs/{}/delete", ids[2]),
        &[("confirm", "yes")],
    )
    .await;
    r.expect(StatusCode::SEE_OTHER);
    assert_eq!(r.location(), format!("/jobs?done=deleted&job={}", ids[2]));
    assert_eq!(state(&db, ids[2]).await, None);
    get(&app, r.location())
        .await
        .has(&format!("Job {} deleted.", ids[2]));
}

/// A queued job not yet due offers "Run now"; the action makes it due,
/// returns to the job with a notice, and is refused for a job that finished
/// meanwhile. On the queued tab, the selection and all matching jobs can be
/// run now too.
#[tokio::test]
async fn run_now_makes_a_scheduled_job_due_one_by_one_or_in_bulk() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 4).await;
    sqlx::query("update lq.jobs set run_at = now() + interval '1 day'")
        .execute(&db.pool)
        .await
        .unwrap();
    let run_now_form = format!(r#"action="/jobs/{}/run-now""#, ids[0]);
    get(&app, &format!("/jobs/{}", ids[0]))
        .await
        .has(&run_now_form)
        .has("Run now");

    let r = post(
        &app,
        &format!("/jobs/{}/run-now", ids[0]),
        &[("state", "queued")],
    )
    .await;
    r.expect(StatusCode::SEE_OTHER);
    assert_eq!(r.location(), format!("/jobs/{}?done=run-now", ids[0]));
    assert!(db.is_due(ids[0]).await);
    get(&app, r.location())
        .await
        .has(&format!("Job {} is due now", ids[0]))
        // Due now: nothing left to bring forward.
        .lacks(&run_now_form);

    // Finished since the page was shown: refused with the reason.
    db.finish(ids[1], "dead", 0.0).await;
    post(
        &app,
        &format!("/jobs/{}/run-now", ids[1]),
        &[("state", "queued")],
    )
    .await
    .expect(StatusCode::CONFLICT)
    .has(&format!("job {} became dead", ids[1]))
    .has("so it was not run now");

    // The queued tab offers it for a selection and for all matching jobs.
    get(&app, "/jobs?state=queued")
        .await
        .has(r#"value="run-now""#)
        .has("Run all now");
    get(&app, "/jobs?state=dead")
        .await
        .lacks(r#"value="run-now""#);
    let selected = ids[2].to_string();
    support::acted(
        &app,
        "/jobs/bulk",
        &[
            ("action", "run-now"),
            ("state", "queued"),
            ("ids", &selected),
        ],
    )
    .await
    .expect(StatusCode::OK)
    .has("Made due now 1 of 1");
    assert!(db.is_due(ids[2]).await);
    assert!(!db.is_due(ids[3]).await);

    let ask = [
        ("action", "run-now"),
        ("all_matching", "1"),
        ("state", "queued"),
    ];
    post(&app, "/jobs/bulk", &ask)
        .await
        .expect(StatusCode::OK)
        .has("Run now 3 jobs matching state queued?");
}

#[tokio::test]
async fn a_refused_single_action_is_a_page_with_the_reason_never_a_500() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 2).await;
    make_running(&db, ids[1], "w-1").await;
    let held = Order { order_id: 9 }.enqueue(&db.pool).await.unwrap().id;
    db.finish(held, "dead", 1.0).await;
    let holder = Order { order_id: 9 }.enqueue(&db.pool).await.unwrap().id;
    let before = snapshot(&db).await;

    post(&app, &format!("/jobs/{}/retry", ids[0]), &[])
        .await
        .expect(StatusCode::CONFLICT)
        .has(&format!(
            "job {} is queued, so it cannot be retried",
            ids[0]
        ))
        .has(&format!(r#"href="/jobs/{}">Back to job"#, ids[0]));
    post(
        &app,
        &format!("/jobs/{}/delete", ids[1]),
        &[("confirm", "yes")],
    )
    .await
    .expect(StatusCode::CONFLICT)
    .has(&format!(
        "job {} is running, so it cannot be deleted",
        ids[1]
    ));
    post(&app, &format!("/jobs/{held}/retry"), &[])
        .await
        .expect(StatusCode::CONFLICT)
        .has(&format!("live job {holder} holds its unique key"));
    post(&app, "/jobs/424242/retry", &[])
        .await
        .expect(StatusCode::NOT_FOUND)
        .has("job 424242 does not exist");
    post(&app, "/jobs/424242/delete", &[("confirm", "yes")])
        .await
        .expect(StatusCode::NOT_FOUND);
    post(&app, &format!("/jobs/{}/explode", ids[0]), &[])
        .await
        .expect(StatusCode::NOT_FOUND)
        .has("use retry, cancel, delete or run-now");
    post(&app, "/jobs/abc/retry", &[])
        .await
        .expect(StatusCode::BAD_REQUEST);
    assert_eq!(snapshot(&db).await, before, "nothing changed");
}

#[tokio::test]
async fn an_action_on_a_row_another_session_holds_is_a_503_that_says_try_again() {
    let db = lq_tests::TestDb::new().await;
    let ids = mails(&db, 1).await;
    // The dashboard's connections give up on a row lock after 200 ms.
    let opts: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy_with(opts.options([("lock_timeout", "200")]));
    let app = lq_web::router(pool, WebConfig::new().actions(true));
    let held = db.lock_row(ids[0]).await;
    post(&app, &format!("/jobs/{}/cancel", ids[0]), &[])
        .await
        .expect(StatusCode::SERVICE_UNAVAILABLE)
        .has("did not answer in time")
        .has("try again");
    held.rollback().await.unwrap();
    assert_eq!(state(&db, ids[0]).await.as_deref(), Some("queued"));
    post(&app, &format!("/jobs/{}/cancel", ids[0]), &[])
        .await
        .expect(StatusCode::SEE_OTHER);
    assert_eq!(state(&db, ids[0]).await.as_deref(), Some("cancelled"));
}

#[tokio::test]
async fn bulk_on_a_selection_acts_on_those_jobs_and_lists_each_refusal() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 5).await;
    db.finish(ids[0], "dead", 1.0).await;
    db.finish(ids[1], "cancelled", 1.0).await;
    db.finish(ids[4], "dead", 1.0).await; // dead, not selected
    make_running(&db, ids[2], "w-1").await;

    let (a, b, c) = (ids[0].to_string(), ids[1].to_string(), ids[2].to_string());
    // 424242 was deleted (or pruned) after the list was shown.
    let gone = "424242";
    let r = support::acted(
        &app,
        "/jobs/bulk",
        &[
            ("action", "retry"),
            ("ids", &a),
            ("ids", &b),
            ("ids", &c),
            ("ids", gone),
        ],
    )
    .await;
    r.expect(StatusCode::OK)
        .has("Retried 2 of 4 the selected jobs")
        .has("2 refused")
        .has(&format!(r#"<a href="/jobs/{c}">{c}</a>"#))
        .has(&format!("job {c} is running, so it cannot be retried"))
        .has(&format!("job {gone} does not exist"));
    assert_eq!(state(&db, ids[0]).await.as_deref(), Some("queued"));
    assert_eq!(state(&db, ids[1]).await.as_deref(), Some("queued"));
    assert_eq!(state(&db, ids[2]).await.as_deref(), Some("running"));
    assert_eq!(
        state(&db, ids[4]).await.as_deref(),
        Some("dead"),
        "not selected"
    );

    // A delete asks on the server first, naming the selection.
    let d = ids[3].to_string();
    post(&app, "/jobs/bulk", &[("action", "delete"), ("ids", &d)])
        .await
        .expect(StatusCode::OK)
        .has("Delete 1 selected job for good?")
        .has(&format!(r#"name="ids" value="{d}""#))
        .has(r#"name="confirm" value="1""#);
    assert_eq!(state(&db, ids[3]).await.as_deref(), Some("queued"));
    // A confirmation for another number of jobs is refused.
    post(
        &app,
        "/jobs/bulk",
        &[("action", "delete"), ("ids", &d), ("confirm", "2")],
    )
    .await
    .expect(StatusCode::BAD_REQUEST)
    .has("the confirmation names 2 jobs, the selection 1");
    assert_eq!(state(&db, ids[3]).await.as_deref(), Some("queued"));
    support::acted(
        &app,
        "/jobs/bulk",
        &[("action", "delete"), ("ids", &d), ("confirm", "1")],
    )
    .await
    .expect(StatusCode::OK)
    .has("Deleted 1 of 1");
    assert_eq!(state(&db, ids[3]).await, None);
}

#[tokio::test]
async fn bulk_by_filter_confirms_the_servers_count_then_acts_on_those_jobs_only() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 6).await;
    for id in &ids[..4] {
        db.finish(*id, "dead", 1.0).await;
    }
    let filter = [("state", "dead"), ("queue", "mail")];

    // The list offers it, with the count.
    get(&app, "/jobs?state=dead&queue=mail")
        .await
        .has("All 4 matching jobs")
        .has(r#"<input type="hidden" name="all_matching" value="1">"#);

    // Asking: a confirmation naming the number, counted on the server (the
    // form's own idea of the count is not asked for), and nothing changes.
    let before = snapshot(&db).await;
    let mut ask = vec![("action", "retry"), ("all_matching", "1")];
    ask.extend(filter);
    let confirm = post(&app, "/jobs/bulk", &ask).await;
    confirm
        .expect(StatusCode::OK)
        .has("Retry 4 jobs matching state dead, queue mail?")
        .has(r#"name="confirm" value="4""#)
        .has(&format!(r#"name="upto" value="{}""#, ids[3]))
        // Answering a POST: the page must not refresh itself (its address does
        // not GET it again).
        .has("<body>")
        .lacks("data-refresh");
    assert_eq!(snapshot(&db).await, before);

    // A job that dies after the count is not acted on.
    db.finish(ids[5], "dead", 0.0).await;
    let upto = ids[3].to_string();
    let mut go = ask.clone();
    go.extend([("confirm", "4"), ("upto", upto.as_str())]);
    support::acted(&app, "/jobs/bulk", &go)
        .await
        .expect(StatusCode::OK)
        .has("Retried 4 of 4 jobs matching state dead, queue mail")
        .has("None refused.")
        .lacks("data-refresh");
    for id in &ids[..4] {
        assert_eq!(state(&db, *id).await.as_deref(), Some("queued"));
    }
    assert_eq!(state(&db, ids[5]).await.as_deref(), Some("dead"));
    assert_eq!(state(&db, ids[4]).await.as_deref(), Some("queued"));
}

#[tokio::test]
async fn bulk_by_filter_lists_the_jobs_it_refused() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 3).await;
    make_running(&db, ids[1], "w-1").await;
    let upto = ids[2].to_string();
    support::acted(
        &app,
        "/jobs/bulk",
        &[
            ("action", "delete"),
            ("all_matching", "1"),
            ("queue", "mail"),
            ("confirm", "3"),
            ("upto", &upto),
        ],
    )
    .await
    .expect(StatusCode::OK)
    .has("Deleted 2 of 3 jobs matching queue mail")
    .has(&format!(
        "job {} is running, so it cannot be deleted",
        ids[1]
    ));
    assert_eq!(state(&db, ids[1]).await.as_deref(), Some("running"));
    assert_eq!(state(&db, ids[0]).await, None);
}

#[tokio::test]
async fn bulk_by_filter_that_fails_partway_says_how_many_it_did_before() {
    lq_tests::init_tracing();
    let (db, app) = support::full().await;
    // Two batches: the newest 500 jobs, then the oldest 100, whose first job the
    // server refuses to remove.
    let ids = mails(&db, 600).await;
    let (oldest, newest) = (ids.iter().min().unwrap(), ids.iter().max().unwrap());
    db.refuse_delete(*oldest).await;
    let upto = newest.to_string();
    support::acted(
        &app,
        "/jobs/bulk",
        &[
            ("action", "cancel"),
            ("all_matching", "1"),
            ("queue", "mail"),
            ("confirm", "600"),
            ("upto", &upto),
        ],
    )
    .await
    .expect(StatusCode::INTERNAL_SERVER_ERROR)
    .has("bulk action stopped partway: 500 jobs were already cancelled and stay so")
    .has("the full reason is in the audit log")
    .has("Cancelled 500 of 500 jobs matching queue mail before it stopped");
    // The outcome page's address carries no free text: the reason is logged.
    let target = format!("600 jobs matching queue mail (ids up to {upto})");
    let lines =
        logged(|e| e.target == "lq_web::audit" && e.field("target") == Some(target.as_str()));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let outcome = lines[0].field("outcome").unwrap();
    assert!(outcome.contains("refused by the test"), "{outcome}");
    assert_eq!(state(&db, *newest).await.as_deref(), Some("cancelled"));
    assert_eq!(state(&db, *oldest).await.as_deref(), Some("queued"));
}

#[tokio::test]
async fn bulk_by_filter_with_nothing_matching_says_so() {
    let (db, app) = support::full().await;
    mails(&db, 1).await;
    post(
        &app,
        "/jobs/bulk",
        &[
            ("action", "retry"),
            ("all_matching", "1"),
            ("state", "dead"),
        ],
    )
    .await
    .expect(StatusCode::OK)
    .has("Nothing to retry")
    .lacks(r#"name="confirm""#);
}

#[tokio::test]
async fn bad_bulk_requests_are_400_pages() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 1).await;
    let before = snapshot(&db).await;
    let id = ids[0].to_string();
    for (fields, message) in [
        (vec![("action", "cancel")], "no job selected"),
        (
            vec![("action", "smash"), ("ids", id.as_str())],
            "unknown bulk action",
        ),
        (
            vec![("action", "cancel"), ("ids", "x1")],
            "ids must be a job id",
        ),
        (
            vec![
                ("action", "cancel"),
                ("all_matching", "1"),
                ("older_than", "5x"),
            ],
            "older_than must be a duration",
        ),
        (
            vec![
                ("action", "cancel"),
                ("all_matching", "1"),
                ("confirm", "1"),
            ],
            "the confirmation lacks upto",
        ),
    ] {
        post(&app, "/jobs/bulk", &fields)
            .await
            .expect(StatusCode::BAD_REQUEST)
            .has(message);
    }
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn queues_pause_and_resume_and_return_where_they_were_asked() {
    let (db, app) = support::full().await;
    mails(&db, 1).await;

    let r = post(&app, "/queues/mail/pause", &[("back", "queues")]).await;
    r.expect(StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/queues?done=pause&queue=mail");
    let q = control::queues(&db.pool).await.unwrap();
    assert_eq!(q[0].paused.as_ref().unwrap().by, "lq-web: dashboard");
    get(&app, r.location()).await.has("Queue mail paused.");

    let r = post(&app, "/queues/mail/resume", &[("back", "overview")]).await;
    assert_eq!(r.location(), "/?done=resume&queue=mail");
    assert!(control::queues(&db.pool).await.unwrap()[0].paused.is_none());
    get(&app, r.location()).await.has("Queue mail resumed.");

    // A bad name or action: a page, not a 500.
    post(&app, "/queues/bad%20name/pause", &[])
        .await
        .expect(StatusCode::BAD_REQUEST)
        .has("invalid queue name");
    post(&app, "/queues/mail/drain", &[])
        .await
        .expect(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn run_now_is_offered_only_where_the_schedule_records_its_job() {
    let (db, app) = support::full().await;
    support::declare_schedule(&db, "reports.recorded", "reports").await;
    // As a runtime of schema 11 declares it: no job recorded, so no run now.
    db.declare_schedule_without_job("reports.older", "reports")
        .await;
    get(&app, "/cron")
        .await
        .has(r#"action="/cron/reports.recorded/run""#)
        .lacks(r#"action="/cron/reports.older/run""#)
        .has(r#"<button type="button" disabled"#)
        .has("start a runtime of this version that declares it");
}

#[tokio::test]
async fn cron_run_now_enqueues_the_recorded_job_and_refuses_what_it_cannot_run() {
    let (db, app) = support::full().await;
    // A schedule as a runtime that has the type records it, with a unique key.
    sqlx::query(
        "insert into lq.cron_schedules (kind, last_tick, expr, tz, catch_up, queue, declared_by,
             payload, priority, max_attempts, unique_key)
         values ('reports.nightly', now(), '0 3 * * *', 'UTC', 'once', 'reports', 'rt-1',
             '{\"scope\": \"all\"}', 2, 5, 'nightly')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    get(&app, "/cron")
        .await
        .has(r#"action="/cron/reports.nightly/run""#)
        .has("Run now");

    let r = post(&app, "/cron/reports.nightly/run", &[]).await;
    r.expect(StatusCode::SEE_OTHER);
    let jobs = control::list(&db.pool, &lq_runtime::JobFilter::new(), 10)
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1);
    let id = jobs[0].id;
    assert_eq!(
        (
            jobs[0].kind.as_str(),
            jobs[0].queue.as_str(),
            jobs[0].payload.get()
        ),
        ("reports.nightly", "reports", r#"{"scope": "all"}"#)
    );
    assert_eq!(
        r.location(),
        format!("/cron?done=run&kind=reports.nightly&job={id}")
    );
    get(&app, r.location()).await.has(&format!(
        r#"Job <a href="/jobs/{id}">{id}</a> of kind reports.nightly enqueued."#
    ));

    // The key is held by that job: a conflict that names it, and no second job.
    post(&app, "/cron/reports.nightly/run", &[])
        .await
        .expect(StatusCode::CONFLICT)
        .has(&format!("live job {id} holds its unique key"));
    post(&app, "/cron/reports.weekly/run", &[])
        .await
        .expect(StatusCode::NOT_FOUND)
        .has("no recurring job of kind");
    post(&app, "/cron/reports.nightly/skip", &[])
        .await
        .expect(StatusCode::NOT_FOUND);
    post(&app, "/cron/bad%20kind/run", &[])
        .await
        .expect(StatusCode::BAD_REQUEST)
        .has("invalid kind name");
    assert_eq!(db.count("queued").await, 1);
}

#[tokio::test]
async fn every_action_and_every_refused_post_is_audit_logged() {
    lq_tests::init_tracing();
    let db = lq_tests::TestDb::new().await;
    let app: Router = lq_web::router(
        db.pool.clone(),
        WebConfig::new().actions(true).authorize(support::ByHeader),
    );
    let ids = mails(&db, 2).await;
    let user = format!("alice-{}", ids[0]);
    let as_user = |path: &str, csrf: Csrf| {
        let mut req = support::form_post(path, &[], csrf);
        req.headers_mut()
            .insert("x-test-access", "full".parse().unwrap());
        req.headers_mut()
            .insert("x-test-user", user.parse().unwrap());
        req
    };
    send(
        &app,
        as_user(&format!("/jobs/{}/cancel", ids[0]), Csrf::Right),
    )
    .await
    .expect(StatusCode::SEE_OTHER);
    send(
        &app,
        as_user(&format!("/jobs/{}/cancel", ids[1]), Csrf::Missing),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    // Refused before any action runs: a bad id, an unknown bulk action, and
    // no access at all (wrong credentials).
    send(&app, as_user("/jobs/abc/retry", Csrf::Right))
        .await
        .expect(StatusCode::BAD_REQUEST);
    let mut bulk = support::form_post("/jobs/bulk", &[("action", "explode")], Csrf::Right);
    for (k, v) in [("x-test-access", "full"), ("x-test-user", user.as_str())] {
        bulk.headers_mut().insert(k, v.parse().unwrap());
    }
    send(&app, bulk).await.expect(StatusCode::BAD_REQUEST);
    let mut anonymous = support::form_post(&format!("/jobs/{}/retry", ids[1]), &[], Csrf::Right);
    anonymous
        .headers_mut()
        .insert("x-test-user", user.parse().unwrap());
    send(&app, anonymous).await.expect(StatusCode::FORBIDDEN);

    let mine = logged(|e| e.target == "lq_web::audit" && e.field("user") == Some(user.as_str()));
    assert_eq!(mine.len(), 5, "{mine:#?}");
    for (i, why) in [
        (2, "refused: the job id"),
        (3, "refused: unknown bulk action \"explode\""),
        (4, "refused: no access"),
    ] {
        let outcome = mine[i].field("outcome").unwrap();
        assert!(outcome.starts_with(why), "{i}: {outcome}");
    }
    assert_eq!(state(&db, ids[1]).await.as_deref(), Some("queued"));
    assert_eq!(mine[0].field("action"), Some("cancel"));
    assert_eq!(
        mine[0].field("target"),
        Some(format!("job {}", ids[0]).as_str())
    );
    assert_eq!(mine[0].field("access"), Some("full"));
    assert_eq!(mine[0].field("outcome"), Some("done"));
    assert_eq!(
        mine[1].field("action"),
        Some(format!("POST /jobs/{}/cancel", ids[1]).as_str())
    );
    assert!(mine[1]
        .field("outcome")
        .unwrap()
        .starts_with("refused: missing or wrong CSRF token"));
}

#[tokio::test]
async fn while_payloads_are_redacted_no_page_shows_a_unique_key() {
    // A unique key is a template over the payload (`order:{order_id}`), so a
    // hook that hides payload values hides the keys too.
    fn hide(_: &str, payload: &mut serde_json::Value) {
        payload["order_id"] = "(hidden)".into();
    }
    let db = lq_tests::TestDb::new().await;
    let app = lq_web::router(db.pool.clone(), WebConfig::new().actions(true).redact(hide));
    let held = Order {
        order_id: 987654321,
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id;
    db.finish(held, "dead", 1.0).await;
    let holder = Order {
        order_id: 987654321,
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id;

    get(&app, &format!("/jobs/{holder}"))
        .await
        .expect(StatusCode::OK)
        .has("hidden while payloads are redacted")
        .lacks("987654321");
    post(&app, &format!("/jobs/{held}/retry"), &[])
        .await
        .expect(StatusCode::CONFLICT)
        .has(&format!("live job {holder} holds its unique key"))
        .lacks("987654321");
    let selected = held.to_string();
    support::acted(
        &app,
        "/jobs/bulk",
        &[("action", "retry"), ("ids", &selected)],
    )
    .await
    .expect(StatusCode::OK)
    .has("1 refused")
    .has(&format!("live job {holder} holds its unique key"))
    .lacks("987654321");
    assert_eq!(state(&db, held).await.as_deref(), Some("dead"));
}
