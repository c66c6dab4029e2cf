//! A bulk action answers with a redirect to its outcome (Post/Redirect/Get):
//! reloading the page the browser shows, or going back to it, never runs the
//! action again.

use axum::http::StatusCode;

use crate::support::{self, get, mails, post, snapshot, state};

#[tokio::test]
async fn reloading_the_outcome_of_a_confirmed_bulk_action_does_not_run_it_again() {
    let (db, app) = support::full().await;
    let ids = mails(&db, 3).await;
    for id in &ids[..2] {
        db.finish(*id, "dead", 1.0).await;
    }
    let upto = ids[1].to_string();
    let go = [
        ("action", "retry"),
        ("all_matching", "1"),
        ("state", "dead"),
        ("confirm", "2"),
        ("upto", upto.as_str()),
    ];
    let r = post(&app, "/jobs/bulk", &go).await;
    r.expect(StatusCode::SEE_OTHER);
    let outcome = r.location().to_owned();
    assert!(outcome.starts_with("/jobs/bulk?"), "{outcome}");
    for id in &ids[..2] {
        assert_eq!(state(&db, *id).await.as_deref(), Some("queued"));
    }

    // Both die again; the operator reloads the page showing the outcome.
    for id in &ids[..2] {
        db.finish(*id, "dead", 0.0).await;
    }
    let before = snapshot(&db).await;
    let shown = get(&app, &outcome).await;
    shown
        .expect(StatusCode::OK)
        .has("Retried 2 of 2 jobs matching state dead")
        .has("None refused.")
        .has(r#"href="/jobs?state=dead""#)
        .lacks("data-refresh");
    assert_eq!(get(&app, &outcome).await.body, shown.body);
    assert_eq!(snapshot(&db).await, before, "nothing ran again");

    // The address alone runs nothing either.
    get(&app, "/jobs/bulk").await.expect(StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn the_outcome_lists_a_hundred_refusals_and_counts_the_rest() {
    let (db, app) = support::full().await;
    mails(&db, 1).await;
    let gone: Vec<String> = (900_001..=900_105).map(|i: i64| i.to_string()).collect();
    let mut fields = vec![("action", "cancel")];
    fields.extend(gone.iter().map(|id| ("ids", id.as_str())));
    let r = post(&app, "/jobs/bulk", &fields).await;
    r.expect(StatusCode::SEE_OTHER);
    assert!(r.location().len() < 4000, "{}", r.location().len());
    get(&app, r.location())
        .await
        .expect(StatusCode::OK)
        .has("Cancelled 0 of 105 the selected jobs")
        .has("105 refused")
        .has("job 900001 does not exist")
        .has("job 900100 does not exist")
        .lacks("job 900101 does not exist")
        .has("And 5 more refused");
}
