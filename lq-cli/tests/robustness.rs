//! The `lq` binary at the edges: payloads nested deeper than serde_json
//! decodes, a server that is not there, jobs that appear or age while `lq`
//! counts and asks, and `status --watch` as a stream.

use lq_tests::TestDb;

mod common;
use common::{insert, lq, lq_text};

/// Whether `text` is one JSON document, as PostgreSQL (which takes any depth)
/// parses it, and `text`'s `path` (a `jsonb` path) equals `expected`.
async fn json_at(db: &TestDb, text: &str, path: &str, expected: &str) -> bool {
    sqlx::query_scalar(&format!("select ($1::jsonb {path}) = $2::jsonb"))
        .bind(text)
        .bind(expected)
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {:.200}", text))
}

#[tokio::test]
async fn json_output_shows_a_payload_and_meta_nested_5000_levels_deep() {
    let db = TestDb::new().await;
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let id: i64 = sqlx::query_scalar(
        "insert into lq.jobs (kind, queue, payload, meta, max_attempts)
         values ('cli.deep', 'deep-q', $1::text::jsonb, jsonb_build_object('t', $1::text::jsonb), 3)
         returning id",
    )
    .bind(&deep)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let deep_meta = format!(r#"{{"t": {deep}}}"#);
    let shallow = insert(&db, "cli.deep", "deep-q", 1).await[0];

    let (code, stdout, stderr) = lq_text(
        &db.url,
        &["--format", "json"],
        &["jobs", "show", &id.to_string()],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(json_at(&db, &stdout, "-> 'payload'", &deep).await);
    assert!(json_at(&db, &stdout, "-> 'meta'", &deep_meta).await);
    assert!(json_at(&db, &stdout, "-> 'id'", &id.to_string()).await);

    let (code, stdout, stderr) = lq_text(
        &db.url,
        &["--format", "json"],
        &["jobs", "list", "--queue", "deep-q"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(json_at(&db, &stdout, "-> 'jobs' -> 0 -> 'id'", &shallow.to_string()).await);
    assert!(json_at(&db, &stdout, "-> 'jobs' -> 0 -> 'meta'", "null").await);
    assert!(json_at(&db, &stdout, "-> 'jobs' -> 1 -> 'payload'", &deep).await);
    assert!(json_at(&db, &stdout, "-> 'jobs' -> 1 -> 'meta'", &deep_meta).await);

    // The table shows it too (raw, as it cannot be indented).
    let (code, stdout, stderr) = lq_text(&db.url, &[], &["jobs", "show", &id.to_string()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(&deep), "{:.200}", stdout);
    let (code, json, _) = lq(&db, &["jobs", "list", "--queue", "nothing-here"]);
    assert_eq!((code, json), (0, serde_json::json!({"jobs": []})));
}
