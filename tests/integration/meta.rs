//! Job metadata set at enqueue (`EnqueueOptions::meta`): stored beside the
//! payload, seen by the handler, filterable by operators; bad metadata is a
//! typed error that writes nothing; a producer without INSERT on `meta` still
//! enqueues jobs without metadata.

use lq_runtime::{
    control, testing, CoreError, EnqueueOptions, Job, JobContext, JobError, JobFilter, Perform,
};
use lq_tests::TestDb;
use serde::{Deserialize, Serialize};

use crate::roles::{grant, pool_as, Roles};

/// Fails unless its metadata names its tenant.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "test.meta_tenant", queue = "meta-q")]
struct Tenanted {
    tenant: String,
}

impl Perform for Tenanted {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        match ctx
            .meta()
            .and_then(|m| m.get("tenant"))
            .and_then(|t| t.as_str())
        {
            Some(t) if t == self.tenant => Ok(()),
            other => Err(JobError::permanent(format!("metadata tenant {other:?}"))),
        }
    }
}

#[tokio::test]
async fn metadata_reaches_the_handler_and_the_filters() {
    let db = TestDb::new().await;
    let acme = EnqueueOptions::new()
        .meta("tenant", "acme")
        .meta("tags", ["vip"]);
    let id = Tenanted {
        tenant: "acme".into(),
    }
    .enqueue_with(&db.pool, acme.clone())
    .await
    .unwrap()
    .id;
    let ids = Tenanted::enqueue_many(
        &db.pool,
        (0..3).map(|_| Tenanted {
            tenant: "acme".into(),
        }),
        acme,
    )
    .await
    .unwrap()
    .ids;
    let plain = Tenanted {
        tenant: "none".into(),
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id;
    let vip = JobFilter::new().meta_contains(serde_json::json!({"tags": ["vip"]}));
    let found: Vec<i64> = control::list(&db.pool, &vip, 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(found, [ids[2], ids[1], ids[0], id]);
    assert!(control::get(&db.pool, plain).await.unwrap().meta.is_none());

    let report = testing::drain(&db.pool, testing::Drain::queue("meta-q"))
        .await
        .unwrap();
    assert_eq!((report.succeeded, report.dead), (4, 1), "{report:?}");
    let row = control::get(&db.pool, plain).await.unwrap();
    assert_eq!(row.errors[0].error, "permanent: metadata tenant None");
}

/// One live job per order.
#[derive(Serialize, Deserialize, Job)]
#[job(
    kind = "test.meta_unique",
    queue = "meta-q",
    unique_key = "order:{order}"
)]
struct PerOrder {
    order: i64,
}

impl Perform for PerOrder {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn unique_jobs_take_metadata_alone_and_in_bulk() {
    let db = TestDb::new().await;
    let opts = EnqueueOptions::new().meta("tenant", "acme");
    let first = PerOrder { order: 1 }
        .enqueue_with(&db.pool, opts.clone())
        .await
        .unwrap();
    let again = PerOrder { order: 1 }
        .enqueue_with(&db.pool, opts.clone())
        .await
        .unwrap();
    assert_eq!((again.id, again.existing), (first.id, true));
    let bulk = PerOrder::enqueue_many(&db.pool, (1..4).map(|order| PerOrder { order }), opts)
        .await
        .unwrap();
    assert_eq!((bulk.ids.len(), bulk.skipped), (2, 1));
    let acme = JobFilter::new().meta_contains(serde_json::json!({"tenant": "acme"}));
    assert_eq!(control::list(&db.pool, &acme, 10).await.unwrap().len(), 3);
}

#[tokio::test]
async fn bad_metadata_is_a_typed_error_and_writes_nothing() {
    let db = TestDb::new().await;
    let job = || Tenanted { tenant: "x".into() };
    let nul = EnqueueOptions::new().meta("note", "a\u{0}b");
    let e = job().enqueue_with(&db.pool, nul.clone()).await.unwrap_err();
    assert!(
        matches!(
            e,
            CoreError::InvalidMeta {
                kind: "test.meta_tenant",
                ..
            }
        ),
        "{e}"
    );
    let e = Tenanted::enqueue_many(&db.pool, [job()], nul)
        .await
        .unwrap_err();
    assert!(matches!(e, CoreError::InvalidMeta { .. }), "{e}");
    let huge = EnqueueOptions::new().meta("blob", "x".repeat(lq_runtime::MAX_META_BYTES));
    let e = job().enqueue_with(&db.pool, huge).await.unwrap_err();
    assert!(e.to_string().contains("64 KiB"), "{e}");
    // A map with non-string keys has no JSON form.
    let keys = std::collections::HashMap::from([((1, 2), "pair key")]);
    let e = job()
        .enqueue_with(&db.pool, EnqueueOptions::new().meta("bad", keys))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("does not serialise"), "{e}");
    // The key `lq` is litequeue's: the handler would read it as a cron tick.
    let forged = EnqueueOptions::new().meta("lq", serde_json::json!({"cron": {}}));
    let e = job()
        .enqueue_with(&db.pool, forged.clone())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("\"lq\""), "{e}");
    let e = Tenanted::enqueue_many(&db.pool, [job()], forged)
        .await
        .unwrap_err();
    assert!(matches!(e, CoreError::InvalidMeta { .. }), "{e}");
    assert_eq!(db.count("queued").await, 0);
}

#[tokio::test]
async fn a_producer_without_the_meta_grant_enqueues_plain_jobs_and_is_refused_metadata() {
    let mut roles = Roles::default();
    let producer = roles.create("lq_meta_prod", "").await;
    let db = TestDb::new().await;
    grant(
        &db.pool,
        "grant usage on schema lq to {role};
         grant insert (kind, queue, priority, payload, run_at, max_attempts, unique_key)
             on lq.jobs to {role};
         grant select (id, kind, unique_key, run_at) on lq.jobs to {role};",
        &producer,
    )
    .await;
    let pool = pool_as(&db, &producer, 2).await;
    Tenanted { tenant: "a".into() }
        .enqueue(&pool)
        .await
        .unwrap();
    let e = Tenanted { tenant: "a".into() }
        .enqueue_with(&pool, EnqueueOptions::new().meta("tenant", "a"))
        .await
        .unwrap_err();
    assert!(
        lq_runtime::chain(&e).contains("permission denied for table jobs"),
        "{}",
        lq_runtime::chain(&e)
    );
    grant(
        &db.pool,
        "grant insert (meta) on lq.jobs to {role};",
        &producer,
    )
    .await;
    Tenanted { tenant: "a".into() }
        .enqueue_with(&pool, EnqueueOptions::new().meta("tenant", "a"))
        .await
        .unwrap();
    assert_eq!(db.count("queued").await, 2);
}
