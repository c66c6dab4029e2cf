//! Payloads nested deeper than serde_json decodes, and objects with duplicate
//! keys: shown by control, ended dead at once when they cannot be decoded.

use super::*;

#[tokio::test]
async fn control_shows_a_payload_nested_5000_levels_deep() {
    let db = TestDb::new().await;
    let deep_text = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let insert = |payload: String, state: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at,
                     attempts, max_attempts, errors, created_at, finished_at)
                 values ((select coalesce(max(id), 0) + 1 from lq.finished_jobs),
                     'hostile.deep', 'hostile_deep', 0, $1::text::jsonb, $2::text::lq.job_state,
                     now(), 1, 1,
                     '[{\"attempt\": 1, \"at\": \"2024-01-01T00:00:00Z\", \"error\": \"too deep\"}]',
                     now(), now())
                 returning id",
            )
            .bind(payload)
            .bind(state)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let shallow = insert(r#"{"a": [1, 2]}"#.to_owned(), "dead").await;
    let deep = insert(deep_text.clone(), "dead").await;
    let done = insert(r#"{"b": 3}"#.to_owned(), "succeeded").await;

    let row = lq_runtime::control::get(&db.pool, deep).await.unwrap();
    assert_eq!(row.state, JobState::Dead);
    assert_eq!(row.payload.get(), deep_text);
    assert!(row.payload_value().is_err(), "serde_json's depth limit");

    let dead = lq_runtime::control::list(
        &db.pool,
        &lq_runtime::JobFilter::new().state(JobState::Dead),
        100,
    )
    .await
    .unwrap();
    let ids: Vec<i64> = dead.iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![deep, shallow], "newest first, dead only");
    assert_eq!(dead[0].payload.get(), deep_text);
    assert!(dead[0].payload_value().is_err());
    assert_eq!(
        dead[1].payload_value().unwrap(),
        serde_json::json!({ "a": [1, 2] })
    );

    let all = lq_runtime::control::list(
        &db.pool,
        &lq_runtime::JobFilter::new().queue("hostile_deep"),
        100,
    )
    .await
    .unwrap();
    assert_eq!(all.len(), 3);
    for row in all.iter().filter(|r| r.id != deep) {
        assert!(row.payload_value().is_ok(), "job {}", row.id);
    }
    let row = lq_runtime::control::get(&db.pool, done).await.unwrap();
    assert_eq!(row.payload_value().unwrap(), serde_json::json!({ "b": 3 }));
}

/// Holds any JSON value: decoding one nested past serde_json's limit fails.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.deep_value", queue = "hostile_deep_run")]
struct DeepValue {
    v: serde_json::Value,
}

impl Perform for DeepValue {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_payload_nested_too_deep_to_decode_ends_dead_at_once_and_is_kept() {
    let db = TestDb::new().await;
    let deep_text = format!(r#"{{"v": {}{}}}"#, "[".repeat(5000), "]".repeat(5000));
    // Written as another client could: enqueue would not build it.
    let deep: i64 = sqlx::query_scalar(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         values ('hostile.deep_value', 'hostile_deep_run', $1::text::jsonb, 3) returning id",
    )
    .bind(&deep_text)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let fine = DeepValue {
        v: serde_json::json!([[1]]),
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id;
    let rt = start(&db, "hostile_deep_run", 2, quick()).await;
    drain_and_stop(&db, rt).await;

    assert_eq!(state_and_attempts(&db, deep).await, (JobState::Dead, 1));
    let errors = errors_of(&db, deep).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].1.starts_with("payload does not deserialise into")
            && errors[0].1.contains("recursion limit"),
        "{errors:?}"
    );
    let row = lq_runtime::control::get(&db.pool, deep).await.unwrap();
    assert_eq!(row.payload.get(), deep_text, "the payload is kept");
    assert_eq!(
        state_and_attempts(&db, fine).await,
        (JobState::Succeeded, 1)
    );
}

/// Pairs written as one JSON object, in their order, duplicates included.
#[derive(Debug, PartialEq)]
struct Pairs(Vec<(String, u32)>);

impl Serialize for Pairs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs = serde_json::Map::deserialize(d)?;
        let pairs = pairs
            .into_iter()
            .map(|(k, v)| (k, v.as_u64().map_or(u32::MAX, |v| v as u32)))
            .collect();
        Ok(Pairs(pairs))
    }
}

/// The pairs [`KeyedPayload`] handlers were handed, in the order they got them.
type Handed = std::sync::Arc<std::sync::Mutex<Vec<(String, u32)>>>;

/// Records the pairs it was handed, in the order it got them.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.pairs", queue = "hostile_pairs")]
struct KeyedPayload {
    pairs: Pairs,
}

impl Perform for KeyedPayload {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let got = ctx.state::<Handed>();
        got.lock().unwrap().extend(self.pairs.0.iter().cloned());
        Ok(())
    }
}

#[tokio::test]
async fn an_objects_keys_come_back_sorted_and_the_last_of_duplicates_kept() {
    let db = TestDb::new().await;
    let pairs = [("b", 1), ("a", 2), ("b", 3)];
    let job = KeyedPayload {
        pairs: Pairs(pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()),
    };
    let id = job.enqueue(&db.pool).await.unwrap().id;
    let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
    assert_eq!(row.payload.get(), r#"{"pairs": {"a": 2, "b": 3}}"#);
    let got = Handed::default();
    let rt = Runtime::builder(db.pool.clone())
        .config(quick())
        .queue("hostile_pairs", 1)
        .state(got.clone())
        .start()
        .await
        .unwrap();
    drain_and_stop(&db, rt).await;
    assert_eq!(state_and_attempts(&db, id).await, (JobState::Succeeded, 1));
    let got = got.lock().unwrap().clone();
    assert_eq!(got, [("a".to_owned(), 2), ("b".to_owned(), 3)]);
}
