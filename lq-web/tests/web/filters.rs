//! The jobs page's filters and keyset paging; bad filter values are 400 pages
//! that say what is wrong.

use axum::http::StatusCode;
use lq_runtime::Job;

use crate::{
    jobs::{Mail, Report},
    support::{self, get, mails, post, report, Resp},
};

/// The ids the page lists, in order (read from the rows' checkboxes).
fn listed(page: &Resp) -> Vec<i64> {
    page.body
        .split(r#"name="ids" value=""#)
        .skip(1)
        // `id:state`: the row's state travels with its id.
        .map(|rest| rest[..rest.find([':', '"']).unwrap()].parse().unwrap())
        .collect()
}

/// The "Older" link's target, if there is one.
fn older(page: &Resp) -> Option<String> {
    let at = page.body.find(r#"id="older" href=""#)?;
    let rest = &page.body[at + r#"id="older" href=""#.len()..];
    Some(rest[..rest.find('"').unwrap()].replace("&amp;", "&"))
}

#[tokio::test]
async fn filters_by_queue_kind_state_and_id() {
    let (db, app) = support::full().await;
    let m = mails(&db, 3).await;
    let r = report(&db, "acme").await;
    db.finish(m[0], "dead", 1.0).await;

    assert_eq!(
        listed(&get(&app, "/jobs?queue=mail").await),
        [m[2], m[1], m[0]]
    );
    assert_eq!(listed(&get(&app, "/jobs?queue=default").await), [r]);
    assert_eq!(
        listed(&get(&app, &format!("/jobs?kind={}", Report::KIND)).await),
        [r]
    );
    assert_eq!(
        listed(&get(&app, &format!("/jobs?kind={}&state=queued", Mail::KIND)).await),
        [m[2], m[1]]
    );
    assert_eq!(listed(&get(&app, "/jobs?state=dead").await), [m[0]]);
    assert_eq!(
        listed(&get(&app, &format!("/jobs?id={}", m[1])).await),
        [m[1]]
    );
    // Blank fields (an empty filter form) filter nothing.
    assert_eq!(listed(&get(&app, "/jobs?queue=&kind=&id=").await).len(), 4);
    // The form shows the filter back.
    get(&app, "/jobs?queue=mail&state=dead")
        .await
        .has(r#"name="queue" value="mail""#)
        .has(r#"<input type="hidden" name="state" value="dead">"#);
}

#[tokio::test]
async fn filters_by_payload_and_metadata_containment() {
    let (db, app) = support::full().await;
    let m = mails(&db, 3).await;
    let acme = report(&db, "acme").await;
    let _other = report(&db, "globex").await;

    let q = |json: &str| form_urlencoded::byte_serialize(json.as_bytes()).collect::<String>();
    assert_eq!(
        listed(
            &get(
                &app,
                &format!("/jobs?payload={}", q(r#"{"to": "user1@x"}"#))
            )
            .await
        ),
        [m[1]]
    );
    assert_eq!(
        listed(&get(&app, &format!("/jobs?payload={}", q(r#"{"n": 2}"#))).await),
        [m[2]]
    );
    assert_eq!(
        listed(&get(&app, &format!("/jobs?meta={}", q(r#"{"tenant": "acme"}"#))).await),
        [acme]
    );
    assert!(
        listed(&get(&app, &format!("/jobs?meta={}", q(r#"{"tenant": "none"}"#))).await).is_empty()
    );
}

#[tokio::test]
async fn filters_by_age() {
    let (db, app) = support::full().await;
    let m = mails(&db, 3).await;
    sqlx::query("update lq.jobs set created_at = now() - interval '2 hours' where id = $1")
        .bind(m[0])
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(listed(&get(&app, "/jobs?older_than=1h").await), [m[0]]);
    assert_eq!(
        listed(&get(&app, "/jobs?newer_than=1h").await),
        [m[2], m[1]]
    );
    assert!(listed(&get(&app, "/jobs?older_than=3h").await).is_empty());
}

#[tokio::test]
async fn keyset_paging_walks_to_older_jobs_without_overlap() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 120).await;
    let newest_first: Vec<i64> = ids.iter().rev().copied().collect();

    let first = get(&app, "/jobs?queue=mail").await;
    assert_eq!(listed(&first), newest_first[..50]);
    let next = older(&first).expect("an Older link");
    assert_eq!(
        next,
        format!("/jobs?queue=mail&before={}", newest_first[49])
    );
    let second = get(&app, &next).await;
    assert_eq!(listed(&second), newest_first[50..100]);
    second.has("« Newest");
    let third = get(&app, &older(&second).expect("a third page")).await;
    assert_eq!(listed(&third), newest_first[100..]);
    assert_eq!(older(&third), None, "the last page has no Older link");
}

#[tokio::test]
async fn bad_filter_values_are_400_pages_that_say_what_is_wrong() {
    let (_db, app) = support::full().await;
    for (query, message) in [
        (
            "id=abc",
            "id must be a job id (a whole number), not &quot;abc&quot;",
        ),
        (
            "older_than=5x",
            "older_than must be a duration like 90s, 15m, 2h or 7d, not &quot;5x&quot;",
        ),
        ("newer_than=soon", "newer_than must be a duration"),
        ("payload=%7Bnope", "payload must be JSON"),
        ("meta=%5B1%2C", "meta must be JSON"),
        ("state=deadd", "unknown state &quot;deadd&quot;"),
        ("before=x", "before must be a job id"),
        // Well-formed, but past what the database takes (typed, not a 500).
        ("older_than=10000y", "older_than is over 1,000 years"),
        (
            "payload=%7B%22a%22%3A%22%5Cu0000%22%7D",
            "the payload filter holds a NUL character",
        ),
    ] {
        get(&app, &format!("/jobs?{query}"))
            .await
            .expect(StatusCode::BAD_REQUEST)
            .has(message)
            .has(r#"role="alert""#);
    }
}

#[tokio::test]
async fn a_nul_in_a_queue_or_kind_filter_is_a_400_not_a_database_error() {
    let (_db, app) = support::full().await;
    for (query, message) in [
        ("queue=%00", "the queue filter holds a NUL character"),
        ("queue=mail%00x", "the queue filter holds a NUL character"),
        ("kind=%00", "the kind filter holds a NUL character"),
    ] {
        get(&app, &format!("/jobs?{query}"))
            .await
            .expect(StatusCode::BAD_REQUEST)
            .has(message)
            .has(r#"role="alert""#);
    }
}

/// The queued tab splits into the jobs due (`available`) and those not yet
/// due (`scheduled`: later, snoozed or backing off), each a sub-tab with its
/// count and its own list; an action on all matching jobs of the scheduled
/// sub-tab leaves the due ones alone.
#[tokio::test]
async fn the_queued_tab_splits_into_available_and_scheduled_jobs() {
    let (db, app) = support::full().await;
    let m = mails(&db, 5).await;
    let later = [m[1], m[3]];
    sqlx::query("update lq.jobs set run_at = now() + interval '1 hour' where id = any($1)")
        .bind(later)
        .execute(&db.pool)
        .await
        .unwrap();
    db.finish(m[4], "dead", 1.0).await;

    let page = get(&app, "/jobs?queue=mail&state=queued").await;
    page.expect(StatusCode::OK)
        .has(r#"data-readiness="all queued">all queued <span class="n">4</span>"#)
        .has(r#"data-readiness="available">available <span class="n">2</span>"#)
        .has(r#"data-readiness="scheduled">scheduled <span class="n">2</span>"#);
    assert_eq!(listed(&page), [m[3], m[2], m[1], m[0]]);
    let scheduled = get(&app, "/jobs?queue=mail&state=scheduled").await;
    scheduled
        .has(r#"class="tab current" href="/jobs?state=scheduled&amp;queue=mail" data-readiness="scheduled""#)
        // the queued tab stays current, and the filter form keeps the part
        .has(r#"class="tab current" href="/jobs?state=queued&amp;queue=mail" data-state="queued""#)
        .has(r#"<input type="hidden" name="state" value="scheduled">"#)
        .has("All 2 matching jobs");
    assert_eq!(listed(&scheduled), [m[3], m[1]]);
    assert_eq!(
        listed(&get(&app, "/jobs?queue=mail&state=available").await),
        [m[2], m[0]]
    );
    // Other tabs have no parts.
    get(&app, "/jobs?state=dead").await.lacks("data-readiness");

    let ask = [
        ("action", "cancel"),
        ("all_matching", "1"),
        ("state", "scheduled"),
        ("queue", "mail"),
    ];
    post(&app, "/jobs/bulk", &ask)
        .await
        .expect(StatusCode::OK)
        .has("Cancel 2 jobs matching state scheduled, queue mail?");
    let upto = m[3].to_string();
    let mut confirmed = ask.to_vec();
    confirmed.extend([("confirm", "2"), ("upto", upto.as_str())]);
    support::acted(&app, "/jobs/bulk", &confirmed)
        .await
        .expect(StatusCode::OK)
        .has("Cancelled 2 of 2 jobs matching state scheduled, queue mail");
    for id in later {
        assert_eq!(support::state(&db, id).await.as_deref(), Some("cancelled"));
    }
    for id in [m[0], m[2]] {
        assert_eq!(support::state(&db, id).await.as_deref(), Some("queued"));
    }
}

#[tokio::test]
async fn an_unknown_state_names_the_parts_of_queued_too() {
    let (_db, app) = support::full().await;
    get(&app, "/jobs?state=retryable")
        .await
        .expect(StatusCode::BAD_REQUEST)
        .has("use queued (or available, scheduled), running");
}
