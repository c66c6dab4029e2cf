//! Two applications in one database keep to their own queues.

use super::*;

/// Application A's job.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "roles.app_a", queue = "app_a_q")]
struct AppA {
    n: u32,
}

impl Perform for AppA {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Application B's job.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "roles.app_b", queue = "app_b_q")]
struct AppB {
    n: u32,
}

impl Perform for AppB {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Settings that claim and bury unknown kinds at once.
fn eager() -> RuntimeConfig {
    RuntimeConfig {
        rescue_interval: Duration::from_millis(50),
        unknown_kind_grace: Some(Duration::from_millis(1)),
        ..quick()
    }
}

/// Inserts a queued job of a kind no type in this binary declares (a job of the
/// other application's binary) on `queue`.
async fn insert_foreign(db: &TestDb, queue: &str) -> i64 {
    sqlx::query_scalar(
        "insert into lq.jobs (kind, queue, payload, max_attempts)
         values ('roles.only_in_another_binary', $1, '{}', 1) returning id",
    )
    .bind(queue)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Two applications share a database with queues of their own: each runtime claims
/// only jobs on its queues (though this binary could run both kinds), and buries
/// unknown kinds only on its queues, never the other's jobs.
#[tokio::test]
async fn two_applications_in_one_database_keep_to_their_queues() {
    lq_tests::init_tracing();
    let db = TestDb::new().await;
    // B's work first, then A's: A's claims see B's jobs waiting.
    let b_ids = AppB::enqueue_many(&db.pool, (0..5).map(|n| AppB { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    let b_foreign = insert_foreign(&db, "app_b_q").await;
    let a_ids = AppA::enqueue_many(&db.pool, (0..5).map(|n| AppA { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    let a_foreign = insert_foreign(&db, "app_a_q").await;

    let rt_a = Runtime::builder(db.pool.clone())
        .config(eager())
        .queue("app_a_q", 10)
        .start()
        .await
        .unwrap();
    for id in &a_ids {
        wait_state(&db, *id, "succeeded").await;
    }
    // A's unknown-kind check buried the foreign job on its own queue; the same
    // statement saw B's foreign job, queued as long, and left it.
    wait_state(&db, a_foreign, "dead").await;
    assert_eq!(state_of(&db, b_foreign).await, "queued");
    for id in &b_ids {
        assert_eq!(state_of(&db, *id).await, "queued", "A touched B's job {id}");
    }
    let a_owner = rt_a.owner().to_owned();
    rt_a.shutdown().await.unwrap();

    // Now B alone, with fresh work of A's waiting.
    let a_late = AppA::enqueue_many(&db.pool, (5..8).map(|n| AppA { n }), EnqueueOptions::new())
        .await
        .unwrap()
        .ids;
    let a_late_foreign = insert_foreign(&db, "app_a_q").await;
    let rt_b = Runtime::builder(db.pool.clone())
        .config(eager())
        .queue("app_b_q", 10)
        .start()
        .await
        .unwrap();
    for id in &b_ids {
        wait_state(&db, *id, "succeeded").await;
    }
    wait_state(&db, b_foreign, "dead").await;
    for id in a_late.iter().chain([&a_late_foreign]) {
        assert_eq!(state_of(&db, *id).await, "queued", "B touched A's job {id}");
    }
    let b_owner = rt_b.owner().to_owned();
    rt_b.shutdown().await.unwrap();
    assert_ne!(a_owner, b_owner);

    let owner_of = |ids: Vec<i64>| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, Option<String>>(
                "select lease_owner from lq.all_jobs where id = any($1) order by id",
            )
            .bind(ids)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(
        owner_of(a_ids.clone()).await,
        vec![Some(a_owner.clone()); a_ids.len()]
    );
    assert_eq!(
        owner_of(b_ids.clone()).await,
        vec![Some(b_owner.clone()); b_ids.len()]
    );
    let buried: Vec<(i64, String)> = sqlx::query_as(
        "select id, errors->0->>'error' from lq.all_jobs where state = 'dead' order by id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        buried.iter().map(|b| b.0).collect::<Vec<_>>(),
        vec![b_foreign, a_foreign]
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    for (id, error) in &buried {
        let queue = if *id == a_foreign {
            "app_a_q"
        } else {
            "app_b_q"
        };
        assert!(error.contains(queue), "job {id}: {error}");
    }
}

// ---------------------------------------------------------------------------
