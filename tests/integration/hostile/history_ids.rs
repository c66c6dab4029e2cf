//! Jobs whose ids are already in the history still end, replacing the old row.

use super::*;

/// Succeeds at once.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "hostile.collide", queue = "hostile_collide")]
struct Collide {
    n: u32,
}

impl Perform for Collide {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Fails for good on its only attempt.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "hostile.collide_doomed",
    queue = "hostile_collide",
    max_attempts = 1
)]
struct CollideDoomed {
    n: u32,
}

impl Perform for CollideDoomed {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Err(format!("doomed {}", self.n).into())
    }
}

#[tokio::test]
async fn jobs_whose_ids_are_already_in_the_history_end_and_replace_it() {
    let db = TestDb::new().await;
    let first = [
        Collide { n: 1 }.enqueue(&db.pool).await.unwrap().id,
        Collide { n: 2 }.enqueue(&db.pool).await.unwrap().id,
        CollideDoomed { n: 3 }.enqueue(&db.pool).await.unwrap().id,
    ];
    assert_eq!(first, [1, 2, 3]);
    let rt = start(&db, "hostile_collide", 4, quick()).await;
    drain_and_stop(&db, rt).await;
    assert_eq!(db.count("succeeded").await, 2);
    assert_eq!(db.count("dead").await, 1);

    // Ids restart: every new job's id up to 3 is taken in the history.
    sqlx::query("truncate lq.jobs restart identity")
        .execute(&db.pool)
        .await
        .unwrap();
    let second = [
        CollideDoomed { n: 11 }.enqueue(&db.pool).await.unwrap().id, // over a success
        Collide { n: 12 }.enqueue(&db.pool).await.unwrap().id,       // over a success
        Collide { n: 13 }.enqueue(&db.pool).await.unwrap().id,       // over a dead job
        Collide { n: 14 }.enqueue(&db.pool).await.unwrap().id,       // no collision
    ];
    assert_eq!(second, [1, 2, 3, 4]);
    let rt = start(&db, "hostile_collide", 4, quick()).await;
    drain_and_stop(&db, rt).await;

    let live: i64 = sqlx::query_scalar("select count(*) from lq.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(live, 0);
    let history: Vec<(i64, String, String, i32)> =
        sqlx::query_as("select id, kind, state::text, attempts from lq.finished_jobs order by id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let expect = |id: i64, kind: &str, state: &str| (id, kind.to_owned(), state.to_owned(), 1);
    assert_eq!(
        history,
        vec![
            expect(1, "hostile.collide_doomed", "dead"),
            expect(2, "hostile.collide", "succeeded"),
            expect(3, "hostile.collide", "succeeded"),
            expect(4, "hostile.collide", "succeeded"),
        ],
        "each history row is the new job's"
    );
    for (id, n) in [(1, 11), (2, 12), (3, 13), (4, 14)] {
        let row = lq_runtime::control::get(&db.pool, id).await.unwrap();
        assert_eq!(row.payload_value().unwrap(), serde_json::json!({ "n": n }));
    }
    assert_eq!(errors_of(&db, 1).await, vec![(1, "doomed 11".to_owned())]);
    assert!(
        errors_of(&db, 3).await.is_empty(),
        "the old dead job's errors went with it"
    );
}
