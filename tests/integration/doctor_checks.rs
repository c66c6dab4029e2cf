//! What `control::doctor` judges autovacuum and open transactions by: the
//! storage option however it was spelt, `track_counts`, and only the
//! transactions that hold back vacuum (a client's snapshot or transaction id,
//! a prepared transaction), not every session that began one.

use lq_core::db::{self, maintenance::JobTable};
use lq_runtime::control;
use lq_tests::TestDb;
use sqlx::{Connection, PgConnection};

/// The doctor's figures, read on a connection of `db`'s pool.
async fn figures(db: &TestDb) -> db::doctor::Figures {
    let mut conn = db.pool.acquire().await.unwrap();
    db::doctor::doctor_figures(&mut conn, 60.0).await.unwrap()
}

/// The doctor's check named `name`.
async fn check(pool: &sqlx::PgPool, name: &str) -> control::Check {
    control::doctor(pool)
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} check"))
}

#[tokio::test]
async fn autovacuum_turned_off_on_lq_jobs_is_seen_however_it_was_spelt() {
    let db = TestDb::new().await;
    for (spelling, off) in [
        ("off", true),
        ("false", true),
        ("0", true),
        ("no", true),
        ("f", true),
        ("'FALSE'", true),
        ("on", false),
        ("1", false),
        ("yes", false),
        ("'TRUE'", false),
    ] {
        sqlx::raw_sql(&format!(
            "alter table lq.jobs set (autovacuum_enabled = {spelling})"
        ))
        .execute(&db.pool)
        .await
        .unwrap();
        assert_eq!(figures(&db).await.jobs_autovacuum_off, off, "{spelling}");
        let mut conn = db.pool.acquire().await.unwrap();
        let stats = db::maintenance::job_table_stats(&mut conn, JobTable::Live)
            .await
            .unwrap();
        if off {
            assert!(stats.autovacuum_off, "{spelling}");
            let autovacuum = check(&db.pool, "autovacuum").await;
            assert!(!autovacuum.ok, "{spelling}: {autovacuum:?}");
        }
    }
}

/// Without `track_counts` autovacuum never finds a table to vacuum: the check
/// fails even where the server's `autovacuum` is on.
#[tokio::test]
async fn autovacuum_without_track_counts_is_reported_as_not_running() {
    let db = TestDb::new().await;
    let server_autovacuum: bool = sqlx::query_scalar("select current_setting('autovacuum')::bool")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(figures(&db).await.autovacuum, server_autovacuum);
    let name: String = sqlx::query_scalar("select current_database()::text")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    sqlx::raw_sql(&format!("alter database {name} set track_counts = off"))
        .execute(&db.pool)
        .await
        .unwrap();
    // Fresh sessions take the database's setting.
    let pool = db.another_pool(2).await;
    let mut conn = pool.acquire().await.unwrap();
    let f = db::doctor::doctor_figures(&mut conn, 60.0).await.unwrap();
    drop(conn);
    assert!(!f.autovacuum, "{f:?}");
    let autovacuum = check(&pool, "autovacuum").await;
    assert!(!autovacuum.ok, "{autovacuum:?}");
    pool.close().await;
}

/// A session between statements of a read committed transaction holds back
/// nothing; one with a snapshot (repeatable read) or a transaction id does.
#[tokio::test]
async fn only_transactions_that_hold_back_vacuum_count_as_open() {
    let db = TestDb::new().await;
    let mut other = PgConnection::connect(&db.url).await.unwrap();
    assert_eq!(figures(&db).await.oldest_xact_secs, None);

    sqlx::raw_sql("begin; select 1")
        .execute(&mut other)
        .await
        .unwrap();
    assert_eq!(
        figures(&db).await.oldest_xact_secs,
        None,
        "idle in a read committed transaction, holding no snapshot"
    );
    sqlx::raw_sql("rollback").execute(&mut other).await.unwrap();

    sqlx::raw_sql("begin isolation level repeatable read; select 1")
        .execute(&mut other)
        .await
        .unwrap();
    assert!(
        figures(&db).await.oldest_xact_secs.is_some(),
        "a repeatable read transaction keeps its snapshot"
    );
    sqlx::raw_sql("rollback").execute(&mut other).await.unwrap();

    sqlx::raw_sql("begin; select pg_current_xact_id()")
        .execute(&mut other)
        .await
        .unwrap();
    assert!(
        figures(&db).await.oldest_xact_secs.is_some(),
        "a transaction id"
    );
    sqlx::raw_sql("rollback").execute(&mut other).await.unwrap();
    other.close().await.unwrap();
}

