//! Unique keys are per kind, and template values are escaped so distinct values
//! never render one key.

use super::*;

/// Unique by `{id}`; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.charge_card",
    queue = "hostile_keys",
    unique_key = "{id}"
)]
struct ChargeCard {
    id: String,
}

/// Unique by `{id}` too, a different kind; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.reset_password",
    queue = "hostile_keys",
    unique_key = "{id}"
)]
struct ResetPassword {
    id: String,
}

/// Unique by two values joined by `:`; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.pair",
    queue = "hostile_keys",
    unique_key = "k:{a}:{b}"
)]
struct Pair {
    a: String,
    b: String,
}

#[tokio::test]
async fn one_unique_key_text_in_two_kinds_is_two_jobs() {
    let db = TestDb::new().await;
    let card = ChargeCard { id: "42".into() }
        .enqueue(&db.pool)
        .await
        .unwrap();
    let reset = ResetPassword { id: "42".into() }
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert!(!card.existing && !reset.existing, "{card:?} {reset:?}");
    assert_ne!(card.id, reset.id);
    // Within a kind the key still holds.
    let again = ChargeCard { id: "42".into() }
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert_eq!((again.id, again.existing), (card.id, true));
    assert_eq!(db.count("queued").await, 2);
}

#[tokio::test]
async fn separators_inside_key_values_do_not_make_two_jobs_collide() {
    let db = TestDb::new().await;
    let pair = |a: &str, b: &str| Pair {
        a: a.into(),
        b: b.into(),
    };
    let one = pair("1:2", "3").enqueue(&db.pool).await.unwrap();
    let two = pair("1", "2:3").enqueue(&db.pool).await.unwrap();
    assert!(!one.existing && !two.existing, "{one:?} {two:?}");
    assert_ne!(one.id, two.id);
    let again = pair("1:2", "3").enqueue(&db.pool).await.unwrap();
    assert_eq!((again.id, again.existing), (one.id, true));
    let keys: Vec<String> = sqlx::query_scalar("select unique_key from lq.jobs order by id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1]);
}
