//! An action on jobs the operator picked acts on them only while they are in
//! the state the page showed: a job that moved meanwhile (a dead job retried,
//! a queued job started) is left alone and reported as having left the view.

use axum::http::StatusCode;
use lq_runtime::control;

use crate::support::{self, follow, get, hidden_in, mails, make_running, post, state};

#[tokio::test]
async fn deleting_a_selected_dead_job_retried_meanwhile_leaves_it_and_says_so() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 2).await;
    db.finish(ids[0], "dead", 1.0).await;
    db.finish(ids[1], "dead", 1.0).await;
    let (a, b) = (ids[0].to_string(), ids[1].to_string());

    // The dead tab: its selection form carries the state it shows.
    let list = get(&app, "/jobs?state=dead").await;
    list.expect(StatusCode::OK);
    let shown = hidden_in(&list.body, r#"id="selection""#, "state");
    assert_eq!(shown.as_deref(), Some("dead"));

    // Job a is retried elsewhere while the page is open.
    control::retry_now(&db.pool, ids[0]).await.unwrap();

    let ask = post(
        &app,
        "/jobs/bulk",
        &[
            ("action", "delete"),
            ("state", "dead"),
            ("ids", &a),
            ("ids", &b),
        ],
    )
    .await;
    ask.expect(StatusCode::OK);
    assert_eq!(
        hidden_in(&ask.body, r#"class="confirm""#, "state").as_deref(),
        Some("dead"),
        "the confirmation keeps the state"
    );
    let done = follow(
        &app,
        post(
            &app,
            "/jobs/bulk",
            &[
                ("action", "delete"),
                ("state", "dead"),
                ("ids", &a),
                ("ids", &b),
                ("confirm", "2"),
            ],
        )
        .await,
    )
    .await;
    done.expect(StatusCode::OK)
        .has("Deleted 1 of 2")
        .has(&format!(
            "job {a} became queued after the filter chose it, so it was not deleted"
        ));
    assert_eq!(state(&db, ids[0]).await.as_deref(), Some("queued"));
    assert_eq!(state(&db, ids[1]).await, None);
}

#[tokio::test]
async fn cancelling_selected_queued_jobs_leaves_one_that_started_running() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 2).await;
    let (a, b) = (ids[0].to_string(), ids[1].to_string());
    let list = get(&app, "/jobs?state=queued").await;
    assert_eq!(
        hidden_in(&list.body, r#"id="selection""#, "state").as_deref(),
        Some("queued")
    );
    make_running(&db, ids[0], "w-1").await;
    let done = follow(
        &app,
        post(
            &app,
            "/jobs/bulk",
            &[
                ("action", "cancel"),
                ("state", "queued"),
                ("ids", &a),
                ("ids", &b),
            ],
        )
        .await,
    )
    .await;
    done.expect(StatusCode::OK)
        .has("Cancelled 1 of 2")
        .has(&format!(
            "job {a} became running after the filter chose it, so it was not cancelled"
        ));
    let requested: bool =
        sqlx::query_scalar("select cancel_requested_at is not null from lq.jobs where id = $1")
            .bind(ids[0])
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(!requested, "a running job the page showed as queued");
    assert_eq!(state(&db, ids[1]).await.as_deref(), Some("cancelled"));
}

#[tokio::test]
async fn the_job_page_acts_only_in_the_state_it_showed() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 2).await;
    db.finish(ids[0], "dead", 1.0).await;
    let dead = ids[0];

    let page = get(&app, &format!("/jobs/{dead}")).await;
    let delete_form = format!(r#"action="/jobs/{dead}/delete""#);
    assert_eq!(
        hidden_in(&page.body, &delete_form, "state").as_deref(),
        Some("dead")
    );
    let ask = post(&app, &format!("/jobs/{dead}/delete"), &[("state", "dead")]).await;
    assert_eq!(
        hidden_in(&ask.body, &delete_form, "state").as_deref(),
        Some("dead"),
        "the confirmation keeps the state"
    );

    control::retry_now(&db.pool, dead).await.unwrap();
    post(
        &app,
        &format!("/jobs/{dead}/delete"),
        &[("state", "dead"), ("confirm", "yes")],
    )
    .await
    .expect(StatusCode::CONFLICT)
    .has(&format!(
        "job {dead} became queued after the filter chose it, so it was not deleted"
    ));
    assert_eq!(state(&db, dead).await.as_deref(), Some("queued"));

    // Shown queued, running by the time the button is pressed.
    let queued = ids[1];
    let page = get(&app, &format!("/jobs/{queued}")).await;
    assert_eq!(
        hidden_in(
            &page.body,
            &format!(r#"action="/jobs/{queued}/cancel""#),
            "state"
        )
        .as_deref(),
        Some("queued")
    );
    make_running(&db, queued, "w-1").await;
    post(
        &app,
        &format!("/jobs/{queued}/cancel"),
        &[("state", "queued")],
    )
    .await
    .expect(StatusCode::CONFLICT)
    .has(&format!(
        "job {queued} became running after the filter chose it, so it was not cancelled"
    ));
    let requested: bool =
        sqlx::query_scalar("select cancel_requested_at is not null from lq.jobs where id = $1")
            .bind(queued)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(!requested);
}

/// On the "all" tab (no state in the address) each row carries its own state:
/// a job shown dead and retried meanwhile is not deleted, while the other
/// selected jobs, dead and queued, are.
#[tokio::test]
async fn on_the_all_tab_each_selected_job_keeps_the_state_its_row_showed() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 3).await;
    db.finish(ids[0], "dead", 1.0).await;
    db.finish(ids[1], "dead", 1.0).await;
    let list = get(&app, "/jobs").await;
    list.expect(StatusCode::OK);
    for (id, shown) in [(ids[0], "dead"), (ids[1], "dead"), (ids[2], "queued")] {
        list.has(&format!(r#"value="{id}:{shown}""#));
    }
    control::retry_now(&db.pool, ids[0]).await.unwrap();
    let (a, b, c) = (
        format!("{}:dead", ids[0]),
        format!("{}:dead", ids[1]),
        format!("{}:queued", ids[2]),
    );
    let ask = post(
        &app,
        "/jobs/bulk",
        &[("action", "delete"), ("ids", &a), ("ids", &b), ("ids", &c)],
    )
    .await;
    ask.expect(StatusCode::OK).has(&format!(r#"value="{a}""#));
    let done = follow(
        &app,
        post(
            &app,
            "/jobs/bulk",
            &[
                ("action", "delete"),
                ("ids", &a),
                ("ids", &b),
                ("ids", &c),
                ("confirm", "3"),
            ],
        )
        .await,
    )
    .await;
    done.expect(StatusCode::OK)
        .has("Deleted 2 of 3")
        .has(&format!(
            "job {} became queued after the filter chose it, so it was not deleted",
            ids[0]
        ));
    assert_eq!(state(&db, ids[0]).await.as_deref(), Some("queued"));
    assert_eq!(state(&db, ids[1]).await, None);
    assert_eq!(state(&db, ids[2]).await, None);
}