/// Rolls back prepared transaction `gid` of the database at `url` when
/// dropped (it would outlive the test, and keep its database from being
/// dropped).
struct Prepared {
    url: String,
    gid: String,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        lq_tests::run_from_drop(
            self.url.clone(),
            vec![format!("rollback prepared '{}'", self.gid)],
        );
    }
}

/// A prepared transaction holds back vacuum until it is committed or rolled
/// back, with no session showing it. Needs `max_prepared_transactions` above
/// 0 (PostgreSQL's default is 0): skipped, saying so, on a server without,
/// unless `LQ_REQUIRE_PREPARED_TRANSACTIONS` is set (CI sets it and runs this
/// test on its private cluster, which has them, so it cannot pass by skipping).
#[tokio::test]
async fn a_prepared_transaction_counts_as_open() {
    let db = TestDb::new().await;
    let most: i32 = sqlx::query_scalar("select current_setting('max_prepared_transactions')::int")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    if most == 0 {
        assert!(
            std::env::var_os("LQ_REQUIRE_PREPARED_TRANSACTIONS").is_none(),
            "LQ_REQUIRE_PREPARED_TRANSACTIONS is set, and this server has max_prepared_transactions = 0"
        );
        eprintln!("skipped: this server has max_prepared_transactions = 0");
        return;
    }
    let mut other = PgConnection::connect(&db.url).await.unwrap();
    let prepared = Prepared {
        url: db.url.clone(),
        gid: format!("lq_doctor_{:08x}", fastrand::u32(..)),
    };
    sqlx::raw_sql(&format!(
        "begin; select pg_current_xact_id(); prepare transaction '{}'",
        prepared.gid
    ))
    .execute(&mut other)
    .await
    .unwrap();
    other.close().await.unwrap();
    assert!(
        figures(&db).await.oldest_xact_secs.is_some(),
        "the prepared transaction, with no session left"
    );
    drop(prepared);
    assert_eq!(figures(&db).await.oldest_xact_secs, None);
}

/// Drops replication slot `name` of the server at `url` when dropped (a slot
/// outlives its test, and keeps WAL for the whole server until dropped).
struct Slot {
    url: String,
    name: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        lq_tests::run_from_drop(
            self.url.clone(),
            vec![format!(
                "select pg_drop_replication_slot(slot_name) from pg_replication_slots \
                 where slot_name = '{}'",
                self.name
            )],
        );
    }
}

