//! Least-privilege roles: a migrator, a producer and a worker with only the
//! grants docs/roles.md lists run every job, and each grant is needed.

use super::*;

/// Succeeds, or always fails when `fail`.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "roles.least", queue = "roles_least_q", max_attempts = 2, backoff = fixed("10ms"))]
struct Least {
    n: u32,
    fail: bool,
}

impl Perform for Least {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        if self.fail {
            return Err(format!("least {} fails", self.n).into());
        }
        Ok(())
    }
}

/// Has a unique key.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "roles.least_unique",
    queue = "roles_least_q",
    unique_key = "lu:{n}"
)]
struct LeastUnique {
    n: u32,
}

impl Perform for LeastUnique {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The schema's owner applies a later release's migration without CREATE on
/// the database, which it needed only to create the schema (docs/roles.md); a
/// worker that starts first is told to let the owner migrate.
#[tokio::test]
async fn the_schemas_owner_migrates_a_later_release_without_create_on_the_database() {
    let mut roles = Roles::default();
    let migrator = roles.create("lq_migrator", "").await;
    let worker = roles.create("lq_worker", "").await;
    let db = TestDb::new().await;
    unmigrate(&db).await;
    let name = db_name(&db).await;
    let database_grant = |verb: &str| {
        format!(
            "{verb} create on database {name} {} {migrator}",
            if verb == "grant" { "to" } else { "from" }
        )
    };
    sqlx::raw_sql(&database_grant("grant"))
        .execute(&db.pool)
        .await
        .unwrap();
    let migrator_pool = pool_as(&db, &migrator, 1).await;
    lq_runtime::migrate(&migrator_pool).await.unwrap();
    grant(&migrator_pool, WORKER_GRANTS, &worker).await;
    let worker_pool = pool_as(&db, &worker, 1).await;
    sqlx::raw_sql(&database_grant("revoke"))
        .execute(&db.pool)
        .await
        .unwrap();
    // A release with two more migrations (the history pruned by id, the
    // runtimes' connection budgets), not applied yet.
    crate::prune_marks::back_to_version_14(&db).await;
    let early = lq_runtime::migrate(&worker_pool).await.unwrap_err();
    assert!(
        matches!(&early, CoreError::SchemaBehind { owner, .. } if *owner == migrator),
        "{early:?}"
    );
    lq_runtime::migrate(&migrator_pool).await.unwrap();
    // The worker, who prunes the history, was given the new table's grants.
    let marks_granted: bool = sqlx::query_scalar(&format!(
        "select has_table_privilege('{worker}', 'lq.id_marks', 'insert')"
    ))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(marks_granted, "the pending migration was applied");
    lq_runtime::migrate(&worker_pool).await.unwrap();
    drop((migrator_pool, worker_pool));
    drop(db);
}

/// Three roles, none a superuser or the tables' owner but the migrator: the
/// migrator builds the schema and grants exactly docs/roles.md's privileges, the
/// producer enqueues every way, and the worker's runtime runs every job to its end.
#[tokio::test]
async fn least_privilege_migrator_producer_and_worker_run_every_job() {
    let mut roles = Roles::default();
    let migrator = roles.create("lq_migrator", "").await;
    let producer = roles.create("lq_producer", "").await;
    let worker = roles.create("lq_worker", "").await;
    let db = TestDb::new().await;
    unmigrate(&db).await;
    let name = db_name(&db).await;
    sqlx::raw_sql(&format!("grant create on database {name} to {migrator}"))
        .execute(&db.pool)
        .await
        .unwrap();
    let migrator_pool = pool_as(&db, &migrator, 2).await;
    lq_runtime::migrate(&migrator_pool).await.unwrap();
    let owner: String =
        sqlx::query_scalar("select nspowner::regrole::text from pg_namespace where nspname = 'lq'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(owner, migrator);
    let sequence: String = sqlx::query_scalar("select pg_get_serial_sequence('lq.jobs', 'id')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(sequence, "lq.jobs_id_seq", "the name WORKER_GRANTS uses");
    grant(&migrator_pool, PRODUCER_GRANTS, &producer).await;
    grant(&migrator_pool, WORKER_GRANTS, &worker).await;

    let producer_pool = pool_as(&db, &producer, 2).await;
    let worker_pool = pool_as(&db, &worker, 2).await;
    // The worker may call migrate() at start-up: the schema is current.
    lq_runtime::migrate(&worker_pool).await.unwrap();

    // Each of the producer's privileges is needed by an enqueue of a unique job
    // inside a transaction (the statement that also decides the NOTIFY).
    for privilege in PRODUCER_PRIVILEGES {
        sqlx::raw_sql(&format!("revoke {privilege} on lq.jobs from {producer}"))
            .execute(&migrator_pool)
            .await
            .unwrap();
        let mut tx = producer_pool.begin().await.unwrap();
        let err = LeastUnique { n: 999 }.enqueue(&mut tx).await.unwrap_err();
        tx.rollback().await.unwrap();
        assert!(
            err.to_string().contains("permission denied")
                || lq_runtime::chain(&err).contains("permission denied"),
            "without {privilege}: {}",
            lq_runtime::chain(&err)
        );
        sqlx::raw_sql(&format!("grant {privilege} on lq.jobs to {producer}"))
            .execute(&migrator_pool)
            .await
            .unwrap();
    }

    let mut ids = Vec::new();
    let mut tx = producer_pool.begin().await.unwrap();
    ids.push(
        Least { n: 1, fail: false }
            .enqueue(&mut tx)
            .await
            .unwrap()
            .id,
    );
    tx.commit().await.unwrap();
    ids.push(
        Least { n: 2, fail: false }
            .enqueue(&producer_pool)
            .await
            .unwrap()
            .id,
    );
    let many = (3..6).map(|n| Least { n, fail: false });
    ids.extend(
        Least::enqueue_many(&producer_pool, many, EnqueueOptions::new())
            .await
            .unwrap()
            .ids,
    );
    // An enqueuer's own connections log in as the pool's role; calls made
    // together may share a statement.
    let enqueuer = lq_runtime::Enqueuer::new(&producer_pool);
    let shared: Vec<_> = (6..9).map(|n| Least { n, fail: false }).collect();
    for done in futures_util::future::join_all(shared.iter().map(|j| j.enqueue(&enqueuer))).await {
        ids.push(done.unwrap().id);
    }
    // Unique keys: one held while queued (the worker is not running yet).
    let first = LeastUnique { n: 1 }.enqueue(&producer_pool).await.unwrap();
    let dup = LeastUnique { n: 1 }.enqueue(&producer_pool).await.unwrap();
    assert_eq!((dup.id, dup.existing), (first.id, true));
    let bulk = LeastUnique::enqueue_many(
        &producer_pool,
        [2, 1, 3].map(|n| LeastUnique { n }),
        EnqueueOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!((bulk.ids.len(), bulk.skipped), (2, 1));
    ids.push(first.id);
    ids.extend(bulk.ids);
    let doomed = Least { n: 9, fail: true }
        .enqueue(&producer_pool)
        .await
        .unwrap()
        .id;
    // The producer reads nothing but the columns its enqueue needs.
    let read = sqlx::query("select payload from lq.jobs")
        .execute(&producer_pool)
        .await;
    assert!(read.is_err(), "the producer may read payloads");

    let rt = Runtime::builder(worker_pool.clone())
        .config(quick())
        .queue("roles_least_q", 4)
        .start()
        .await
        .unwrap();
    for id in &ids {
        wait_state(&db, *id, "succeeded").await;
    }
    wait_state(&db, doomed, "dead").await;
    let errors: serde_json::Value =
        sqlx::query_scalar("select errors from lq.all_jobs where id = $1")
            .bind(doomed)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(errors.as_array().map(Vec::len), Some(2), "{errors}");
    let owners: Vec<Option<String>> =
        sqlx::query_scalar("select distinct lease_owner from lq.all_jobs")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(owners, vec![Some(rt.owner().to_owned())]);

    // Job control as the worker, once it may read lq.all_jobs too.
    sqlx::raw_sql(&format!("grant select on lq.all_jobs to {worker}"))
        .execute(&migrator_pool)
        .await
        .unwrap();
    let dead = control::list(
        &worker_pool,
        &lq_runtime::JobFilter::new().state(JobState::Dead),
        10,
    )
    .await
    .unwrap();
    assert_eq!(dead.iter().map(|r| r.id).collect::<Vec<_>>(), vec![doomed]);
    control::retry_now(&worker_pool, doomed).await.unwrap();
    wait_state(&db, doomed, "dead").await;
    let late = Least { n: 10, fail: false }
        .enqueue_with(
            &producer_pool,
            EnqueueOptions::new().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .id;
    assert_eq!(
        control::cancel(&worker_pool, late).await.unwrap(),
        JobState::Queued
    );
    assert_eq!(
        control::get(&worker_pool, late).await.unwrap().state,
        JobState::Cancelled
    );
    rt.shutdown().await.unwrap();
    drop((migrator_pool, producer_pool, worker_pool));
    drop(db);
}
