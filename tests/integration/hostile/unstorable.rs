//! Keys and payloads the database cannot store are typed errors that name the
//! job, and nothing of the call is written.

use super::*;

/// A key part whose text holds a NUL for `Tag(0)`, while its JSON (a number)
/// never does: the payload is storable, the key is not.
#[derive(Serialize, Deserialize)]
struct Tag(u8);

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            f.write_str("nul\0tag")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// Unique by a tag and a name; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.bad_key",
    queue = "hostile_bad_keys",
    unique_key = "t:{tag}:{name}"
)]
struct BadKey {
    tag: Tag,
    name: String,
}

/// Carries free text; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.nul_payload", queue = "hostile_bad_keys")]
struct NulPayload {
    text: String,
}

/// Carries numbers, one of them optional; producer only.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.reading", queue = "hostile_bad_keys")]
struct Reading {
    value: f64,
    previous: Option<f32>,
}

#[tokio::test]
async fn a_payload_holding_a_nan_or_an_infinity_is_refused_not_stored_as_null() {
    // serde_json writes them as `null`: an `f64` would not decode at the claim,
    // and an `Option` would come back `None`.
    let db = TestDb::new().await;
    let reading = |value: f64, previous: Option<f32>| Reading { value, previous };
    for (i, bad) in [
        reading(f64::NAN, None),
        reading(1.0, Some(f32::INFINITY)),
        reading(f64::NEG_INFINITY, Some(1.0)),
    ]
    .into_iter()
    .enumerate()
    {
        let refused = bad.enqueue(&db.pool).await;
        assert!(
            matches!(
                refused,
                Err(CoreError::NonFiniteNumber {
                    kind: "hostile.reading",
                    position: None,
                })
            ),
            "case {i}: {refused:?}"
        );
    }
    let batch = [reading(1.0, None), reading(2.0, Some(f32::NAN))];
    let mut tx = db.pool.begin().await.unwrap();
    let many = Reading::enqueue_many(&mut *tx, batch, EnqueueOptions::new()).await;
    assert!(
        matches!(
            many,
            Err(CoreError::NonFiniteNumber {
                kind: "hostile.reading",
                position: Some(1),
            })
        ),
        "{many:?}"
    );
    tx.commit().await.unwrap();
    assert_eq!(live_jobs(&db).await, 0, "nothing of a refused call written");
    // A null that is a real `None` is no NaN.
    reading(1.0, None).enqueue(&db.pool).await.unwrap();
    assert_eq!(live_jobs(&db).await, 1);
}

async fn live_jobs(db: &TestDb) -> i64 {
    sqlx::query_scalar("select count(*) from lq.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn keys_and_payloads_postgres_cannot_store_are_refused_naming_the_job() {
    let db = TestDb::new().await;
    let key = |tag: u8, name: &str| BadKey {
        tag: Tag(tag),
        name: name.into(),
    };

    let nul = key(0, "a").enqueue(&db.pool).await;
    assert!(
        matches!(
            nul,
            Err(CoreError::InvalidUniqueKey {
                kind: "hostile.bad_key",
                position: None,
                ..
            })
        ),
        "{nul:?}"
    );

    let long_name = "n".repeat(MAX_UNIQUE_KEY_BYTES + 1);
    let long = key(1, &long_name).enqueue(&db.pool).await;
    assert!(
        matches!(
            long,
            Err(CoreError::InvalidUniqueKey {
                kind: "hostile.bad_key",
                position: None,
                len,
                ..
            }) if len > MAX_UNIQUE_KEY_BYTES
        ),
        "{long:?}"
    );

    let batch = vec![key(1, "a"), key(1, "b"), key(1, &long_name), key(1, "d")];
    let many = BadKey::enqueue_many(&db.pool, batch, EnqueueOptions::new()).await;
    assert!(
        matches!(
            many,
            Err(CoreError::InvalidUniqueKey {
                kind: "hostile.bad_key",
                position: Some(2),
                ..
            })
        ),
        "{many:?}"
    );

    let payload = NulPayload {
        text: "a\0b".into(),
    }
    .enqueue(&db.pool)
    .await;
    assert!(
        matches!(
            payload,
            Err(CoreError::PayloadHasNul {
                kind: "hostile.nul_payload",
                position: None,
            })
        ),
        "{payload:?}"
    );
    let texts = ["fine", "a\0b", "fine too"].map(|t| NulPayload { text: t.into() });
    let many = NulPayload::enqueue_many(&db.pool, texts, EnqueueOptions::new()).await;
    assert!(
        matches!(
            many,
            Err(CoreError::PayloadHasNul {
                kind: "hostile.nul_payload",
                position: Some(1),
            })
        ),
        "{many:?}"
    );
    let big = "x".repeat(lq_core::MAX_PAYLOAD_BYTES);
    let texts = ["fine", "fine too", big.as_str()].map(|t| NulPayload { text: t.into() });
    let many = NulPayload::enqueue_many(&db.pool, texts, EnqueueOptions::new()).await;
    assert!(
        matches!(
            many,
            Err(CoreError::PayloadTooLarge {
                kind: "hostile.nul_payload",
                position: Some(2),
                ..
            })
        ),
        "{many:?}"
    );

    assert_eq!(
        live_jobs(&db).await,
        0,
        "nothing of any refused call written"
    );
    // The same types enqueue fine with storable values.
    key(1, "a").enqueue(&db.pool).await.unwrap();
    NulPayload {
        text: r"a\0b".into(),
    }
    .enqueue(&db.pool)
    .await
    .unwrap();
    assert_eq!(live_jobs(&db).await, 2);
}