/// Slots this test made in runs that were killed before they could drop them
/// (named `lq_doctor_{unix seconds}_{random}`), ten minutes on: a slot outlives
/// its session and keeps WAL for the whole server.
async fn drop_leaked_slots(pool: &sqlx::PgPool) {
    sqlx::raw_sql(
        "select pg_drop_replication_slot(slot_name) from pg_replication_slots
         where not active
           and case when slot_name ~ '^lq_doctor_[0-9]{1,12}_[0-9a-f]+$'
                    then split_part(slot_name, '_', 3)::bigint < extract(epoch from now()) - 600
                    else false end",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// A replication slot nobody reads is listed by name with the WAL it keeps
/// (under the bound, as here, the check still passes; past it, or holding back
/// vacuum, it fails: the unit tests judge those), until it is dropped. Needs a
/// free slot (`max_replication_slots`, 10 by default) and a role that may make
/// one: skipped, saying so, otherwise.
#[tokio::test]
async fn a_replication_slot_without_a_reader_is_named_until_dropped() {
    let db = TestDb::new().await;
    drop_leaked_slots(&db.pool).await;
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let slot = Slot {
        url: db.url.clone(),
        name: format!("lq_doctor_{epoch}_{:08x}", fastrand::u32(..)),
    };
    // Reserves WAL at once, as a standby's slot does once it has connected.
    let created = sqlx::query("select pg_create_physical_replication_slot($1, true)")
        .bind(&slot.name)
        .execute(&db.pool)
        .await;
    if let Err(e) = created {
        // 53400: every slot taken; 55000: slots off (max_replication_slots = 0,
        // or wal_level = minimal); 42501: a role without REPLICATION.
        let code = e.as_database_error().and_then(|d| d.code());
        assert!(
            matches!(code.as_deref(), Some("53400" | "55000" | "42501")),
            "creating a slot: {e}"
        );
        eprintln!("skipped: no replication slot can be made here ({e})");
        return;
    }
    let slots = check(&db.pool, "replication slots").await;
    let named = slots
        .detail
        .split("; ")
        .find(|s| s.starts_with(&slot.name))
        .unwrap_or_else(|| panic!("{} not named: {}", slot.name, slots.detail));
    assert!(
        named.starts_with(&format!("{} (physical, no reader) keeps ", slot.name))
            && named.contains(" of WAL"),
        "{named}"
    );
    let name = slot.name.clone();
    drop(slot);
    let slots = check(&db.pool, "replication slots").await;
    assert!(!slots.detail.contains(&name), "{slots:?}");
}

/// A `CHECKPOINT` counts as a requested checkpoint, and the check reports the
/// server's counts. The checkpointer publishes its counts a moment after the
/// command returns, so the count is read until it moves, within a bound.
#[tokio::test]
async fn a_requested_checkpoint_is_counted_and_the_check_reports_the_counts() {
    let db = TestDb::new().await;
    let read = || async {
        let mut conn = db.pool.acquire().await.unwrap();
        db::doctor::doctor_checkpoints(&mut conn).await.unwrap()
    };
    let before = read().await;
    assert!(
        before.max_wal_size > 0 && before.checkpoint_timeout_secs > 0,
        "{before:?}"
    );
    sqlx::raw_sql("checkpoint").execute(&db.pool).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let after = loop {
        let now = read().await;
        if now.requested > before.requested {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a CHECKPOINT was never counted: {before:?} then {now:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(after.timed >= before.timed, "{before:?} then {after:?}");

    // The check judges the counts it reports, which are at least those read.
    let checkpoints = check(&db.pool, "checkpoints").await;
    let counts: Vec<i64> = checkpoints
        .detail
        .split(" checkpoints timed and ")
        .flat_map(|part| part.split(' ').next())
        .map(|n| n.parse().unwrap_or_else(|_| panic!("{checkpoints:?}")))
        .collect();
    let [timed, requested] = counts[..] else {
        panic!("{checkpoints:?}")
    };
    assert!(
        timed >= after.timed && requested >= after.requested,
        "{after:?} then {checkpoints:?}"
    );
    assert_eq!(
        checkpoints.ok,
        requested < 10 || requested <= timed,
        "{checkpoints:?}"
    );
}

/// The connections' check counts every client session on the server (three
/// held open here among them) against `max_connections`, and judges the
/// counts it reports.
#[tokio::test]
async fn the_connections_check_counts_the_servers_client_sessions() {
    let db = TestDb::new().await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            PgConnection::connect_with(&db.pool.connect_options())
                .await
                .unwrap(),
        );
    }
    let max: i64 = sqlx::query_scalar("select current_setting('max_connections')::int8")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let connections = check(&db.pool, "connections").await;
    let figures: Vec<i64> = connections
        .detail
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(3)
        .map(|n| n.parse().unwrap())
        .collect();
    let [in_use, reported_max, reserved] = figures[..] else {
        panic!("{connections:?}")
    };
    assert!(
        in_use >= 4,
        "three held and the doctor's own: {connections:?}"
    );
    assert_eq!(reported_max, max, "{connections:?}");
    let open = max - reserved;
    let wanted = ((open as f64 * 0.1).ceil() as i64).max(3);
    assert_eq!(connections.ok, open - in_use >= wanted, "{connections:?}");
    for conn in held {
        conn.close().await.unwrap();
    }
}

/// The connections' check adds up what this database's live runtimes may
/// open (their rows, as `RuntimeBuilder::connections` counts), and is a
/// finding when that exceeds what the server allows ordinary roles, however
/// few sessions are open now; a row from before schema 16 is named as not
/// counted.
#[tokio::test]
async fn the_connections_check_adds_up_what_live_runtimes_may_open() {
    let db = TestDb::new().await;
    let max: i64 = sqlx::query_scalar("select current_setting('max_connections')::int8")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    // A runtime row whose beat lapses `expires_in_secs` from now (negative: gone).
    let runtime = |id: &str, connections: Option<i32>, expires_in_secs: f64| {
        sqlx::query(
            "insert into lq.runtimes (id, host, pid, version, queues, kinds, expires_at, connections)
             values ($1, 'here', 1, '0', '{\"default\": 1}', '{}',
                     now() + make_interval(secs => $3), $2)",
        )
        .bind(id.to_owned())
        .bind(connections)
        .bind(expires_in_secs)
    };
    let hour = 3600.0;
    for row in [
        runtime("sized", Some(max as i32), hour),
        runtime("old", None, hour),
        // Gone runtimes do not count.
        runtime("gone", Some(1000), -hour),
    ] {
        row.execute(&db.pool).await.unwrap();
    }
    let connections = check(&db.pool, "connections").await;
    assert!(!connections.ok, "{connections:?}");
    assert!(
        connections.detail.contains(&format!(
            "this database's live runtimes may open up to {max} connections of their own \
             (1 built before schema 16 not counted), more than the"
        )),
        "{connections:?}"
    );
}
