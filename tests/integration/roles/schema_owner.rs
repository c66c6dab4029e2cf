//! `migrate()` and the schema's owner: a schema squatted by another role is
//! refused, and a current schema needs no CREATE privilege.

use super::*;

/// A role that got to create schema `lq` first is not trusted: `migrate()` by
/// another role refuses to build in it, naming its owner, whether or not the
/// squatter lets others into the schema, and leaves it empty.
#[tokio::test]
async fn migrate_refuses_a_schema_owned_by_another_role() {
    let mut roles = Roles::default();
    let squatter = roles.create("lq_squatter", "").await;
    let app = roles.create("lq_app", "").await;
    let db = TestDb::new().await;
    unmigrate(&db).await;
    let name = db_name(&db).await;
    sqlx::raw_sql(&format!(
        "grant create on database {name} to {squatter}, {app}"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let squatter_pool = pool_as(&db, &squatter, 1).await;
    let app_pool = pool_as(&db, &app, 2).await;
    sqlx::raw_sql("create schema lq")
        .execute(&squatter_pool)
        .await
        .unwrap();

    for (how, setup) in [
        ("open to all", "grant usage, create on schema lq to public"),
        ("closed", "revoke all on schema lq from public"),
    ] {
        sqlx::raw_sql(setup).execute(&squatter_pool).await.unwrap();
        let err = lq_runtime::migrate(&app_pool).await.unwrap_err();
        assert!(
            matches!(&err, CoreError::SchemaNotOwned { owner } if *owner == squatter),
            "schema lq {how}: expected SchemaNotOwned {{ owner: {squatter:?} }}, got {err:?}"
        );
        let objects: i64 = sqlx::query_scalar(
            "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace
             where n.nspname = 'lq'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(objects, 0, "schema lq {how}: migrate created objects in it");
    }

    // A squatter's version table that claims to be current, as a view over a
    // function of the squatter's: reading it would run that function as the
    // reader. Neither migrate() nor a runtime's start reads it.
    sqlx::raw_sql(&format!(
        "create table lq.calls (who text);
         grant insert on lq.calls to public;
         create function lq.claimed_version() returns int language sql
             as 'insert into lq.calls values (current_user) returning {}';
         create view lq.schema_migrations as select lq.claimed_version() as version;
         grant select on lq.schema_migrations to public;",
        lq_runtime::SCHEMA_VERSION
    ))
    .execute(&squatter_pool)
    .await
    .unwrap();
    let err = lq_runtime::migrate(&app_pool).await.unwrap_err();
    assert!(
        matches!(&err, CoreError::SchemaTampered { what } if what.contains("\"v\"")),
        "{err:?}"
    );
    let started = Runtime::builder(app_pool.clone())
        .queue("default", 1)
        .start()
        .await;
    assert!(
        started.is_err(),
        "a runtime started on the squatter's schema"
    );
    let calls: i64 = sqlx::query_scalar("select count(*) from lq.calls")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(calls, 0, "the squatter's function ran");
    drop((squatter_pool, app_pool));
    drop(db);
}

/// On a schema already at the current version `migrate()` only reads: a role with
/// no CREATE anywhere, only USAGE on `lq` and SELECT on its version table, may
/// call it at start-up.
#[tokio::test]
async fn migrate_at_the_current_version_needs_no_create_privilege() {
    let mut roles = Roles::default();
    let reader = roles.create("lq_reader", "").await;
    let db = TestDb::new().await; // migrated by the superuser
    let name = db_name(&db).await;
    sqlx::raw_sql(&format!(
        "revoke all on database {name} from public;
         grant connect on database {name} to {reader};
         grant usage on schema lq to {reader};
         grant select on lq.schema_migrations to {reader};"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let pool = pool_as(&db, &reader, 2).await;
    let may_create: (bool, bool) = sqlx::query_as(
        "select has_database_privilege(current_database(), 'CREATE'),
                has_schema_privilege('lq', 'CREATE')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(may_create, (false, false));
    lq_runtime::migrate(&pool).await.unwrap();
    assert_eq!(
        lq_runtime::schema_version(&pool).await.unwrap(),
        lq_runtime::SCHEMA_VERSION
    );
    drop(pool);
    drop(db);
}
